"""Vector-env members as Ray actors, on a local Ray instance or on an existing cluster.

:func:`connect_ray` joins the cluster that ``ray_address`` or ``$RAY_ADDRESS`` names (or
starts a local instance), shipping a source checkout as Ray's ``working_dir``. On a cluster
each actor reserves its env's sandbox resources (:func:`sandbox_resources`), and a lost
node or a killed actor is an env error, never a fresh actor answering ``ResetNeeded``
(:class:`RayMember`).
"""

from __future__ import annotations

import inspect
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym

from envs.workers import Call, EnvFactory, MemberTimeout, RemoteError, _run, describe

RAY_CLOSE_TIMEOUT_S = 30.0
"""How long closing a Ray member waits for its actor to close its env before killing it."""
_PROBE_TIMEOUT_S = 5.0
_SHIP_EXCLUDES = [".git", ".venv*", ".hypothesis", ".pytest_cache", ".bootstrap", "runs",
                  "build", "dist", "*.egg-info", "__pycache__"]
_started_local_ray = False  # this module started the Ray instance the process is connected to


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("backend='ray' needs ray: pip install 'clawgym[ray]'") from None
    return ray


def connect_ray(address: str | None = None) -> bool:
    """Connect this process to Ray, once; True when env actors go to an existing cluster.

    ``address``, else ``$RAY_ADDRESS`` (Ray's own convention), names a running cluster: its
    head's ``host:port``, ``ray://host:port`` (Ray Client) or ``auto`` (the cluster started on
    this machine). With neither (or ``local``), a private local instance is started. Where
    nothing answers, a ConnectionError says so within seconds. Actors on a cluster run with
    :func:`cluster_runtime_env`. A process that called ``ray.init`` itself keeps that
    connection and runtime env, and counts as a cluster.
    """
    global _started_local_ray
    ray = _import_ray()
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "local":
        address = None
    if ray.is_initialized():
        if address is not None and _started_local_ray:
            raise RuntimeError(f"this process already runs a local Ray instance, so it cannot connect "
                               f"to {address}; call ray.shutdown() first")
        return not _started_local_ray
    if address is None:
        ray.init(include_dashboard=False, log_to_driver=False)
        _started_local_ray = True
        return False
    _probe(address)
    try:
        ray.init(address=address, runtime_env=cluster_runtime_env(), log_to_driver=False)
    except Exception as exc:  # ConnectionError, AuthenticationError, RuntimeError: all say "can't join"
        if any(type(e).__name__ == "AuthenticationError" for e in _causes(exc)):
            raise ConnectionError(f"the Ray cluster at {address} refused this process's token; export "
                                  "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (the cluster's) before starting "
                                  "Python") from exc
        raise ConnectionError(f"could not join the Ray cluster at {address} ({_first_line(exc)}); check "
                              f"that `ray status --address {address}` answers here") from exc
    _started_local_ray = False
    return True


def _probe(address: str) -> None:
    """Fail fast where nothing listens: Ray itself retries for a minute or more."""
    if address == "auto":
        return  # Ray reads the local cluster's address from its temp dir, and fails at once
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"ray_address {address!r} is not host:port, ray://host:port or 'auto'; "
                         "use the address `ray start --head` printed")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ConnectionError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one "
                              "with `ray start --head`, or fix RAY_ADDRESS or ray_address") from None


def cluster_runtime_env() -> dict[str, Any]:
    """What env actors on a cluster run with: the driver's ``CLAWGYM_*`` variables and, when
    clawgym runs from a source checkout, that checkout as Ray's ``working_dir`` (its code, task
    data, and any plugin or test env it holds) without virtualenvs, git data and caches.
    An installed clawgym ships nothing: every node then needs the same version installed,
    as it needs clawgym's dependencies, sandbox images and rootfs in any case."""
    runtime_env: dict[str, Any] = {}
    forwarded = {k: v for k, v in os.environ.items() if k.startswith("CLAWGYM_")}
    if forwarded:
        runtime_env["env_vars"] = forwarded
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "clawgym"' in pyproject.read_text():
        runtime_env |= {"working_dir": str(root), "excludes": list(_SHIP_EXCLUDES)}
    return runtime_env


