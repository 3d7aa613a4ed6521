"""Grade a patch the way SWE-bench does: fresh checkout, test_patch, patch, tests, report.

Steps (:func:`grade`), all in a sandbox wiped first:

1. Keep only the graded files of the patch (:mod:`envs.swe.patches`): its changes to the
   project's source. Tests, ``conftest.py``, the test runner's configuration, start-up
   hooks (``*.pth``, ``sitecustomize``), package metadata, bytecode and new top-level
   modules are dropped and named in the verdict, so nothing the agent adds changes how
   the tests run or are reported (the kept source runs in the test process: see step 5).
2. Fresh copy of the prepared workspace at ``base_commit`` (the cache, no reinstall).
3. Apply the test_patch to that pristine copy. A test_patch that does not apply is the
   instance's fault, whatever the agent did: :class:`GradingError`.
4. Apply the kept patch with swebench's fallbacks (``git apply``, ``--3way``, ``--reject``,
   ``patch --fuzz=5``; the tree is restored and the test_patch reapplied between tries). A
   patch no command applies leaves the instance unresolved with the reason
   (``patch_applied`` 0).
5. Run ``test_cmd`` on the test files, then the grader's canary (:mod:`envs.swe.canary`),
   output to a file (no pipe cap), between swebench's ``>>>>> Start/End Test Output``
   markers, with the exit status after them.
6. Grade with swebench itself: ``get_logs_eval`` (its pytest parser, or the record's
   ``log_parser``), ``get_eval_tests_report`` and ``get_resolution_status``, the canary's
   results taken out first; a canary reported wrong makes the run unresolved, ``forged``.

A SWE-bench record's own ``eval_script`` (docker images) restores the tests and applies the
test_patch itself, after step 4.

swebench's rules that decide outcomes here: a FAIL_TO_PASS or PASS_TO_PASS test missing
from the log counts as failed (the verdict names it apart, with why: :mod:`envs.swe.log_keys`);
XFAIL counts as passed; a skipped FAIL_TO_PASS test is a failure, a skipped PASS_TO_PASS test
is not; a run whose test command exits non-zero while the log reports no failure (the
canary's aside) is not trusted (no results); an empty FAIL_TO_PASS would resolve every
patch, so :mod:`envs.swe.instances` refuses it.

Who is to blame when the run goes wrong: tests past ``test_timeout_s`` or a run that leaves
no results are unresolved (reward 0, counted) when the graded patch is not empty, as
SWE-bench counts a timed-out prediction; with an empty patch they are the instance's fault,
a :class:`GradingError` (an env error), as are a test_patch that does not apply to the
pristine copy and a copy that fails.

The model's patch is :func:`model_patch`: ``git add -A`` and ``git diff --cached
--binary`` of ``/workspace`` against the base commit, taken with a pristine copy of the
prepared ``.git`` (so the agent's hooks, config or rewritten history cannot steer it).
New files are included; new files the repository's pristine ignore rules ignore (its
``.gitignore`` files as at base, ``install``'s outputs) are not, whatever the agent's
``.gitignore`` now says. A diff over :data:`MAX_PATCH_BYTES` is not read
(:class:`PatchTooLarge`).

swebench's ``swebench.harness`` package imports docker, datasets and modal when imported;
:func:`swebench_harness` registers a bare package module first, so only the grading
modules load (~30 ms).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shlex
import sys
import tempfile
import time
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from envs.errors import EnvError
from envs.sandbox import ExecResult, Sandbox
from envs.swe.canary import PYTEST_LOG_PARSERS, Canary, canary_for
from envs.swe.instances import Instance, touched_files
from envs.swe.log_keys import log_parser_name, not_found, swebench_spec
from envs.swe.patches import GradedPatch, graded_patch, layout_of
from envs.swe.repos import STAGE, PreparedRepo, pristine_git_dir, stage_checkout, untar_command

GIT_APPLY_CMDS = ("git apply --verbose", "git apply --verbose --3way", "git apply --verbose --reject",
                  "patch --batch --forward --fuzz=5 -p1 -i")
"""swebench's ``run_evaluation.GIT_APPLY_CMDS`` (that module imports docker at load, so
the list is copied); tried in order."""
MAX_PATCH_BYTES = 16 << 20
"""A diff larger than this is neither read nor applied (unresolved): no fix is that big."""
LOG_TAIL_BYTES = 4 << 20
"""Test output kept for parsing: the end, where pytest's ``-rA`` summary is."""
REWARD_MODES = ("resolved", "fraction")
_GIT = ("GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git -c safe.directory='*' "
        "-c core.hooksPath=/dev/null -c core.excludesFile=/dev/null -c core.fsmonitor=false")


