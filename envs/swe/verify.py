"""Prove an instance fair with scripted agents that go through the env itself.

* The **oracle** applies the gold ``patch`` through the ``str_replace_editor`` tool (one
  ``str_replace`` per hunk, ``create`` for new files, ``bash rm`` for deleted ones; a file
  the editor cannot express, such as a binary or a rename, goes through ``git apply``)
  and submits: the instance must be resolved.
* The **idle** agent submits at once: the instance must not be resolved, and each
  FAIL_TO_PASS test must fail (one that passes proves nothing).
* The **vandals** (:data:`VANDALS`) try to win without a fix, each in its own episode: delete
  the tests; replace a test folder by a file or a symlink; plant a ``conftest.py`` hook that
  marks failed reports passed; load the same hook through ``pytest.ini`` ``addopts``, a
  ``.pth`` file and ``usercustomize`` in the user site-packages (``$HOME`` is
  ``/workspace``), a ``sitecustomize``, a ``pytest.py`` shadowing the real one, or an
  entry point of a ``*.dist-info``; edit the installed pytest (the rootfs is read-only); or
  append to the project's own source code that forges pytest's reports once the tests
  import it (graded source: the grader's canary tests catch it).
  None may resolve it, and none may end in an env error.

And one check of the sandbox itself, :func:`rootfs_copies`: the ``swe`` rootfs must hold no
copy of a project instances are made from (Debian's python3-dateutil once showed the gold
fix of 7 of 8 dateutil instances to ``diff``).

``python -m envs.swe check <file>`` runs this on every instance of a file, and the test
suite on the shipped ones. Problems are named by the record's field, e.g. ``patch does
not apply``, ``FAIL_TO_PASS test t::x passes without the patch``.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from unidiff import PatchedFile, PatchSet

from envs.errors import EnvError
from envs.messages import Message
from envs.swe.env import SWEEnv
from envs.terminal.verify import tool_call

VANDAL_COMMAND = (
    "git ls-files -z | grep -zE '(^|/)(tests?|testing)/|(^|/)test_[^/]*\\.py$|_tests?\\.py$|"
    "(^|/)conftest\\.py$' | xargs -0 -r rm -f --"
)
"""Delete every tracked test file (test directories, ``test_*.py``, ``*_test.py``, conftest)."""

FORGE = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""
"""A pytest plugin that reports every failed test as passed (the hook issue 45 found)."""

SHADOW_PYTEST = """import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
import pytest  # the real one

sys.path.insert(0, _here)
import vandal_forge

if __name__ == "__main__":
    sys.exit(pytest.main(sys.argv[1:], plugins=[vandal_forge]))
"""
"""``pytest.py`` at the root: ``python -m pytest`` runs it instead of pytest, with the forge."""

FORGE_SOURCE = """

try:  # appended by a vandal: forge pytest's reports from the project's own source
    import _pytest.reports as _vandal_reports
except ImportError:
    _vandal_reports = None
if _vandal_reports is not None and not hasattr(_vandal_reports.TestReport, "_vandal"):
    _vandal_make = _vandal_reports.TestReport.from_item_and_call.__func__

    def _vandal_forged(cls, item, call):
        report = _vandal_make(cls, item, call)
        if report.failed:
            report.outcome = "passed"
        return report

    _vandal_reports.TestReport.from_item_and_call = classmethod(_vandal_forged)
    _vandal_reports.TestReport._vandal = True
