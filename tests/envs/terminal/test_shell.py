"""How commands are read from text and how their results are shown: hand-computed cases."""

from __future__ import annotations

import pytest

from envs.sandbox import ExecResult
from envs.terminal.grading import TestResult, summary
from envs.terminal.intercode import normalized_output
from envs.terminal.shell import cut_middle, fenced_commands, format_result
from tests.helpers import cpu_growth


@pytest.mark.parametrize("text, command", [
    ("Let me look.\n```bash\nls -la\n```", "ls -la"),
    ("```sh\ncd /tmp && pwd\n```", "cd /tmp && pwd"),
    ("```\necho hi\n```", "echo hi"),  # unlabelled blocks are bash
    ("```Bash\nwc -l f\n```", "wc -l f"),
    ("First\n```bash\nmkdir a\n```\nthen\n```bash\ntouch a/b\n```", "mkdir a\ntouch a/b"),
    ("```python\nprint(1)\n```", None),  # another language is not run
    ("```json\n{}\n```\n```bash\ncat x.json\n```", "cat x.json"),
    ("I would run ls.", None),
    ("```bash\n\n```", None),
    ("```\nls\n```\nThis prints:\n```\nfile.txt\n```", "ls"),  # expected output is not run
    ("```bash\nwc -l f\n```\nOutput:\n```\n3 f\n```", "wc -l f"),
])
def test_fenced_commands(text, command):
    assert fenced_commands(text) == command


@pytest.mark.parametrize("make", [lambda n: "```" + " " * n, lambda n: "```" + " \t" * (n // 2) + "x",
                                  lambda n: "```bash" + " " * n + "\nls\n```"], ids=["spaces", "blanks", "bash"])
def test_fenced_commands_is_linear_in_the_text(make):
    # The first pattern was quadratic: 40 s on the first of these at 100,000 spaces.
    assert cpu_growth(fenced_commands, make, 1_000) < 4 * 16


def test_cut_middle_keeps_head_and_tail():
    text = "a" * 50 + "b" * 50
    assert cut_middle(text, 200) == text
    cut = cut_middle(text, 20)
    assert cut == "a" * 10 + "\n[... 80 characters cut ...]\n" + "b" * 10


def test_format_result_reads_exit_code_stdout_stderr():
    ok = ExecResult(0, "hello\n", "")
    assert format_result(ok, 30, 100) == "exit code 0\nhello"
    failed = ExecResult(2, "", "ls: cannot access 'x': No such file or directory\n")
    assert format_result(failed, 30, 100) == \
        "exit code 2\nstderr:\nls: cannot access 'x': No such file or directory"
    assert format_result(ExecResult(0, "", ""), 30, 100) == "exit code 0"


def test_format_result_says_when_a_command_was_killed_or_cut():
    slow = ExecResult(137, "partial\n", "", timed_out=True)
    assert format_result(slow, 5, 100) == \
        "exit code 137 (killed: the command ran past its 5 s timeout)\npartial"
    long = format_result(ExecResult(0, "x" * 1000, ""), 30, 100)
    assert long.startswith("exit code 0\n" + "x" * 50 + "\n[... 900 characters cut ...]\n")
    assert long.endswith("x" * 50)


def test_summary_names_failures():
    results = [TestResult("count", True), TestResult("header", False, "diff: line 1\nexpected id")]
    assert summary(results) == "tests passed 1/2: count passed; header FAILED (expected id)"


def test_intercode_output_comparison_ignores_order_spacing_and_path_spelling():
    gold = "/workspace/testbed/dir1: 0\n/workspace/testbed/dir2:   1\n"
    assert normalized_output(gold) == normalized_output("testbed/dir2: 1\n./testbed/dir1: 0\n\n")
    assert normalized_output(gold) != normalized_output("testbed/dir2: 2\ntestbed/dir1: 0")
    assert normalized_output("  2 /workspace/testbed/a.txt\n") == ["2 testbed/a.txt"]
