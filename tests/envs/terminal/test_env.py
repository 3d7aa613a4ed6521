"""The terminal env on real sandboxes: scripted agents that solve and fail, the tool results
they see, budgets, and the faults an agent can cause (each must be an observation)."""

from __future__ import annotations

import pickle
from pathlib import Path

import gymnasium as gym
import pytest

import envs
from envs.checker import check_env
from envs.sandbox import SandboxUnavailable
from envs.terminal import TaskSetupError, TerminalEnv
from envs.terminal.shell import NO_COMMAND
from envs.terminal.verify import tool_call

from tests.helpers import require

from tests.helpers import require_backend
from .test_tasks import _installed

TASK = "text-count-errors"  # app.log has 3 ERROR lines; the test wants errors.txt == 3


def bash(command: str, call_id: str = "call_0", **extra: object) -> dict:
    return tool_call("bash", {"command": command, **extra}, call_id)


def submit(**arguments: object) -> dict:
    return tool_call("submit", arguments, "call_submit")


def run(env: TerminalEnv, command: str) -> str:
    """One bash tool call; the text the agent gets back."""
    obs, *_ = env.step(bash(command))
    return obs[0]["content"]


# ---- scripted agents: one solves, one fails ------------------------------------------------
def test_a_solving_agent_gets_reward_one(make_env):
    env = make_env()
    obs, info = env.reset(options={"task_id": TASK})
    assert [m["role"] for m in obs] == ["system", "user"] and "ERROR" in obs[1]["content"]
    assert info["task_id"] == TASK and info["category"] == "text"
    assert [t["function"]["name"] for t in info["tools"]] == ["bash", "submit"]
    obs, reward, terminated, truncated, info = env.step(bash("grep -c ERROR app.log > errors.txt"))
    assert obs == [{"role": "tool", "tool_call_id": "call_0", "content": "exit code 0"}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["next_state"] == "exit code 0" and info["metrics"]["commands"] == 1.0
    obs, reward, terminated, truncated, info = env.step(submit())
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["stop_reason"] == "submitted"
    assert info["metrics"] == {"commands": 0.0, "tests_passed": 1.0, "solved": 1.0,
                               "tests_total": 1.0, "test/count": 1.0, "invalid_action": 0.0}
    assert info["tests"] == [{"name": "count", "passed": True, "output": ""}]
    assert obs[0]["content"] == "tests passed 1/1: count passed"


def test_a_wrong_agent_gets_reward_zero_and_sees_why(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    assert run(env, "grep -ci error app.log > errors.txt") == "exit code 0"  # counts 'error' too
    obs, reward, terminated, _, info = env.step(submit())
    assert reward == 0.0 and terminated and info["metrics"]["solved"] == 0.0
    assert info["tests"][0]["passed"] is False
    assert obs[0]["content"].startswith("tests passed 0/1: count FAILED")


def test_partial_credit_is_the_fraction_of_tests_passed(make_env):
    env = make_env()
    env.reset(options={"task_id": "files-key-permissions"})  # 3 tests: keys, pubs, dir
    run(env, "chmod 600 keys/*.key && chmod 644 keys/*.pub")
    _, reward, _, _, info = env.step(submit())
    assert reward == pytest.approx(2 / 3)
    assert info["metrics"]["test/dir_700"] == 0.0 and info["metrics"]["test/keys_600"] == 1.0


# ---- what the agent sees ---------------------------------------------------------------
def test_results_show_exit_code_stdout_and_stderr(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    assert run(env, "echo out; echo err >&2; exit 3") == "exit code 3\nout\nstderr:\nerr"
    assert run(env, "cat missing.txt").startswith("exit code 1\nstderr:\ncat: missing.txt: No such file")
    text = run(env, "nosuchcommand")
    assert text.startswith("exit code 127\nstderr:\n") and text.endswith("nosuchcommand: command not found")


def test_long_output_is_cut_in_the_middle(make_env):
    env = make_env(max_output_chars=200)
    env.reset(options={"task_id": TASK})
    text = run(env, "seq 1 10000")
    assert text.startswith("exit code 0\n1\n2\n3\n") and text.endswith("9999\n10000")
    assert "characters cut ...]" in text and len(text) < 300


def test_a_fenced_bash_block_runs_when_the_model_makes_no_tool_call(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    obs, reward, _, _, info = env.step("I'll count them:\n```bash\ngrep -c ERROR app.log\n```")
    assert obs == [{"role": "user", "content": "exit code 0\n3"}]
    assert info["next_state"] == "exit code 0\n3" and info["metrics"]["commands"] == 1.0
    obs, *_ = env.step("Done, there are three errors.")
    assert obs == [{"role": "user", "content": NO_COMMAND}]
    obs, *_ = env.step('<tool_call>{"name": "bash", "arguments": {"command": "echo hi"}}</tool_call>')
    assert obs[0]["role"] == "tool" and obs[0]["content"] == "exit code 0\nhi"


def test_each_command_is_a_fresh_shell_in_the_workspace(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    assert run(env, "cd /tmp && X=1 && echo made > here.txt && pwd") == "exit code 0\n/tmp"
    assert run(env, 'pwd; echo "X=$X"; cat /tmp/here.txt') == "exit code 0\n/workspace\nX=\nmade"


def test_several_tool_calls_run_in_order_and_submit_ends_the_turn(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    action = {"role": "assistant", "content": "", "tool_calls": [
        *bash("grep -c ERROR app.log > errors.txt", "c1")["tool_calls"],
        *submit()["tool_calls"],
        *bash("rm errors.txt", "c3")["tool_calls"]]}
    obs, reward, terminated, _, info = env.step(action)
    assert [m["tool_call_id"] for m in obs] == ["c1", "call_submit", "c3"]
    assert obs[2]["content"] == "Not run: `submit` already ended the episode."
    assert reward == 1.0 and terminated and info["metrics"]["commands"] == 1.0


def test_calls_past_the_cap_of_one_message_are_answered_not_run(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    calls = [bash(f"echo {i} >> calls.txt", f"c{i}")["tool_calls"][0] for i in range(11)]
    obs, _, _, _, info = env.step({"role": "assistant", "content": "", "tool_calls": calls})
    assert [m["tool_call_id"] for m in obs] == [f"c{i}" for i in range(11)]  # every call answered
    assert all(m["content"].startswith("Not run: at most 8 tool calls") for m in obs[8:])
    assert "call 11 of 11" in obs[10]["content"]
    assert info["metrics"]["commands"] == 8 and info["metrics"]["calls_not_run"] == 3
    assert info["metrics"]["invalid_action"] == 1
    assert run(env, "cat calls.txt").split("\n")[1:9] == [str(i) for i in range(8)]


def test_bad_tool_arguments_are_the_agents_mistake(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    for arguments, fragment in [({"command": ""}, "`command` must be a non-empty string"),
                                ({"command": "ls", "timeout": -5}, "`timeout` must be a number"),
                                ({"command": "ls", "timeout": "soon"}, "`timeout` must be a number")]:
        obs, reward, terminated, truncated, info = env.step(tool_call("bash", arguments))
        assert fragment in obs[0]["content"] and info["metrics"]["invalid_action"] == 1.0
        assert not (terminated or truncated)
    obs, *_, info = env.step(tool_call("submit", {"answer": 42}))
    assert "`answer` must be a string" in obs[0]["content"] and info["metrics"]["invalid_action"] == 1.0


def test_a_nul_byte_is_refused_before_it_reaches_the_sandbox(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    obs, reward, terminated, truncated, info = env.step(bash("echo a\0b > errors.txt"))
    assert obs[0]["tool_call_id"] == "call_0" and "holds a NUL byte" in obs[0]["content"]
    assert "was not run" in obs[0]["content"] and info["metrics"]["invalid_action"] == 1.0
    assert info["metrics"]["commands"] == 0.0 and not (terminated or truncated)
    obs, *_, info = env.step("Let me try:\n```bash\nprintf 'x\0y'\n```")  # a fenced block too
    assert obs[0]["role"] == "user" and "holds a NUL byte" in obs[0]["content"]
    assert info["metrics"]["invalid_action"] == 1.0
    obs, *_, info = env.step(tool_call("submit", {"answer": "3\0"}))  # the tests read it in a shell
    assert "`answer` holds a NUL byte" in obs[0]["content"] and info["metrics"]["invalid_action"] == 1.0
    assert run(env, "ls errors.txt; printf 'a\\0b' | wc -c") == \
        "exit code 0\n3\nstderr:\nls: cannot access 'errors.txt': No such file or directory"
    assert run(env, "grep -c ERROR app.log > errors.txt") == "exit code 0"
    _, reward, terminated, _, _ = env.step(submit())
    assert reward == 1.0 and terminated


def test_a_command_past_its_timeout_is_killed(make_env):
    env = make_env(command_timeout_s=1)
    env.reset(options={"task_id": TASK})
    text = run(env, "echo started; sleep 20")
    assert text == "exit code 137 (killed: the command ran past its 1 s timeout)\nstarted"
    text = env.step(bash("sleep 3; echo slept", timeout=5))[0][0]["content"]
    assert text == "exit code 0\nslept"  # the agent may ask for more time


# ---- budgets ---------------------------------------------------------------------------
def test_running_out_of_turns_still_runs_the_tests(make_env):
    env = make_env(max_turns=2)
    env.reset(options={"task_id": TASK})
    assert env.max_turns == 2
    env.step(bash("grep -c ERROR app.log > errors.txt"))
    obs, reward, terminated, truncated, info = env.step(bash("ls"))
    assert (terminated, truncated, info["stop_reason"]) == (False, True, "max_turns")
    assert reward == 1.0 and info["metrics"]["solved"] == 1.0
    assert obs[-1] == {"role": "user", "content": "The turn budget is used up. tests passed 1/1: count passed"}
    assert "tests passed 1/1" in info["next_state"]


def test_task_limits_set_the_budget_unless_the_env_overrides_them(make_env):
    require(_installed("intercode-bench"), "intercode-bench is not installed")
    env = make_env(suite="all", split="all")
    env.reset(options={"task_id": "intercode-bash-000"})  # InterCode tasks allow 10 turns
    assert env.max_turns == 10
    env.reset(options={"task_id": TASK})
    assert env.max_turns == 20


# ---- faults ----------------------------------------------------------------------------
def _task_folder(root: Path, task_id: str, setup: str) -> str:
    folder = root / task_id
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(
        "instruction: Say hi.\ncategory: files\ndifficulty: easy\nsolution: echo hi > hi.txt\n"
        f"setup: {setup!r}\ntests:\n  hi: grep -qx hi hi.txt\n")
    return str(root)


def test_a_failing_setup_is_an_env_error_not_an_episode(make_env, tmp_path, backend):
    tasks_dir = _task_folder(tmp_path, "broken-setup", "echo preparing; echo no disk >&2; exit 3")
    env = make_env(suite="user", tasks_dir=tasks_dir, split="all")
    with pytest.raises(TaskSetupError, match=r"task broken-setup: setup exited with code 3: 'no disk'"):
        env.reset()
    with envs.make_vec("terminal", 2, env_kwargs={"suite": "user", "tasks_dir": tasks_dir,
                                                  "split": "all", "sandbox": backend}) as vec:
        obs, infos = vec.reset(seed=0)
    assert obs == [None, None] and all(i["stop_reason"] == "error" for i in infos)
    assert "TaskSetupError" in infos[0]["error"] and "setup exited with code 3" in infos[0]["error"]
    assert vec.active == [False, False]


def test_a_failed_first_reset_through_gym_make_leaves_a_working_env(tmp_path, backend):
    # A setup failure on the very first reset used to break a gym.make'd env for good: every
    # step after the next good reset raised TypeError from gymnasium's PassiveEnvChecker.
    tasks_dir = _task_folder(tmp_path, "broken-setup", "exit 3")
    _task_folder(tmp_path, "fine", "true")
    env = gym.make("clawgym/Terminal-v0", suite="user", tasks_dir=tasks_dir, split="all",
                   sandbox=backend)
    try:
        with pytest.raises(TaskSetupError, match="setup exited with code 3"):
            env.reset(options={"task_id": "broken-setup"})
        with pytest.raises(envs.ResetNeeded):
            env.step(bash("echo hi > hi.txt"))
        env.reset(options={"task_id": "fine"})
        assert run(env, "echo hi > hi.txt && cat hi.txt") == "exit code 0\nhi"
        assert run(env, "ls") == "exit code 0\nhi.txt"
        _, reward, terminated, _, info = env.step(submit())
        assert (reward, terminated, info["metrics"]["solved"]) == (1.0, True, 1.0)
    finally:
        env.close()


def test_deleting_the_workspace_is_an_observation(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    text = run(env, "rm -rf /workspace; rm -rf /workspace/* /workspace/.[!.]*; ls -A /workspace | wc -l")
    assert text.startswith("exit code 0\n0\nstderr:\n") and "cannot remove '/workspace'" in text
    assert run(env, "pwd && echo alive > a.txt && cat a.txt") == "exit code 0\n/workspace\nalive"
    _, reward, terminated, _, info = env.step(submit())
    assert terminated and reward == 0.0 and "error" not in info


def test_killing_the_shell_or_exiting_is_an_observation(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    text = run(env, "echo before; kill -9 $$; echo after")
    assert text.startswith("exit code 137\nbefore") and "after" not in text
    assert run(env, "exit 7") == "exit code 7"
    assert run(env, "kill -9 -1").startswith("exit code")
    assert run(env, "echo still here") == "exit code 0\nstill here"


def test_filling_the_disk_quota_is_an_observation(make_env):
    env = make_env(sandbox_config={"disk_mb": 8})
    env.reset(options={"task_id": TASK})
    text = run(env, "head -c 20000000 /dev/zero > big.bin; echo status $?")
    assert "status 0" not in text and ("No space left" in text or "File size limit" in text)
    run(env, "rm -f big.bin")
    assert run(env, "grep -c ERROR app.log > errors.txt && cat errors.txt") == "exit code 0\n3"
    _, reward, *_ = env.step(submit())
    assert reward == 1.0


def test_nothing_of_one_episode_is_visible_in_the_next(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    run(env, "echo secret > /workspace/secret.txt; echo secret > /tmp/secret.txt; "
             "chmod 000 app.log; (sleep 60 &) ; git init -q repo")
    env.step(submit())
    env.reset(options={"task_id": TASK})
    text = run(env, "ls -A /workspace; ls -A /tmp; cat app.log | wc -l; pgrep -c sleep")
    assert text == "exit code 1\napp.log\n.gitconfig\n8\n0"
    env.reset(options={"task_id": "git-first-commit"})
    assert run(env, "ls -A; ls /tmp/secret.txt 2>&1") == \
        "exit code 2\nproject\nls: cannot access '/tmp/secret.txt': No such file or directory"


# ---- the contract ----------------------------------------------------------------------
def test_the_registered_env_keeps_the_contract(backend):
    env = gym.make("clawgym/Terminal-v0", sandbox=backend)
    check_env(env)
    env.close()


def test_a_fresh_or_used_env_pickles_without_its_sandbox(make_env):
    env = make_env()
    clone = pickle.loads(pickle.dumps(env))
    assert clone.task_ids() == env.task_ids()
    env.reset(options={"task_id": TASK})
    used = pickle.loads(pickle.dumps(env))
    try:
        used.reset(options={"task_id": TASK})
        assert run(used, "cat app.log | wc -l") == "exit code 0\n8"
    finally:
        used.close()


def test_close_is_idempotent_and_the_env_can_reset_after(make_env):
    env = make_env()
    env.reset(options={"task_id": TASK})
    env.close()
    env.close()
    env.reset(options={"task_id": TASK})
    assert run(env, "grep -c ERROR app.log") == "exit code 0\n3"


def test_the_alias_makes_the_env_without_starting_a_sandbox():
    assert envs.resolve("terminal") == "clawgym/Terminal-v0"
    env = envs.make("terminal", split="heldout")
    assert env.unwrapped.task_ids() and env.unwrapped._sandbox is None
    env.close()


@pytest.mark.bwrap
def test_a_missing_rootfs_says_what_to_do():
    require_backend("bwrap")
    env = TerminalEnv(sandbox="bwrap", sandbox_config={"rootfs": "/nonexistent"})
    with pytest.raises(SandboxUnavailable, match="make rootfs"):
        env.reset()
    env.close()
