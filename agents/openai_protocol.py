"""The slice of the OpenAI chat-completions protocol the live server speaks.

Requests are validated here, so every malformed one gets a 4xx with an OpenAI-style
error body (``{"error": {"message", "type", "param", "code"}}``) instead of a traceback.
The body is decoded with :func:`envs.messages.parse_json` (bounded nesting and integer
size, no NaN, no lone surrogates), tool schemas and the tool-call arguments a client
sends back are checked too, and ``param`` names the field at fault as precisely as it
can (``tools[0].function.parameters``).
Fields the server does not use (``user``, ``metadata``, ``stop``, ...) are accepted and
ignored, as OpenAI-compatible servers do. clawgym's session fields (``session_id``,
``turn_type``, ``session_done``) may come in the body instead of headers; they are taken
out before generation.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.policy import Completion
from envs.messages import MAX_JSON_DEPTH, Message, message_problem, parse_json


RESPONSE_ONLY_KEYS = frozenset({"refusal", "annotations", "audio", "function_call", "reasoning_content"})

MAX_SESSION_ID = 200
"""Longest session id accepted, from the X-Session-Id header or the session_id field."""


def _text(value: str, limit: int) -> str:
    """Safe to put in a JSON reply and the record: UTF-8 encodable (a lone surrogate from a
    client would break both) and at most ``limit`` characters."""
    value = value if len(value) <= limit else value[: limit - 3] + "..."
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        message = _text(message, 2000)
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = None if param is None else _text(param, 200)
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class FieldError(ValueError):
    """A validator's complaint about a part of a field, naming it (``param``) precisely."""

    def __init__(self, param: str, problem: str) -> None:
        super().__init__(f"{param}: {problem}")
        self.param = param


