"""Grading like SWE-bench: swebench's rules on hand-written logs, the model patch, patches that
do not apply, and the predictions file the official harness reads."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.sandbox import Sandbox, make_sandbox
from envs.swe import sandbox_config
from envs.swe.grading import GradingError, grade, judge_log, model_patch, prediction, write_predictions
from envs.swe.instances import Instance, load_instances, parse_instance
from envs.swe.repos import SANDBOX_ENV, PreparedRepo, RepoCache, checkout

from .tiny import F2P, GOLD_PATCH, P2P, record

ADD, ZERO = F2P
MUL = P2P[0]


def log(*lines: str, exit_code: int = 0) -> str:
    body = "\n".join(lines)
    return f">>>>> Start Test Output\n{body}\n>>>>> End Test Output\n>>>>> Test Exit Code: {exit_code}\n"


@pytest.fixture(scope="module")
def instance() -> Instance:
    return parse_instance(record(Path("/repos/calc"), "0123456789abcdef0123456789abcdef01234567"))


# ---- swebench's rules, on hand-written pytest -rA logs ---------------------------------------
# log (statuses of add, add_zero | mul)       resolved  status            f2p   reward(fraction)
# PASSED PASSED | PASSED                      yes       RESOLVED_FULL     1.0   1.0
# PASSED (missing) | PASSED                   no        RESOLVED_PARTIAL  0.5   0.5   missing = failed
# PASSED SKIPPED | PASSED                     no        RESOLVED_PARTIAL  0.5   0.5   F2P skip = failed
# XFAIL PASSED | SKIPPED                      yes       RESOLVED_FULL     1.0   1.0   P2P skip = kept
# PASSED PASSED | FAILED                      no        RESOLVED_NO       1.0   1.0   P2P broke
@pytest.mark.parametrize("statuses, resolved, status, f2p", [
    (("PASSED", "PASSED", "PASSED"), True, "RESOLVED_FULL", 1.0),
    (("PASSED", None, "PASSED"), False, "RESOLVED_PARTIAL", 0.5),
    (("PASSED", "SKIPPED", "PASSED"), False, "RESOLVED_PARTIAL", 0.5),
    (("XFAIL", "PASSED", "SKIPPED"), True, "RESOLVED_FULL", 1.0),
    (("PASSED", "PASSED", "FAILED"), False, "RESOLVED_NO", 1.0),
])
def test_swebench_rules_decide_the_verdict(instance, statuses, resolved, status, f2p):
    lines = [f"{s} {t}" for s, t in zip(statuses, (ADD, ZERO, MUL), strict=True) if s is not None]
    verdict = judge_log(instance, log("collected 3 items", *lines, exit_code=int("FAILED" in statuses)))
    assert (verdict.resolved, verdict.status, verdict.f2p_fraction()) == (resolved, status, f2p)
    assert verdict.reward("resolved") == float(resolved) and verdict.reward("fraction") == f2p


def test_a_failed_line_with_a_message_is_parsed(instance):
    verdict = judge_log(instance, log(f"PASSED {MUL}", f"FAILED {ADD} - assert -1 == 5",
                                      f"FAILED {ZERO} - assert -7 == 7", exit_code=1))
    assert verdict.f2p_failed == [ADD, ZERO] and verdict.p2p_passed == [MUL]
    assert verdict.reason == "2 FAIL_TO_PASS test(s) fail"
    assert verdict.metrics() == {"resolved": 0.0, "f2p_passed": 0.0, "p2p_passed": 1.0,
                                 "patch_applied": 1.0, "patch_lines": 0.0, "forged": 0.0}


def test_a_log_that_contradicts_the_exit_status_is_not_trusted(instance):
    # a patch can print its own PASSED lines; pytest exiting 1 with no failure gives it away
    verdict = judge_log(instance, log(f"PASSED {ADD}", f"PASSED {ZERO}", f"PASSED {MUL}", exit_code=1))
    assert not verdict.resolved and verdict.reason == "the test command's exit status contradicts its log"


def test_a_run_with_no_results_is_not_resolved(instance):
    verdict = judge_log(instance, log("collected 0 items", "no tests ran in 0.01s", exit_code=5))
    assert not verdict.resolved
    assert verdict.reason == "the tests did not run: their output holds no test results (exit code 5)"


def test_swebench_loads_without_its_heavy_dependencies():
    code = ("import sys; from envs.swe.grading import swebench_harness; swebench_harness(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'docker', 'datasets', 'modal', 'requests'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_predictions_are_written_in_the_harness_format(tmp_path):
    path = write_predictions(tmp_path / "out" / "predictions.jsonl",
                             [prediction("calc__calc-1", GOLD_PATCH, "oracle"),
                              {"instance_id": "x-1", "model_name_or_path": "m", "model_patch": "", "extra": 1}])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"instance_id": "calc__calc-1", "model_name_or_path": "oracle", "model_patch": GOLD_PATCH},
                    {"instance_id": "x-1", "model_name_or_path": "m", "model_patch": ""}]
    with pytest.raises(ValueError, match=r"a prediction needs \['model_patch'\]"):
        write_predictions(tmp_path / "p.jsonl", [{"instance_id": "x", "model_name_or_path": "m"}])


# ---- on a real sandbox ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real(backend: str, tiny: Path, cache_root: Path) -> Iterator[tuple[Sandbox, Instance, PreparedRepo]]:
    sandbox = make_sandbox(backend, sandbox_config(env=SANDBOX_ENV))
    inst = next(i for i in load_instances(tiny) if i.instance_id == "calc__calc-1")
    prepared = RepoCache(cache_root).prepare(inst, sandbox)
    yield sandbox, inst, prepared
    sandbox.close()


def test_the_model_patch_is_the_true_diff_whatever_the_agent_did_to_git(real):
    sandbox, inst, prepared = real
    sandbox.reset()
    checkout(sandbox, prepared)
    assert sandbox.exec(
        "sed -i 's/a - b/a + b/' calc/__init__.py && echo 'x = 1' > extra.py && "
        "git add -A && git commit -qm mine && git checkout -q --orphan other && git commit -qm rewritten && "
        "git config diff.external /bin/false && mkdir -p .git/hooks && "
        "printf '#!/bin/sh\\nexit 1\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && "
        "rm -rf .git/objects").ok
    patch = model_patch(sandbox, prepared)
    assert "-    return a - b\n+    return a + b" in patch and "+x = 1" in patch
    assert sorted(line.split(" b/")[1] for line in patch.splitlines() if line.startswith("diff --git")) \
        == ["calc/__init__.py", "extra.py"]
    assert grade(sandbox, inst, prepared, patch).resolved


def test_a_patch_that_does_not_apply_is_unresolved_with_the_reason(real):
    sandbox, inst, prepared = real
    bad = GOLD_PATCH.replace("-    return a - b", "-    return a // b")
    verdict = grade(sandbox, inst, prepared, bad)
    assert not verdict.resolved and not verdict.patch_applied and verdict.reward("fraction") == 0.0
    assert verdict.reason.startswith("the patch does not apply: ")
    assert verdict.metrics()["patch_applied"] == 0.0 and verdict.f2p_failed == F2P


def test_a_patch_git_apply_refuses_goes_through_swebenchs_fallbacks(real):
    sandbox, inst, prepared = real
    shifted = GOLD_PATCH.replace("@@ -3,7 +3,7 @@", "@@ -9,6 +9,6 @@").replace(" def mul(a, b):\n", "")
    verdict = grade(sandbox, inst, prepared, shifted)
    assert verdict.patch_applied and verdict.resolved, verdict.log_tail


def test_a_test_patch_that_does_not_apply_is_a_grading_error(real):
    sandbox, inst, prepared = real
    broken = dataclasses.replace(inst, test_patch=inst.test_patch.replace("-from calc import mul",
                                                                          "-from calc import div"))
    with pytest.raises(GradingError, match=r"calc__calc-1: test_patch does not apply at base_commit: "
                                           r"error: patch failed: tests/test_calc.py:1; error: tests/test_calc.py: "
                                           r"patch does not apply; fix `test_patch` in .*instances.jsonl:1"):
        grade(sandbox, broken, prepared, "")


def test_a_test_patch_that_does_not_apply_is_the_datas_fault_whatever_the_patch(real):
    # the test_patch goes onto the pristine copy first: no model patch can make it fail
    sandbox, inst, prepared = real
    broken = dataclasses.replace(inst, test_patch=inst.test_patch.replace("-from calc import mul",
                                                                          "-from calc import div"))
    with pytest.raises(GradingError, match=r"test_patch does not apply at base_commit: .*fix `test_patch`"):
        grade(sandbox, broken, prepared, GOLD_PATCH)
    assert grade(sandbox, inst, prepared, GOLD_PATCH).resolved


def test_a_tests_link_beside_the_fix_is_dropped_and_the_fix_graded(real):
    # a test folder the agent turned into a link is not graded; the fix beside it is
    sandbox, inst, prepared = real
    hostile = GOLD_PATCH + ("diff --git a/calc/tests b/calc/tests\nnew file mode 120000\n--- /dev/null\n"
                            "+++ b/calc/tests\n@@ -0,0 +1 @@\n+/nonexistent\n\\ No newline at end of file\n")
    verdict = grade(sandbox, inst, prepared, hostile)
    assert verdict.resolved and verdict.dropped == ["calc/tests (a test file)"]
