"""The terminal family: shell tasks in real sandboxes, rewarded by each task's tests.
``clawgym/Terminal-v0`` (alias ``terminal``)::

    env = envs.make("terminal", sandbox="bwrap")        # suite="clawgym", split="train"
    obs, info = env.reset(seed=0)                        # [system, task instruction]
    obs, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>')

Tasks are folders with a ``task.yaml`` (``envs.terminal.tasks``); ``python -m envs.terminal
list`` shows them and ``python -m envs.terminal check DIR`` proves new ones fair.
"""

from __future__ import annotations

from envs.terminal.env import SUITES, TaskSetupError, TerminalEnv
from envs.terminal.grading import TestResult
from envs.terminal.tasks import CATEGORIES, DIFFICULTIES, TASKS_DIR, Limits, Task, TaskError, load_tasks

__all__ = ["CATEGORIES", "DIFFICULTIES", "SUITES", "TASKS_DIR", "Limits", "Task", "TaskError",
           "TaskSetupError", "TerminalEnv", "TestResult", "load_tasks"]
