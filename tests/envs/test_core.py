"""The Env contract, on the GuessNumber env and on small envs that break on purpose."""

from __future__ import annotations

import json
import pickle
from typing import Any

import gymnasium as gym
import pytest

import envs
from envs import ClawEnv, EnvError, EpisodeEndedError, Opening, ResetNeeded, Transition
from envs.guess import GuessNumberEnv
from tests.envs.fault_env import FAULT_ID


def guess(n: int, call_id: str = "c") -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "guess", "arguments": json.dumps({"number": n})}}]}


def play_binary_search(env: gym.Env, seed: int) -> tuple[float, dict[str, Any], int]:
    env.reset(seed=seed)
    lo, hi, turns = 1, 100, 0
    while True:
        mid = (lo + hi) // 2
        obs, reward, terminated, truncated, info = env.step(guess(mid, f"c{turns}"))
        turns += 1
        if terminated or truncated:
            return reward, info, turns
        lo, hi = (mid + 1, hi) if obs[0]["content"] == "higher" else (lo, mid - 1)


def test_scripted_agent_solves_it():
    env = gym.make("clawgym/GuessNumber-v0")
    for seed in range(5):
        reward, info, turns = play_binary_search(env, seed)
        assert reward == 1.0 and info["stop_reason"] == "solved" and turns <= 7
    env.close()


def test_agent_that_never_finds_it_is_truncated_by_the_turn_budget():
    env = gym.make("clawgym/GuessNumber-v0", max_turns=4)
    env.reset(options={"task_id": "guess-77"})
    for turn in range(4):
        obs, reward, terminated, truncated, info = env.step(guess(1))
        assert reward == 0.0 and obs[0]["content"] == "higher"
    assert truncated and not terminated and info["stop_reason"] == "max_turns"
    with pytest.raises(EpisodeEndedError, match="call reset"):
        env.step(guess(77))


def test_step_before_reset_is_a_clear_error():
    with pytest.raises(ResetNeeded, match="reset"):
        GuessNumberEnv().step(guess(3))
    # Through gymnasium.make too: clawgym's error with clawgym's message (Gymnasium's
    # order-enforcing wrapper used to answer first, with its own), which code written
    # against Gymnasium still catches as gymnasium's ResetNeeded.
    made = gym.make("clawgym/GuessNumber-v0")
    with pytest.raises(ResetNeeded, match=r"call reset\(\) first") as raised:
        made.step(guess(3))
    assert isinstance(raised.value, gym.error.ResetNeeded)


def test_reset_info_and_task_option():
    env = GuessNumberEnv()
    obs, info = env.reset(seed=0, options={"task_id": "guess-9"})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert info["task_id"] == "guess-9" and info["tools"][0]["function"]["name"] == "guess"
    info["tools"].clear()  # the caller owns what it gets: the env's schemas are untouched
    assert env.reset(seed=0)[1]["tools"]
    with pytest.raises(ValueError, match="guess-<n>"):
        env.reset(options={"task_id": "banana"})


def test_seeding_uses_np_random_only():
    a = [GuessNumberEnv().reset(seed=s)[1]["task_id"] for s in range(10)]
    b = [GuessNumberEnv().reset(seed=s)[1]["task_id"] for s in range(10)]
    assert a == b and len(set(a)) > 5


def test_plain_string_actions_are_parsed():
    env = GuessNumberEnv()
    env.reset(options={"task_id": "guess-50"})
    obs, reward, terminated, *_ = env.step('<tool_call>{"name": "guess", "arguments": {"number": 50}}</tool_call>')
    assert reward == 1.0 and terminated and obs[0]["role"] == "tool"
    env.reset(options={"task_id": "guess-50"})
    obs, *_ = env.step("is it fifty?")  # no tool call: a reminder, not an error
    assert "guess" in obs[0]["content"] and obs[0]["role"] == "user"


@pytest.mark.parametrize("bad", [42, None, ["list"], {"role": "assistant", "content": 3},
                                 {"role": "assistant", "content": "x", "bogus": 1}])
def test_non_messages_become_invalid_action_observations(bad):
    env = GuessNumberEnv()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(bad)
    assert obs[0]["role"] == "user" and "Invalid action" in obs[0]["content"]
    assert info["metrics"]["invalid_action"] == 1.0 and info["next_state"] == obs[0]["content"]
    assert not terminated and not truncated


def test_malformed_tool_arguments_are_answered_on_the_tool_call():
    env = GuessNumberEnv()
    env.reset(seed=0)
    bad = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_x", "type": "function", "function": {"name": "guess", "arguments": '{"number": '}}]}
    obs, _, _, _, info = env.step(bad)
    assert obs == [{"role": "tool", "tool_call_id": "call_x", "content": obs[0]["content"]}]
    assert "not valid JSON" in obs[0]["content"] and info["metrics"]["invalid_action"] == 1.0


