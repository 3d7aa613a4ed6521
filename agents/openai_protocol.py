"""The slice of the OpenAI chat-completions protocol the live server speaks.

Requests are validated here, so every malformed one gets a 4xx with an OpenAI-style
error body (``{"error": {"message", "type", "param", "code"}}``) instead of a traceback.
Fields the server does not use (``user``, ``metadata``, ``stop``, ...) are accepted and
ignored, as OpenAI-compatible servers do. clawgym's session fields (``session_id``,
``turn_type``, ``session_done``) may come in the body instead of headers; they are taken
out before generation.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.policy import Completion
from envs.messages import Message, message_problem


RESPONSE_ONLY_KEYS = frozenset({"refusal", "annotations", "audio", "function_call", "reasoning_content"})


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=8)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    # clawgym's session fields (headers win when both are given)
    session_id: str | None = Field(default=None, max_length=200)
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
                raise ValueError(f"messages[{i}]: {problem}")
        return messages

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, tool in enumerate(tools or []):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type", "function") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}")
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


def parse_request(raw: bytes) -> ChatRequest:
    """Bytes of a POST body -> a validated request, or a 400 that says what is wrong."""
    try:
        payload = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise RequestError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        return ChatRequest.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
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
