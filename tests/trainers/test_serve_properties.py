"""Property-based tests of the live server's request path, on the real model and a real
uvicorn server: generated garbage is answered with a 4xx and an OpenAI error body, never
a 5xx, and the server answers a normal request afterwards.

``prepare`` (model name, chat template, tokenizer, session lookup) is driven directly
with what ``parse_request`` accepts, which is fast; one bounded run goes through HTTP.
The strategies come from tests/agents/test_openai_protocol.py. Raise
``CLAWGYM_PROPERTY_EXAMPLES`` to search harder.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agents.openai_protocol import RequestError
from agents.server import TurnHeaders
from tests.agents.test_openai_protocol import (PATHS, VALID, _check, _check_error, _mutate, _settings, _splice,
                                               hostile_json, json_values)
from tests.trainers.test_serve import SHORT, _config
from trainers.serve import serve_in_thread


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Path]]:
    out = tmp_path_factory.mktemp("fuzz") / "run"
    with serve_in_thread(_config(learn=False), out) as (url, service):
        yield url, service, out


header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
                        max_size=300)
session_headers = st.dictionaries(st.sampled_from(["X-Session-Id", "X-Turn-Type", "X-Session-Done"]),
                                  header_values | st.sampled_from(["main", "side", "true", "0"]))


@_settings(120)
@given(st.sampled_from(PATHS), json_values, st.booleans(), session_headers)
def test_prepare_takes_any_parsed_request_or_refuses_it_with_a_4xx(live, path: tuple[Any, ...], new: Any,
                                                                   delete: bool, headers: dict[str, str]) -> None:
    _, service, _ = live
    request = _check(json.dumps(_mutate(path, new, delete)).encode())
    if request is None:
        return
    try:
        turn = service.prepare(request, TurnHeaders.read({k.lower(): v for k, v in headers.items()}))
    except RequestError as exc:
        _check_error(exc)
        return
    assert turn.prompt_ids and 1 <= turn.n <= 8 and turn.turn_type in ("main", "side")
    assert len(turn.prompt_ids) + turn.sampling.max_new_tokens <= service.config.max_context


def _rejected_bodies() -> st.SearchStrategy[bytes]:
    """Bodies every one of which must be refused."""
    return st.one_of(
        json_values.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode()),
        st.builds(_splice, st.sampled_from(PATHS), hostile_json.filter(lambda raw: raw not in _BENIGN)),
        st.builds(lambda value: json.dumps({**VALID, "tools": [value]}).encode(),
                  json_values.filter(lambda v: not isinstance(v, dict) or "function" not in v)),
        st.binary(max_size=64).filter(lambda b: not b.strip().startswith(b"{")),
    )


_BENIGN = {"[]", "{}", '""', "null", '"\\u0000"', "1.5e308"}


def _send(url: str, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(url.removesuffix("/v1") + path, body if method != "GET" else None,
                                     {"Content-Type": "application/json", **headers}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


CHAT = ("POST", "/v1/chat/completions")


@_settings(40)
@given(_rejected_bodies(), session_headers,
       st.sampled_from([CHAT] * 6 + [("GET", "/v1/chat/completions"), ("PUT", "/v1/chat/completions"),
                                     ("POST", "/v1/completions"), ("POST", "/v1/models")]))
@example(_splice(("messages",), "[" * 100_000 + "]" * 100_000), {}, CHAT)  # issue 10, item 7, always tried
@example(_splice(("n",), "7" * 5000), {}, CHAT)
@example(_splice(("max_tokens",), "7" * 4000), {}, CHAT)  # parses (under 4300 digits); was answered 200
@example(_splice(("messages", 0, "content"), '"a\\ud800b"'), {}, CHAT)
@example(_splice(("messages", 2, "tool_calls", 0, "function", "arguments"), json.dumps("[" * 200_000)), {}, CHAT)
@example(_splice(("tools", 0, "function", "parameters"), "null"), {}, CHAT)
@example(json.dumps({"model": "x"}).encode(), {"X-Session-Id": "s" * 100_000}, CHAT)
def test_garbage_over_http_is_a_4xx_with_an_openai_error_body(live, body: bytes, headers: dict[str, str],
                                                              route: tuple[str, str]) -> None:
    url, _, _ = live
    status, payload = _send(url, *route, body, headers)
    assert 400 <= status < 500, (status, payload)
    assert set(payload["error"]) == {"message", "type", "param", "code"} and payload["error"]["message"]


def test_the_server_still_answers_after_the_garbage(live) -> None:
    url, _, _ = live
    status, payload = _send(url, "POST", "/v1/chat/completions",
                            json.dumps({"model": "clawgym", "messages": [{"role": "user", "content": SHORT[1]}],
                                        "max_tokens": 4}).encode(), {})
    assert status == 200 and payload["choices"][0]["message"]["role"] == "assistant"