class GradingError(EnvError):
    """Grading itself failed (tests hung with no patch, the test_patch does not apply, the
    sandbox died): an infrastructure or instance error, not the agent's score."""


class PatchTooLarge(GradingError):
    """The agent's diff is over :data:`MAX_PATCH_BYTES`: it is not read (its loss)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the diff of your changes is {size:,} bytes, over the "
                         f"{MAX_PATCH_BYTES >> 20} MiB limit; it was not graded")
        self.size = size


class _RunFailed(GradingError):
    """The test run itself went wrong (ran past the limit, left no results): the patch's
    doing when there is one, else the instance's. ``reason`` says it to the agent."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@functools.cache
def swebench_harness() -> types.SimpleNamespace:
    """swebench's grading pieces, imported without its heavy ``harness/__init__``."""
    if "swebench.harness" not in sys.modules:
        spec = importlib.util.find_spec("swebench")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("swebench is not installed: pip install 'swebench==5.0.2' "
                              "--no-deps unidiff (the `swe` extra)")
        package = types.ModuleType("swebench.harness")
        package.__path__ = [str(Path(spec.submodule_search_locations[0]) / "harness")]
        package.__package__ = "swebench.harness"
        sys.modules["swebench.harness"] = package
    from swebench.harness import constants, grading
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.types import TestSpec

    return types.SimpleNamespace(constants=constants, grading=grading, TestSpec=TestSpec,
                                 PARSER_REGISTRY=PARSER_REGISTRY)