def sandbox_resources(spec: gym.envs.registration.EnvSpec, kwargs: dict[str, Any]) -> dict[str, float | int]:
    """The Ray resources one env actor reserves on a cluster: its sandbox's CPUs and memory.

    The env *class* is asked, not an instance: a class may define a classmethod
    ``sandbox_config_for(kwargs) -> SandboxConfig | None`` that reads its constructor kwargs;
    otherwise a class whose constructor takes ``sandbox_config`` gets
    :class:`~envs.sandbox.SandboxConfig`'s defaults under those overrides. An env without a
    sandbox waits on I/O (an API, a simulated user) and reserves nothing: ``{}``.
    """
    entry = spec.entry_point
    env_cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    merged = {**spec.kwargs, **kwargs}
    hook = getattr(env_cls, "sandbox_config_for", None)
    if hook is not None:
        config = hook(merged)
    elif "sandbox_config" in inspect.signature(env_cls).parameters:
        from envs.sandbox.base import config_from
        config = config_from(merged.get("sandbox_config"))
    else:
        return {}
    if config is None:
        return {}
    return {"num_cpus": float(config.cpus), "memory": config.memory_mb * 2**20}


def ray_actor_options(factory: Callable[[], gym.Env], user_options: dict[str, Any] | None,
                      on_cluster: bool) -> dict[str, Any]:
    """Ray options for one member's actor. On a cluster a sandboxed env reserves its
    :func:`sandbox_resources`, so Ray puts each actor on a node with room. Otherwise it reserves
    no CPU: I/O-bound envs would sit unscheduled on a small machine, and on a local instance
    all actors share one machine under their sandboxes' own limits. ``user_options`` override
    both. Ray never restarts an env actor (an episode cannot survive a restart): a lost actor
    is an env error, and the member starts a new one on the next reset."""
    user = check_ray_actor_options(user_options)
    needs = {}
    if on_cluster and isinstance(factory, EnvFactory):
        needs = sandbox_resources(factory.spec, factory.kwargs)
    return {"num_cpus": 0, **needs, **user, "max_restarts": 0}


def check_ray_actor_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of the user's ``ray_actor_options``; ValueError for those clawgym cannot honour."""
    options = dict(options or {})
    if options.get("max_restarts", 0) != 0:
        raise ValueError("ray_actor_options.max_restarts must be 0 or unset: an env's episode cannot "
                         "survive a restart; clawgym reports a lost actor and starts a new one on reset")
    return options


def ray_shortfall(options: list[dict[str, Any]]) -> str | None:
    """A sentence when the cluster's live nodes cannot hold all these actors at once (the rest
    would wait unplaced until their resets time out), else None. Nodes an autoscaler would
    add are not counted, so this is for a warning, not a refusal."""
    total = _import_ray().cluster_resources()
    for key, ray_key, unit, scale, knob in (("num_cpus", "CPU", "CPUs", 1, "cpus"),
                                            ("memory", "memory", "GiB", 2**30, "memory_mb")):
        wanted, held = sum(float(o.get(key) or 0) for o in options), total.get(ray_key, 0.0)
        if wanted > held + 1e-9:
            return (f"{len(options)} env actors reserve {wanted / scale:.3g} {unit} but the Ray cluster "
                    f"has {held / scale:.3g}; add nodes, lower the sandbox's {knob}, or set "
                    f"ray_actor_options={{'{key}': ...}}")
    return None


class _ActorLost(Exception):
    """The member's Ray actor is gone (node lost, process killed); the text says where."""



class _RayEnvActor:
    """The Ray actor body: one env, built on first use."""

    def __init__(self, factory: Callable[[], gym.Env]) -> None:
        self._factory = factory
        self._env: gym.Env | None = None

    def placement(self) -> dict[str, Any]:
        import ray

        import envs
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "resources": context.get_assigned_resources(), "code": str(Path(envs.__file__).parent)}

    def run(self, call: Call) -> tuple[bool, Any]:
        try:
            if self._env is None:
                self._env = self._factory()
            return True, _run(self._env, call)
        except Exception as exc:
            return False, describe(exc)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


