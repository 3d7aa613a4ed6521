"""Which session a request belongs to, what kind of turn it is, and its next state.

As in OpenClaw-RL (docs/concepts/methods.md), a turn's next state is every new message
of the session's next request.
Clients resend the whole conversation each time, so the new messages are those after
the prefix the server already answered (the previous request's messages plus the reply
it got). A session is named by ``X-Session-Id`` (or ``session_id`` in the body; once
that session is closed, the same id starts a new one, stored as ``<id>~2``...); without
one, a request that continues an answered conversation joins that conversation's
session, found by a digest of the prefix, so plain OpenAI clients train too.

Turn type comes from ``X-Turn-Type`` / ``turn_type``; when absent, a request whose last
message is from the user or a tool is ``main`` (the assistant answers someone) and any
other is ``side``. Side turns are served and recorded, never trained on, and do not move
a session's pointer: a heartbeat between two user messages is not their next state.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Protocol

from envs.messages import Message, parse_json, text_of

TURN_TYPES = ("main", "side")


class SessionLookup(Protocol):
    def session_by_continuation(self, digest: str, user: str | None = None) -> str | None: ...

    def session_for_client(self, client_id: str, user: str | None = None) -> tuple[str, str | None]: ...

    def other_choice(self, digest: str, user: str | None = None) -> tuple[str, int] | None: ...


def _canonical(message: Message) -> list[object]:
    """What identifies a message across resends: role, text, and tool calls' names and
    arguments (clients drop or add fields such as ``refusal`` or call ids)."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        args = fn.get("arguments", "")
        try:  # bounded: the arguments are the client's text
            args = json.dumps(parse_json(args), sort_keys=True) if isinstance(args, str) else str(args)
        except ValueError:
            pass
        calls.append([fn.get("name", ""), args])
    return [message.get("role", ""), text_of(message).strip(), calls]


def digest(messages: list[Message]) -> str:
    payload = json.dumps([_canonical(m) for m in messages], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


def classify(messages: list[Message]) -> str:
    """``main`` when the last message is from the user or a tool, else ``side``."""
    return "main" if messages and messages[-1].get("role") in ("user", "tool") else "side"


@dataclass(frozen=True)
class Placement:
    session_id: str
    next_state: list[Message] | None
    """The new messages since the session's previous main turn; None for a new session."""
    next_role: str | None
    client_id: str | None = None
    """The client's name for the session (X-Session-Id), when it gave one."""
    chosen: int | None = None
    """The previous request had n > 1 choices and the client went on from this one (turn id)."""


def _answered_prefixes(messages: list[Message]) -> list[int]:
    """Lengths k (longest first) where ``messages[:k]`` ends with an assistant reply."""
    return [k for k in range(len(messages), 0, -1) if messages[k - 1].get("role") == "assistant"]


def place(messages: list[Message], session_id: str | None, store: SessionLookup,
          user: str | None = None) -> Placement:
    """Find the request's session and the next state it carries for that session. With
    ``user`` (per-user adapters) only that user's sessions are candidates: a request never
    joins, or gives a next state to, another user's conversation."""
    if session_id:
        internal, known = store.session_for_client(session_id, user)
        if known is None:
            return Placement(internal, None, None, session_id)
        prefixes = _answered_prefixes(messages)
        cut = next((k for k in prefixes if digest(messages[:k]) == known), None)
        chosen = None
        if cut is None:
            for k in prefixes:  # went on from another of the previous request's n choices?
                other = store.other_choice(digest(messages[:k]), user)
                if other is not None and other[0] == internal:
                    cut, chosen = k, other[1]
                    break
            else:  # the client edited history: take what follows its last assistant message
                cut = prefixes[0] if prefixes else 0
        new = messages[cut:]
        return Placement(internal, new, new[0].get("role") if new else None, session_id, chosen)
    for k in _answered_prefixes(messages):
        prefix = digest(messages[:k])
        found, chosen = store.session_by_continuation(prefix, user), None
        if found is None and (other := store.other_choice(prefix, user)) is not None:
            found, chosen = other
        if found is not None:
            new = messages[k:]
            return Placement(found, new, new[0].get("role") if new else None, None, chosen)
    return Placement(f"s-{uuid.uuid4().hex[:16]}", None, None)


def continuation(messages: list[Message], response: Message) -> str:
    """The digest a follow-up request's prefix will have: these messages plus the reply."""
    return digest([*messages, response])
