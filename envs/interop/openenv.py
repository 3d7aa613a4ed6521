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

import functools
import json
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envs.core import ClawEnv, Opening, StopReason, Transition
from envs.errors import EnvError
from envs.messages import AssistantTurn, Message, tool_schema_problem
from envs.registration import register_with_gymnasium, resolve

if TYPE_CHECKING:
    from fastapi import FastAPI

ENV_ID = "clawgym/OpenEnv-v0"
"""The id :class:`OpenEnvEnv` is registered under (``import envs.interop.openenv`` does it);
the CLI's ``env=envs.interop.openenv:OpenEnv-v0`` imports and resolves it."""
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


def __getattr__(name: str) -> Any:  # ClawAction etc. as module attributes, built lazily
    names = ("ClawAction", "ClawObservation", "ClawState")
    if name in names:
        return dict(zip(names, wire_types()))[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


# ---- any OpenEnv server as a clawgym env ----------------------------------------------------
@dataclass
class _Reply:
    observation: dict[str, Any]
    reward: float
    done: bool


class OpenEnvEnv(ClawEnv):
    """An OpenEnv environment server, played as a clawgym env over one WebSocket session.

    ## Description
    Connects to the OpenEnv server at ``url`` on the first reset and keeps that session
    (one env on the server) until ``close``. A clawgym server (``python -m
    envs.interop.openenv serve``) is mirrored exactly; any other OpenEnv server is driven
    through one ``step`` tool (see the module docstring).

    ## Observation
    A clawgym server's messages as they are. Otherwise: reset, a user message holding the
    server's observation as JSON; step, one ``tool`` message per call holding the
    observation it got.

    ## Action
    An assistant message calling the served env's tools (a clawgym server) or ``step``
    with the server's action fields as arguments (any other).

    ## Reward
    The server's: a clawgym server's step reward; otherwise the sum of the rewards of the
    turn's ``step`` calls (None counts 0).

    ## Episode End
    As the clawgym server says (terminated / truncated, stop reason); otherwise ``done``
    terminates (``submitted``). Truncated (``max_turns``) after ``max_turns`` turns: a
    clawgym server's own budget, else the argument. Truncated with ``info["error"]`` when
    the server fails or does not answer within ``timeout_s``.

    ## Arguments
    ``url`` (http(s):// or ws(s):// of the server), ``timeout_s`` (for one reply, default
    300), ``connect_timeout_s`` (default 10), ``max_turns`` (default 20; a clawgym server's
    own replaces it), and the :class:`~envs.core.ClawEnv` arguments.

    ## Version History
    v0: initial version.
    """

    def __init__(self, url: str = "", timeout_s: float = 300.0, connect_timeout_s: float = 10.0,
                 max_turns: int = 20, **kwargs: Any) -> None:
        if not isinstance(url, str) or not url.strip():
            raise ValueError("OpenEnvEnv needs url= (the OpenEnv server, e.g. http://127.0.0.1:8000); "
                             "on the CLI: env_kwargs.url=http://127.0.0.1:8000")
        if not timeout_s > 0 or not connect_timeout_s > 0:
            raise ValueError(f"timeout_s and connect_timeout_s must be > 0, got {timeout_s}, {connect_timeout_s}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.url = url.strip().rstrip("/")
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.default_max_turns = max_turns
        self._client: Any = None
        self._clawgym = False  # the server is a served clawgym env
        self._generic_tools: list[dict[str, Any]] | None = None

    # ---- the session ----------------------------------------------------------------------
    def _session(self) -> Any:
        if self._client is None:
            from openenv.core import GenericEnvClient

            client = GenericEnvClient(base_url=self.url, connect_timeout_s=self.connect_timeout_s,
                                      message_timeout_s=self.timeout_s).sync()
            try:
                client.connect()
            except Exception as exc:
                _close_quietly(client)
                raise EnvError(f"no OpenEnv server answers at {self.url} ({exc}); start one (e.g. "
                               "python -m envs.interop.openenv serve env=guess port=8000) or fix "
                               "env_kwargs.url") from None
            self._client = client
        return self._client

    def _drop_session(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            _close_quietly(client)

    def _call(self, what: str, send: Any) -> _Reply:
        """One request over the session: its reply, or an EnvError (the session dropped)."""
        try:
            result = send(self._session())
        except EnvError:
            raise
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            if not message.startswith("Server error: "):  # not the server's answer: a reply lost
                self._drop_session()                      # or late leaves the stream out of step
            if isinstance(exc, TimeoutError):
                message = f"no reply within timeout_s={self.timeout_s:g}"
            elif type(exc).__name__.startswith("ConnectionClosed"):  # websockets' own
                message = (f"it closed the session ({message}); a server running its max_sessions "
                           "closes a new one at once")
            raise _server_error(what, self.url, message) from None
        reward = 0.0 if result.reward is None else result.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            self._drop_session()
            raise EnvError(f"the OpenEnv server at {self.url} gave a reward that is not a finite "
                           f"number: {reward!r:.80}")
        observation = result.observation if isinstance(result.observation, dict) else {}
        return _Reply(observation, float(reward), bool(result.done))

    # ---- the contract ---------------------------------------------------------------------
    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        request: dict[str, Any] = {"seed": int(self.np_random.integers(2**31 - 1))}
        if task_id is not None:
            request["task_id"] = task_id
        if options:
            request["options"] = options
        reply = self._call("reset", lambda client: client.reset(**request))
        observation = reply.observation
        self._clawgym = {"messages", "info", "terminated", "truncated"} <= set(observation)
        if self._clawgym:
            return self._open_clawgym(observation)
        self._offer(self._step_tool())
        self.max_turns = self.default_max_turns
        text = json.dumps(observation, ensure_ascii=False)
        return Opening([{"role": "user", "content": f"The environment's first observation:\n{text}"}],
                       task_id=task_id or f"seed-{request['seed']}")

    def _open_clawgym(self, observation: dict[str, Any]) -> Opening:
        info = dict(observation["info"]) if isinstance(observation["info"], dict) else {}
        tools, task_id = info.pop("tools", None), info.pop("task_id", None)
        problems = [tool_schema_problem(t) for t in tools] if isinstance(tools, list) else ["no tool list"]
        if not isinstance(task_id, str) or not task_id or any(problems):
            self._drop_session()
            raise EnvError(f"the OpenEnv server at {self.url} sent a clawgym opening without a task "
                           f"id or with bad tools ({next(filter(None, problems), 'no task_id')})")
        self._offer(tools)
        max_turns = observation.get("max_turns")
        self.max_turns = max_turns if isinstance(max_turns, int) and max_turns >= 1 else self.default_max_turns
        return Opening(list(observation["messages"]), task_id=task_id, info=info)

    def _offer(self, tools: list[dict[str, Any]]) -> None:
        """Make ``tools`` the ones offered, changing the action space in place (its random
        state, seeded by checkers, carries over), as the tool-call env does."""
        self.tools = [dict(t) for t in tools]
        self.action_space.tools = [dict(t) for t in tools]
        self.action_space.tool_names = frozenset(t["function"]["name"] for t in tools)

    def _step_tool(self) -> list[dict[str, Any]]:
        """The ``step`` tool of a non-clawgym server: its action schema (``/schema``) as the
        parameters, fetched once per env."""
        if self._generic_tools is None:
            schema = _fetch_json(f"{_http_url(self.url)}/schema", self.connect_timeout_s).get("action")
            if not isinstance(schema, dict):
                raise EnvError(f"the OpenEnv server at {self.url} has no action schema at /schema")
            parameters = {k: v for k, v in schema.items() if k not in ("title", "description")}
            parameters["type"] = "object"
            properties = dict(parameters.get("properties") or {})
            properties.pop("metadata", None)  # OpenEnv's base Action field, not the env's
            parameters["properties"] = properties
            described = schema.get("description") or "Take one action in the environment."
            self._generic_tools = [{"type": "function", "function": {
                "name": "step", "description": f"{described} Arguments: the action's fields.",
                "parameters": parameters}}]
        return self._generic_tools

    def _act(self, turn: AssistantTurn) -> Transition:
        if self._clawgym:
            return self._act_clawgym(turn)
        if not turn.tool_calls:
            return Transition([{"role": "user", "content": "Call the `step` tool with the action's fields."}],
                              metrics={"invalid_action": 1.0})
        replies: list[Message] = []
        reward, stop, refused = 0.0, None, 0
        for call in turn.tool_calls:
            if stop is not None:
                replies.append({"role": "tool", "tool_call_id": call.id,
                                "content": "Not run: the episode ended with an earlier call."})
                continue
            try:
                reply = self._call("step", lambda client, a=call.arguments: client.step(a))
            except EnvError as exc:
                if "VALIDATION_ERROR" not in str(exc):
                    raise
                refused += 1  # the server's schema refused the arguments: the agent's mistake
                replies.append({"role": "tool", "tool_call_id": call.id, "content": f"Refused: {exc}"})
                continue
            reward += reply.reward
            stop = StopReason.SUBMITTED if reply.done else None
            replies.append({"role": "tool", "tool_call_id": call.id,
                            "content": json.dumps(reply.observation, ensure_ascii=False)})
        return Transition(replies, reward=reward, stop=stop,
                          metrics={"invalid_action": float(refused > 0)})

    def _act_clawgym(self, turn: AssistantTurn) -> Transition:
        reply = self._call("step", lambda client: client.step({"message": turn.message}))
        observation = reply.observation
        info = dict(observation.get("info") or {})
        stop_reason = info.pop("stop_reason", None)
        try:
            stop = StopReason(stop_reason) if stop_reason is not None else None
        except ValueError:
            self._drop_session()
            raise EnvError(f"the OpenEnv server at {self.url} sent an unknown stop_reason "
                           f"{stop_reason!r:.60}") from None
        if stop is None and (observation.get("terminated") or observation.get("truncated")):
            stop = StopReason.ERROR  # an ended episode must say why
        metrics = info.pop("metrics", None) or {}
        next_state = info.pop("next_state", None)
        info.pop("task_id", None)
        return Transition(list(observation.get("messages") or []), reward=reply.reward, stop=stop,
                          next_state=next_state if isinstance(next_state, str) else None,
                          metrics={k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
                          info=info)

    def _shutdown(self) -> None:
        self._drop_session()

    def __getstate__(self) -> dict[str, Any]:  # a live session does not travel
        state = dict(self.__dict__)
        state["_client"] = None
        return state


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # the session is being dropped because it failed: nothing to save
        pass


def _server_error(what: str, url: str, message: str) -> Exception:
    """The exception a failed request becomes: a ValueError the served env raised on reset
    stays one (a task that does not exist is the caller's mistake); the rest are EnvErrors."""
    message = message.removeprefix("Server error: ")
    if what == "reset" and message.startswith("ValueError: "):
        return ValueError(message.removeprefix("ValueError: ").rsplit(" (code: ", 1)[0])
    if "CAPACITY_REACHED" in message:
        return EnvError(f"the OpenEnv server at {url} runs as many sessions as it allows ({message}); "
                        "close other clients or serve with a larger max_sessions=")
    return EnvError(f"the OpenEnv server at {url} failed on {what}: {message}")


def _http_url(url: str) -> str:
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(ws):
            return http + url[len(ws):]
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


def _fetch_json(url: str, timeout_s: float) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            payload = json.loads(response.read(1 << 22).decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EnvError(f"could not read {url} ({exc}); is an OpenEnv server running there?") from None
    if not isinstance(payload, dict):
        raise EnvError(f"{url} did not return a JSON object")
    return payload


register_with_gymnasium(ENV_ID, "envs.interop.openenv:OpenEnvEnv")


# ---- the CLI --------------------------------------------------------------------------------
USAGE = """usage: python -m envs.interop.openenv serve env=<alias or id> [port=8000] [host=127.0.0.1]
                                       [max_sessions=8] [idle_timeout_s=none] [env_kwargs.<name>=<value>]"""


def parse_serve_args(argv: list[str]) -> dict[str, Any]:
    """``key=value`` arguments of ``serve`` -> keyword arguments (``env_kwargs.<name>`` values
    are JSON when they parse, as in ``trainers.run``)."""
    settings: dict[str, Any] = {"port": 8000, "host": "127.0.0.1", "max_sessions": MAX_SESSIONS,
                                "idle_timeout_s": None, "env_kwargs": {}}
    for item in argv:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"argument {item!r} must look like key=value (e.g. env=guess)")
        if key.startswith("env_kwargs."):
            try:
                settings["env_kwargs"][key.removeprefix("env_kwargs.")] = json.loads(raw)
            except json.JSONDecodeError:
                settings["env_kwargs"][key.removeprefix("env_kwargs.")] = raw
        elif key == "env" or key == "host":
            settings[key] = raw
        elif key in ("port", "max_sessions"):
            try:
                settings[key] = int(raw)
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer") from None
        elif key == "idle_timeout_s":
            try:
                settings[key] = None if raw.lower() in ("none", "") else float(raw)
            except ValueError:
                raise ValueError(f"idle_timeout_s={raw!r} is not a number (or none)") from None
        else:
            raise ValueError(f"unknown key {key!r}; keys: env, port, host, max_sessions, "
                             "idle_timeout_s, env_kwargs.<name>")
    if "env" not in settings:
        raise ValueError("env= is required (an alias or id: `python -m envs list`)")
    return settings


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "serve":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        settings = parse_serve_args(args[1:])
        host, port = settings.pop("host"), settings.pop("port")
        env = settings.pop("env")
        app = build_app(env, **settings)
    except (ValueError, KeyError, ImportError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    import uvicorn

    print(f"serving {resolve(env)} as an OpenEnv server on http://{host}:{port} (sessions over /ws, "
          f"at most {settings['max_sessions']})", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