def test_invalid_actions_cost_a_turn():
    env = GuessNumberEnv(max_turns=2)
    env.reset(seed=0)
    env.step(1)
    *_, truncated, info = env.step(2)
    assert truncated and info["stop_reason"] == "max_turns"


class _BrokenSandboxEnv(ClawEnv):
    """Its infrastructure fails on the second turn, as a dead sandbox would."""

    def __init__(self) -> None:
        super().__init__(max_turns=5)
        self.released = 0

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        self.turns = 0
        return Opening([{"role": "user", "content": "go"}], task_id="t")

    def _act(self, turn: Any) -> Transition:
        self.turns += 1
        if self.turns == 2:
            raise EnvError("sandbox container vanished")
        return Transition([{"role": "user", "content": "ok"}])

    def _release(self) -> None:
        self.released += 1


def test_infrastructure_failure_truncates_with_error():
    env = _BrokenSandboxEnv()
    env.reset()
    assert env.step("a")[3] is False
    obs, reward, terminated, truncated, info = env.step("b")
    assert truncated and not terminated and obs == []
    assert info["stop_reason"] == "error" and "sandbox container vanished" in info["error"]


class _ToolsThenUserEnv(ClawEnv):
    """Answers each call it runs, then adds a user message, as BFCL's next turn or a page
    snapshot does: the calls it did not run must be answered before that message."""

    tools = GuessNumberEnv.tools

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        self.ran: list[str] = []
        return Opening([{"role": "user", "content": "go"}], task_id="t")

    def _act(self, turn: Any) -> Transition:
        self.ran += [call.id for call in turn.tool_calls]
        return Transition([*({"role": "tool", "tool_call_id": c.id, "content": "ran"} for c in turn.tool_calls),
                           {"role": "user", "content": "next"}])


def test_only_max_tool_calls_of_a_message_run_and_the_rest_are_answered_in_place():
    env = _ToolsThenUserEnv(max_tool_calls=2)
    env.reset()
    calls = [guess(i, f"c{i}")["tool_calls"][0] for i in range(5)]
    obs, _, _, _, info = env.step({"role": "assistant", "content": None, "tool_calls": calls})
    assert env.ran == ["c0", "c1"]
    assert [m.get("tool_call_id") for m in obs] == ["c0", "c1", "c2", "c3", "c4", None]
    assert obs[2]["content"].startswith("Not run: at most 2 tool calls of one message run; this was call 3 of 5")
    assert obs[-1] == {"role": "user", "content": "next"}
    assert info["metrics"]["calls_not_run"] == 3 and info["metrics"]["invalid_action"] == 1
    obs, *_, info = env.step({"role": "assistant", "content": None, "tool_calls": calls[:2]})
    assert "calls_not_run" not in info["metrics"] and info["metrics"]["invalid_action"] == 0
    assert GuessNumberEnv().max_tool_calls == 8  # the default, BFCL's widest parallel question
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_tool_calls"):
            GuessNumberEnv(max_tool_calls=bad)


def test_close_is_idempotent_and_context_manager_releases():
    with _BrokenSandboxEnv() as env:
        env.reset()
        env.reset()  # a second reset releases the first episode's resources
        assert env.released == 1
    assert env.released == 2
    env.close()
    assert env.released == 2


def test_render_ansi_shows_the_transcript():
    env = gym.make("clawgym/GuessNumber-v0", render_mode="ansi")
    env.reset(options={"task_id": "guess-3"})
    env.step(guess(3))
    text = env.render()
    assert "[user] I picked" in text and 'guess({"number": 3})' in text and "[tool] correct" in text


def test_constructor_is_cheap_and_picklable():
    env = pickle.loads(pickle.dumps(GuessNumberEnv(low=5, high=6)))
    assert env.reset(seed=1)[1]["task_id"] in ("guess-5", "guess-6")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="max_turns"):
        GuessNumberEnv(max_turns=0)
    with pytest.raises(ValueError, match="render_mode"):
        GuessNumberEnv(render_mode="human")


def test_action_space_sample_plays_a_valid_episode():
    env = gym.make("clawgym/GuessNumber-v0")
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(10):
        *_, terminated, truncated, info = env.step(env.action_space.sample())
        assert info["metrics"]["invalid_action"] == 0.0
        if terminated or truncated:
            break
    assert terminated or truncated
    assert envs.RESERVED_INFO_KEYS[0] == "task_id"


# ---- a reset that raised ------------------------------------------------------------------
def test_a_failed_first_reset_through_gym_make_leaves_a_working_env():
    # gymnasium 1.4.0's PassiveEnvChecker, which gym.make used to add, kept None as the first
    # reset's data after it raised, and every step after the next good reset hit TypeError.
    env = gym.make(FAULT_ID)
    with pytest.raises(RuntimeError, match="setup exploded"):
        env.reset(options={"task_id": "raise_on_reset"})
    with pytest.raises(ResetNeeded):  # the contract's error, not Gymnasium's bookkeeping
        env.step("hello")
    obs, info = env.reset(options={"task_id": "ok"})
    assert info["task_id"] == "ok"
    for turn in range(3):
        obs, reward, terminated, truncated, info = env.step(f"turn {turn}")
        assert obs == [{"role": "user", "content": f"echo: turn {turn}"}] and reward == 1.0
    env.close()


