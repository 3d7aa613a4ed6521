"""The consuming half of :mod:`envs.interop.openenv`: any OpenEnv server as a clawgym env."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from envs.core import ClawEnv, Opening, StopReason, Transition
from envs.errors import EnvError
from envs.messages import AssistantTurn, Message, message_problem, tool_schema_problem


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
    through one ``step`` tool (see :mod:`envs.interop.openenv`).

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
        return Opening(self._messages(observation, allow_empty=False), task_id=task_id, info=info)

    def _messages(self, observation: dict[str, Any], allow_empty: bool = True) -> list[Message]:
        """A clawgym server's messages, checked: what it sends goes to a trainer as it is."""
        messages = observation.get("messages")
        problem = ("no message list" if not isinstance(messages, list) or not (messages or allow_empty)
                   else next(filter(None, map(message_problem, messages)), None))
        if problem is not None:
            self._drop_session()
            raise EnvError(f"the OpenEnv server at {self.url} sent a malformed observation: {problem}")
        return messages

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
        return Transition(self._messages(observation), reward=reply.reward, stop=stop,
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
