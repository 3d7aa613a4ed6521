from __future__ import annotations

import json
import re

import pytest

from envs.messages import (MAX_JSON_DEPTH, InvalidAction, json_value_problem, message_problem,
                           parse_json, parse_text_action, text_of, to_assistant_turn, tool_schema,
                           tool_schema_problem)
from tests.helpers import cpu_growth


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


# ---- untrusted JSON: parse_json and json_value_problem ----------------------------------
@pytest.mark.parametrize("text, value", [
    ('{"a": [1, 2.5, "x", null, true]}', {"a": [1, 2.5, "x", None, True]}),
    (b'{"a": 1}', {"a": 1}),
    ("-" + "9" * 4300, -int("9" * 4300)),  # the longest integer allowed, sign aside
    ("[" * 64 + "]" * 64, json.loads("[" * 64 + "]" * 64)),  # exactly MAX_JSON_DEPTH
    ('"caf\\u00e9 \\ud83d\\ude00"', "café 😀"),  # a surrogate *pair* is one valid character
])
def test_parse_json_accepts_plain_json(text, value):
    assert parse_json(text) == value


@pytest.mark.parametrize("text, fragment", [
    ("{oops", "Expecting property name"),
    ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
    ("[" * 100_000, "nested deeper than 64 levels"),  # json.loads: RecursionError
    ('{"a": ' * 100_000, "nested deeper than 64 levels"),
    ("9" * 4301, "integer of 4301 digits"),  # json.loads: ValueError about int conversion
    ('{"n": ' + "9" * 5000 + "}", "integer of 5000 digits"),
    ("NaN", "NaN, which is not a JSON number"),
    ("[-Infinity]", "-Infinity, which is not a JSON number"),
    ("1e999", "too large for a float"),
    ('"a\\ud800b"', "lone UTF-16 surrogate"),
    ('{"\\udfff": 1}', "lone UTF-16 surrogate"),  # in a key too
    (b'"\xff"', "not valid UTF-8"),
])
def test_parse_json_refuses_with_a_value_error_that_says_why(text, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_json(text)


def test_parse_json_depth_is_adjustable():
    assert parse_json("[[1]]", max_depth=2) == [[1]]
    with pytest.raises(ValueError, match="deeper than 1 levels"):
        parse_json("[[1]]", max_depth=1)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("value, problem", [
    ({"a": [1, "x", None, 2.5, False]}, None),
    (_nested(MAX_JSON_DEPTH), None),
    (_nested(MAX_JSON_DEPTH + 1), "JSON nested deeper than 64 levels"),
    (_nested(200_000), "JSON nested deeper than 64 levels"),  # checked without recursion
    ({"a": "x\ud800"}, "JSON holds a lone UTF-16 surrogate (e.g. \\ud800), which is not valid text"),
    ([float("nan")], "JSON holds nan, which is not a JSON number"),
    ({"a": float("-inf")}, "JSON holds -inf, which is not a JSON number"),
    ({1: "a"}, "JSON object keys must be strings"),
    ([-(10 ** 4300 - 1), 2 ** 14_000], None),  # 4300 digits is still fine
    ({"a": 10 ** 4300}, "JSON holds an integer of more than 4300 digits"),
    ([-(10 ** 5000)], "JSON holds an integer of more than 4300 digits"),
    ({"a": (1, 2)}, "JSON cannot hold a tuple value"),
    ([b"raw"], "JSON cannot hold a bytes value"),
    ([object()], "JSON cannot hold a object value"),
])
def test_json_value_problem_names_what_is_unsafe(value, problem):
    assert json_value_problem(value) == problem


# ---- actions an agent cannot crash the parser with --------------------------------------
def _call(arguments: str, name: str = "guess") -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


@pytest.mark.parametrize("action, fragment", [
    (_call("[" * 100_000), "were refused: JSON nested deeper than 64 levels"),
    (_call('{"number": ' + "9" * 5000 + "}"), "were refused: JSON holds an integer of 5000 digits"),
    (_call('{"number": NaN}'), "were refused: JSON holds NaN"),
    ('<tool_call>{"name": "guess", "arguments": ' + "[" * 100_000 + "</tool_call>",
     "were refused: JSON nested deeper than 64 levels"),
    ('<tool_call>{"name": "guess", "arguments": {"number": ' + "9" * 5000 + "}}</tool_call>",
     "were refused: JSON holds an integer of 5000 digits"),
])
def test_hostile_tool_arguments_are_invalid_and_answered_on_the_call(action, fragment):
    with pytest.raises(InvalidAction, match=re.escape(fragment)) as err:
        to_assistant_turn(action, frozenset({"guess"}), call_id_prefix="c")
    assert err.value.tool_call_id in ("c1", "c_0")
    assert err.value.message["role"] == "assistant"
    assert err.value.message["tool_calls"][0]["id"] == err.value.tool_call_id


@pytest.mark.parametrize("action, fragment", [
    ({"role": "assistant", "content": [{"type": "text", "text": "x", "extra": _nested(100_000)}]},
     "JSON nested deeper than 64 levels"),
    ({"role": "assistant", "content": "a\ud800"}, "lone UTF-16 surrogate"),
    ("text with a lone surrogate \udc00", "lone UTF-16 surrogate"),
    ({1: "x"}, "JSON object keys must be strings"),  # would be a TypeError in {**action}
    ({"role": "assistant", "content": "x", "name": float("nan")}, "not a JSON number"),
    ({"role": 10 ** 5000, "content": ""}, "more than 4300 digits"),  # repr() of it would raise
])
def test_hostile_messages_are_invalid_actions(action, fragment):
    with pytest.raises(InvalidAction, match=re.escape(fragment)) as err:
        to_assistant_turn(action, frozenset({"guess"}))
    assert err.value.tool_call_id is None


def test_an_unknown_tool_name_is_clipped_in_the_feedback():
    with pytest.raises(InvalidAction) as err:
        to_assistant_turn(_call("{}", name="x" * 100_000), frozenset({"guess"}))
    assert len(str(err.value)) < 200 and "unknown tool 'xxx" in str(err.value)


@pytest.mark.parametrize("make", [lambda n: "<tool_call>x" + " " * n + "y", lambda n: "<tool_call>" * (n // 11),
                                  lambda n: "</tool_call>" * (n // 12)], ids=["spaces", "opening", "closing"])
def test_parse_text_action_is_linear_in_the_text(make):
    # The first regex was quadratic: about 3 minutes on the first of these at 200,000 spaces.
    assert cpu_growth(parse_text_action, make, 1_000) < 4 * 16


def test_text_around_and_between_blocks_is_the_content():
    msg = parse_text_action("a <tool_call> {} </tool_call> b <tool_call>{}</tool_call>c")
    assert msg["content"] == "a  b c" and len(msg["tool_calls"]) == 2
    assert parse_text_action("</tool_call> stray") == {"role": "assistant", "content": "</tool_call> stray"}
