"""Many envs stepped together: lists in, lists out, faults contained per member.

``make_vec(env_id, num_envs, backend=...)`` builds a :class:`VectorEnv` whose members run
on one of four backends::

    sync    one member after another in the caller's order (the baseline);
    thread  (default) every member on its own thread at once: envs are I/O bound;
    process every member in its own process: a segfault or a hang is killed, not waited on;
    ray     every member in a Ray actor: a local instance, or the cluster that
            ray_address or $RAY_ADDRESS names (see envs.ray_members.connect_ray).

All four give identical results for the same seeds. ``step`` takes ``None`` for members
that are idle (finished members of a GRPO group wait for the rest); there is no autoreset.
Each call runs under a timeout and an exception guard: a member that raises or hangs comes
back ``truncated=True`` with ``info["error"]`` and ``info["stop_reason"] == "error"``, its
env is discarded, and the next ``reset`` gives it a fresh one. The batch always completes.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable

import gymnasium as gym

from envs.messages import Message
from envs.registration import resolve
from envs.ray_members import RayMember, check_ray_actor_options, connect_ray, ray_shortfall
from envs.ray_members import ray_actor_options as actor_options_for  # the argument has its name
from envs.workers import Call, EnvFactory, Member, MemberTimeout, ProcessMember, RemoteError, ThreadMember

BACKENDS = ("sync", "thread", "process", "ray")

StepResult = tuple[list[Message], float, bool, bool, dict[str, Any]]


def make_vec(env_id: str, num_envs: int, backend: str = "thread", *,
             step_timeout_s: float = 300.0, reset_timeout_s: float = 600.0,
             env_kwargs: dict[str, Any] | None = None,
             ray_actor_options: dict[str, Any] | None = None,
             ray_address: str | None = None) -> VectorEnv:
    """``num_envs`` copies of ``env_id`` (an alias or id) on ``backend``.

    ``env_kwargs`` go to every env's constructor. For the ``ray`` backend, ``ray_address``
    (default ``$RAY_ADDRESS``; neither: a local instance) is the cluster to join; there each
    sandboxed env's actor reserves its sandbox's CPUs and memory, and ``ray_actor_options``
    (e.g. ``{"num_cpus": 1, "resources": {...}}``) override that placement.
    """
    spec = gym.spec(resolve(env_id))
    factory = EnvFactory(spec, dict(env_kwargs or {}))
    return VectorEnv([factory] * num_envs, backend=backend, step_timeout_s=step_timeout_s,
                     reset_timeout_s=reset_timeout_s, ray_actor_options=ray_actor_options,
                     ray_address=ray_address)


class VectorEnv:
    """A batch of envs behind list-valued ``reset`` and ``step``. See the module docstring."""

    def __init__(self, env_fns: list[Callable[[], gym.Env]], backend: str = "thread", *,
                 step_timeout_s: float = 300.0, reset_timeout_s: float = 600.0,
                 ray_actor_options: dict[str, Any] | None = None,
                 ray_address: str | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown vector backend {backend!r}; choose one of {list(BACKENDS)}")
        if not env_fns:
            raise ValueError("a vector env needs at least one env (num_envs >= 1)")
        if step_timeout_s <= 0 or reset_timeout_s <= 0:
            raise ValueError("step_timeout_s and reset_timeout_s must be > 0")
        self.backend = backend
        self.num_envs = len(env_fns)
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self._ray_options: list[dict[str, Any]] = []
        if backend == "ray":
            check_ray_actor_options(ray_actor_options)  # before Ray starts or connects
            on_cluster = connect_ray(ray_address)
            per_factory: dict[int, dict[str, Any]] = {}  # make_vec repeats one factory: ask its class once
            for fn in env_fns:
                if id(fn) not in per_factory:
                    per_factory[id(fn)] = actor_options_for(fn, ray_actor_options, on_cluster)
                self._ray_options.append(per_factory[id(fn)])
            if on_cluster and (short := ray_shortfall(self._ray_options)):
                warnings.warn(short, RuntimeWarning, stacklevel=2)
        self._members: list[Member] = [self._member(i, fn) for i, fn in enumerate(env_fns)]
        self._active = [False] * self.num_envs  # in an episode that has not ended
        self._task_ids: list[str | None] = [None] * self.num_envs
        self._closed = False

    def _member(self, i: int, fn: Callable[[], gym.Env]) -> Member:
        if self.backend == "process":
            return ProcessMember(fn)
        if self.backend == "ray":
            return RayMember(fn, self._ray_options[i])
        return ThreadMember(fn)

    # ---- the batch API -----------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | list[dict[str, Any] | None] | None = None,
              indices: list[int] | None = None) -> tuple[list[list[Message] | None], list[dict[str, Any]]]:
        """Reset ``indices`` (default: all). An int ``seed`` gives member ``i`` seed ``seed + i``.

        Returns one (obs, info) per member; members not reset get ``None`` and ``{}``.
        A member whose reset failed gets ``None`` and ``info["error"]`` and stays inactive.
        """
        targets = list(range(self.num_envs)) if indices is None else list(indices)
        seeds = self._per_member(seed, "seed")
        opts = self._per_member(options, "options")
        calls: list[Call | None] = [None] * self.num_envs
        for i in targets:
            s = seed + i if isinstance(seed, int) else seeds[i]
            calls[i] = ("reset", (), {"seed": s, "options": opts[i]})
        results = self._run(calls, self.reset_timeout_s, "reset")
        obs: list[list[Message] | None] = [None] * self.num_envs
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in targets:
            ok, value = results[i]
            if ok:
                obs[i], infos[i] = value
                self._task_ids[i] = infos[i].get("task_id")
            else:
                infos[i] = {"error": value, "stop_reason": "error"}
            self._active[i] = ok
        return obs, infos

    def step(self, actions: list[Message | str | None]) -> tuple[
            list[list[Message] | None], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """Step every member with a non-None action; idle members return ``None`` obs."""
        if len(actions) != self.num_envs:
            raise ValueError(f"step() got {len(actions)} actions for {self.num_envs} envs; "
                             "pass None for idle envs")
        for i, action in enumerate(actions):
            if action is not None and not self._active[i]:
                raise ValueError(f"env {i} is not in an episode (it ended, failed or was never "
                                 "reset); pass None for it or reset it")
        calls = [("step", (a,), {}) if a is not None else None for a in actions]
        results = self._run(calls, self.step_timeout_s, "step")
        obs: list[list[Message] | None] = [None] * self.num_envs
        rewards = [0.0] * self.num_envs
        terminated = [False] * self.num_envs
        truncated = [False] * self.num_envs
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i, (ok, value) in enumerate(results):
            if calls[i] is None:
                continue
            if ok:
                obs[i], rewards[i], terminated[i], truncated[i], infos[i] = value
            else:
                obs[i], truncated[i] = [], True
                infos[i] = {"error": value, "stop_reason": "error", "task_id": self._task_ids[i],
                            "next_state": "", "metrics": {}}
            if terminated[i] or truncated[i]:
                self._active[i] = False
        return obs, rewards, terminated, truncated, infos

    @property
    def active(self) -> list[bool]:
        """Which members are in an episode that has not ended."""
        return list(self._active)

    def close(self) -> None:
        """Close every member at once: each may wait for a call in flight (a sandbox command
        up to its timeout) before its env is closed, and a stopped trainer (SIGTERM) should
        wait for the slowest member, not for all of them in turn."""
        if self._closed:
            return
        self._closed = True
        closers = [threading.Thread(target=_close_quietly, args=(m,), name="clawgym-close", daemon=True)
                   for m in self._members]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join()

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- running calls under a timeout and an exception guard --------------------------
    def _run(self, calls: list[Call | None], timeout: float, what: str) -> list[tuple[bool, Any]]:
        if self._closed:
            raise RuntimeError("this vector env is closed; make a new one")
        results: list[tuple[bool, Any]] = [(True, None)] * self.num_envs
        if self.backend == "sync":
            for i, call in enumerate(calls):
                if call is not None:
                    self._members[i].submit(call)
                    results[i] = self._collect(i, time.monotonic() + timeout, timeout, what)
            return results
        for i, call in enumerate(calls):
            if call is not None:
                self._members[i].submit(call)
        deadline = time.monotonic() + timeout
        for i, call in enumerate(calls):
            if call is not None:
                results[i] = self._collect(i, deadline, timeout, what)
        return results

    def _collect(self, i: int, deadline: float, timeout: float, what: str) -> tuple[bool, Any]:
        member = self._members[i]
        try:
            return True, member.result(deadline - time.monotonic())
        except MemberTimeout as exc:
            member.abandon()
            why = f": {exc}" if str(exc) else ""
            return False, f"TimeoutError: env {i} {what}() did not return within {timeout:g} s{why}"
        except RemoteError as exc:
            member.abandon()
            return False, str(exc)

    def _per_member(self, value: Any, name: str) -> list[Any]:
        if isinstance(value, list):
            if len(value) != self.num_envs:
                raise ValueError(f"{name} has {len(value)} entries for {self.num_envs} envs")
            return list(value)
        return [value] * self.num_envs


def _close_quietly(member: Member) -> None:
    try:
        member.close()
    except Exception:  # a member that cannot close cleanly is abandoned; the others still close
        pass
