"""Gymnasium spaces for chat messages, so Gymnasium's own tooling works on clawgym envs.

:class:`MessageSpace` is the action space: ``contains`` accepts exactly the assistant
messages an env can act on (well-formed, tool names known, arguments a JSON object) and
``sample`` draws a valid random action — text, or a call to one of the env's tools with
arguments drawn from its JSON schema. :class:`ConversationSpace` is the observation space:
a list of messages of any role.
"""

from __future__ import annotations

import json
import string
from typing import Any

import numpy as np
from gymnasium.spaces import Space

from envs.messages import InvalidAction, Message, message_problem, to_assistant_turn

_ALPHABET = np.array(list(string.ascii_letters + string.digits + " .,!?-"))
_WORDS = ("alpha", "beta", "file", "data", "hello", "x", "42", "/workspace", "ok")


class MessageSpace(Space[Message]):
    """Assistant messages that call only ``tools`` (OpenAI function schemas)."""

    def __init__(self, tools: list[dict[str, Any]] | None = None, max_text: int = 64,
                 seed: int | np.random.Generator | None = None) -> None:
        self.tools = [dict(t) for t in tools or []]
        self.tool_names = frozenset(t["function"]["name"] for t in self.tools)
        self.max_text = max_text
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: object) -> bool:
        try:
            to_assistant_turn(x, self.tool_names)
        except InvalidAction:
            return False
        return isinstance(x, dict)

    def sample(self, mask: Any = None, probability: Any = None) -> Message:
        if mask is not None or probability is not None:
            raise NotImplementedError("MessageSpace.sample does not take a mask or probability")
        rng = self.np_random
        if self.tools and rng.random() < 0.5:
            tool = self.tools[int(rng.integers(len(self.tools)))]["function"]
            args = _sample_json(tool.get("parameters", {"type": "object"}), rng)
            call = {"id": f"call_{int(rng.integers(1 << 30))}", "type": "function",
                    "function": {"name": tool["name"], "arguments": json.dumps(args)}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        n = int(rng.integers(1, self.max_text + 1))
        return {"role": "assistant", "content": "".join(rng.choice(_ALPHABET, size=n))}

    def __repr__(self) -> str:
        return f"MessageSpace(tools={sorted(self.tool_names)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageSpace) and other.tools == self.tools \
            and other.max_text == self.max_text


class ConversationSpace(Space[list[Message]]):
    """A list of chat messages (any role): what ``reset`` and ``step`` return."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: object) -> bool:
        return isinstance(x, list) and all(message_problem(m) is None for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        if mask is not None or probability is not None:
            raise NotImplementedError("ConversationSpace.sample does not take a mask or probability")
        rng = self.np_random
        roles = ("user", "tool")
        out: list[Message] = []
        for i in range(int(rng.integers(1, 4))):
            role = roles[int(rng.integers(2))]
            n = int(rng.integers(1, 33))
            msg: Message = {"role": role, "content": "".join(rng.choice(_ALPHABET, size=n))}
            if role == "tool":
                msg["tool_call_id"] = f"call_{i}"
            out.append(msg)
        return out

    def __repr__(self) -> str:
        return "ConversationSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConversationSpace)


def _sample_json(schema: dict[str, Any], rng: np.random.Generator, depth: int = 0) -> Any:
    """A random value that satisfies the common subset of JSON schema tools use."""
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = kind[int(rng.integers(len(kind)))]
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", list(props)))
        return {k: _sample_json(v, rng, depth + 1) for k, v in props.items()
                if k in required or rng.random() < 0.5}
    if kind == "array":
        n = 0 if depth > 3 else int(rng.integers(0, 4))
        return [_sample_json(schema.get("items", {}), rng, depth + 1) for _ in range(n)]
    if kind == "integer":
        lo, hi = int(schema.get("minimum", -100)), int(schema.get("maximum", 100))
        return int(rng.integers(lo, hi + 1))
    if kind == "number":
        lo, hi = float(schema.get("minimum", -100.0)), float(schema.get("maximum", 100.0))
        return float(rng.uniform(lo, hi))
    if kind == "boolean":
        return bool(rng.random() < 0.5)
    if kind == "null":
        return None
    return _WORDS[int(rng.integers(len(_WORDS)))]