MAX_LIMIT = 2**31 - 1
"""The largest ``max_tokens`` / ``max_completion_tokens`` taken (int32's)."""


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # above the room left in the context a limit is cut to that room; past MAX_LIMIT (say, a
    # 4000-digit number, which JSON parses) it is no limit a client meant, and is refused
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    n: int = Field(default=1, ge=1, le=8)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    # clawgym's session fields (headers win when both are given)
    session_id: str | None = Field(default=None, max_length=MAX_SESSION_ID)
    turn_type: str | None = None
    session_done: bool | None = None

    @field_validator("messages")
    @classmethod
    def _messages(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Clients echo response messages back with fields only responses carry.
        messages = [{k: v for k, v in m.items() if k not in RESPONSE_ONLY_KEYS and
                     (v is not None or k in ("role", "content"))} if isinstance(m, dict) else m
                    for m in messages]
        for i, message in enumerate(messages):
            problem = message_problem(message, ("system", "developer", "user", "assistant", "tool"))
            if problem:
                raise FieldError(f"messages[{i}]", problem)
            for j, call in enumerate(message.get("tool_calls") or []):  # shapes checked by message_problem
                arguments = call.get("function", {}).get("arguments")
                if isinstance(arguments, str):
                    _check_arguments(arguments, f"messages[{i}].tool_calls[{j}].function.arguments")
        return messages

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, tool in enumerate(tools or []):
            _check_tool(tool, f"tools[{i}]")
        return tools

    @field_validator("turn_type")
    @classmethod
    def _turn_type(cls, value: str | None) -> str | None:
        if value is not None and value not in ("main", "side"):
            raise ValueError("turn_type must be 'main' or 'side'")
        return value

    def chat_messages(self) -> list[Message]:
        """The messages as the policy sees them (``developer`` is OpenAI's newer ``system``)."""
        return [{**m, "role": "system"} if m.get("role") == "developer" else dict(m) for m in self.messages]

    def completion_limit(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default


def _check_arguments(arguments: str, param: str) -> None:
    """Tool-call arguments a client sends back: text that is not JSON is kept as written
    (a model may have written it), but JSON that later code cannot handle safely (too
    deep, a huge integer, NaN, a lone surrogate) is refused."""
    try:
        parse_json(arguments)
    except json.JSONDecodeError:
        pass
    except ValueError as exc:
        raise FieldError(param, str(exc)) from None


def _check_tool(tool: dict[str, Any], param: str) -> None:
    """An OpenAI function tool: ``{"type": "function", "function": {"name", "description",
    "parameters": <JSON Schema of an object>}}``."""
    if tool.get("type", "function") != "function":
        raise FieldError(f"{param}.type", f"must be 'function', got {tool.get('type')!r:.40}")
    fn = tool.get("function")
    if not isinstance(fn, dict):
        raise FieldError(f"{param}.function", "must be an object with a name (and description, parameters)")
    if not isinstance(fn.get("name"), str) or not fn["name"].strip():
        raise FieldError(f"{param}.function.name", "must be a non-empty string")
    if fn.get("description") is not None and not isinstance(fn["description"], str):
        raise FieldError(f"{param}.function.description", "must be a string")
    if "parameters" not in fn:
        return
    params = fn["parameters"]
    where = f"{param}.function.parameters"
    if not isinstance(params, dict):
        raise FieldError(where, f"must be a JSON Schema object, got {_kind(params)}")
    if params.get("type", "object") != "object":
        raise FieldError(f"{where}.type", f"must be 'object', got {params.get('type')!r:.40}")
    properties = params.get("properties", {})
    if not isinstance(properties, dict):
        raise FieldError(f"{where}.properties", f"must be an object mapping names to schemas, got {_kind(properties)}")
    for name, schema in properties.items():
        if not isinstance(schema, dict):
            raise FieldError(f"{where}.properties.{name:.40}", f"must be a JSON Schema object, got {_kind(schema)}")
    required = params.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise FieldError(f"{where}.required", "must be a list of property names")


def _kind(value: object) -> str:
    return "null" if value is None else {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__)


_SPACE = re.compile(r"[ \t\n\r]*")


def _field_at_fault(text: str) -> str | None:
    """The top-level field of a JSON object that :func:`parse_json` refuses, when the
    object is well-formed enough to walk (only called on that error path)."""
    decoder = json.JSONDecoder()
    i = _SPACE.match(text).end()
    if text[i : i + 1] != "{":
        return None
    i = _SPACE.match(text, i + 1).end()
    while text[i : i + 1] == '"':
        try:
            key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        except ValueError:
            return None
        i = _SPACE.match(text, i).end()
        if text[i : i + 1] != ":":
            return None
        i = _SPACE.match(text, i + 1).end()
        try:
            _, end = decoder.raw_decode(text, i)
            parse_json(text[i:end], max_depth=MAX_JSON_DEPTH - 1)
        except (RecursionError, ValueError):
            return key
        i = _SPACE.match(text, end).end()
        if text[i : i + 1] != ",":
            return None
        i = _SPACE.match(text, i + 1).end()
    return None


def parse_request(raw: bytes) -> ChatRequest:
    """Bytes of a POST body -> a validated request, or a 400 that says what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(400, f"the request body is not UTF-8 text ({exc.reason} at byte {exc.start})",
                           code="invalid_json") from None
    try:
        payload = parse_json(text)
    except ValueError as exc:
        param = None if isinstance(exc, json.JSONDecodeError) else _field_at_fault(text)
        where = f"the request body's {param!r} field" if param else "the request body"
        raise RequestError(400, f"{where} is not valid JSON: {exc}", param=param, code="invalid_json") from None
    if not isinstance(payload, dict):
        raise RequestError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        return ChatRequest.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            raise RequestError(400, str(cause), param=cause.param, code="invalid_value") from None
        param = ".".join(str(p) for p in first.get("loc", ()))
        message = first.get("msg", "invalid value").removeprefix("Value error, ")
        named = param and not message.startswith(f"{param}[")
        raise RequestError(400, f"{param}: {message}" if named else message, param=param or None,
                           code="invalid_value") from None


def _finish_reason(completion: Completion) -> str:
    if completion.message.get("tool_calls"):
        return "tool_calls"
    return "length" if completion.finish_reason in ("length", "context") else "stop"


def response_message(completion: Completion) -> Message:
    """The reply as OpenAI sends it: content is null only beside tool calls, so a client
    that echoes an empty reply back sends a valid message (``""``)."""
    calls = completion.message.get("tool_calls")
    message: Message = {"role": "assistant", "content": completion.message.get("content") or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def completion_body(request_id: str, model: str, completions: list[Completion], created: int | None = None) -> dict[str, Any]:
    prompt = len(completions[0].prompt_ids) if completions else 0
    generated = sum(len(c.completion_ids) for c in completions)
    return {
        "id": request_id, "object": "chat.completion", "created": created or int(time.time()), "model": model,
        "choices": [{"index": i, "message": response_message(c), "logprobs": None,
                     "finish_reason": _finish_reason(c)} for i, c in enumerate(completions)],
        "usage": {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated},
        "system_fingerprint": f"clawgym-v{completions[0].weight_version if completions else 0}",
    }


def chunk_body(request_id: str, model: str, created: int, index: int, delta: dict[str, Any],
               finish_reason: str | None = None) -> dict[str, Any]:
    return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def final_chunks(request_id: str, model: str, created: int, index: int, completion: Completion,
                 streamed_text: str) -> list[dict[str, Any]]:
    """What is left to stream once a choice is complete: the rest of its text (or, for a
    tool call, the calls themselves) and the chunk with its finish reason."""
    chunks = []
    message = response_message(completion)
    if message.get("tool_calls"):
        calls = [{"index": j, "id": c["id"], "type": "function",
                  "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
                 for j, c in enumerate(message["tool_calls"])]
        delta: dict[str, Any] = {"tool_calls": calls}
        if message.get("content") and not streamed_text:
            delta["content"] = message["content"]
        chunks.append(chunk_body(request_id, model, created, index, delta))
    else:
        text = message.get("content") or ""
        rest = text[len(streamed_text):] if text.startswith(streamed_text) else ""
        if rest:
            chunks.append(chunk_body(request_id, model, created, index, {"content": rest}))
    chunks.append(chunk_body(request_id, model, created, index, {}, _finish_reason(completion)))
    return chunks