"""
"""Source that, once the tests import it, makes pytest report every failure as passed (and
so exit 0): the graded part of a patch runs inside the test process."""
_SOURCE_FILES = ("git ls-files -z '*.py' | grep -zvE '(^|/)(tests?|testing|docs?)/|(^|/)test_[^/]*\\.py$|"
                 "_tests?\\.py$|(^|/)(conftest|setup|noxfile)\\.py$'")
_ADDOPTS = "import os; os.environ['PYTEST_ADDOPTS'] = os.environ.get('PYTEST_ADDOPTS', '') + ' -p vandal_forge'"
_USER_SITE = 'd=$(python3 -c "import site; print(site.getusersitepackages())") && mkdir -p "$d" && '
_TEST_DIRS = "git ls-files | grep -oE '^([^/]*/)*(tests?|testing)/' | sort -u | sed 's:/$::'"


def _write(path: str, text: str) -> str:
    return f"cat > {path} <<'CLAWGYM_EOF'\n{text}CLAWGYM_EOF\n"


VANDALS: dict[str, tuple[str, str]] = {
    "delete-tests": ("deleting the test files", VANDAL_COMMAND),
    "tests-file": ("replacing the test folders by files",
                   f"for d in $({_TEST_DIRS}); do rm -rf \"$d\" && echo gone > \"$d\"; done"),
    "tests-symlink": ("replacing the test folders by symlinks",
                      f"for d in $({_TEST_DIRS}); do rm -rf \"$d\" && ln -s /nonexistent \"$d\"; done"),
    "conftest": ("a conftest.py hook marking failures passed", _write("conftest.py", FORGE)),
    "pytest-ini": ("a pytest.ini whose addopts load a forging plugin",
                   _write("vandal_forge.py", FORGE) + "printf '[pytest]\\naddopts = -p vandal_forge\\n' > pytest.ini"),
    "user-site": ("a .pth and usercustomize in the user site-packages loading a forging plugin",
                  _USER_SITE + _write('"$d/vandal_forge.py"', FORGE) + f'echo "{_ADDOPTS}" > "$d/vandal.pth" && '
                  f'echo "{_ADDOPTS}" > "$d/usercustomize.py"'),
    "sitecustomize": ("a sitecustomize loading a forging plugin",
                      "for d in . src; do [ -d $d ] || continue; "
                      + _write("$d/vandal_forge.py", FORGE) + f'echo "{_ADDOPTS}" > $d/sitecustomize.py; done'),
    "shadow-pytest": ("a pytest.py shadowing pytest", _write("vandal_forge.py", FORGE) + _write("pytest.py", SHADOW_PYTEST)),
    "entry-point": ("a .dist-info whose pytest11 entry point loads a forging plugin",
                    _write("vandal_forge.py", FORGE) + "mkdir -p vandal_forge-1.0.dist-info && "
                    "printf 'Metadata-Version: 2.1\\nName: vandal-forge\\nVersion: 1.0\\n' > vandal_forge-1.0.dist-info/METADATA && "
                    "printf '[pytest11]\\nvandal = vandal_forge\\n' > vandal_forge-1.0.dist-info/entry_points.txt"),
    "forge-source": ("source code that forges pytest's reports when the tests import it",
                     f"{_SOURCE_FILES} | while IFS= read -r -d '' f; do printf '\\n' >> \"$f\" && "
                     f"cat >> \"$f\" <<'CLAWGYM_EOF'\n{FORGE_SOURCE}CLAWGYM_EOF\ndone"),
    "edit-pytest": ("editing the installed pytest",
                    "f=$(python3 -c 'import _pytest.runner as m; print(m.__file__)') && "
                    + _write('"$f"', "from vandal_forge import *\n") + "true"),
}
"""Name -> (what it does, the bash command it runs in ``/workspace`` before submitting)."""


@dataclass
class InstanceCheck:
    """The outcome of the three runs on one instance."""

    instance_id: str
    gold_reward: float = 0.0
    idle_reward: float = 1.0
    vandal_rewards: dict[str, float] = field(default_factory=dict)
    """Vandal name -> its reward (each must be 0)."""
    problems: list[str] = field(default_factory=list)
    """What is wrong, one sentence each, naming the field; empty when the instance is fair."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds per run (gold, idle, vandal): reset, the agent's steps and grading."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def vandal_reward(self) -> float:
        """The best any vandal scored (1.0 until they ran)."""
        return max(self.vandal_rewards.values(), default=1.0)


def editor(arguments: dict[str, Any], call_id: str) -> Message:
    return tool_call("str_replace_editor", arguments, call_id)


def _editable(patched: PatchedFile) -> bool:
    """Whether the editor can apply this file's diff (text hunks, no rename, no lost newline)."""
    renamed = (patched.source_file.removeprefix("a/") != patched.target_file.removeprefix("b/")
               and not (patched.is_added_file or patched.is_removed_file))
    if patched.is_binary_file or renamed:
        return False
    return not any(line.line_type == "\\" for hunk in patched for line in hunk)


def _hunk_text(hunk: Any, source: bool) -> str:
    lines = hunk.source_lines() if source else hunk.target_lines()
    return "".join(line.value for line in lines)


