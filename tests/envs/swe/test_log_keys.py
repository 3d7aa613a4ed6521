"""Test ids with a space: swebench's pytest log parser cuts them at the first space, so the
id is never found in the test log; grading, ``check`` and loading say so, and what to write.

The log is a real ``pytest -rA`` run; the parser and the lookup are swebench's own."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from envs.swe.grading import judge_log
from envs.swe.instances import Instance, parse_instance
from envs.swe.log_keys import CutTestIdWarning
from envs.swe.verify import _problems

from .tiny import record

TESTS = '''import pytest


@pytest.mark.parametrize("text", ["a b", "a c", "d"])
def test_words(text):
    assert text
'''
AB, AC, D = (f"test_words.py::test_words[{p}]" for p in ("a b", "a c", "d"))
CUT = "test_words.py::test_words[a"
"""What swebench's ``parse_log_pytest`` records for both ``[a b]`` and ``[a c]``: the second word."""
PARSER = "swebench's pytest log parser (parse_log_pytest)"


@pytest.fixture(scope="module")
def pytest_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real ``pytest -rA`` run of three passing tests, between swebench's markers."""
    root = tmp_path_factory.mktemp("spaced")
    (root / "test_words.py").write_text(TESTS)
    run = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_words.py"],
                         cwd=root, capture_output=True, text=True, timeout=120)
    assert f"PASSED {AB}" in run.stdout, run.stdout  # pytest keeps the space in the id
    return (f">>>>> Start Test Output\n{run.stdout}\n>>>>> End Test Output\n"
            f">>>>> Test Exit Code: {run.returncode}\n")


def instance(p2p: list[str], **extra: object) -> Instance:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CutTestIdWarning)
        return parse_instance(record(Path("/repos/words"), "0123456789abcdef0123456789abcdef01234567",
                                     FAIL_TO_PASS=[D], PASS_TO_PASS=p2p, **extra), "words.jsonl:1")


def test_an_id_with_a_space_is_reported_not_found_with_the_id_the_parser_records(pytest_log):
    verdict = judge_log(instance([AB]), pytest_log)
    assert not verdict.resolved and verdict.p2p_failed == [AB]  # graded as before: not found is not passing
    assert verdict.reason == "1 PASS_TO_PASS test(s) not found in the test log"
    why = (f"{PARSER} cuts test ids at the first space and records this one as '{CUT}' "
           f"(PASSED in this log), so write that id in PASS_TO_PASS instead")
    assert verdict.not_found == {AB: why} and verdict.as_dict()["not_found"] == {AB: why}
    assert verdict.summary().endswith(f"Not found in the test log: {AB}.")
    assert _problems("gold", verdict.as_dict()) == [
        f"PASS_TO_PASS test {AB} is not found in the test log with the gold patch: {why}"]
    assert _problems("idle", verdict.as_dict()) == [  # this log is the fixed run's: test_words[d] passes
        f"FAIL_TO_PASS test {D} passes without the patch",
        f"PASS_TO_PASS test {AB} is not found in the test log without the patch: {why}"]


def test_the_suggested_id_is_found(pytest_log):
    assert judge_log(instance([CUT]), pytest_log).resolved


def test_ids_cut_to_the_same_key_are_told_they_share_one_status(pytest_log):
    verdict = judge_log(instance([AB, AC]), pytest_log)
    assert verdict.reason == "2 PASS_TO_PASS test(s) not found in the test log"
    assert verdict.not_found[AC] == (f"{PARSER} cuts test ids at the first space and records this one as "
                                     f"'{CUT}' (PASSED in this log, one status for all 2 ids cut to it), "
                                     f"so write that id in PASS_TO_PASS instead")


def test_an_id_the_log_does_not_name_is_not_found_without_a_parser_reason(pytest_log):
    gone = "test_words.py::test_gone"
    verdict = judge_log(instance([gone]), pytest_log)
    assert verdict.not_found == {gone: "no status line of the log names it (it did not run, or ran under "
                                       "another id), so fix the id in PASS_TO_PASS or the instance's test_files"}
    assert _problems("gold", verdict.as_dict()) == [
        f"PASS_TO_PASS test {gone} is not found in the test log with the gold patch: {verdict.not_found[gone]}"]


