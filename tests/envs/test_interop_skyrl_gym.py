"""envs.interop.skyrl_gym: a clawgym env made through SkyRL-gym's own registry, played with
real text actions; every reward, done flag and observation is the one the clawgym env itself
gives for the same actions."""

from __future__ import annotations

import importlib
import importlib.util
import json
from types import ModuleType

import pytest

import envs
from tests.helpers import require

pytestmark = pytest.mark.skyrl_gym


@pytest.fixture(scope="module")
def skyrl() -> tuple[ModuleType, ModuleType]:
    """``skyrl_gym`` and the adapter module (whose import registers ``clawgym``)."""
    require(importlib.util.find_spec("skyrl_gym") is not None,
            "skyrl-gym is not installed: pip install -e '.[skyrl-gym]'")
    return importlib.import_module("skyrl_gym"), importlib.import_module("envs.interop.skyrl_gym")


def guess(number: int) -> str:
    return f'I will try {number}.\n<tool_call>\n{{"name": "guess", "arguments": {{"number": {number}}}}}\n</tool_call>'


def test_a_binary_search_episode_gets_the_envs_rewards_done_flags_and_observations(skyrl) -> None:
    skyrl_gym, adapter = skyrl
    env = skyrl_gym.make("clawgym", env_config={"env": "guess"}, extras={"task_id": "guess-37", "seed": 3})
    assert isinstance(env, adapter.ClawgymTextEnv) and env.spec.id == "clawgym"
    twin = envs.make("guess")
    opening, twin_info = twin.reset(seed=3, options={"task_id": "guess-37"})

    prompt, meta = env.init([{"role": "user", "content": "the dataset row's prompt, not used"}])
    assert meta == {"task_id": "guess-37", "tools": twin_info["tools"]}
    assert [m["role"] for m in prompt] == ["system", "user"] and prompt[1] == opening[1]
    assert prompt[0]["content"].startswith(opening[0]["content"])  # the env's own, then the tools
    assert json.dumps(twin_info["tools"][0]) in prompt[0]["content"] and "<tool_call>" in prompt[0]["content"]

    low, high, rewards, dones = 1, 100, [], []
    while True:
        number = (low + high) // 2
        out = env.step(guess(number))
        obs, reward, terminated, truncated, info = twin.step(guess(number))
        assert out["observations"] == obs and out["reward"] == reward
        assert out["done"] == (terminated or truncated)
        assert out["metadata"]["metrics"] == info["metrics"] and out["metadata"]["task_id"] == "guess-37"
        rewards.append(out["reward"])
        dones.append(out["done"])
        if out["done"]:
            break
        low, high = (number + 1, high) if obs[0]["content"] == "higher" else (low, number - 1)
    assert rewards[-1] == 1.0 and sum(rewards) == 1.0 and dones == [False] * (len(dones) - 1) + [True]
    assert out["metadata"]["stop_reason"] == "solved" and out["observations"][0]["content"] == "correct"
    assert len(rewards) <= 7  # binary search over 1..100
    assert env.get_metrics() == {"env_return": 1.0, "turns": len(rewards), "first/solved": float(len(rewards) == 1),
                                 "first/invalid_action": 0.0, "last/solved": 1.0, "last/invalid_action": 0.0}
    env.close()


def test_skyrls_max_turns_becomes_the_envs_budget_and_bad_actions_cost_a_turn(skyrl) -> None:
    skyrl_gym, _ = skyrl
    # SkyRL's generator puts max_turns in every trajectory's extras; extras win over env_config.
    env = skyrl_gym.make("clawgym", env_config={"env": "toolmath"},
                         extras={"env": "guess", "task_id": "guess-80", "max_turns": 2, "tools_in_prompt": False})
    twin = envs.make("guess", max_turns=2)
    opening, _ = twin.reset(options={"task_id": "guess-80"})
    prompt, _ = env.init([])
    assert prompt == opening  # tools_in_prompt=False: exactly what the env opened with
    bad = '<tool_call>{"name": "guess", "arguments": {"number": </tool_call>'  # broken JSON
    first = env.step(bad)
    assert first["done"] is False and first["reward"] == 0.0
    assert first["metadata"]["metrics"]["invalid_action"] == 1.0
    assert first["observations"] == twin.step(bad)[0] and first["observations"][0]["role"] == "tool"
    last = env.step("Is it 80?")  # no tool call: a reminder, and the budget is used up
    assert last["done"] is True and last["reward"] == 0.0 and last["metadata"]["stop_reason"] == "max_turns"
    assert env.get_metrics()["turns"] == 2 and env.get_metrics()["last/invalid_action"] == 0.0


def test_bad_settings_and_registrations_are_refused_with_the_fix(skyrl) -> None:
    skyrl_gym, adapter = skyrl
    with pytest.raises(ValueError, match="needs `env`"):
        skyrl_gym.make("clawgym", env_config={}, extras={"task_id": "guess-1"})
    with pytest.raises(KeyError, match="unknown env 'no-such-env'"):
        skyrl_gym.make("clawgym", extras={"env": "no-such-env"})
    assert adapter.register() == "clawgym"  # again: a no-op
    skyrl_gym.register(id="clawgym-test-taken", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    try:
        with pytest.raises(ValueError, match="already names"):
            adapter.register("clawgym-test-taken")
    finally:
        skyrl_gym.envs.registration.deregister("clawgym-test-taken")
