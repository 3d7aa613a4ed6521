"""Prove a task is fair: its reference solution passes every test, doing nothing and
deleting everything pass none.

The runs go through the env itself, as scripted agents: the *reference agent* runs the
task's ``solution`` with the ``bash`` tool, then calls ``submit`` with the solution's
stdout as its answer; the *idle agent* submits at once; the *vandal* empties /workspace
and submits (a test like "no .jpeg file is left" must not reward that). ``python -m
envs.terminal check`` runs this on task folders, and the test suite on every shipped task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from envs.messages import Message
from envs.terminal.env import TerminalEnv


@dataclass
class TaskCheck:
    """The outcome of the three runs on one task."""

    task_id: str
    reference_reward: float = 0.0
    idle_reward: float = 1.0
    vandal_reward: float = 1.0
    problems: list[str] = field(default_factory=list)
    """Why the task is not fair, one sentence each; empty when it is."""

    @property
    def ok(self) -> bool:
        return not self.problems


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_0") -> Message:
    """An assistant message calling one tool, as a model would send it."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def reference_run(env: TerminalEnv, task_id: str, seed: int | None = None) -> tuple[float, dict[str, Any]]:
    """Solve ``task_id`` (its episode seeded with ``seed``) with its reference solution; (reward, last info)."""
    env.reset(seed=seed, options={"task_id": task_id})
    task = env.task(task_id)
    timeout = min(task.limits.command_timeout_s * 4, 300)
    env.step(tool_call("bash", {"command": task.solution, "timeout": timeout}))
    answer = env.last_stdout.strip()  # what the solution printed is its answer
    _, reward, terminated, _, info = env.step(tool_call("submit", {"answer": answer}, "call_1"))
    assert terminated, "submit must end the episode"
    return reward, info


def idle_run(env: TerminalEnv, task_id: str) -> tuple[float, dict[str, Any]]:
    """Submit at once without doing anything; (reward, last info)."""
    env.reset(options={"task_id": task_id})
    _, reward, _, _, info = env.step(tool_call("submit", {}))
    return reward, info


def vandal_run(env: TerminalEnv, task_id: str) -> tuple[float, dict[str, Any]]:
    """Delete everything in /workspace, then submit; (reward, last info)."""
    env.reset(options={"task_id": task_id})
    env.step(tool_call("bash", {"command": "rm -rf /workspace/* /workspace/.[!.]* /workspace/..?*"}))
    _, reward, _, _, info = env.step(tool_call("submit", {}, "call_1"))
    return reward, info


def check_task(env: TerminalEnv, task_id: str) -> TaskCheck:
    """Both runs on one task, with what is wrong if the task is not fair."""
    check = TaskCheck(task_id)
    check.reference_reward, info = reference_run(env, task_id)
    if check.reference_reward != 1.0:
        failed = [f"{t['name']} ({t['output'][-160:]})" for t in info.get("tests", []) if not t["passed"]]
        check.problems.append(f"the reference solution fails {', '.join(failed) or 'the tests'}")
    check.idle_reward, info = idle_run(env, task_id)
    if check.idle_reward >= 1.0:
        check.problems.append("doing nothing passes every test: the tests cannot fail")
    check.vandal_reward, info = vandal_run(env, task_id)
    passed = [t["name"] for t in info.get("tests", []) if t["passed"]]
    if passed:
        check.problems.append(f"deleting everything in /workspace passes {', '.join(passed)}")
    return check
