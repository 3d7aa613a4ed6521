"""OpenEnv both ways: any clawgym env served as an OpenEnv environment server, and any
OpenEnv server played as a clawgym env.

**Serving** (``python -m envs.interop.openenv serve env=guess port=8000``): openenv-core's
own server (``openenv.core.env_server.HTTPEnvServer``) runs ``ServedEnv``, which
holds one clawgym env. Every WebSocket session (``/ws``, what OpenEnv's ``EnvClient`` and
TRL's OpenEnv examples speak) gets an env of its own, made when the session opens and
closed when it ends, so two clients never share an episode; at most ``max_sessions`` run
at once and one more is refused with OpenEnv's ``CAPACITY_REACHED``. OpenEnv's stateless
HTTP ``/reset`` and ``/step`` (a fresh env per request) are not served: a clawgym episode
lives in a session, and those requests would start sandboxes outside the session bound.

On the wire an action is ``ClawAction`` ``{"message": <one assistant message or a
plain string>}``, passed to ``env.step`` as it came, so a malformed message gets the
contract's answer (an error message as the observation, ``invalid_action`` 1), never a
server error. An observation is ``ClawObservation``: the new ``messages``, the step's
``info`` (reserved keys and the env's own), ``terminated`` and ``truncated`` apart (OpenEnv's
``done`` is their ``or``), and on reset the env's ``max_turns``. Reset takes ``seed``,
``task_id`` and ``options``.

**Consuming** (``env=envs.interop.openenv:OpenEnv-v0 env_kwargs.url=http://host:8000``):
:class:`OpenEnvEnv` is a :class:`~envs.core.ClawEnv` over one OpenEnv session. Against a
clawgym server it is the served env again: its tools, budget, rewards, stop reasons and
info. Against any other OpenEnv server it offers one tool, ``step``, whose parameters are
the server's action schema (``/schema``); each call is one OpenEnv ``step`` answered by the
observation as JSON; the rewards of a turn's calls add up and ``done`` terminates the
episode (stop reason ``submitted``: OpenEnv does not say why an episode ended); an action
the server's schema refuses is an invalid action. Every reset sends a seed drawn from the
env's ``np_random``, so seeded rollouts are as deterministic as the server. A server that
cannot be reached, times out or fails is an :class:`~envs.errors.EnvError`: reset raises
it, naming the problem and the fix; step truncates with ``info["error"]``. A reply lost or
late drops the session (the next reset opens a new one); an error the server answered keeps
it. Until its first reset the env knows neither the server's tools nor its budget: its
``max_turns`` is the argument's and ``task_ids()`` is empty (tasks come from seeds).
"""

from __future__ import annotations

from typing import Any

from envs.interop.openenv.client import OpenEnvEnv
from envs.interop.openenv.server import MAX_SESSIONS, build_app, client_class, wire_types
from envs.registration import register_with_gymnasium

ENV_ID = "clawgym/OpenEnv-v0"
"""The id :class:`~envs.interop.openenv.client.OpenEnvEnv` is registered under (importing
this package does it); the CLI's ``env=envs.interop.openenv:OpenEnv-v0`` imports and
resolves it."""

register_with_gymnasium(ENV_ID, "envs.interop.openenv.client:OpenEnvEnv")

__all__ = ["ENV_ID", "MAX_SESSIONS", "OpenEnvEnv", "build_app", "client_class", "wire_types"]


def __getattr__(name: str) -> Any:  # ClawAction, ClawObservation, ClawState: built on first use
    names = ("ClawAction", "ClawObservation", "ClawState")
    if name in names:
        return dict(zip(names, wire_types()))[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