def test_a_failing_test_is_still_reported_as_failing(pytest_log):
    log = pytest_log.replace(f"PASSED {D}", f"FAILED {D} - assert 0")
    verdict = judge_log(instance([CUT]), log)
    assert verdict.not_found == {} and verdict.reason == "1 FAIL_TO_PASS test(s) fail"
    assert _problems("gold", verdict.as_dict()) == [f"FAIL_TO_PASS test {D} fails with the gold patch"]


def test_a_parser_that_keeps_spaces_finds_the_id(pytest_log):
    # parse_log_pytest_v2 (astropy, scikit-learn, sphinx) keys a line by all its words
    with warnings.catch_warnings():
        warnings.simplefilter("error", CutTestIdWarning)
        spaced = instance([AB], log_parser="parse_log_pytest_v2")
    verdict = judge_log(spaced, pytest_log)
    assert verdict.resolved and verdict.not_found == {}


def test_loading_warns_of_an_id_with_a_space_naming_the_record_instance_and_id():
    line = (f"words.jsonl:1: instance calc__calc-1: PASS_TO_PASS id '{AB}' can never be found in the test log "
            f"(it always counts as failed): {PARSER} cuts test ids at the first space and records this one as "
            f"'{CUT}', so write that id in PASS_TO_PASS instead")
    with pytest.warns(CutTestIdWarning) as caught:
        loaded = parse_instance(record(Path("/repos/words"), "0123456789abcdef0123456789abcdef01234567",
                                       FAIL_TO_PASS=[D], PASS_TO_PASS=[AB, CUT]), "words.jsonl:1")
    assert [str(w.message) for w in caught] == [line]
    assert loaded.pass_to_pass == (AB, CUT)  # loaded all the same


def test_the_command_line_prints_the_warning_as_one_line(tmp_path, capsys):
    from envs.swe.__main__ import main

    from .tiny import write_instances

    path = write_instances(tmp_path / "words.jsonl", [record(
        Path("/repos/words"), "0123456789abcdef0123456789abcdef01234567", FAIL_TO_PASS=[D], PASS_TO_PASS=[AB])])
    assert main(["list", str(path)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"WARNING {path}:1: instance calc__calc-1: PASS_TO_PASS id '{AB}' can never be found in the test log "
        f"(it always counts as failed): {PARSER} cuts test ids at the first space and records this one as "
        f"'{CUT}', so write that id in PASS_TO_PASS instead"]


WORDS_TEST_PATCH = """diff --git a/tests/test_words.py b/tests/test_words.py
new file mode 100644
--- /dev/null
+++ b/tests/test_words.py
@@ -0,0 +1,11 @@
+import pytest
+from calc import add
+
+
+def test_add():
+    assert add(2, 3) == 5
+
+
+@pytest.mark.parametrize("text", ["a b"])
+def test_words(text):
+    assert text
"""
"""Adds ``test_add`` (FAIL_TO_PASS) and ``test_words[a b]``, which passes before and after."""


@pytest.mark.slow
def test_check_says_the_spaced_id_is_not_found_and_passes_the_id_it_suggests(tmp_path, backend, capsys):
    from envs.swe.__main__ import main

    from .tiny import make_repo, write_instances

    repo, base = make_repo(tmp_path)
    spaced, cut = "tests/test_words.py::test_words[a b]", "tests/test_words.py::test_words[a"
    path = write_instances(tmp_path / "words.jsonl", [
        record(repo, base, instance_id=f"calc__words-{n}", test_patch=WORDS_TEST_PATCH,
               FAIL_TO_PASS=["tests/test_words.py::test_add"], PASS_TO_PASS=[p2p])
        for n, p2p in enumerate((spaced, cut))])
    assert main(["check", str(path), "--backend", backend, "--vandal", "delete-tests"]) == 1
    out = capsys.readouterr().out.splitlines()
    why = (f"{PARSER} cuts test ids at the first space and records this one as '{cut}' (PASSED in this log), "
           f"so write that id in PASS_TO_PASS instead")
    assert out[0].startswith(
        f"calc__words-0: gold 0.00, idle 0.00, vandal 0.00: UNFAIR: PASS_TO_PASS test {spaced} is not found in "
        f"the test log with the gold patch: {why}; PASS_TO_PASS test {spaced} is not found in the test log "
        f"without the patch: {why} (")
    assert out[1].startswith("calc__words-1: gold 1.00, idle 0.00, vandal 0.00: ok")