def test_a_failed_later_reset_ends_the_episode_it_interrupted():
    env = gym.make(FAULT_ID)
    env.reset(options={"task_id": "ok"})
    env.step("one")
    with pytest.raises(RuntimeError):
        env.reset(options={"task_id": "raise_on_reset"})
    with pytest.raises(ResetNeeded):  # not a step in the old episode, whose resources are gone
        env.step("two")
    env.reset(options={"task_id": "ok"})
    assert env.step("three")[0][0]["content"] == "echo: three"


@pytest.mark.parametrize("env_id", [e.env_id for e in envs.entries()])
def test_registered_envs_skip_gymnasiums_passive_checker_and_order_wrapper(env_id):
    # the env enforces reset-before-step itself (clawgym's ResetNeeded, its message)
    assert gym.spec(env_id).disable_env_checker is True and gym.spec(env_id).order_enforce is False
    env = gym.make(env_id)
    chain = []
    while isinstance(env, gym.Wrapper):
        chain.append(type(env).__name__)
        env = env.env
    assert "PassiveEnvChecker" not in chain and "OrderEnforcing" not in chain


@pytest.mark.parametrize("env_id", [e.env_id for e in envs.entries()])
def test_every_registered_env_takes_max_tool_calls(env_id):
    assert gym.make(env_id, max_tool_calls=3).unwrapped.max_tool_calls == 3


# ---- hostile actions ----------------------------------------------------------------------
HOSTILE_ARGUMENTS = ["[" * 100_000, '{"number": ' + "9" * 5000 + "}", '{"number": 1e999}']


@pytest.mark.parametrize("arguments", HOSTILE_ARGUMENTS, ids=["deep", "5000-digits", "overflow"])
@pytest.mark.parametrize("as_text", [False, True], ids=["dict", "text"])
def test_hostile_tool_arguments_are_invalid_actions_and_the_env_goes_on(arguments, as_text):
    env = gym.make("clawgym/GuessNumber-v0")
    env.reset(options={"task_id": "guess-40"})
    action = (f'<tool_call>{{"name": "guess", "arguments": {arguments}}}</tool_call>' if as_text
              else {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": arguments}}]})
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs[0]["role"] == "tool" and "were refused" in obs[0]["content"]
    assert info["metrics"]["invalid_action"] == 1.0 and not (terminated or truncated)
    assert env.step(guess(10))[0][0]["content"] == "higher"
    assert env.step(guess(40))[1:3] == (1.0, True)
    transcript = env.unwrapped.transcript  # the refused call is on record, then its answer
    refused, answer = transcript[2], transcript[3]
    assert refused["role"] == "assistant" and answer["tool_call_id"] == refused["tool_calls"][0]["id"]


def test_a_deep_message_is_an_invalid_action_not_a_recursion_error():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    env = GuessNumberEnv()
    env.reset(options={"task_id": "guess-5"})
    obs, *_, info = env.step({"role": "assistant", "content": [{"type": "text", "text": "x", "more": deep}]})
    assert "nested deeper than 64 levels" in obs[0]["content"] and info["metrics"]["invalid_action"] == 1.0
    assert env.step(guess(5))[1] == 1.0


# ---- the task_id option -------------------------------------------------------------------
def _deep_list(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("task_id", [["a"], 7, "", {"id": "x"}, 10 ** 5000, _deep_list(100_000)],
                         ids=["list", "int", "empty", "dict", "5000-digits", "deep"])
@pytest.mark.parametrize("env_id", [e.env_id for e in envs.entries()])
def test_every_env_names_a_task_id_that_is_not_a_string(env_id, task_id):
    env = gym.make(env_id)  # refused before any sandbox starts: no backend needed
    with pytest.raises(ValueError, match=r"options\['task_id'\] must be a non-empty string naming a "
                                         r"task \(see task_ids\(\), e\.g\. '"):
        env.reset(options={"task_id": task_id})
    with pytest.raises(ResetNeeded):
        env.step("hi")
    env.close()


@pytest.mark.parametrize("options", [["task_id"], "guess-3", {1: "x"}])
def test_options_must_be_a_dict(options):
    with pytest.raises(ValueError, match=r"options=\.\.\.\) must be a dict"):
        GuessNumberEnv().reset(options=options)


@pytest.mark.parametrize("env_id", [e.env_id for e in envs.entries()])
def test_an_unknown_task_id_is_a_value_error_naming_it(env_id):
    env = gym.make(env_id)
    if not env.unwrapped.task_ids():
        pytest.skip(f"{env_id} generates its tasks: any id may name one")
    with pytest.raises(ValueError, match="no-such-task"):
        env.reset(options={"task_id": "no-such-task"})
    env.close()