@dataclass
class Grade:
    """The verdict on one patch."""

    resolved: bool
    status: str
    """swebench's ``ResolvedStatus`` value: RESOLVED_FULL, RESOLVED_PARTIAL or RESOLVED_NO."""
    patch_applied: bool
    patch_lines: int
    f2p_passed: list[str] = field(default_factory=list)
    f2p_failed: list[str] = field(default_factory=list)
    p2p_passed: list[str] = field(default_factory=list)
    p2p_failed: list[str] = field(default_factory=list)
    reason: str = ""
    """Why it is not resolved, in one sentence (empty when resolved)."""
    log_tail: str = ""
    """The end of the test output, for people reading a failed run."""
    seconds: float = 0.0
    dropped: list[str] = field(default_factory=list)
    """The patch's files that were not graded, ``path (why)``, at most 20 and a count."""
    patch: str = ""
    """The graded part of the patch (what ``predictions.jsonl`` should hold)."""
    forged: bool = False
    """The grader's canary tests were reported wrong: the run's results are not trusted."""
    not_found: dict[str, str] = field(default_factory=dict)
    """Failed tests the log does not name -> why, and the fix of the instance (``log_keys``)."""

    def f2p_fraction(self) -> float:
        total = len(self.f2p_passed) + len(self.f2p_failed)
        return len(self.f2p_passed) / total if total else 0.0

    def reward(self, mode: str = "resolved") -> float:
        """``resolved``: 1 if resolved else 0; ``fraction``: the passing share of FAIL_TO_PASS."""
        if mode == "fraction":
            return self.f2p_fraction() if self.patch_applied else 0.0
        return float(self.resolved)

    def metrics(self) -> dict[str, float]:
        p2p_total = len(self.p2p_passed) + len(self.p2p_failed)
        return {"resolved": float(self.resolved), "f2p_passed": self.f2p_fraction(),
                "p2p_passed": len(self.p2p_passed) / p2p_total if p2p_total else 1.0,
                "patch_applied": float(self.patch_applied), "patch_lines": float(self.patch_lines),
                "forged": float(self.forged)}

    def summary(self) -> str:
        """What the agent (and a judge) reads at the end of the episode."""
        counts = (f"FAIL_TO_PASS {len(self.f2p_passed)}/{len(self.f2p_passed) + len(self.f2p_failed)} "
                  f"pass, PASS_TO_PASS {len(self.p2p_passed)}/{len(self.p2p_passed) + len(self.p2p_failed)} pass")
        if self.resolved:
            return f"Resolved: {counts}.{self._dropped_note()}"
        failing = [t for t in self.f2p_failed + self.p2p_failed if t not in self.not_found][:5]
        detail = f" Failing: {', '.join(failing)}." if failing and self.patch_applied else ""
        if self.not_found:
            detail += f" Not found in the test log: {', '.join(list(self.not_found)[:5])}."
        return f"Not resolved: {self.reason} ({counts}).{detail}{self._dropped_note()}"

    def _dropped_note(self) -> str:
        return f" Not graded (left out of your patch): {'; '.join(self.dropped)}." if self.dropped else ""

    def as_dict(self) -> dict[str, object]:
        """The report as ``info["grade"]`` carries it (no timings: rollouts stay reproducible)."""
        return {"resolved": self.resolved, "status": self.status, "patch_applied": self.patch_applied,
                "patch_lines": self.patch_lines, "FAIL_TO_PASS": {"success": self.f2p_passed,
                "failure": self.f2p_failed}, "PASS_TO_PASS": {"success": self.p2p_passed,
                "failure": self.p2p_failed}, "reason": self.reason, "dropped": self.dropped,
                "forged": self.forged, "not_found": self.not_found}


# ---- the model's patch ---------------------------------------------------------------------
def model_patch(sandbox: Sandbox, prepared: PreparedRepo, workdir: str = "/workspace") -> str:
    """The agent's work as a patch: every change to ``workdir`` since the base commit, new
    files included but those the pristine ignore rules ignore. Raises :class:`PatchTooLarge`
    past :data:`MAX_PATCH_BYTES` (the diff stays in the sandbox) and :class:`GradingError`
    when no diff can be taken."""
    git_dir = pristine_git_dir(sandbox, prepared)
    pristine = git_dir.removesuffix("/.git")
    git = f"{_GIT} --git-dir={git_dir} --work-tree={workdir}"
    out, ignored = f"{STAGE}/model.patch", f"{STAGE}/ignored"
    # New files the agent un-ignored (a `!` rule in its .gitignore) are judged by the rules at
    # base: the pristine .gitignore files and info/exclude, in a tree of nothing else.
    check = (f"(cd {pristine} && {_GIT} --git-dir={git_dir} --work-tree={pristine} "
             f"check-ignore --no-index -z --stdin) > {ignored}")
    result = sandbox.exec(
        f"cd {workdir} && {git} add -A && {{ {git} diff --cached --name-only -z --no-renames "
        f"--diff-filter=A {prepared.head} | {check}; [ $? -le 1 ]; }} && "
        f"{{ [ ! -s {ignored} ] || {git} --literal-pathspecs rm -q --cached --ignore-unmatch "
        f"--pathspec-from-file={ignored} --pathspec-file-nul; }} && "
        f"{git} diff --cached --binary --no-color --no-ext-diff --no-renames --full-index "
        f"{prepared.head} > {out} && stat -c %s {out}", timeout=300)
    if not result.ok:
        why = ("ran past 300 s" if result.timed_out
               else "; ".join(result.stderr.strip().splitlines()[-2:])[-300:])
        raise GradingError(f"could not take the diff of {workdir}: {why}")
    size = int(result.stdout.split()[-1])
    if size > MAX_PATCH_BYTES:
        raise PatchTooLarge(size)
    return sandbox.get_file(out).decode("utf-8", errors="surrogateescape")


