"""Hostile tool calls on the suites whose tools run (BFCL multi-turn's backends, tau2's
domains): code in argument names or values never runs, costly calls are refused or stopped,
and no tool message is longer than the suite's clip."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from envs.toolcall.env import ToolCallEnv
from envs.toolcall.oracle import assistant_calls
from envs.toolcall.worker import MEMORY_BYTES

MAX_NUMBER = 10**6  # envs.toolcall.limits.MAX_NUMBER
MATH_AND_FILES = "multi_turn_base_15"  # GorillaFileSystem and MathAPI: pwd, echo, power...


def marker_name(marker) -> str:
    """The argument name of the issue's attack: it ran ``id`` on the host through BFCL's eval."""
    return f"__import__('os').system('id > {marker}')) #"


def text_call(name: str, arguments: dict) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def bfcl():
    made = ToolCallEnv(suite="bfcl_multi", split="all")
    yield made
    made.close()


@pytest.mark.parametrize("as_text", [True, False], ids=["text", "tool_calls"])
def test_code_in_an_argument_name_is_refused_and_never_run(bfcl, tmp_path, as_text):
    marker = tmp_path / "marker"
    arguments = {marker_name(marker): 1}
    bfcl.reset(options={"task_id": MATH_AND_FILES})
    action = text_call("pwd", arguments) if as_text else assistant_calls([("pwd", arguments)])
    obs, reward, terminated, truncated, info = bfcl.step(action)
    assert obs[0]["content"].startswith("Error: `pwd` has no argument \"__import__(")
    assert info["metrics"]["invalid_action"] == 1.0
    for _ in range(len(bfcl.episode.entry["question"])):  # the checker replays what ran
        *_, terminated, truncated, info = bfcl.step({"role": "assistant", "content": "Done."})
    assert terminated and not marker.exists()


@pytest.mark.parametrize("name", ["a=1);import os;os.system('touch x')#", "__class__", "a b",
                                  "x')\n__import__('os')#", "ls()", ""])
def test_no_argument_name_but_a_declared_one_reaches_a_backend(bfcl, name):
    bfcl.reset(options={"task_id": MATH_AND_FILES})
    obs, *_, info = bfcl.step(assistant_calls([("echo", {"content": "hi", name: 1})]))
    assert obs[0]["content"].startswith("Error: `echo` has no argument")
    assert info["metrics"]["invalid_action"] == 1.0 and bfcl.episode.executed == [[]]


BREAKOUTS = ["'); __import__('os').system('touch {m}') #", '"""; import os #', "\\'; ls(\\')",
             "\n')\nimport os\nos.system('touch {m}')\n('", "pwd()", "x' + str(__import__('os')) + '"]


def test_values_reach_the_backend_as_they_were_sent_and_the_checker_runs_none(bfcl, tmp_path):
    marker = tmp_path / "m"
    contents = [b.format(m=marker) for b in BREAKOUTS]
    bfcl.reset(options={"task_id": MATH_AND_FILES})
    for i, content in enumerate(contents):
        name = f"f{i}.txt"
        obs, *_ = bfcl.step(assistant_calls([("touch", {"file_name": name}), ("echo", {"content": content}),
                                             ("echo", {"content": content, "file_name": name}),
                                             ("cat", {"file_name": name})]))
        assert json.loads(obs[1]["content"]) == {"terminal_output": content}
        assert json.loads(obs[3]["content"]) == {"file_content": content}
    for _ in range(len(bfcl.episode.entry["question"])):
        *_, terminated, _, info = bfcl.step({"role": "assistant", "content": "Done."})
    assert terminated and "wrong" in info["verdict"] and not marker.exists()


def test_a_huge_exponent_is_refused_before_it_runs(bfcl):
    bfcl.reset(options={"task_id": MATH_AND_FILES})
    obs, *_, info = bfcl.step(assistant_calls([("power", {"base": 10, "exponent": 10**7})]))
    assert obs[0]["content"].startswith("Error: argument 'exponent' of `power` is 10000000")
    assert info["metrics"]["invalid_action"] == 1.0 and bfcl.episode.executed == [[]]
    obs, *_ = bfcl.step(assistant_calls([("power", {"base": 10, "exponent": MAX_NUMBER + 0.5})]))
    assert obs[0]["content"].startswith("Error: argument 'exponent'")
    obs, *_ = bfcl.step(assistant_calls([("power", {"base": 2, "exponent": 10})]))
    assert json.loads(obs[0]["content"]) == {"result": 1024}


def test_a_huge_result_is_clipped(bfcl):
    bfcl.reset(options={"task_id": MATH_AND_FILES})
    obs, *_, info = bfcl.step(assistant_calls([("square_root", {"number": 2, "precision": 300_000})]))
    text = obs[0]["content"]
    assert len(text) <= bfcl.suite.max_output_chars and "characters cut" in text
    assert "1.41421356237" in text[:100]  # BFCL writes a dict JSON cannot hold with str()
    obs, *_ = bfcl.step(assistant_calls([("echo", {"content": "x" * 30_000})]))
    assert obs[0]["content"].startswith("Error: the arguments of `echo` are 30,")


