"""The grader's canary tests on hand-written pytest -rA logs: what it trusts, what it calls
forged, that it never enters the report, and where it cannot run. (On a real sandbox:
tests/envs/swe/test_hostile.py.)"""

from __future__ import annotations

import dataclasses
import email
import json
from pathlib import Path

import pytest

from envs.swe.canary import Canary, canary_for
from envs.swe.grading import judge_log
from envs.swe.instances import Instance, parse_instance

from .tiny import F2P, P2P, record

ADD, ZERO = F2P
MUL = P2P[0]

BASE = "0123456789abcdef0123456789abcdef01234567"


def log(*lines: str, exit_code: int = 0) -> str:
    body = "\n".join(lines)
    return f">>>>> Start Test Output\n{body}\n>>>>> End Test Output\n>>>>> Test Exit Code: {exit_code}\n"


@pytest.fixture(scope="module", params=["parse_log_pytest", "parse_log_pytest_v2", "parse_log_pytest_options"])
def instance(request: pytest.FixtureRequest) -> Instance:
    """The tiny instance under each of swebench's pytest log parsers."""
    return parse_instance(record(Path("/repos/calc"), BASE, log_parser=request.param))


def fresh(instance: Instance) -> Canary:
    canary = canary_for(instance, pytest_log=True, own_script=False)
    assert canary is not None
    return canary


def lines(canary: Canary, failing: str | None, passing: str | None) -> list[str]:
    """The -rA summary lines of the canary's two tests (None: not in the log)."""
    out = []
    if failing is not None:
        message = f" - AssertionError: {canary.message}" if failing == "FAILED" else ""
        out.append(f"{failing} {canary.path}::test_{canary.must_fail}{message}")
    if passing is not None:
        out.append(f"{passing} {canary.path}::test_{canary.must_pass}")
    return out


GRADED_PASS = [f"PASSED {ADD}", f"PASSED {ZERO}", f"PASSED {MUL}"]


# canary (fails | passes)  graded tests        exit  resolved  forged  why
# FAILED | PASSED          all pass            0     yes       no      reported right
# PASSED | PASSED          all pass            0/1   no        yes     the failing one passed
# XFAIL  | PASSED          all pass            0     no        yes     an expected failure is not a failure
# (none) | PASSED          all pass            0     no        yes     its failure was hidden
# FAILED | FAILED          all pass            0     no        yes     the passing one failed
# (none) | (none)          all pass            0     no        yes     a resolved run without the canary
# (none) | (none)          add fails           1     no        no      a run cut short (pytest -x) is no forgery
@pytest.mark.parametrize("failing, passing, graded, exit_code, resolved, forged, reason", [
    ("FAILED", "PASSED", GRADED_PASS, 0, True, False, ""),
    ("PASSED", "PASSED", GRADED_PASS, 0, False, True, "the test run's results are forged: a test the grader "
                                                      "added, which fails, was reported PASSED"),
    ("PASSED", "PASSED", GRADED_PASS, 1, False, True, "the test run's results are forged: a test the grader "
                                                      "added, which fails, was reported PASSED"),
    ("XFAIL", "PASSED", GRADED_PASS, 0, False, True, "the test run's results are forged: a test the grader "
                                                     "added, which fails, was reported XFAIL"),
    (None, "PASSED", GRADED_PASS, 0, False, True, "the test run's results are forged: a test the grader "
                                                  "added, which fails, was reported missing"),
    ("FAILED", "FAILED", GRADED_PASS, 0, False, True, "the test run's results are not trusted: a test the "
                                                      "grader added, which passes, was reported FAILED"),
    (None, None, GRADED_PASS, 0, False, True, "the test run's results are not trusted: the grader's check "
                                              "tests did not run"),
    (None, None, [f"FAILED {ADD} - assert -1 == 5", f"PASSED {ZERO}", f"PASSED {MUL}"], 1, False, False,
     "1 FAIL_TO_PASS test(s) fail"),
])
def test_the_canary_decides_whether_the_log_is_trusted(instance, failing, passing, graded, exit_code,
                                                       resolved, forged, reason):
    canary = fresh(instance)
    verdict = judge_log(instance, log(*graded, *lines(canary, failing, passing), exit_code=exit_code),
                        canary=canary)
    assert (verdict.resolved, verdict.forged, verdict.reason) == (resolved, forged, reason)
    assert verdict.metrics()["forged"] == float(forged) and verdict.as_dict()["forged"] is forged
    if forged:  # nothing of a forged run counts, in either reward mode
        assert verdict.f2p_failed == [ADD, ZERO] and verdict.reward("fraction") == 0.0