class RayMember:
    """Runs its env in a Ray actor, so members can spread over a cluster.

    A lost actor (its node died, its process was killed) fails the call in flight, or the
    next call, with a RemoteError that names its node: the episode is an env error. The
    vector env then abandons the member, and its next reset starts a new actor, which Ray
    places on a live node. A reset that meets a lost actor is sent once more to a new actor
    at once: it had no episode to lose.
    """

    def __init__(self, factory: Callable[[], gym.Env], actor_options: dict[str, Any] | None = None) -> None:
        self._ray = _import_ray()
        if not self._ray.is_initialized():
            connect_ray()
        self._factory = factory
        self._options = dict(actor_options) if actor_options is not None else ray_actor_options(factory, None, False)
        self._actor: Any = None
        self._placed: Any = None  # the actor's placement(): resolves once Ray has started it
        self._call: Call | None = None
        self._ref: Any = None

    def _start(self) -> None:
        self._actor = self._ray.remote(_RayEnvActor).options(**self._options).remote(self._factory)
        self._placed = self._actor.placement.remote()

    def submit(self, call: Call) -> None:
        if self._actor is None:
            self._start()
        self._call, self._ref = call, self._actor.run.remote(call)

    def result(self, timeout: float) -> Any:
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            return self._await(deadline)
        except _ActorLost as lost:
            if self._call is None or self._call[0] != "reset":
                raise RemoteError(str(lost)) from None
        self.abandon()  # a reset lost no episode: a new actor takes it at once
        self.submit(self._call)
        try:
            return self._await(deadline)
        except _ActorLost as lost:
            raise RemoteError(str(lost)) from None

    def _await(self, deadline: float) -> Any:
        ready, _ = self._ray.wait([self._ref], timeout=max(deadline - time.monotonic(), 0.0))
        if not ready:
            raise MemberTimeout(self._unplaced())
        try:
            ok, value = self._ray.get(self._ref)
        except self._ray.exceptions.RayActorError as exc:
            raise _ActorLost(self._lost(exc)) from None
        except self._ray.exceptions.RayError as exc:
            raise RemoteError(f"Ray failed the env call: {_first_line(exc)}") from None
        if not ok:
            raise RemoteError(value)
        return value

    def _lost(self, exc: BaseException) -> str:
        where = "its node"
        try:
            if self._ray.wait([self._placed], timeout=0)[0]:
                placed = self._ray.get(self._placed)
                where = f"its node {placed['node_id']} ({placed['node_ip']})"
        except self._ray.exceptions.RayError:  # it died before it could say where it was
            pass
        return (f"the env actor died: {where} was lost or its process was killed, and the episode "
                f"with it ({type(exc).__name__}: {_first_line(exc)})")

    def _unplaced(self) -> str:
        if self._placed is None or self._ray.wait([self._placed], timeout=0)[0]:
            return ""
        wants = [f"{self._options['num_cpus']:g} CPU"] if self._options.get("num_cpus") else []
        if self._options.get("memory"):
            wants.append(f"{self._options['memory'] / 2**20:g} MiB")
        wants += [f"{k}={v:g}" for k, v in (self._options.get("resources") or {}).items()]
        return (f"its Ray actor never started: no live node had {', '.join(wants) or 'a worker'} free, "
                "or its runtime env was still being set up; add nodes, or lower the sandbox's "
                "cpus/memory_mb or ray_actor_options")

    def placement(self, timeout: float = 60.0) -> dict[str, Any]:
        """Where the actor runs: ``node_id``, ``node_ip``, the ``resources`` Ray assigned it and
        ``code`` (the folder its ``envs`` package came from). Starts the actor if there is none."""
        if self._actor is None:
            self._start()
        return self._ray.get(self._placed, timeout=timeout)

    def abandon(self) -> None:
        if self._actor is not None:
            try:
                self._ray.kill(self._actor)
            except Exception:  # already gone with its node
                pass
        self._actor = self._placed = None

    def close(self) -> None:
        if self._actor is None:
            return
        try:
            self._ray.get(self._actor.close.remote(), timeout=RAY_CLOSE_TIMEOUT_S)
        except Exception:  # dead, or stuck on a node that stopped answering: killed below
            pass
        self.abandon()


def _causes(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
