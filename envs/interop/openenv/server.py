"""The serving half of :mod:`envs.interop.openenv`: openenv-core's wire types for a clawgym env,
the env behind OpenEnv's ``Environment`` interface (one per session), the server app, and a
typed OpenEnv client for it. openenv-core is imported on first use."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from envs.registration import resolve

if TYPE_CHECKING:
    from fastapi import FastAPI

MAX_SESSIONS = 8
"""Sessions a server runs at once unless told otherwise: each holds a live env (a sandbox,
a browser)."""
_RESET_KEYS = ("seed", "episode_id", "task_id", "options")
_NEEDS = "pip install -e '.[openenv]' (openenv-core==0.3.0)"


def _openenv() -> Any:
    """openenv-core's server types, or an ImportError that says how to install them."""
    try:
        from openenv.core import env_server
    except ImportError as exc:
        raise ImportError(f"envs.interop.openenv needs openenv-core: {_NEEDS} ({exc})") from None
    return env_server


def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON (an env's info may hold numpy scalars or paths: their repr)."""
    return json.loads(json.dumps(value, default=repr))


# ---- the wire types and the served env ------------------------------------------------------
@functools.cache
def wire_types() -> tuple[type, type, type]:
    """``(ClawAction, ClawObservation, ClawState)``: openenv-core's pydantic models for a
    served clawgym env, defined on first use so that importing this module needs no openenv."""
    from pydantic import Field

    env_server = _openenv()

    class ClawAction(env_server.Action):
        """One assistant message (text and/or ``tool_calls``) or a plain string to parse."""

        message: Any = Field(description="one assistant message (OpenAI chat format) or a plain "
                                         "string; a malformed one is the agent's mistake")

    class ClawObservation(env_server.Observation):
        """What a clawgym env's reset or step returned."""

        messages: list[dict[str, Any]] = Field(default_factory=list,
                                               description="the new messages (reset: the opening)")
        info: dict[str, Any] = Field(default_factory=dict, description="the step's info: task_id, "
                                     "tools (reset), next_state, metrics, stop_reason, error, ...")
        terminated: bool = Field(default=False, description="the task ended by itself")
        truncated: bool = Field(default=False, description="a budget ran out or infrastructure failed")
        max_turns: int | None = Field(default=None, description="the env's turn budget (reset only)")

    class ClawState(env_server.State):
        """The session's env and task."""

        env_id: str = ""
        task_id: str | None = None

    return ClawAction, ClawObservation, ClawState


@functools.cache
def _served_env_class() -> type:
    env_server = _openenv()
    ClawAction, ClawObservation, ClawState = wire_types()

    class ServedEnv(env_server.Environment):
        """One clawgym env behind OpenEnv's ``Environment`` interface (one per session)."""

        SUPPORTS_CONCURRENT_SESSIONS = True  # every session makes an env of its own

        def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
            super().__init__()
            import envs

            self.env_id = env_id
            self.env = envs.make(env_id, **env_kwargs)
            self._state = ClawState(env_id=env_id)

        def reset(self, seed: int | None = None, episode_id: str | None = None,
                  task_id: str | None = None, options: dict[str, Any] | None = None,
                  **unknown: Any) -> Any:
            if unknown:
                raise ValueError(f"ValueError: reset takes {', '.join(_RESET_KEYS)}; got "
                                 f"{', '.join(sorted(unknown))}")
            options = dict(options) if isinstance(options, dict) else options
            if task_id is not None:
                options = {**(options or {}), "task_id": task_id}
            try:
                obs, info = self.env.reset(seed=seed, options=options)
            except Exception as exc:  # the client reads the kind: ValueError is the caller's
                kind = "ValueError" if isinstance(exc, ValueError) else type(exc).__name__
                raise RuntimeError(f"{kind}: {exc}") from exc
            self._state = ClawState(env_id=self.env_id, episode_id=episode_id, step_count=0,
                                    task_id=info.get("task_id"))
            return ClawObservation(messages=_json_safe(obs), info=_json_safe(info),
                                   max_turns=getattr(self.env.unwrapped, "max_turns", None))

        def step(self, action: Any, timeout_s: float | None = None, **_: Any) -> Any:
            try:
                obs, reward, terminated, truncated, info = self.env.step(action.message)
            except Exception as exc:
                raise RuntimeError(f"{type(exc).__name__}: {exc}") from exc
            self._state.step_count += 1
            return ClawObservation(messages=_json_safe(obs), info=_json_safe(info), reward=reward,
                                   done=terminated or truncated, terminated=terminated,
                                   truncated=truncated)

        @property
        def state(self) -> Any:
            return self._state

        def get_metadata(self) -> Any:
            from envs.registration import entries

            described = {e.env_id: e.description for e in entries()}
            return env_server.types.EnvironmentMetadata(
                name=self.env_id, description=described.get(self.env_id, "a clawgym env"))

        def close(self) -> None:
            self.env.close()

    return ServedEnv


def build_app(env: str, env_kwargs: dict[str, Any] | None = None, *, max_sessions: int = MAX_SESSIONS,
              idle_timeout_s: float | None = None) -> FastAPI:
    """The OpenEnv server app for clawgym env ``env`` (an alias or id), ready for uvicorn.

    ``env_kwargs`` go to every session's env. At most ``max_sessions`` sessions at once;
    ``idle_timeout_s`` closes a session that sent nothing for that long (None: only when
    its WebSocket closes)."""
    from fastapi import FastAPI

    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be > 0 or None, got {idle_timeout_s!r}")
    env_server = _openenv()
    env_id = resolve(env)
    kwargs = dict(env_kwargs or {})
    import envs

    envs.make(env_id, **kwargs).close()  # a bad env_kwargs fails here, not in every session
    ClawAction, ClawObservation, _ = wire_types()
    server = env_server.HTTPEnvServer(
        functools.partial(_served_env_class(), env_id, kwargs), ClawAction, ClawObservation,
        concurrency_config=env_server.ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                        session_timeout=idle_timeout_s))
    app = FastAPI(title=f"clawgym {env_id} (OpenEnv)",
                  description="A clawgym env as an OpenEnv server: sessions over /ws.")
    server.register_routes(app, mode=env_server.ServerMode.PRODUCTION)
    app.add_middleware(_QuietDisconnects)
    return app


