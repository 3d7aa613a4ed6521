"""``check_env``: does an env keep the clawgym contract (``envs.core``)?

It first runs Gymnasium's own ``gymnasium.utils.env_checker.check_env`` (so Gymnasium's
tooling works on the env), then clawgym's rules: message spaces, the reserved info keys
(``user_id``, when reset gives one, a non-empty string), terminated/truncated, invalid
actions as observations, ``step`` after the end, a ``task_id`` option that is not a
string refused with ``ValueError`` (and ``step`` after that failed reset raising
``ResetNeeded``), seeded determinism of whole rollouts, a
picklable constructor, and ``close`` that gives back every thread, file descriptor and
child process the episode took. The test suite runs it over every registered env, so a
new env is checked the moment it is registered.
"""

from __future__ import annotations

import math
import os
import pickle
import threading
import warnings
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from envs.core import ClawEnv, StopReason
from envs.errors import EpisodeEndedError, ResetNeeded
from envs.messages import tool_schema_problem
from envs.spaces import ConversationSpace, MessageSpace

_STOP_REASONS = {r.value for r in StopReason}


class EnvCheckError(AssertionError):
    """An env broke the contract; the message names the rule."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise EnvCheckError(message)


def check_env(env: gym.Env, *, seed: int = 123, rollout_steps: int = 6,
              check_resources: bool = True) -> None:
    """Raise :class:`EnvCheckError` naming the first contract rule ``env`` breaks."""
    base = env.unwrapped
    _require(isinstance(base, ClawEnv), f"{type(base).__name__} must subclass envs.ClawEnv")
    _require(isinstance(base.action_space, MessageSpace), "action_space must be a MessageSpace")
    _require(isinstance(base.observation_space, ConversationSpace),
             "observation_space must be a ConversationSpace")
    _check_pickle(base)
    for _ in range(4):
        sample = base.action_space.sample()
        _require(base.action_space.contains(sample), f"action_space.sample() gave {sample!r:.120}, "
                 "which action_space.contains() rejects")
    first = _rollout(base, seed, rollout_steps)
    _require(first == _rollout(base, seed, rollout_steps),
             f"two rollouts with seed={seed} and the same actions differ: the env must draw all "
             "randomness from self.np_random")
    _check_invalid_actions(base, seed)
    _check_episode_end(base, seed)
    _check_task_option(base, seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            gymnasium_check_env(base, skip_render_check=base.spec is None)
        except AssertionError as exc:
            raise EnvCheckError(f"gymnasium's env checker failed: {exc}") from exc
    problems = [str(w.message) for w in caught if "gymnasium" in (w.filename or "")]
    _require(not problems, f"gymnasium's env checker warned: {problems[:3]}")
    base.close()
    base.close()  # idempotent
    if check_resources:
        _check_resources(base, seed)


def _check_pickle(base: ClawEnv) -> None:
    if base.spec is None:
        return
    fresh = base.spec.make().unwrapped
    try:
        pickle.loads(pickle.dumps(fresh))
    except Exception as exc:
        raise EnvCheckError(f"a freshly made env must be picklable (vector envs ship it to "
                            f"workers): {type(exc).__name__}: {exc}") from exc
    finally:
        fresh.close()


def _check_reset(base: ClawEnv, obs: Any, info: Any) -> None:
    _require(isinstance(obs, list) and len(obs) > 0, "reset() must return a non-empty message list")
    _require(base.observation_space.contains(obs), f"reset() obs is not a valid message list: {obs!r:.200}")
    _require(isinstance(info, dict), "reset() info must be a dict")
    _require(isinstance(info.get("task_id"), str) and info["task_id"] != "",
             "reset() info['task_id'] must be a non-empty string")
    _require(isinstance(info.get("tools"), list), "reset() info['tools'] must be a list of tool schemas")
    _require("user_id" not in info or (isinstance(info["user_id"], str) and info["user_id"] != ""),
             f"reset() info['user_id'] names the episode's user: a non-empty string when present, "
             f"got {info.get('user_id')!r:.80}")
    for schema in info["tools"]:
        problem = tool_schema_problem(schema)
        _require(problem is None, f"reset() info['tools']: {problem}")


def check_step_result(base: ClawEnv, result: Any, task_id: str) -> bool:
    """Raise :class:`EnvCheckError` unless ``result`` is a valid ``step`` return for the
    episode of ``task_id``; return whether that step ended the episode."""
    _require(isinstance(result, tuple) and len(result) == 5, "step() must return a 5-tuple")
    obs, reward, terminated, truncated, info = result
    _require(base.observation_space.contains(obs), f"step() obs is not a valid message list: {obs!r:.200}")
    _require(isinstance(reward, float) and math.isfinite(reward), f"reward must be a finite float, got {reward!r}")
    _require(isinstance(terminated, bool) and isinstance(truncated, bool),
             "terminated and truncated must be bools")
    _require(not (terminated and truncated), "terminated and truncated must never both be True")
    _require(isinstance(info, dict), "step() info must be a dict")
    _require(info.get("task_id") == task_id, "step() info['task_id'] must name the episode's task")
    _require(isinstance(info.get("next_state"), str), "step() info['next_state'] must be a string")
    metrics = info.get("metrics")
    _require(isinstance(metrics, dict) and all(isinstance(k, str) and isinstance(v, float)
                                               for k, v in metrics.items()),
             "step() info['metrics'] must map names to floats")
    done = terminated or truncated
    _require(("stop_reason" in info) == done, "info['stop_reason'] must be set exactly on the last step")
    if done:
        _require(info["stop_reason"] in _STOP_REASONS, f"unknown stop_reason {info['stop_reason']!r}")
        _require(StopReason(info["stop_reason"]).terminates == terminated,
                 f"stop_reason {info['stop_reason']!r} does not match terminated={terminated}")
    _require("error" not in info or truncated, "info['error'] must come with truncated=True")
    return done


def _rollout(base: ClawEnv, seed: int, steps: int) -> list[Any]:
    base.action_space.seed(seed)
    obs, info = base.reset(seed=seed)
    _check_reset(base, obs, info)
    trace: list[Any] = [obs, info]
    for _ in range(steps):
        result = base.step(base.action_space.sample())
        trace.append(result)
        if check_step_result(base, result, info["task_id"]):
            break
    return trace


def _check_invalid_actions(base: ClawEnv, seed: int) -> None:
    _, info = base.reset(seed=seed)
    for bad in (42, {"role": "assistant", "content": 7}, None):
        obs, reward, terminated, truncated, step_info = base.step(bad)
        check_step_result(base, (obs, reward, terminated, truncated, step_info), info["task_id"])
        _require(step_info["metrics"].get("invalid_action") == 1.0,
                 f"step({bad!r}) must report info['metrics']['invalid_action'] == 1")
        _require(len(obs) >= 1, f"step({bad!r}) must explain the mistake in an observation")
        if terminated or truncated:
            return
    if base.tools:
        name = base.tools[0]["function"]["name"]
        bad_call = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_bad", "type": "function", "function": {"name": name, "arguments": "{oops"}}]}
        obs, *_rest, step_info = base.step(bad_call)
        _require(step_info["metrics"].get("invalid_action") == 1.0,
                 "a tool call with malformed JSON arguments must count as an invalid action")
        _require(any(m.get("role") == "tool" and m.get("tool_call_id") == "call_bad" for m in obs),
                 "a malformed tool call must be answered by a tool message with its tool_call_id")


def _check_episode_end(base: ClawEnv, seed: int) -> None:
    base.action_space.seed(seed)
    base.reset(seed=seed)
    for _ in range(base.max_turns + 1):
        *_, terminated, truncated, _info = base.step(base.action_space.sample())
        if terminated or truncated:
            break
    else:
        raise EnvCheckError(f"the episode did not end within max_turns={base.max_turns} steps")
    try:
        base.step(base.action_space.sample())
    except EpisodeEndedError:
        return
    raise EnvCheckError("step() after the episode ended must raise envs.EpisodeEndedError")


def _check_task_option(base: ClawEnv, seed: int) -> None:
    ids = base.task_ids()
    if ids:
        chosen = ids[len(ids) // 2]
        _, info = base.reset(seed=seed, options={"task_id": chosen})
        _require(info["task_id"] == chosen, f"reset(options={{'task_id': {chosen!r}}}) gave "
                 f"task {info['task_id']!r}")
    for bad in (["a"], 7, ""):
        try:
            base.reset(seed=seed, options={"task_id": bad})
        except ValueError:
            pass
        else:
            raise EnvCheckError(f"reset(options={{'task_id': {bad!r}}}) must raise ValueError "
                                "naming the problem")
        try:
            base.step(base.action_space.sample())
        except ResetNeeded:
            continue
        raise EnvCheckError("step() after a reset that raised must raise envs.ResetNeeded")


def _resource_counts() -> tuple[int, int, int]:
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    children = 0
    for task in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                children += len(f.read().split())
        except OSError:
            pass
    return fds, threading.active_count(), children


def _check_resources(base: ClawEnv, seed: int) -> None:
    # One warm-up episode first: imports and lazily built clients may keep a cache open.
    base.reset(seed=seed)
    base.close()
    before = _resource_counts()
    base.reset(seed=seed)
    base.step(base.action_space.sample())
    base.close()
    after = _resource_counts()
    names = ("file descriptors", "threads", "child processes")
    for name, b, a in zip(names, before, after):
        _require(a <= b, f"close() must release what the episode took: {name} went {b} -> {a}")
