"""check_env passes on every registered env and catches each broken rule."""

from __future__ import annotations

import inspect
import random
import threading
from typing import Any

import gymnasium as gym
import pytest

import envs
from envs import ClawEnv, Opening, StopReason, Transition
from envs.checker import EnvCheckError, check_env
from tests.helpers import require


# Browser-v1's default is MiniWoB's pages, ~18 s of checker resets: slow here, while
# tests/envs/gui/test_env.py checks the same contract on its shipped folder tasks by default
@pytest.mark.parametrize("env_id", [pytest.param(e.env_id, marks=pytest.mark.slow) if e.env_id == "clawgym/Browser-v1"
                                    else e.env_id for e in envs.entries()])
def test_every_registered_env_keeps_the_contract(env_id):
    creator = gym.envs.registration.load_env_creator(gym.spec(env_id).entry_point)
    if "sandbox" in inspect.signature(creator.__init__).parameters:  # sandboxed families
        from envs.sandbox import backend_status

        reasons = backend_status()
        require(any(r is None for r in reasons.values()), f"no sandbox backend for {env_id}: {reasons}")
    if gym.spec(env_id).entry_point.startswith("envs.gui"):  # a real Chromium
        from envs.browser import browser_unavailable_reason

        reason = browser_unavailable_reason()
        require(reason is None, f"no browser for {env_id}: {reason}")
    env = gym.make(env_id)
    check_env(env)


class _Good(ClawEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_turns=3, **kwargs)

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        n = int(self.np_random.integers(100))
        return Opening([{"role": "user", "content": f"task {n}"}], task_id=f"t{n}")

    def _act(self, turn: Any) -> Transition:
        return Transition([{"role": "user", "content": "noted"}])


class _GlobalRandom(_Good):
    def _act(self, turn: Any) -> Transition:
        return Transition([{"role": "user", "content": str(random.random())}])


class _BothDone(_Good):
    def step(self, action: Any) -> Any:
        obs, reward, _, _, info = super().step(action)
        return obs, reward, True, True, info


class _NoNextState(_Good):
    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        info.pop("next_state")
        return obs, reward, terminated, truncated, info


class _IntReward(_Good):
    def step(self, action: Any) -> Any:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, 1, terminated, truncated, info


class _LeaksThreads(_Good):
    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        stop = threading.Event()
        self._stops = getattr(self, "_stops", []) + [stop]
        threading.Thread(target=stop.wait, daemon=True).start()
        return super()._open(task_id, options)


class _NeverEnds(_Good):
    def _finish(self, transition: Transition) -> Any:
        self._turn = 0
        return super()._finish(transition)


class _BadStopReason(_Good):
    def _act(self, turn: Any) -> Transition:
        return Transition([{"role": "user", "content": "bye"}], stop=StopReason.SOLVED)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, False, True, info


def test_a_good_env_passes():
    check_env(_Good())


@pytest.mark.parametrize("cls, fragment", [
    (_GlobalRandom, "np_random"),
    (_BothDone, "terminated and truncated"),
    (_NoNextState, "next_state"),
    (_IntReward, "finite float"),
    (_LeaksThreads, "threads went"),
    (_NeverEnds, "did not end within max_turns"),
    (_BadStopReason, "does not match terminated"),
])
def test_each_broken_rule_is_named(cls, fragment):
    with pytest.raises(EnvCheckError, match=fragment):
        check_env(cls())
    for stop in getattr(cls, "_stops", []):
        stop.set()


def test_non_clawgym_env_is_refused():
    with pytest.raises(EnvCheckError, match="subclass envs.ClawEnv"):
        check_env(gym.make("CartPole-v1"))