class _QuietDisconnects:
    """openenv-core 0.3.0's ``/ws`` handler closes the socket after the client already did
    (its ``close`` message, then the client's own close), and the ``WebSocketDisconnect``
    that raises reaches uvicorn, which logs a traceback for every session that ended well."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


# ---- a typed OpenEnv client for served clawgym envs -----------------------------------------
def client_class() -> type:
    """``ClawEnvClient``: an OpenEnv ``EnvClient`` for a served clawgym env, as OpenEnv's own
    env packages ship one (``EchoEnv``). ``step`` takes an assistant message (a dict or a
    string) or a ``ClawAction``; results carry a ``ClawObservation``."""
    from openenv.core import EnvClient
    from openenv.core.client_types import StepResult

    ClawAction, ClawObservation, ClawState = wire_types()

    class ClawEnvClient(EnvClient):
        def _step_payload(self, action: Any) -> dict[str, Any]:
            if isinstance(action, ClawAction):
                return action.model_dump(exclude={"metadata"})
            return {"message": action}

        def _parse_result(self, payload: dict[str, Any]) -> Any:
            observation = ClawObservation.model_validate(
                {**payload.get("observation", {}), "reward": payload.get("reward"),
                 "done": payload.get("done", False)})
            return StepResult(observation=observation, reward=payload.get("reward"),
                              done=payload.get("done", False))

        def _parse_state(self, payload: dict[str, Any]) -> Any:
            return ClawState.model_validate(payload)

    return ClawEnvClient