def graded_part(instance: Instance, prepared: PreparedRepo, patch: str) -> GradedPatch:
    """The part of ``patch`` that is graded for ``instance`` (:mod:`envs.swe.patches`)."""
    return graded_patch(patch, layout_of(touched_files(instance.test_patch), instance.test_cmd,
                                         prepared.tar))


# ---- grading ---------------------------------------------------------------------------------
def grade(sandbox: Sandbox, instance: Instance, prepared: PreparedRepo, patch: str, *,
          test_timeout_s: float = 300.0, workdir: str = "/workspace") -> Grade:
    """Keep the graded part of ``patch``, apply the test_patch and it to a fresh checkout
    in ``sandbox`` (wiped first), run the tests, and grade them with swebench. The sandbox
    is left dirty.

    The usual path is one command (untar, test_patch, ``git apply``, the tests); only a
    patch plain ``git apply`` refuses takes more.
    """
    start = time.monotonic()
    if len(patch) > MAX_PATCH_BYTES:  # characters: a cheap bound before parsing
        return _unapplied(str(PatchTooLarge(len(patch))), 0, instance, start)
    graded = graded_part(instance, prepared, patch)
    data = graded.text.encode("utf-8", errors="surrogateescape")
    if len(data) > MAX_PATCH_BYTES:
        return _unapplied(str(PatchTooLarge(len(data))), graded.lines, instance, start)
    own = eval_script(instance, prepared)
    canary = canary_for(instance, pytest_log=_pytest_log(instance), own_script=own is not None)
    sandbox.reset()
    stage_checkout(sandbox, prepared)
    sandbox.put_file(f"{STAGE}/model.patch", data)
    sandbox.put_file(f"{STAGE}/test.patch", instance.test_patch)
    if own is not None:
        sandbox.put_file(f"{STAGE}/eval.sh", own)
    apply = f"{GIT_APPLY_CMDS[0]} {STAGE}/model.patch > {STAGE}/apply.log 2>&1 || exit {_APPLY_FAILED}\n"
    script = (f"{untar_command(workdir)} || exit {_CHECKOUT_FAILED}\ncd {workdir} || exit {_CHECKOUT_FAILED}\n"
              f"{'' if own else _TEST_PATCH}{apply if data.strip() else ''}"
              f"{_test_script(instance, test_timeout_s, own, canary)}")
    result = sandbox.exec(script, timeout=test_timeout_s + 120)
    if result.exit_code == _APPLY_FAILED and not result.timed_out:
        problem = _apply_fallbacks(sandbox, workdir, test_patch=own is None)
        if problem is not None:
            return _unapplied(f"the patch does not apply: {problem}", graded.lines, instance, start, graded)
        result = sandbox.exec(f"cd {workdir} || exit 1\n{_test_script(instance, test_timeout_s, own, canary)}",
                              timeout=test_timeout_s + 120)
    try:
        log = _test_log(sandbox, instance, result, test_timeout_s, wrap=own is None)
    except _RunFailed as exc:
        if not data.strip():
            raise GradingError(str(exc)) from None  # no patch: the instance's own fault
        verdict = _unapplied(exc.reason, graded.lines, instance, start, graded)
        verdict.patch_applied = True
        return verdict
    verdict = judge_log(instance, log, patch_lines=graded.lines, canary=canary)
    verdict.seconds = time.monotonic() - start
    verdict.dropped, verdict.patch = graded.dropped_summary(), graded.text
    return verdict


_CHECKOUT_FAILED, _APPLY_FAILED, _TEST_PATCH_FAILED = 97, 98, 99
"""Exit codes of the grading script's stages (the script ends ``exit 0`` once tests ran)."""