def test_the_canary_is_never_part_of_the_report(instance):
    canary = fresh(instance)
    verdict = judge_log(instance, log(*GRADED_PASS, *lines(canary, "FAILED", "PASSED")), canary=canary)
    assert (verdict.f2p_passed, verdict.p2p_passed, verdict.p2p_failed) == ([ADD, ZERO], [MUL], [])


def test_printed_passed_lines_still_contradict_the_exit_status(instance):
    # the canary's own failure must not hide swebench's check: pytest exited 1, and apart
    # from the canary the log reports no failure
    canary = fresh(instance)
    verdict = judge_log(instance, log(*GRADED_PASS, *lines(canary, "FAILED", "PASSED"), exit_code=1),
                        canary=canary)
    assert not verdict.resolved and not verdict.forged
    assert verdict.reason == "the test command's exit status contradicts its log"


def test_each_grading_gets_new_names_beside_the_first_test_file(instance):
    first, second = fresh(instance), fresh(instance)
    assert len({first.must_fail, first.must_pass, first.message, second.must_fail, second.path}) == 5
    assert first.path.startswith("tests/test_") and first.path.endswith(".py")
    assert first.imports_from == ("tests/test_calc.py",)
    for files, folder in ((("test_inflection.py",), ""), (("toolz/tests/test_x.py::T::test_y",), "toolz/tests/"),
                          (("tests",), "tests/")):
        path = fresh(dataclasses.replace(instance, test_files=files)).path
        assert path.startswith(f"{folder}test_") and path.count("/") == folder.count("/")


@pytest.mark.parametrize("change, own_script, pytest_log", [
    ({"test_cmd": "tox -e py311"}, False, True),
    ({"test_cmd": "./tests/runtests.py --verbosity 2"}, False, True),
    ({"test_files": ()}, False, True),
    ({}, True, True),
    ({}, False, False),
])
def test_no_canary_where_it_cannot_run(instance, change, own_script, pytest_log):
    assert canary_for(dataclasses.replace(instance, **change), pytest_log=pytest_log, own_script=own_script) is None


def test_the_canary_module_imports_what_the_tests_import(tmp_path, instance):
    # so source that forges when imported is active for it as for the graded tests
    test_file = tmp_path / "test_x.py"
    test_file.write_text("import json.decoder\nfrom email import message\nfrom . import helpers\n"
                         "from missing_module import x\n\n\ndef test_x():\n    import collections.abc\n")
    canary = dataclasses.replace(fresh(instance), imports_from=(str(test_file), str(tmp_path / "gone.py")))
    namespace: dict[str, object] = {}
    exec(compile(canary.text, canary.path, "exec"), namespace)  # the grader's own code
    assert namespace["json"] is json and namespace["email"] is email and "collections" in namespace
    assert "missing_module" not in namespace and "helpers" not in namespace
    tests = sorted(name for name in namespace if name.startswith("test_"))
    assert tests == sorted([f"test_{canary.must_fail}", f"test_{canary.must_pass}"])


def test_the_fairness_check_names_a_gold_run_whose_results_are_not_trusted():
    # one line saying why, not "fails with the gold patch" for tests whose results were not used
    from envs.swe.verify import _problems

    report = {"resolved": False, "patch_applied": True, "forged": True,
              "reason": "the grader's check tests did not run",
              "FAIL_TO_PASS": {"success": [], "failure": [ADD]}, "PASS_TO_PASS": {"success": [], "failure": [MUL]}}
    assert _problems("gold", report) == [
        "the gold run's test results are not trusted: the grader's check tests did not run"]
