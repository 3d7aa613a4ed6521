"""An OpenAI-compatible HTTP server (FastAPI on uvicorn) in front of a chat backend.

Routes: ``POST /v1/chat/completions`` (JSON, or SSE with ``stream: true``; tool calls in
both), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text). With an
API key configured, ``/v1/*`` needs ``Authorization: Bearer <key>`` (else 401).

With users' keys (``keys``: key -> :class:`Caller`) a request's key names its user, and
nothing in the request can name another; without them the user is whatever ``X-User-Id``
(or the body's ``user``) says, unauthenticated. ``GET /v1/users/<id>/export`` (that user's
own key, or an admin's) and ``DELETE /v1/users/<id>`` (an admin's key only) reach a
backend's per-user record.

The server knows nothing about learning: a :class:`ChatBackend` prepares each request
(session, turn type, prompt ids), generates through its batching generator, and records
the turn durably; the reply leaves only after ``record`` returns. A client that leaves
before its reply (closes or resets the connection) has its request ``abandon``-ed: the
generation stops at the next decode step and the turn is recorded as never delivered.
Every refusal is a 4xx with an OpenAI-style error body, recorded by the backend, and the
server keeps serving; anything unexpected is a 500 with the same body (and a logged
traceback), never a plain-text page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from agents.openai_protocol import (MAX_SESSION_ID, ChatRequest, RequestError, chunk_body, completion_body,
                                    final_chunks, parse_request)
from agents.policy import Completion

log = logging.getLogger("clawgym.server")


@dataclass(frozen=True)
class Caller:
    """Who a users' key belongs to."""

    user: str
    admin: bool = False


@dataclass(frozen=True)
class TurnHeaders:
    """clawgym's session headers, as sent (None when absent)."""

    session_id: str | None
    turn_type: str | None
    session_done: bool | None
    user_id: str | None = None
    """The request's user: its key's, else ``X-User-Id`` (None: the body's ``user`` decides)."""

    @classmethod
    def read(cls, headers: Any) -> TurnHeaders:
        done = headers.get("x-session-done")
        turn_type = headers.get("x-turn-type")
        session_id = headers.get("x-session-id") or None
        if turn_type is not None and turn_type.lower() not in ("main", "side"):
            raise RequestError(400, f"X-Turn-Type must be 'main' or 'side', got {turn_type[:40]!r}",
                               param="X-Turn-Type", code="invalid_value")
        if done is not None and done.lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise RequestError(400, f"X-Session-Done must be true or false, got {done[:40]!r}",
                               param="X-Session-Done", code="invalid_value")
        if session_id is not None and len(session_id) > MAX_SESSION_ID:
            raise RequestError(400, f"X-Session-Id is {len(session_id)} characters long; the limit is "
                                    f"{MAX_SESSION_ID}", param="X-Session-Id", code="invalid_value")
        return cls(session_id, turn_type.lower() if turn_type else None,
                   None if done is None else done.lower() in ("1", "true", "yes"), headers.get("x-user-id") or None)


class PreparedTurn(Protocol):
    request_id: str
    prompt_ids: list[int]
    model: str
    n: int
    has_tools: bool


class ChatBackend(Protocol):
    model_ids: list[str]

    def prepare(self, request: ChatRequest, headers: TurnHeaders) -> PreparedTurn: ...

    def submit(self, turn: PreparedTurn, index: int, on_token: Any | None = None) -> Future[Completion]: ...

    def record(self, turn: PreparedTurn, completions: list[Completion]) -> None: ...

    def abandon(self, turn: PreparedTurn) -> None:
        """The client left before its reply: stop its generations, record it undelivered.
        Must return at once (it runs where the server cannot wait)."""
        ...

    def reject(self, error: RequestError) -> None: ...

    def decode(self, token_ids: list[int]) -> str: ...

    def metrics_text(self) -> str: ...

    def health(self) -> dict[str, Any]: ...

    def export_user(self, user: str) -> dict[str, Any]:
        """Everything kept about ``user`` (a RequestError where there are no users)."""
        ...

    def delete_user(self, user: str) -> dict[str, Any]:
        """Remove everything kept about ``user``: turns, scores, adapter."""
        ...