def judge_log(instance: Instance, log: str, *, patch_lines: int = 0, canary: Canary | None = None) -> Grade:
    """Grade a test log written between swebench's markers against the instance's tests;
    with ``canary``, its results are checked and taken out first."""
    sb = swebench_harness()
    c = sb.constants
    spec = swebench_spec(instance)
    parser = spec.log_parser
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8", errors="replace") as f:
        f.write(log)
        f.flush()
        status_map, found = sb.grading.get_logs_eval(spec, f.name)
    tail = log[-2000:]
    problem = None
    if canary is not None:
        # from swebench's status map, or, where it refused the log, the parser's own reading
        results = canary.take_results(status_map if found else sb.PARSER_REGISTRY[parser](log, spec))
        problem = canary.problem(results)
        if problem is not None and results:  # reported, and wrong: forged (the exit status too)
            return _untrusted(instance, problem, patch_lines, tail, forged=True)
        if found and _contradicts(log, status_map):
            found = False  # swebench's exit-status check again, the canary's failure aside
    if not found:
        exit_code = sb.grading.parse_test_exit_code(log)
        if sb.PARSER_REGISTRY[parser](log, spec):  # results, but swebench refused them
            reason = "the test command's exit status contradicts its log"
        else:
            reason = "the tests did not run: their output holds no test results"
            if exit_code not in (None, 0):
                reason += f" (exit code {exit_code})"
        return _untrusted(instance, reason, patch_lines, tail)
    report = sb.grading.get_eval_tests_report(
        status_map, {c.FAIL_TO_PASS: list(instance.fail_to_pass),
                     c.PASS_TO_PASS: list(instance.pass_to_pass)},
        eval_type=c.EvalType(spec.eval_type))
    status = sb.grading.get_resolution_status(report)
    f2p, p2p = report[c.FAIL_TO_PASS], report[c.PASS_TO_PASS]
    resolved = status == c.ResolvedStatus.FULL.value
    if problem is not None and resolved:  # no canary ran: forged if all passed, else a run cut short
        return _untrusted(instance, problem, patch_lines, tail, forged=True)
    missing = not_found({c.FAIL_TO_PASS: f2p["failure"], c.PASS_TO_PASS: p2p["failure"]}, status_map, spec)
    reason = ""
    if not resolved:
        parts = []
        for name, failed in ((c.FAIL_TO_PASS, f2p["failure"]), (c.PASS_TO_PASS, p2p["failure"])):
            absent = sum(t in missing for t in failed)
            parts += [f"{len(failed) - absent} {name} test(s) fail"] if len(failed) > absent else []
            parts += [f"{absent} {name} test(s) not found in the test log"] if absent else []
        reason = " and ".join(parts) or "not every test passes"
    return Grade(resolved, status, True, patch_lines, list(f2p["success"]), list(f2p["failure"]),
                 list(p2p["success"]), list(p2p["failure"]), reason, tail, not_found=missing)


def _untrusted(instance: Instance, reason: str, patch_lines: int, tail: str, *, forged: bool = False) -> Grade:
    """A verdict on a run whose results are not used: every graded test counts as failed."""
    return Grade(False, "RESOLVED_NO", True, patch_lines, f2p_failed=list(instance.fail_to_pass),
                 p2p_failed=list(instance.pass_to_pass), reason=reason, log_tail=tail, forged=forged)


def _pytest_log(instance: Instance) -> bool:
    """Whether the instance's log parser reads pytest's ``-rA`` summary."""
    registry = swebench_harness().PARSER_REGISTRY
    return registry[log_parser_name(instance)] in {registry[name] for name in PYTEST_LOG_PARSERS}


def _contradicts(log: str, status_map: dict[str, str]) -> bool:
    """swebench's rule: the test command exited non-zero, yet the log reports no failure."""
    sb = swebench_harness()
    failing = (sb.constants.TestStatus.FAILED.value, sb.constants.TestStatus.ERROR.value)
    return (sb.grading.parse_test_exit_code(log) not in (None, 0) and bool(status_map)
            and not any(status in failing for status in status_map.values()))


