"""The tool-call core: schema checks, execution, faults as observations, turn ends."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np
import pytest

import envs
from envs.core import StopReason
from envs.errors import EnvError
from envs.messages import tool_schema
from envs.toolcall import env as toolcall_env
from envs.toolcall.env import CallRecord, Outcome, TaskInfo, ToolCallEnv

TOOLS = [tool_schema("divide", "a / b", {"a": {"type": "number"}, "b": {"type": "number"}}),
         tool_schema("crash", "the backend dies", {}),
         tool_schema("add_tool", "offers a new tool", {})]
NEW_TOOL = tool_schema("square", "x * x", {"x": {"type": "number"}})


@dataclass
class CalculatorEpisode:
    task: TaskInfo
    tools: list = field(default_factory=lambda: list(TOOLS))
    opening: list = field(default_factory=lambda: [{"role": "user", "content": "Compute 6 / 3."}])
    max_turns: int = 5
    log: list = field(default_factory=list)

    def call(self, call):
        self.log.append(call.name)
        if call.name == "divide":
            return str(call.arguments["a"] / call.arguments["b"])  # b == 0 raises
        if call.name == "square":
            return str(call.arguments["x"] ** 2)
        if call.name == "crash":
            raise EnvError("the backend's process died")
        return "added"

    def after_calls(self, records: list[CallRecord]) -> Outcome:
        if any(r.call.name == "add_tool" and r.ran for r in records):
            return Outcome(tools=[*self.tools, NEW_TOOL],
                           messages=[{"role": "user", "content": "You may now call square."}])
        return Outcome()

    def after_text(self, content: str) -> Outcome:
        solved = "2" in content
        return Outcome(reward=float(solved), stop=StopReason.SUBMITTED, metrics={"solved": float(solved)})

    def after_invalid(self, message):
        return None

    def on_budget_end(self) -> Outcome:
        return Outcome(metrics={"solved": 0.0})

    def close(self) -> None:
        self.log.append("closed")


class CalculatorSuite:
    def __init__(self, split: str = "train") -> None:
        self.split = split

    def task_ids(self):
        return ["calc-0", "calc-1"]

    def task(self, task_id):
        if task_id not in self.task_ids():
            raise ValueError(f"unknown task_id {task_id!r}")
        return TaskInfo(task_id, "arithmetic", "train")

    def open(self, task_id, rng: np.random.Generator):
        return CalculatorEpisode(self.task(task_id))

    def close(self):
        pass


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setitem(toolcall_env.SUITES, "calculator", f"{__name__}:CalculatorSuite")
    made = ToolCallEnv(suite="calculator", split="all")
    made.reset(seed=0, options={"task_id": "calc-0"})
    yield made
    made.close()


def calls(*specs):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(specs)]}


def test_good_calls_run_and_bad_ones_are_named_not_run(env):
    obs, reward, terminated, truncated, info = env.step(calls(
        ("divide", '{"a": 6, "b": 3}'), ("divide", '{"a": 6}'), ("divide", '{"a": "6", "b": 3}'),
        ("divide", '{"a": 6, "b": 3, "c": 1}')))
    assert [m["content"] for m in obs] == [
        "2.0",
        "Error: `divide` is missing the required argument 'b'.",
        "Error: argument 'a' must be a number, got string '6' (in a call to `divide`).",
        "Error: `divide` has no argument 'c'; its arguments are: a, b."]
    assert [m["tool_call_id"] for m in obs] == ["c0", "c1", "c2", "c3"]
    assert env.episode.log == ["divide"]
    assert info["metrics"] == {"calls": 4.0, "call_errors": 0.0, "invalid_action": 1.0}
    assert info["next_state"].startswith("2.0\nError: `divide` is missing")
    assert not (terminated or truncated)


def test_an_unknown_function_is_an_invalid_action(env):
    obs, *_, info = env.step(calls(("multiply", '{"a": 1}')))
    assert obs[0]["role"] == "tool" and "unknown tool 'multiply'" in obs[0]["content"]
    assert info["metrics"]["invalid_action"] == 1.0


def test_a_tool_that_raises_is_a_tool_error_and_env_errors_end_the_episode(env):
    obs, *_, truncated, info = env.step(calls(("divide", '{"a": 1, "b": 0}')))
    assert obs[0]["content"] == "Error: ZeroDivisionError: division by zero"
    assert info["metrics"]["call_errors"] == 1.0 and not truncated
    obs, reward, terminated, truncated, info = env.step(calls(("crash", "{}")))
    assert truncated and info["stop_reason"] == "error" and "process died" in info["error"]


def test_a_plain_message_ends_the_turn(env):
    *_, reward, terminated, truncated, info = env.step("The answer is 2.")
    assert (reward, terminated, info["stop_reason"]) == (1.0, True, "submitted")


def test_tools_can_change_mid_episode(env):
    obs, *_, info = env.step(calls(("add_tool", "{}")))
    assert obs[-1] == {"role": "user", "content": "You may now call square."}
    assert [t["function"]["name"] for t in info["tools"]][-1] == "square"
    obs, *_ = env.step(calls(("square", '{"x": 3}')))
    assert obs[0]["content"] == "9"


def test_budget_end_and_release(env):
    episode = env.episode
    for _ in range(5):
        *_, terminated, truncated, info = env.step(calls(("divide", '{"a": 1, "b": 1}')))
    assert truncated and info["stop_reason"] == "max_turns" and info["metrics"]["solved"] == 0.0
    env.reset(options={"task_id": "calc-1"})
    assert episode.log[-1] == "closed"


def test_arguments_are_checked(monkeypatch):
    monkeypatch.setitem(toolcall_env.SUITES, "calculator", f"{__name__}:CalculatorSuite")
    with pytest.raises(ValueError, match="suite must be one of"):
        ToolCallEnv(suite="nope")
    with pytest.raises(ValueError, match="split must be one of"):
        ToolCallEnv(suite="calculator", split="test")
    with pytest.raises(ValueError, match="takes no argument 'sandbox'; its arguments: none"):
        ToolCallEnv(suite="calculator", sandbox="bwrap")
    with pytest.raises(ValueError, match="unknown task_id 'calc-9'"):
        ToolCallEnv(suite="calculator", task_ids="calc-0,calc-9")
    assert ToolCallEnv(suite="calculator", task_ids="calc-1").task_ids() == ["calc-1"]
    pickle.loads(pickle.dumps(ToolCallEnv(suite="calculator")))


def test_the_family_is_registered():
    ids = {e.alias: e.env_id for e in envs.entries()}
    assert ids["toolcall"] == "clawgym/ToolCall-v1"
    assert ids["bfcl"] == "clawgym/BFCL-v0" and ids["bfcl-multi"] == "clawgym/BFCLMultiTurn-v1"
    assert ids["tau2"] == "clawgym/Tau2-v1" and ids["toolmath"] == "clawgym/ToolMath-v0"
    assert envs.make("bfcl").unwrapped.suite_name == "bfcl"
    made = envs.make("toolcall", suite="bfcl_multi", categories="multi_turn_base")
    assert made.unwrapped.suite_name == "bfcl_multi"


@pytest.mark.parametrize("name", ["toolcall", pytest.param("bfcl-multi", marks=pytest.mark.slow),
                                  pytest.param("tau2", marks=pytest.mark.slow)])
def test_check_env(name):
    envs.check_env(envs.make(name))