def create_app(backend: ChatBackend, *, api_key: str = "", max_body_bytes: int = 4 << 20,
               keys: dict[str, Caller] | None = None) -> FastAPI:
    """The app; ``keys`` (users' keys) replaces ``api_key`` when given."""
    app = FastAPI(title="clawgym live server", docs_url=None, redoc_url=None)

    def refuse(error: RequestError) -> JSONResponse:
        backend.reject(error)
        return JSONResponse(error.body(), status_code=error.status)

    def check_auth(request: Request) -> Caller | None:
        """The caller a users' key names (None without users' keys); a 401 for a bad key."""
        if not api_key and keys is None:
            return None
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        if keys is not None:
            # every key compared, in constant time each: which one matched is not timed
            found = [caller for key, caller in keys.items() if hmac.compare_digest(token.encode(), key.encode())]
            if token and found:
                return found[0]
        elif hmac.compare_digest(token.encode(), api_key.encode()):
            return None
        raise RequestError(401, "missing or wrong API key: send Authorization: Bearer <key>",
                           type="authentication_error", code="invalid_api_key")

    def check_user(request: Request, user: str, delete: bool) -> None:
        caller = check_auth(request)
        allowed = caller is not None and (caller.admin or (caller.user == user and not delete))
        if not allowed:
            what = "delete a user" if delete else "export another user's record"
            raise RequestError(403, f"only an admin key (api_keys) may {what}", type="permission_error",
                               code="permission_denied")

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > max_body_bytes:
            raise RequestError(413, f"the request body is {declared} bytes; the limit is {max_body_bytes}",
                               code="request_too_large")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > max_body_bytes:
                    raise RequestError(413, f"the request body is over the {max_body_bytes}-byte limit",
                                       code="request_too_large")
        except ClientDisconnect:
            raise RequestError(400, "the client closed the connection before sending its whole body",
                               code="incomplete_body") from None
        return bytes(body)

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> JSONResponse:
        return refuse(exc)

    @app.exception_handler(404)
    async def _not_found(request: Request, _: Exception) -> JSONResponse:
        return refuse(RequestError(404, f"no route {request.method} {request.url.path}", code="not_found"))

    @app.exception_handler(405)
    async def _bad_method(request: Request, _: Exception) -> JSONResponse:
        return refuse(RequestError(405, f"{request.method} is not allowed on {request.url.path}",
                                   code="method_not_allowed"))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The last line of defence: a request must never meet a plain-text 500. Starlette
        # re-raises after this reply, so uvicorn logs the traceback too.
        log.error("unexpected %s on %s %s", type(exc).__name__, request.method, request.url.path)
        error = RequestError(500, f"the server failed on this request ({type(exc).__name__}); "
                                  "its log has the traceback", type="server_error", code="internal_error")
        return JSONResponse(error.body(), status_code=500)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", **backend.health()}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(backend.metrics_text(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        check_auth(request)
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "clawgym"}
                                           for m in backend.model_ids]}

    @app.get("/v1/users/{user}/export")
    async def export_user(request: Request, user: str) -> Any:
        check_user(request, user, delete=False)
        return await asyncio.to_thread(backend.export_user, user)

    @app.delete("/v1/users/{user}")
    async def delete_user(request: Request, user: str) -> Any:
        check_user(request, user, delete=True)
        return await asyncio.to_thread(backend.delete_user, user)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Any:
        caller = check_auth(request)
        headers = TurnHeaders.read(request.headers)
        if caller is not None:  # the key's user, whatever the request says
            headers = dataclasses.replace(headers, user_id=caller.user)
        chat = await asyncio.to_thread(parse_request, await read_body(request))
        turn = await asyncio.to_thread(backend.prepare, chat, headers)
        if chat.stream:
            return _EventStream(_stream(backend, turn, chat), media_type="text/event-stream",
                                headers={"Cache-Control": "no-cache"})
        answered = asyncio.gather(*(asyncio.wrap_future(backend.submit(turn, i)) for i in range(turn.n)))
        left = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({answered, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if not answered.done():  # nobody will read the reply: stop generating it
            backend.abandon(turn)
            answered.add_done_callback(_quiet)
            return Response(status_code=499)  # nginx's "client closed request"; no one receives it
        completions = list(answered.result())
        await asyncio.to_thread(backend.record, turn, completions)
        return completion_body(turn.request_id, turn.model, completions)

    return app


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (its request body is already read, so the next
    ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _quiet(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: an abandoned turn's failure is nobody's to report


class _EventStream(StreamingResponse):
    """A StreamingResponse that always closes its generator when the response ends, so
    the generator's ``finally`` runs at once when the client leaves mid-stream (Starlette
    cancels the send loop and would leave closing it to the garbage collector)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _stream(backend: ChatBackend, turn: PreparedTurn, chat: ChatRequest) -> AsyncIterator[str]:
    """SSE: text is forwarded token by token as it is sampled; a reply with tools is sent
    when complete (whether it is a tool call is only known at its end). A client that
    leaves before the turn is recorded has it abandoned."""
    recorded = False
    try:
        async for event in _events(backend, turn, chat):
            if event is None:
                recorded = True  # the record is being written: from here the turn is delivered
                continue
            yield event
    finally:
        if not recorded:
            backend.abandon(turn)


async def _events(backend: ChatBackend, turn: PreparedTurn, chat: ChatRequest) -> AsyncIterator[str | None]:
    """The SSE events of one turn; ``None`` marks the moment the turn is recorded."""
    loop = asyncio.get_running_loop()
    created = int(time.time())
    tokens: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    live = not turn.has_tools

    def push(index: int) -> Any:
        return lambda token: loop.call_soon_threadsafe(tokens.put_nowait, (index, token))

    futures = [asyncio.wrap_future(backend.submit(turn, i, push(i) if live else None)) for i in range(turn.n)]
    for i in range(turn.n):
        yield _sse(chunk_body(turn.request_id, turn.model, created, i, {"role": "assistant", "content": ""}))
    ids: list[list[int]] = [[] for _ in range(turn.n)]
    sent = [""] * turn.n
    pending = asyncio.ensure_future(asyncio.gather(*futures))
    pending.add_done_callback(_quiet)
    while live:
        getter = asyncio.ensure_future(tokens.get())
        try:
            await asyncio.wait({getter, pending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            getter.cancel()
        if not getter.done() or getter.cancelled():
            break
        arrived = [getter.result()]
        while not tokens.empty():
            arrived.append(tokens.get_nowait())
        for index, token in arrived:
            ids[index].append(token)
        for index in {index for index, _ in arrived}:
            text = backend.decode(ids[index]).lstrip()
            if text.endswith("\ufffd") or len(text) <= len(sent[index]) or not text.startswith(sent[index]):
                continue  # half a multi-byte character, or nothing new
            yield _sse(chunk_body(turn.request_id, turn.model, created, index, {"content": text[len(sent[index]):]}))
            sent[index] = text
    try:
        completions = list(await pending)
    except Exception as exc:  # the status line has gone out: report the failure in the stream
        log.exception("generation failed mid-stream")
        yield _sse(RequestError(500, f"generation failed ({type(exc).__name__})", type="server_error",
                                code="internal_error").body())
        return
    yield None
    await asyncio.to_thread(backend.record, turn, completions)
    for index, completion in enumerate(completions):
        for chunk in final_chunks(turn.request_id, turn.model, created, index, completion, sent[index]):
            yield _sse(chunk)
    if (chat.stream_options or {}).get("include_usage"):
        usage = completion_body(turn.request_id, turn.model, completions)["usage"]
        yield _sse({"id": turn.request_id, "object": "chat.completion.chunk", "created": created,
                    "model": turn.model, "choices": [], "usage": usage})
    yield "data: [DONE]\n\n"


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def new_request_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"
