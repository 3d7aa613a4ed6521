from __future__ import annotations

import json

import pytest

from envs.messages import (InvalidAction, message_problem, parse_text_action, text_of,
                           to_assistant_turn, tool_schema, tool_schema_problem)


def test_plain_text_is_content_only():
    assert parse_text_action("just words") == {"role": "assistant", "content": "just words"}


def test_tool_call_blocks_are_lifted_out_of_text():
    text = ('Let me look. <tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>'
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    msg = parse_text_action(text, call_id_prefix="c")
    assert msg["content"] == "Let me look."
    assert [c["id"] for c in msg["tool_calls"]] == ["c_0", "c_1"]
    assert msg["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd": "ls"}'}
    assert json.loads(msg["tool_calls"][1]["function"]["arguments"]) == {}


def test_unclosed_tool_call_at_end_is_still_parsed():
    msg = parse_text_action('<tool_call>{"name": "guess", "arguments": {"number": 3}}')
    assert msg["tool_calls"][0]["function"]["name"] == "guess"


def test_malformed_json_keeps_the_call_so_the_agent_hears_which_one():
    msg = parse_text_action('<tool_call>{"name": "guess", "arguments": {number: 3}</tool_call>')
    call = msg["tool_calls"][0]
    assert call["function"]["name"] == "guess"
    with pytest.raises(InvalidAction, match="not valid JSON") as err:
        to_assistant_turn(msg, frozenset({"guess"}))
    assert err.value.tool_call_id == call["id"]


@pytest.mark.parametrize("message, fragment", [
    ("hi", "must be a dict"),
    ({"role": "robot", "content": "x"}, "role must be one of"),
    ({"role": "user"}, "content is missing"),
    ({"role": "user", "content": 3}, "content must be a string"),
    ({"role": "user", "content": [{"type": "audio"}]}, "text or image_url"),
    ({"role": "assistant", "content": None}, "needs content or tool_calls"),
    ({"role": "tool", "content": "x"}, "tool_call_id"),
    ({"role": "user", "content": "x", "tool_calls": []}, "only assistant"),
    ({"role": "user", "content": "x", "extra": 1}, "unknown message keys"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {}}}]},
     "JSON string"),
])
def test_message_problems_are_named(message, fragment):
    assert fragment in message_problem(message)


def test_valid_messages_have_no_problem():
    assert message_problem({"role": "system", "content": "s"}) is None
    assert message_problem({"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}) is None
    assert message_problem({"role": "tool", "content": "ok", "tool_call_id": "c"}) is None


def test_unknown_tool_and_non_object_arguments_are_invalid():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "rm", "arguments": "{}"}}]}
    with pytest.raises(InvalidAction, match="unknown tool 'rm'"):
        to_assistant_turn(call, frozenset({"guess"}))
    call["tool_calls"][0]["function"] = {"name": "guess", "arguments": "[1, 2]"}
    with pytest.raises(InvalidAction, match="must be a JSON object"):
        to_assistant_turn(call, frozenset({"guess"}))


def test_valid_turn_decodes_arguments():
    turn = to_assistant_turn('ok <tool_call>{"name": "guess", "arguments": {"number": 7}}</tool_call>',
                             frozenset({"guess"}))
    assert turn.content == "ok"
    assert turn.tool_calls[0].name == "guess" and turn.tool_calls[0].arguments == {"number": 7}


def test_text_of_joins_parts():
    assert text_of({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) == "ab"
    assert text_of({"role": "assistant", "content": None}) == ""


def test_tool_schema_roundtrip():
    schema = tool_schema("bash", "run", {"cmd": {"type": "string"}})
    assert tool_schema_problem(schema) is None
    assert schema["function"]["parameters"]["required"] == ["cmd"]
    assert "type 'function'" in tool_schema_problem({"name": "x"})