def oracle_calls(patch: str) -> list[tuple[str, list[Message]]]:
    """Per file of ``patch``: (path, the tool calls that apply it), in order."""
    plan = []
    for n, patched in enumerate(PatchSet(patch)):
        path = f"/workspace/{patched.path}"
        if not _editable(patched):
            plan.append((patched.path, []))  # applied with git apply by the oracle
        elif patched.is_removed_file:
            plan.append((patched.path, [tool_call("bash", {"command": f"rm -f -- {shlex.quote(path)}"},
                                                  f"call_{n}_rm")]))
        elif patched.is_added_file:
            text = "".join(_hunk_text(h, source=False) for h in patched)
            plan.append((patched.path, [editor({"command": "create", "path": path, "file_text": text},
                                               f"call_{n}_create")]))
        else:
            calls = []
            for k, hunk in enumerate(patched):
                old, new = _hunk_text(hunk, True), _hunk_text(hunk, False)
                if old:
                    calls.append(editor({"command": "str_replace", "path": path, "old_str": old,
                                         "new_str": new}, f"call_{n}_{k}"))
                else:  # a pure insertion with no context: after line source_start
                    calls.append(editor({"command": "insert", "path": path,
                                         "insert_line": hunk.source_start, "new_str": new},
                                        f"call_{n}_{k}"))
            plan.append((patched.path, calls))
    return plan


def apply_with_tools(env: SWEEnv, patch: str) -> int:
    """Apply ``patch`` in the current episode through the env's tools, as an agent would;
    returns the number of turns used. A file the editor cannot express (or whose edit it
    refuses) is restored and applied with ``git apply`` instead."""
    turns = 0
    files = {f.path: str(f) for f in PatchSet(patch)}
    for path, calls in oracle_calls(patch):
        failed = not calls
        for call in calls:
            obs, *_ = env.step(call)
            turns += 1
            if obs and str(obs[0].get("content", "")).startswith("Error:"):
                failed = True
                break
        if failed:
            restore = (f"git checkout -q HEAD -- {shlex.quote(path)} 2>/dev/null || rm -f -- {shlex.quote(path)}")
            env.step(editor({"command": "create", "path": f"/tmp/oracle-{turns}.patch",
                             "file_text": files[path]}, f"call_{turns}_patch"))
            obs, *_ = env.step(tool_call("bash", {"command": f"{restore}; git apply /tmp/oracle-{turns}.patch "
                                                                  f"&& rm /tmp/oracle-{turns}.patch"},
                                         f"call_{turns}_apply"))
            turns += 2
    return turns


def gold_run(env: SWEEnv, task_id: str, seed: int | None = None) -> tuple[float, dict[str, Any]]:
    """The oracle: apply the gold patch with the tools, then submit; (reward, last info)."""
    env.reset(seed=seed, options={"task_id": task_id})
    apply_with_tools(env, env.instance(task_id).patch)
    return _submit(env)


def idle_run(env: SWEEnv, task_id: str) -> tuple[float, dict[str, Any]]:
    """Submit at once; (reward, last info)."""
    env.reset(options={"task_id": task_id})
    return _submit(env)


def vandal_run(env: SWEEnv, task_id: str, vandal: str = "delete-tests") -> tuple[float, dict[str, Any]]:
    """Run one of :data:`VANDALS`, then submit; (reward, last info)."""
    env.reset(options={"task_id": task_id})
    env.step(tool_call("bash", {"command": VANDALS[vandal][1]}, "call_vandal"))
    return _submit(env)


def _submit(env: SWEEnv) -> tuple[float, dict[str, Any]]:
    _, reward, terminated, truncated, info = env.step(tool_call("submit", {}, "call_submit"))
    if "error" in info:
        raise EnvError(info["error"])
    assert terminated or truncated, "submit must end the episode"
    return reward, info


