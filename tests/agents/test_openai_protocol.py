"""Request parsing of the live server (agents/openai_protocol.py): hand-written cases for
what issue 10 found, then property-based tests that throw generated garbage at
``parse_request`` and ``TurnHeaders.read``: every input is either a valid request or a
``RequestError`` with a 4xx status and an OpenAI error body that JSON can carry; nothing
else may escape. Pure functions, no model: these run in a few seconds.

Raise ``CLAWGYM_PROPERTY_EXAMPLES`` to search harder (e.g. 5000).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.openai_protocol import ChatRequest, RequestError, parse_request
from agents.server import TurnHeaders

SCALE = int(float(os.environ.get("CLAWGYM_PROPERTY_EXAMPLES", 0))) or None


def _settings(examples: int) -> settings:
    return settings(max_examples=SCALE or examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


VALID: dict[str, Any] = {
    "model": "clawgym",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "max_tokens": 8, "temperature": 0.5, "n": 1, "stream": False, "session_id": "s-1", "turn_type": "main",
}
"""A request using every field the server reads; mutations start from it."""


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _paths(child, (*prefix, i))
    return out


PATHS = _paths(VALID)


def _mutate(path: tuple[Any, ...], new: Any, delete: bool) -> dict[str, Any]:
    request = json.loads(json.dumps(VALID))
    parent = request
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return request


def _check(raw: bytes) -> ChatRequest | None:
    """parse_request(raw) must give a request or a well-formed 4xx; returns the request."""
    try:
        return parse_request(raw)
    except RequestError as exc:
        _check_error(exc)
        return None


def _check_error(exc: RequestError) -> None:
    assert 400 <= exc.status < 500, exc.status
    body = exc.body()["error"]
    assert set(body) == {"message", "type", "param", "code"} and body["message"]
    json.dumps(body, ensure_ascii=False).encode("utf-8")  # what the reply and the record need


# ---- the cases, by hand ---------------------------------------------------------------
def _tool(parameters: Any) -> dict[str, Any]:
    return {**VALID, "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}]}


def _arguments(arguments: str) -> dict[str, Any]:
    return _mutate(("messages", 2, "tool_calls", 0, "function", "arguments"), arguments, False)


@pytest.mark.parametrize("body, param", [
    (json.dumps(_tool("x")), "tools[0].function.parameters"),
    (json.dumps(_tool(None)), "tools[0].function.parameters"),
    (json.dumps(_tool({"type": "object", "properties": ["a"]})), "tools[0].function.parameters.properties"),
    (json.dumps(_tool({"type": "object", "properties": {"a": "string"}})), "tools[0].function.parameters.properties.a"),
    (json.dumps(_tool({"type": "string"})), "tools[0].function.parameters.type"),
    (json.dumps(_tool({"type": "object", "required": "a"})), "tools[0].function.parameters.required"),
    (json.dumps({**VALID, "tools": [{"type": "function", "function": {"name": ""}}]}), "tools[0].function.name"),
    (json.dumps({**VALID, "tools": [{"type": "retrieval"}]}), "tools[0].type"),
    (json.dumps(_arguments("[" * 200_000)), "messages[2].tool_calls[0].function.arguments"),
    (json.dumps(_arguments("9" * 5000)), "messages[2].tool_calls[0].function.arguments"),
    (json.dumps(_arguments('{"a": NaN}')), "messages[2].tool_calls[0].function.arguments"),
    (json.dumps(_arguments('{"a": "\\ud800"}')), "messages[2].tool_calls[0].function.arguments"),
    ('{"model": "clawgym", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}", "messages"),
    ('{"model": "clawgym", "n": ' + "1" * 5000 + ', "messages": []}', "n"),
    ('{"model": "clawgym", "messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages"),
    ('{"model": "clawgym", "temperature": NaN, "messages": []}', "temperature"),
    ('{"model": "clawgym", "temperature": 1e999, "messages": []}', "temperature"),
    (json.dumps({**VALID, "session_id": "s" * 201}), "session_id"),
    (json.dumps({**VALID, "max_tokens": int("7" * 4000)}), "max_tokens"),  # JSON parses it; no client means it
    (json.dumps({**VALID, "max_completion_tokens": 2**31}), "max_completion_tokens"),
])
def test_hostile_requests_are_400s_that_name_the_parameter(body: str, param: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_request(body.encode())
    assert caught.value.status == 400 and caught.value.param == param
    _check_error(caught.value)


def test_a_limit_up_to_int32_is_a_request_the_server_then_cuts_to_the_contexts_room() -> None:
    assert parse_request(json.dumps({**VALID, "max_tokens": 2**31 - 1}).encode()).completion_limit(64) == 2**31 - 1


def test_arguments_that_are_not_json_are_kept_as_the_model_wrote_them() -> None:
    """A model can write malformed arguments and the client echoes them back: not an error."""
    request = parse_request(json.dumps(_arguments('{"city": "Oslo"')).encode())
    assert request.messages[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"'


def test_bytes_that_are_not_utf8_are_a_400() -> None:
    with pytest.raises(RequestError) as caught:
        parse_request(b'{"model": "\xff"}')
    assert caught.value.status == 400 and "UTF-8" in caught.value.message


@pytest.mark.parametrize("headers, param", [
    ({"x-session-id": "s" * 201}, "X-Session-Id"),
    ({"x-turn-type": "both"}, "X-Turn-Type"),
    ({"x-session-done": "maybe"}, "X-Session-Done"),
])
def test_bad_headers_are_400s(headers: dict[str, str], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        TurnHeaders.read(headers)
    assert caught.value.status == 400 and caught.value.param == param
    assert TurnHeaders.read({"x-session-id": "s" * 200}).session_id == "s" * 200


# ---- generated garbage ----------------------------------------------------------------------
def _text(max_size: int = 20) -> st.SearchStrategy[str]:
    """Any text, lone surrogates included (json.dumps escapes them as a client would)."""
    return st.text(st.characters(codec=None, exclude_categories=()), max_size=max_size)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text(8), children, max_size=4),
    max_leaves=16)


def _deep(depth: int, kind: str) -> str:
    return {"list": "[" * depth + "]" * depth, "dict": '{"a":' * depth + "1" + "}" * depth,
            "open": "[" * depth}[kind]


hostile_json = st.one_of(
    st.builds(_deep, st.integers(60, 200_000), st.sampled_from(["list", "dict", "open"])),
    st.builds(lambda n, sign: sign + "7" * n, st.integers(4000, 6000), st.sampled_from(["", "-"])),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400", '"\\ud800"', '"a\\udfffb"',
                     '{"\\ud800": 1}', '"\\u0000"', "1.5e308", "[]", "{}", '""', "null"]),
)
"""JSON text (not values) that trips naive decoding: depth, huge numbers, non-numbers, surrogates."""


def _splice(path: tuple[Any, ...], raw: str) -> bytes:
    """VALID with the value at ``path`` replaced by raw JSON text."""
    return json.dumps(_mutate(path, "\x00SPLICE\x00", False)).replace('"\\u0000SPLICE\\u0000"', raw).encode()


@_settings(200)
@given(json_values)
def test_any_json_value_is_a_request_or_a_4xx(value: Any) -> None:
    _check(json.dumps(value).encode())


@_settings(200)
@given(st.binary(max_size=200) | st.builds(lambda b: json.dumps(VALID).encode()[:b], st.integers(0, 800)))
def test_any_bytes_are_a_request_or_a_4xx(raw: bytes) -> None:
    _check(raw)


@_settings(300)
@given(st.sampled_from(PATHS), json_values, st.booleans())
def test_a_valid_request_with_a_field_mutated_is_a_request_or_a_4xx(path: tuple[Any, ...], new: Any,
                                                                    delete: bool) -> None:
    request = _check(json.dumps(_mutate(path, new, delete)).encode())
    if request is not None:  # accepted: what later code reads must be as promised
        assert request.messages and all(isinstance(m, dict) for m in request.messages)
        for tool in request.tools or []:
            assert isinstance(tool["function"].get("parameters", {}), dict)


@_settings(150)
@given(st.sampled_from(PATHS), hostile_json)
def test_hostile_json_anywhere_is_a_request_or_a_4xx(path: tuple[Any, ...], raw: str) -> None:
    _check(_splice(path, raw))


@_settings(200)
@given(st.dictionaries(st.sampled_from(["x-session-id", "x-turn-type", "x-session-done"]),
                       st.text(st.characters(max_codepoint=255), max_size=300)))
def test_any_session_headers_are_read_or_a_4xx(headers: dict[str, str]) -> None:
    try:
        read = TurnHeaders.read(headers)
    except RequestError as exc:
        _check_error(exc)
        return
    assert read.session_id is None or len(read.session_id) <= 200
    assert read.turn_type in (None, "main", "side")
