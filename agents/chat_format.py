"""Messages -> the exact text a model's chat template expects, tools included.

Small models' templates (SmolLM2's among them) take string content only and ignore
``tools``. So before templating, tool calls are written back as the
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` text the model is asked to
produce, content parts are joined, and the tool schemas are described in the system
message. A template that does handle ``tools`` natively gets them passed through instead.
"""

from __future__ import annotations

import json
from typing import Any

from envs.messages import Message, parse_json, text_of

TOOL_INSTRUCTIONS = (
    "You can call these tools. To call one, write its name and its arguments as a JSON object "
    "in a tool_call tag, for example\n{example}\nand wait for its result.\nTools:\n{tools}"
)
"""The system-prompt block. The example is a real call of the first tool with well-typed
values: small models copy an instruction's example literally, and a placeholder such as
``{<arguments as JSON>}`` (the old text) came back verbatim as an invalid call."""

_EXAMPLE_VALUES: dict[str, Any] = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {},
                                   "string": "text"}


def _type_name(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "any"
    if isinstance(spec.get("enum"), list):
        return "|".join(json.dumps(v) for v in spec["enum"])
    kind = spec.get("type", "any")
    if isinstance(kind, list):
        kind = "|".join(str(k) for k in kind)
    if kind == "array" and isinstance(spec.get("items"), dict):
        return f"array of {_type_name(spec['items'])}"
    return str(kind)


def _example_value(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return "text"
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        return spec["enum"][0]
    if "default" in spec and spec["default"] is not None:
        return spec["default"]
    kind = spec.get("type")
    if isinstance(kind, list):  # ["integer", "null"]: the first; a client's schema may be anything
        kind = kind[0] if kind else None
    return _EXAMPLE_VALUES.get(kind, "text") if isinstance(kind, str) else "text"


def example_call(schema: dict[str, Any]) -> str:
    """``<tool_call>...</tool_call>`` calling ``schema``'s function with its required arguments
    (its first one when none is required)."""
    fn = schema["function"]
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    names = [k for k in params.get("required") or [] if k in props] or list(props)[:1]
    arguments = {k: _example_value(props[k]) for k in names}
    return f"<tool_call>{json.dumps({'name': fn['name'], 'arguments': arguments})}</tool_call>"


def describe_tools(tools: list[dict[str, Any]]) -> str:
    """One line per tool, ``name(arg: type, optional?: type): description``, then an
    indented line per argument that has a description, allowed values or a default."""
    lines = []
    for schema in tools:
        fn = schema["function"]
        params = fn.get("parameters") or {}
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        args = ", ".join(f"{k}{'' if k in required else '?'}: {_type_name(v)}" for k, v in props.items())
        lines.append(f"- {fn['name']}({args}): {fn.get('description') or ''}".rstrip())
        for name, spec in props.items():
            if not isinstance(spec, dict):
                continue
            notes = [str(spec["description"]).strip()] if spec.get("description") else []
            if "default" in spec:
                notes.append(f"default {json.dumps(spec['default'])}")
            if notes:
                lines.append(f"    {name}: {'; '.join(notes)}")
    example = example_call(tools[0]) if tools else ""
    return TOOL_INSTRUCTIONS.format(example=example, tools="\n".join(lines))


def template_handles_tools(tokenizer: Any) -> bool:
    template = getattr(tokenizer, "chat_template", None) or ""
    return "tools" in template


def plain_messages(messages: list[Message], tools: list[dict[str, Any]] | None,
                   native_tools: bool = False) -> list[dict[str, str]]:
    """Template-safe messages: string content, tool calls as text, tools in the system prompt."""
    out: list[dict[str, str]] = []
    for message in messages:
        content = text_of(message)
        for call in message.get("tool_calls") or []:
            fn = call["function"]
            try:  # bounded: arguments may be a client's text (not JSON, or hostile JSON)
                arguments: Any = parse_json(fn["arguments"])
            except (ValueError, TypeError):
                arguments = fn["arguments"]
            payload = json.dumps({"name": fn["name"], "arguments": arguments})
            content = f"{content}\n<tool_call>{payload}</tool_call>".strip()
        out.append({"role": message["role"], "content": content})
    if tools and not native_tools:
        block = describe_tools(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def render_prompt(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
    """The prompt text, ending where the assistant's reply begins."""
    native = bool(tools) and template_handles_tools(tokenizer)
    kwargs: dict[str, Any] = {"tools": tools} if native else {}
    return tokenizer.apply_chat_template(plain_messages(messages, tools, native), tokenize=False,
                                         add_generation_prompt=True, **kwargs)