def check_instance(env: SWEEnv, task_id: str, vandals: tuple[str, ...] = tuple(VANDALS)) -> InstanceCheck:
    """The gold, idle and vandal runs on one instance, with what is wrong if it is not fair."""
    check = InstanceCheck(task_id)
    runs: list[tuple[str, Any]] = [("gold", gold_run), ("idle", idle_run)]
    runs += [(name, lambda env, task_id, name=name: vandal_run(env, task_id, name)) for name in vandals]
    for name, run in runs:
        start = time.monotonic()
        try:
            reward, info = run(env, task_id)
        except EnvError as exc:
            check.problems.append(f"the {name} run could not be graded: {exc}")
            if name == "gold":
                return check  # the instance does not build or grade: nothing more to learn
            continue
        report = info.get("grade", {})
        check.seconds[name] = round(time.monotonic() - start, 3)
        if name in VANDALS:
            check.vandal_rewards[name] = reward
        else:
            setattr(check, f"{name}_reward", reward)
        check.problems += _problems(name, report)
    return check


def _problems(run: str, report: dict[str, Any]) -> list[str]:
    f2p, p2p = report.get("FAIL_TO_PASS", {}), report.get("PASS_TO_PASS", {})
    if run in ("gold", "idle") and report.get("forged"):  # no test result of the run counts
        return [f"the {run} run's test results are not trusted: {report.get('reason', '')}"]
    if run == "gold":
        if not report.get("patch_applied"):
            return [f"patch does not apply ({report.get('reason', '')})"]
        found = [_failed("FAIL_TO_PASS", t, "with the gold patch", report) for t in f2p.get("failure", [])]
        found += [_failed("PASS_TO_PASS", t, "with the gold patch", report) for t in p2p.get("failure", [])]
        if not found and not report.get("resolved"):
            found.append(f"the gold patch does not resolve it ({report.get('reason', '')})")
        return found
    if run == "idle":
        found = [f"FAIL_TO_PASS test {t} passes without the patch" for t in f2p.get("success", [])]
        found += [_failed("PASS_TO_PASS", t, "without the patch", report, " (it must pass before and after)")
                  for t in p2p.get("failure", [])]
        if report.get("resolved"):
            found.append("an empty patch resolves it")
        return found
    return [f"{VANDALS[run][0]} resolves it"] if report.get("resolved") else []


def _failed(field: str, test: str, when: str, report: dict[str, Any], note: str = "") -> str:
    """That a failed test fails ``when``; or, for one the log does not name, that it is not
    found in the test log, with why and what to do (the grade's ``not_found``)."""
    why = report.get("not_found", {}).get(test)
    if why is None:
        return f"{field} test {test} fails {when}{note}"
    return f"{field} test {test} is not found in the test log {when}: {why}"


def summary_line(check: InstanceCheck) -> str:
    status = "ok" if check.ok else "UNFAIR: " + "; ".join(check.problems)
    return (f"{check.instance_id}: gold {check.gold_reward:.2f}, idle {check.idle_reward:.2f}, "
            f"vandal {check.vandal_reward:.2f}: {status}")


def as_json(check: InstanceCheck) -> str:
    return json.dumps({"instance_id": check.instance_id, "ok": check.ok, "problems": check.problems,
                       "gold": check.gold_reward, "idle": check.idle_reward,
                       "vandal": check.vandal_reward, "vandals": check.vandal_rewards,
                       "seconds": check.seconds})


def rootfs_copies(rootfs: str | Path, projects: Iterable[Any] | None = None) -> list[str]:
    """Copies of a project under test in ``rootfs`` (default: every project of
    ``projects.yaml``): its top-level modules or its distribution's ``.dist-info``/
    ``.egg-info`` in any ``site-packages``/``dist-packages`` folder; paths inside the rootfs."""
    if projects is None:
        from envs.swe.projects import load_projects

        projects = load_projects().values()
    root = Path(rootfs)
    folders = [d for pattern in ("usr/lib/python3*/*-packages", "usr/local/lib/python3*/*-packages")
               for d in sorted(root.glob(pattern)) if d.is_dir()]
    found = []
    for project in projects:
        modules = {PurePosixPath(s).name.removesuffix(".py") for s in project.source}
        dist = re.compile(re.sub(r"[-_.]+", "[-_.]", project.distribution) + r"-[^/]*\.(dist|egg)-info",
                          re.IGNORECASE)
        for folder in folders:
            for entry in sorted(folder.iterdir()):
                if entry.name.split(".", 1)[0] in modules or dist.fullmatch(entry.name):
                    found.append(f"/{entry.relative_to(root)} (project {project.name})")
    return found

