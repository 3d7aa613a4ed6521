from __future__ import annotations

import json

from envs.messages import tool_schema
from envs.spaces import ConversationSpace, MessageSpace

TOOLS = [
    tool_schema("move", "move", {"dx": {"type": "integer", "minimum": -3, "maximum": 3},
                                 "mode": {"enum": ["walk", "run"]},
                                 "tags": {"type": "array", "items": {"type": "string"}}}),
    tool_schema("say", "say", {"text": {"type": "string"}, "loud": {"type": "boolean"}}),
]


def test_samples_are_valid_and_use_the_schema():
    space = MessageSpace(TOOLS, seed=0)
    saw_call = saw_text = False
    for _ in range(200):
        action = space.sample()
        assert space.contains(action)
        for call in action.get("tool_calls") or []:
            saw_call = True
            args = json.loads(call["function"]["arguments"])
            if call["function"]["name"] == "move":
                assert -3 <= args["dx"] <= 3 and args["mode"] in ("walk", "run")
                assert isinstance(args["tags"], list)
        saw_text |= isinstance(action.get("content"), str)
    assert saw_call and saw_text


def test_sampling_is_reproducible_under_a_seed():
    a, b = MessageSpace(TOOLS, seed=5), MessageSpace(TOOLS, seed=5)
    assert [a.sample() for _ in range(20)] == [b.sample() for _ in range(20)]


def test_contains_rejects_what_the_env_cannot_act_on():
    space = MessageSpace(TOOLS)
    assert not space.contains("text is parsed by step, but is not itself a message")
    assert not space.contains({"role": "user", "content": "x"})
    bad_args = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "say", "arguments": "{nope"}}]}
    assert not space.contains(bad_args)
    unknown = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "fly", "arguments": "{}"}}]}
    assert not space.contains(unknown)
    assert space.contains({"role": "assistant", "content": "fine"})


def test_no_tools_means_text_only():
    space = MessageSpace(seed=1)
    assert all("tool_calls" not in space.sample() for _ in range(50))


def test_conversation_space():
    space = ConversationSpace(seed=3)
    for _ in range(20):
        assert space.contains(space.sample())
    assert not space.contains([{"role": "user"}])
    assert not space.contains({"role": "user", "content": "not a list"})