def _unapplied(reason: str, lines: int, instance: Instance, start: float,
               graded: GradedPatch | None = None) -> Grade:
    return Grade(False, "RESOLVED_NO", False, lines, f2p_failed=list(instance.fail_to_pass),
                 p2p_failed=list(instance.pass_to_pass), reason=reason,
                 seconds=time.monotonic() - start,
                 dropped=graded.dropped_summary() if graded else [], patch=graded.text if graded else "")


def _apply_fallbacks(sandbox: Sandbox, workdir: str, *, test_patch: bool) -> str | None:
    """swebench's other apply commands, each on a pristine tree (the test_patch applied
    again first when ``test_patch``); None once one applies the patch, else the last error."""
    error = sandbox.exec(f"cat {STAGE}/apply.log", timeout=30).stdout.strip()
    again = f" && git apply {STAGE}/test.patch" if test_patch else ""
    for command in GIT_APPLY_CMDS[1:]:
        # reset --hard, not checkout: a failed --3way leaves unmerged entries checkout refuses
        reset = sandbox.exec(f"cd {workdir} && git reset -q --hard && git clean -fdq{again}", timeout=120)
        if not reset.ok:
            raise GradingError(f"could not restore {workdir} between apply commands: "
                               f"{reset.stderr.strip()[-300:]}")
        result = sandbox.exec(f"cd {workdir} && {command} {STAGE}/model.patch", timeout=120)
        if result.ok:
            return None
        error = (result.stderr or result.stdout).strip()
    # the chain can leave the patch fully applied while each command still exited non-zero
    check = sandbox.exec(f"cd {workdir} && git apply --check --reverse {STAGE}/model.patch", timeout=120)
    if check.ok:
        return None
    return error.splitlines()[-1][:300] if error else "no apply command accepted it"


def run_tests_command(instance: Instance) -> str:
    """The shell command that runs the instance's tests (``test_cmd`` plus its files)."""
    return " ".join([instance.test_cmd, *map(shlex.quote, instance.test_files)])


def eval_script(instance: Instance, prepared: PreparedRepo) -> str | None:
    """A SWE-bench record's own ``eval_script`` (run as-is on its image: it restores the
    test files, applies the test_patch and prints the markers itself), made to record the
    test command's exit status as swebench's harness does; None for other instances."""
    script = instance.record.get("eval_script")
    if prepared.image is None or not isinstance(script, str) or not script.strip():
        return None
    c = swebench_harness().constants
    # swebench.harness.utils' parse_eval_script + record_test_exit_code (that module imports
    # `datasets` at load): drop the shebang and set line, record the test command's status.
    lines = [line for line in script.strip().split("\n") if line not in ("#!/bin/bash", "set -uxo pipefail")]
    for i, line in enumerate(lines):
        if c.END_TEST_OUTPUT in line:
            lines[i:i + 1] = [f"{c.TEST_EXIT_CODE_VAR}=$?", line,
                              f'echo "{c.TEST_EXIT_CODE}: ${c.TEST_EXIT_CODE_VAR}"']
            break
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


_TEST_PATCH = (f"git apply --verbose {STAGE}/test.patch > {STAGE}/test_patch.log 2>&1 "
               f"|| exit {_TEST_PATCH_FAILED}\n")
"""Apply the test_patch to the pristine copy (before the model's patch: a failure is the data's)."""


def _test_script(instance: Instance, timeout_s: float, script: str | None = None,
                 canary: Canary | None = None) -> str:
    """Run the tests into a file (or run the record's own eval script, staged at
    ``STAGE/eval.sh``), killed after ``timeout_s`` (then ``STAGE/test_exit`` says ``timeout``);
    ``canary`` is written first and passed last."""
    limit = f"timeout -k 5 {timeout_s:g} bash -c"
    finish = (f"rc=$?; if [ $rc -eq 124 ] && [ $((SECONDS - started)) -ge {int(timeout_s)} ]; then "
              f"rc=timeout; fi\ntail -c {LOG_TAIL_BYTES} {STAGE}/test_output.txt > {STAGE}/test_tail.txt "
              f"&& echo $rc > {STAGE}/test_exit\nexit 0\n")
    command = f"bash {STAGE}/eval.sh" if script is not None else run_tests_command(instance)
    if canary is not None:
        command += f" {shlex.quote(canary.path)}"
    write = canary.write_command() if canary is not None else ""
    return (f"{write}started=$SECONDS\n{limit} {shlex.quote(command)} > {STAGE}/test_output.txt 2>&1 "
            f"< /dev/null\n{finish}")