def test_a_call_past_its_time_limit_is_stopped_without_stalling_other_threads():
    env = ToolCallEnv(suite="bfcl_multi", split="all", call_timeout_s=1.0)
    env.reset(options={"task_id": MATH_AND_FILES})
    env.step(assistant_calls([("pwd", {})]))  # the backend process is up
    counts = []

    def count(stop: threading.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1
        counts.append(n)

    def counted(seconds_or_step):
        stop = threading.Event()
        thread = threading.Thread(target=count, args=(stop,))
        started = time.monotonic()
        thread.start()
        result = seconds_or_step() if callable(seconds_or_step) else time.sleep(seconds_or_step)
        stop.set()
        thread.join()
        return result, counts[-1] / (time.monotonic() - started)

    slow = assistant_calls([("logarithm", {"value": 3, "base": 2, "precision": MAX_NUMBER})])
    (obs, reward, terminated, truncated, info), rate = counted(lambda: env.step(slow))
    _, idle_rate = counted(0.5)
    assert obs[0]["content"].startswith("Error: `logarithm` ran past its 1 s limit and was stopped")
    assert (reward, truncated, info["stop_reason"]) == (0.0, True, "time_limit")
    assert rate > idle_rate / 4  # the slow call held no lock the rest of the process needs
    env.reset(options={"task_id": MATH_AND_FILES})  # a fresh backend process
    obs, *_ = env.step(assistant_calls([("add", {"a": 1, "b": 2})]))
    assert json.loads(obs[0]["content"]) == {"result": 3}
    env.close()


def test_the_tool_process_has_a_memory_limit(bfcl):
    bfcl.reset(options={"task_id": MATH_AND_FILES})
    bfcl.step(assistant_calls([("pwd", {})]))
    limits = open(f"/proc/{bfcl.suite.worker().pid}/limits").read().splitlines()
    address_space = next(line for line in limits if line.startswith("Max address space")).split()
    assert address_space[3:5] == [str(MEMORY_BYTES)] * 2


def test_a_tool_process_killed_between_calls_is_the_env_s_error(bfcl):
    bfcl.reset(options={"task_id": MATH_AND_FILES})
    bfcl.step(assistant_calls([("pwd", {})]))
    os.kill(bfcl.suite.worker().pid, signal.SIGKILL)
    while bfcl.suite.worker().alive:
        time.sleep(0.01)
    *_, truncated, info = bfcl.step(assistant_calls([("pwd", {})]))
    assert truncated and info["stop_reason"] == "error" and "ended between calls" in info["error"]
    bfcl.reset(options={"task_id": MATH_AND_FILES})  # the next episode starts a new one
    obs, *_ = bfcl.step(assistant_calls([("pwd", {})]))
    assert json.loads(obs[0]["content"]) == {"current_working_directory": "/project"}


# ---- tau2 ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tau2():
    made = ToolCallEnv(suite="tau2", split="all", user="scripted", call_timeout_s=1.0)
    yield made
    made.close()


def test_tau2_refuses_code_in_argument_names(tau2, tmp_path):
    marker = tmp_path / "marker"
    tau2.reset(options={"task_id": "airline_3"})
    obs, *_, info = tau2.step(assistant_calls([("list_all_airports", {marker_name(marker): 1})]))
    assert obs[0]["content"].startswith("Error: `list_all_airports` has no argument \"__import__(")
    assert info["metrics"]["invalid_action"] == 1.0 and not marker.exists()


def test_tau2_s_calculate_cannot_stall_the_process(tau2):
    tau2.reset(options={"task_id": "airline_3"})
    obs, *_ = tau2.step(assistant_calls([("calculate", {"expression": "(2 + 3) * 4.5"})]))
    assert obs[0]["content"] == "22.5"
    obs, reward, terminated, truncated, info = tau2.step(
        assistant_calls([("calculate", {"expression": "9**9**9**9"})]))
    assert obs[0]["content"].startswith("Error: `calculate` ran past its 1 s limit and was stopped")
    assert (reward, truncated, info["stop_reason"]) == (0.0, True, "time_limit")


def test_tau2_tool_messages_are_clipped(tau2):
    tau2.reset(options={"task_id": "airline_3"})
    obs, *_ = tau2.step(assistant_calls([("get_user_details", {"user_id": "a" * 15_000})]))
    text = obs[0]["content"]  # tau2 echoes the id: "Error: User aaa... not found"
    assert text.startswith("Error: User aaa") and text.endswith("not found")
    assert len(text) <= tau2.suite.max_output_chars < 15_000
