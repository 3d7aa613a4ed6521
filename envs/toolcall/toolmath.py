"""toolmath: arithmetic and word problems solved by calling a sandboxed ``python`` tool.

In the spirit of ReTool (Feng et al., 2025, "ReTool: Reinforcement Learning for Strategic
Tool Use in LLMs"): the problems (:mod:`envs.toolcall.toolmath_problems`) are easy to
state and hard to compute in one's head, exactly checkable, and generated from a seed,
so there are as many as training needs. The agent has one tool, ``python``, which runs a
program in the sandbox (``envs.sandbox``: docker or bwrap, no network) and returns its
exit code and output. It answers with a message without tool calls, putting the number
in ``\\boxed{...}``; :mod:`envs.toolcall.answers` extracts and checks it.

Task ids are ``toolmath-train-<n>`` (``n`` < ``train_size``, default 5000) and
``toolmath-heldout-<n>`` (``n`` < ``heldout_size``, default 500); a problem is a pure
function of its id. Reward 1 for a correct final answer, else 0; ``info["answer"]`` is
what was read from the reply and ``info["expected"]`` the right answer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.core import StopReason
from envs.messages import Message, ToolCall, tool_schema
from envs.sandbox import BACKENDS, Sandbox, SandboxConfig, SandboxError, make_sandbox
from envs.terminal.shell import format_result
from envs.toolcall.answers import grade
from envs.toolcall.env import CallRecord, Outcome, TaskInfo
from envs.toolcall.toolmath_problems import Problem, generate

SYSTEM_PROMPT = (
    "You solve math problems exactly. You can run Python 3 with the `python` tool: it runs "
    "your program and shows its exit code and what it printed, so print() the values you "
    "need. Numbers this large are easy to get wrong by hand: compute them with the tool. "
    "When you know the answer, reply without calling a tool and write the final answer as "
    "a number in \\boxed{}, e.g. \\boxed{42}."
)
PYTHON_TOOL = tool_schema("python", "Run a Python 3 program and get its exit code, stdout and stderr.", {
    "code": {"type": "string", "description": "the program; print() what you want to see"},
})
PROGRAM_PATH = "/tmp/toolmath_program.py"
DEFAULT_MAX_TURNS = 6


class ToolMathSuite:
    """toolmath. Arguments: ``split``; ``sandbox`` (``auto``, ``docker``, ``bwrap``);
    ``train_size`` (5000) and ``heldout_size`` (500) problems; ``timeout_s`` per program
    (10); ``max_output_chars`` of a program's output shown (2000)."""

    def __init__(self, split: str = "train", sandbox: str = "auto", train_size: int = 5000,
                 heldout_size: int = 500, timeout_s: float = 10.0, max_output_chars: int = 2000) -> None:
        if sandbox not in BACKENDS:
            raise ValueError(f"sandbox must be one of {', '.join(BACKENDS)}, got {sandbox!r}")
        if train_size < 1 or heldout_size < 1:
            raise ValueError(f"train_size and heldout_size must be >= 1, got {train_size}, {heldout_size}")
        if not 0 < timeout_s <= 300:
            raise ValueError(f"timeout_s must be in (0, 300], got {timeout_s}")
        self.split, self.sandbox_backend = split, sandbox
        self.sizes = {"train": train_size, "heldout": heldout_size}
        self.timeout_s, self.max_output_chars = timeout_s, max_output_chars
        self._sandbox: Sandbox | None = None

    def task_ids(self) -> list[str]:
        splits = ("train", "heldout") if self.split == "all" else (self.split,)
        return [f"toolmath-{s}-{n:05d}" for s in splits for n in range(self.sizes[s])]

    def task(self, task_id: str) -> TaskInfo:
        parts = task_id.split("-")
        if len(parts) != 3 or parts[0] != "toolmath" or parts[1] not in self.sizes \
                or not parts[2].isdigit() or int(parts[2]) >= self.sizes[parts[1]]:
            raise ValueError(f"unknown task_id {task_id!r}: expected 'toolmath-<train|heldout>-<n>' "
                             f"with n below {self.sizes}, e.g. 'toolmath-train-00000'")
        return TaskInfo(task_id, problem(task_id).kind, parts[1])

    def open(self, task_id: str, rng: np.random.Generator) -> ToolMathProblem:
        info = self.task(task_id)
        return ToolMathProblem(info, problem(task_id), self)

    def sandbox(self) -> Sandbox:
        """The suite's sandbox, started on first use and wiped for each episode."""
        if self._sandbox is None:
            self._sandbox = make_sandbox(self.sandbox_backend, SandboxConfig())
        return self._sandbox

    def fresh_sandbox(self) -> Sandbox:
        if self._sandbox is not None:
            try:
                self._sandbox.reset()
                return self._sandbox
            except SandboxError:  # gone bad: start over with a new one
                self.close()
        return self.sandbox()

    def run(self, code: str) -> str:
        """Run ``code`` as a Python program in the sandbox; the agent-facing result."""
        sandbox = self.sandbox()
        sandbox.put_file(PROGRAM_PATH, code)
        result = sandbox.exec(f"python3 {PROGRAM_PATH}", timeout=self.timeout_s)
        return format_result(result, self.timeout_s, self.max_output_chars)

    def close(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sandbox"] = None  # a live sandbox does not travel; the copy starts its own
        return state


@functools.lru_cache(maxsize=4096)
def problem(task_id: str) -> Problem:
    return generate(task_id)


@dataclass
class ToolMathProblem:
    """One problem being solved."""

    task: TaskInfo
    problem: Problem
    suite: ToolMathSuite
    max_turns: int = DEFAULT_MAX_TURNS

    def __post_init__(self) -> None:
        self.max_output_chars = self.suite.max_output_chars + 200  # the result's header and cut note
        self.suite.fresh_sandbox()
        self.tools = [PYTHON_TOOL]
        self.opening: list[Message] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{self.problem.question}\n\nPut the final answer in \\boxed{{}}."}]

    def call(self, call: ToolCall) -> str:
        code = call.arguments["code"]
        if "\0" in code:
            return "Error: the program holds a NUL byte (\\0); it was not run."
        return self.suite.run(code)  # a SandboxError is an EnvError: the episode's, not the agent's

    def after_calls(self, records: list[CallRecord]) -> Outcome:
        return Outcome(metrics={"python_runs": float(sum(r.ran for r in records))})

    def after_text(self, content: str) -> Outcome:
        correct, answer = grade(content, self.problem.answer, self.problem.decimals)
        verdict = "correct" if correct else f"wrong: expected {self.problem.answer_text}, got {answer}"
        return Outcome(reward=float(correct), stop=StopReason.SUBMITTED,
                       metrics={"solved": float(correct), "answered": float(answer is not None)},
                       next_state=verdict,
                       info={"answer": answer, "expected": self.problem.answer_text, "verdict": verdict})

    def after_invalid(self, message: Message | None) -> None:
        return None

    def on_budget_end(self) -> Outcome:
        return Outcome(metrics={"solved": 0.0, "answered": 0.0},
                       info={"expected": self.problem.answer_text})

    def close(self) -> None:
        pass
