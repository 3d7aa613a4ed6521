"""A task's tests, run in the agent's sandbox once the episode ends.

Each test is its own sandbox command, run in ``/workspace`` with the agent's submitted
answer in ``$ANSWER``; it passes when it exits 0 within the task's ``test_timeout_s``. The
reward is the fraction that pass. Running each test in a fresh shell means one test
cannot break another (a ``kill -9 -1`` or an ``exit`` ends only that test).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from envs.sandbox import Sandbox
from envs.terminal.tasks import Task

OUTPUT_CHARS = 400
"""How much of a test's output is kept for people reading a failed run."""


@dataclass(frozen=True)
class TestResult:
    """One test's verdict."""

    __test__ = False  # not a pytest test class, despite the name

    name: str
    passed: bool
    output: str = ""
    """The tail of what the check printed (stdout then stderr), or why it failed."""


def tail(text: str, limit: int = OUTPUT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def run_checks(sandbox: Sandbox, task: Task, answer: str) -> list[TestResult]:
    """Run every test of ``task`` in ``sandbox``; raises SandboxError if the sandbox fails."""
    results = []
    prelude = f"export ANSWER={shlex.quote(answer)}\ncd /workspace || exit 125\n"
    for name, script in task.tests:
        result = sandbox.exec(prelude + script, timeout=task.limits.test_timeout_s)
        output = "\n".join(part for part in (result.stdout.strip(), result.stderr.strip()) if part)
        if result.timed_out:
            output = f"timed out after {task.limits.test_timeout_s:g} s\n{output}"
        results.append(TestResult(name, result.ok, tail(output)))
    return results


def summary(results: list[TestResult]) -> str:
    """``tests passed 1/2: count_ok passed; header_kept FAILED (expected ...)``."""
    passed = sum(r.passed for r in results)
    parts = []
    for r in results:
        if r.passed:
            parts.append(f"{r.name} passed")
        else:
            why = f" ({r.output.splitlines()[-1][:120]})" if r.output else ""
            parts.append(f"{r.name} FAILED{why}")
    return f"tests passed {passed}/{len(results)}: " + "; ".join(parts)
