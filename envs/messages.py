"""Chat messages in the OpenAI format, and turning an agent's action into one.

Every observation and action in clawgym is an OpenAI chat message:
``{"role", "content", "tool_calls", "tool_call_id", "name"}``. Content is a string, or a
list of content parts (``{"type": "text", "text": ...}``, ``{"type": "image_url",
"image_url": {"url": ...}}``) for screenshots. Tool calls carry their arguments as a JSON
*string*, as the OpenAI API does.

An agent may act with a full assistant message or a plain string. A string is parsed the
way small models write tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks (Hermes/Qwen/SmolLM convention) become ``tool_calls``; the text around them is the
content.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
"""One OpenAI chat message. Kept a plain dict: it is what every engine and client speaks."""

ROLES = ("system", "user", "assistant", "tool")
MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})

_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


class InvalidAction(ValueError):
    """An action the env cannot act on. Its message is shown to the agent as feedback."""

    def __init__(self, message: str, tool_call_id: str | None = None) -> None:
        super().__init__(message)
        self.tool_call_id = tool_call_id


@dataclass(frozen=True)
class ToolCall:
    """A tool call with its arguments decoded. ``id`` links the tool's reply to it."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class AssistantTurn:
    """A validated assistant action: what an env's ``_act`` receives."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    message: Message = field(default_factory=dict)
    """The assistant message as it goes into the transcript (tool calls JSON-encoded)."""


def text_of(message: Message) -> str:
    """The text of a message's content, whether it is a string or a list of parts."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def message_problem(message: object, roles: tuple[str, ...] = ROLES) -> str | None:
    """Why ``message`` is not a valid chat message with one of ``roles``; None if it is."""
    if not isinstance(message, dict):
        return f"a message must be a dict, got {type(message).__name__}"
    extra = set(message) - MESSAGE_KEYS
    if extra:
        return f"unknown message keys {sorted(extra)}; allowed: {sorted(MESSAGE_KEYS)}"
    role = message.get("role")
    if role not in roles:
        return f"role must be one of {list(roles)}, got {role!r}"
    problem = _content_problem(message.get("content"), allow_none=role == "assistant")
    if problem:
        return problem
    if "tool_calls" in message and message["tool_calls"] is not None:
        if role != "assistant":
            return "only assistant messages may carry tool_calls"
        problem = _tool_calls_problem(message["tool_calls"])
        if problem:
            return problem
    if role == "assistant" and message.get("content") is None and not message.get("tool_calls"):
        return "an assistant message needs content or tool_calls"
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        return "a tool message needs a string tool_call_id"
    if "name" in message and not isinstance(message["name"], str):
        return "name must be a string"
    return None


def _content_problem(content: object, allow_none: bool) -> str | None:
    if content is None:
        return None if allow_none else "content is missing"
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"content must be a string or a list of parts, got {type(content).__name__}"
    for part in content:
        if not isinstance(part, dict):
            return "each content part must be a dict"
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        if kind == "image_url" and isinstance(part.get("image_url"), dict) \
                and isinstance(part["image_url"].get("url"), str):
            continue
        return f"content part must be text or image_url, got {part!r:.80}"
    return None


def _tool_calls_problem(tool_calls: object) -> str | None:
    if not isinstance(tool_calls, list):
        return "tool_calls must be a list"
    for call in tool_calls:
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            return "each tool call needs a 'function' object"
        if not isinstance(call.get("id"), str):
            return "each tool call needs a string 'id'"
        if call.get("type", "function") != "function":
            return f"tool call type must be 'function', got {call.get('type')!r}"
        fn = call["function"]
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            return "each tool call needs a function name"
        if not isinstance(fn.get("arguments"), str):
            return "tool call arguments must be a JSON string"
    return None


def parse_text_action(text: str, call_id_prefix: str = "call") -> Message:
    """Turn model text into an assistant message, lifting ``<tool_call>`` blocks out.

    A block whose JSON does not parse is kept as a tool call with the raw text as its
    arguments, so the env can tell the agent exactly which call was malformed.
    """
    calls: list[dict[str, Any]] = []
    for i, match in enumerate(_TOOL_CALL_RE.finditer(text)):
        raw = match.group(1)
        name, arguments = "", raw
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError:
            name_match = re.search(r'"name"\s*:\s*"([^"]+)"', raw)
            name = name_match.group(1) if name_match else ""
        else:
            if isinstance(payload, dict):
                name = str(payload.get("name", ""))
                args = payload.get("arguments", payload.get("parameters", {}))
                arguments = args if isinstance(args, str) else json.dumps(args)
        calls.append({"id": f"{call_id_prefix}_{i}", "type": "function",
                      "function": {"name": name or "<missing>", "arguments": arguments}})
    content = _TOOL_CALL_RE.sub("", text).strip() if calls else text
    message: Message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


def to_assistant_turn(action: object, tool_names: frozenset[str] | None,
                      call_id_prefix: str = "call") -> AssistantTurn:
    """Validate an action and decode its tool calls, or raise :class:`InvalidAction`.

    ``tool_names`` is the set the env offers; None means "accept any name".
    """
    if isinstance(action, str):
        message = parse_text_action(action, call_id_prefix)
    elif isinstance(action, dict):
        message = {"role": "assistant", **action}
    else:
        raise InvalidAction(
            f"Invalid action: expected an assistant message (a dict) or a string, "
            f"got {type(action).__name__}.")
    problem = message_problem(message, roles=("assistant",))
    if problem:
        raise InvalidAction(f"Invalid action: {problem}.")
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        if tool_names is not None and fn["name"] not in tool_names:
            raise InvalidAction(
                f"Error: unknown tool {fn['name']!r}; available tools: {sorted(tool_names)}.",
                tool_call_id=call["id"])
        try:
            arguments = json.loads(fn["arguments"]) if fn["arguments"].strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidAction(
                f"Error: the arguments of tool call {fn['name']!r} are not valid JSON "
                f"({exc.msg} at position {exc.pos}). Send a JSON object.",
                tool_call_id=call["id"]) from None
        if not isinstance(arguments, dict):
            raise InvalidAction(
                f"Error: the arguments of tool call {fn['name']!r} must be a JSON object, "
                f"got {type(arguments).__name__}.", tool_call_id=call["id"])
        calls.append(ToolCall(id=call["id"], name=fn["name"], arguments=arguments))
    return AssistantTurn(content=text_of(message), tool_calls=tuple(calls), message=message)


def tool_schema(name: str, description: str, parameters: dict[str, Any],
                required: list[str] | None = None) -> dict[str, Any]:
    """An OpenAI function-tool schema; ``parameters`` maps argument name -> JSON schema."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": parameters,
                           "required": list(parameters) if required is None else required},
        },
    }


def tool_schema_problem(schema: object) -> str | None:
    """Why ``schema`` is not an OpenAI function-tool schema; None if it is."""
    if not isinstance(schema, dict) or schema.get("type") != "function":
        return "a tool schema must be a dict with type 'function'"
    fn = schema.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        return "a tool schema needs function.name"
    params = fn.get("parameters", {"type": "object"})
    if not isinstance(params, dict) or params.get("type") != "object":
        return f"tool {fn['name']!r}: parameters must be a JSON schema of type 'object'"
    return None