def _test_log(sandbox: Sandbox, instance: Instance, result: ExecResult, timeout_s: float, *,
              wrap: bool = True) -> str:
    """The test output between swebench's markers. :class:`GradingError` when the copy or
    the test_patch failed; :class:`_RunFailed` when the run itself went wrong."""
    c = swebench_harness().constants
    if result.exit_code == _CHECKOUT_FAILED and not result.timed_out:
        raise GradingError(f"instance {instance.instance_id}: could not copy the repository for "
                           f"grading: {result.stderr.strip()[-300:]}")
    if result.exit_code == _TEST_PATCH_FAILED and not result.timed_out:
        log = sandbox.exec(f"tail -c 2000 {STAGE}/test_patch.log", timeout=30).stdout
        why = "; ".join(line for line in log.splitlines() if line.startswith("error: patch")
                        or line.endswith("patch does not apply")) or log.strip()[-300:]
        raise GradingError(f"instance {instance.instance_id}: test_patch does not apply at "
                           f"base_commit: {why}; fix `test_patch` in {instance.source}")
    try:
        status = sandbox.get_file(f"{STAGE}/test_exit").decode().strip()
    except (OSError, ValueError):
        status = ""
    if result.timed_out or status == "timeout":
        raise _RunFailed(f"instance {instance.instance_id}: the tests ran past {timeout_s:g} s "
                         "(a hung test); raise test_timeout_s or fix the tests",
                         f"the tests ran past {timeout_s:g} s with your patch")
    try:
        code = int(status)
        output = sandbox.get_file(f"{STAGE}/test_tail.txt")
    except (OSError, ValueError) as exc:
        raise _RunFailed(f"instance {instance.instance_id}: the test run left no results "
                         f"(exit code {result.exit_code}: {result.stderr.strip()[-200:]})",
                         "the test run left no results with your patch") from exc
    text = output.decode("utf-8", errors="replace")
    if not wrap:  # an eval script prints the markers and the exit status itself
        return text
    return f"{c.START_TEST_OUTPUT}\n{text}\n{c.END_TEST_OUTPUT}\n{c.TEST_EXIT_CODE}: {code}\n"


# ---- predictions for the official harness ---------------------------------------------------
def prediction(instance_id: str, model_patch: str, model_name_or_path: str) -> dict[str, str]:
    """One line of a ``predictions.jsonl`` the official harness reads."""
    return {"instance_id": instance_id, "model_name_or_path": model_name_or_path,
            "model_patch": model_patch}


def write_predictions(path: str | Path, predictions: Iterable[dict[str, str]]) -> Path:
    """Write ``predictions.jsonl`` (``instance_id, model_name_or_path, model_patch`` per
    line) for ``python -m swebench.harness.run_evaluation --predictions_path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in predictions:
            missing = {"instance_id", "model_name_or_path", "model_patch"} - set(row)
            if missing:
                raise ValueError(f"a prediction needs {sorted(missing)}; make it with prediction()")
            f.write(json.dumps({k: row[k] for k in ("instance_id", "model_name_or_path",
                                                    "model_patch")}) + "\n")
    return path


__all__ = ["GIT_APPLY_CMDS", "Grade", "GradingError", "PatchTooLarge", "REWARD_MODES", "grade", "graded_part",
           "judge_log", "model_patch", "prediction", "swebench_harness", "run_tests_command",
           "write_predictions"]
