"""agents.openai_policy against a real HTTP server on loopback that answers as scripted:
retries, refusals, tool calls (native and as text), concurrency and the key's handling.
The end-to-end run against this project's own live server is in tests/benchmarks/test_run.py."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from agents.openai_policy import EndpointError, OpenAIPolicy, key_record, resolve_api_key
from agents.policy import SamplingParams
from tests.helpers import http_server

Reply = tuple[int, dict[str, str], dict[str, Any]]
"""HTTP status, extra headers, JSON body."""

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


def _ok(message: dict[str, Any], finish_reason: str = "stop") -> Reply:
    return 200, {}, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
                     "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}


def _error(status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None) -> Reply:
    return status, headers or {}, {"error": {"message": message, "type": "error", "param": None, "code": code}}


def _echo(body: dict[str, Any], count: int) -> Reply:
    return _ok({"role": "assistant", "content": f"you said: {body['messages'][-1]['content']}"})


@contextlib.contextmanager
def scripted_server(respond: Callable[[dict[str, Any], int], Reply]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``respond(body, n)`` answers the n-th request (from 1). Yields the base URL and a
    record: ``requests`` (bodies with their Authorization header), ``max_in_flight``."""
    record: dict[str, Any] = {"requests": [], "in_flight": 0, "max_in_flight": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                record["requests"].append({**body, "authorization": self.headers.get("Authorization")})
                count = len(record["requests"])
                record["in_flight"] += 1
                record["max_in_flight"] = max(record["max_in_flight"], record["in_flight"])
            try:
                status, headers, payload = respond(body, count)
            finally:
                with lock:
                    record["in_flight"] -= 1
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # a client that timed out has left
                pass

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        yield url, record


def _prompt(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# ---- replies become actions ---------------------------------------------------------------
def test_native_tool_calls_pass_through_and_text_ones_are_parsed() -> None:
    native = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc", "type": "function", "function": {"name": "python", "arguments": '{"code": "1+1"}'}}]}
    text = 'Let me run it. <tool_call>{"name": "python", "arguments": {"code": "2+2"}}</tool_call>'
    replies = {"native": _ok(native, "tool_calls"), "text": _ok({"role": "assistant", "content": text})}
    tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object", "properties": {}}}}]
    with scripted_server(lambda body, n: replies[body["messages"][-1]["content"]]) as (url, record):
        policy = OpenAIPolicy(url, "m")
        first, second = policy.generate([_prompt("native"), _prompt("text")], [tools, tools], GREEDY)
    assert first.message == {"role": "assistant", "content": "", "tool_calls": native["tool_calls"]}
    assert first.finish_reason == "stop" and first.completion_ids == [] and first.logprobs == []
    call = second.message["tool_calls"][0]
    assert second.message["content"] == "Let me run it."
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("python", {"code": "2+2"})
    assert second.text == text  # the raw reply, as TransformersPolicy keeps its decoded text
    assert all(r["tools"] == tools and r["temperature"] == 0.0 and r["max_tokens"] == 8 for r in record["requests"])


def test_a_cut_reply_and_a_prompt_over_the_context_keep_the_local_finish_reasons() -> None:
    def respond(body: dict[str, Any], n: int) -> Reply:
        if body["messages"][-1]["content"] == "long":
            return _error(400, "This model's maximum context length is 8 tokens", "context_length_exceeded")
        return _ok({"role": "assistant", "content": "cut"}, "length")

    with scripted_server(respond) as (url, record):
        cut, over = OpenAIPolicy(url, "m").generate([_prompt("short"), _prompt("long")], None, GREEDY)
    assert cut.finish_reason == "length" and cut.message == {"role": "assistant", "content": "cut"}
    assert over.finish_reason == "context" and over.message == {"role": "assistant", "content": ""}
    assert len(record["requests"]) == 2  # a context overflow is not retried
    assert "tools" not in record["requests"][0]  # no tools: the key is left out, not sent empty


# ---- failures -----------------------------------------------------------------------------
def test_429_and_5xx_are_retried_with_the_servers_retry_after() -> None:
    script = {1: _error(429, "slow down", headers={"retry-after-ms": "300"}), 2: _error(503, "overloaded")}
    with scripted_server(lambda body, n: script.get(n) or _echo(body, n)) as (url, record):
        started = time.perf_counter()
        completion, = OpenAIPolicy(url, "m", max_retries=2).generate([_prompt("hi")], None, GREEDY)
        elapsed = time.perf_counter() - started
    assert completion.message["content"] == "you said: hi" and len(record["requests"]) == 3
    assert elapsed >= 0.3 + 1.0 * 0.5  # the asked 300 ms, then the second backoff (1 s, jittered to >= half)


def test_retries_run_out_into_one_sentence_naming_the_url() -> None:
    with scripted_server(lambda body, n: _error(500, "boom")) as (url, record):
        with pytest.raises(EndpointError) as caught:
            OpenAIPolicy(url, "m", max_retries=1).generate([_prompt("hi")], None, GREEDY)
    assert str(caught.value).startswith(f"the endpoint {url} answered HTTP 500 (boom) on 2 attempts; ")
    assert "\n" not in str(caught.value) and len(record["requests"]) == 2


def test_a_slow_server_times_out_and_is_retried() -> None:
    def respond(body: dict[str, Any], n: int) -> Reply:
        time.sleep(1.0)
        return _echo(body, n)

    with scripted_server(respond) as (url, record):
        with pytest.raises(EndpointError, match=r"did not answer within timeout_s=0\.2 on 2 attempts"):
            OpenAIPolicy(url, "m", timeout_s=0.2, max_retries=1).generate([_prompt("hi")], None, GREEDY)
    assert len(record["requests"]) == 2


@pytest.mark.parametrize("status, fix", [(401, "check api_key="), (404, "check model=")])
def test_a_refusal_no_retry_mends_fails_at_once_with_the_fix(status, fix) -> None:
    with scripted_server(lambda body, n: _error(status, "nope")) as (url, record):
        with pytest.raises(EndpointError) as caught:
            OpenAIPolicy(url, "gpt-x", max_retries=5).generate([_prompt("hi")], None, GREEDY)
    assert f"the endpoint {url} refused the request with HTTP {status} (nope); {fix}" in str(caught.value)
    assert len(record["requests"]) == 1


# ---- concurrency --------------------------------------------------------------------------
def test_requests_go_out_together_up_to_the_limit_and_come_back_in_order() -> None:
    # Rounds of 3, 3 and 1, each answered only once it is all in: requests sent one after
    # another would never fill one. The pause lets a fourth show, were the limit not kept.
    rounds = threading.Barrier(3, timeout=30)

    def respond(body: dict[str, Any], n: int) -> Reply:
        if n <= 6:
            rounds.wait()
        time.sleep(0.1)
        return _echo(body, n)

    prompts = [_prompt(f"p{i}") for i in range(7)]
    with scripted_server(respond) as (url, record):
        completions = OpenAIPolicy(url, "m", concurrency=3).generate(prompts, None, GREEDY)
    assert [c.message["content"] for c in completions] == [f"you said: p{i}" for i in range(7)]
    assert record["max_in_flight"] == 3 and len(record["requests"]) == 7  # no round timed out into a retry


# ---- the key ------------------------------------------------------------------------------
def test_the_key_comes_from_the_variable_it_names_and_only_the_name_is_recorded(monkeypatch) -> None:
    monkeypatch.setenv("CLAWGYM_TEST_KEY", "sk-from-env")
    monkeypatch.delenv("CLAWGYM_UNSET_KEY", raising=False)
    assert resolve_api_key("CLAWGYM_TEST_KEY") == "sk-from-env" and key_record("CLAWGYM_TEST_KEY") == "CLAWGYM_TEST_KEY"
    assert resolve_api_key("sk-literal") == "sk-literal" and key_record("sk-literal") == "<redacted>"
    assert resolve_api_key("") == "none" and key_record("") == ""
    with pytest.raises(ValueError, match="CLAWGYM_UNSET_KEY names an environment variable that is not set"):
        resolve_api_key("CLAWGYM_UNSET_KEY")
    with scripted_server(_echo) as (url, record):
        OpenAIPolicy(url, "m", "CLAWGYM_TEST_KEY").generate([_prompt("hi")], None, GREEDY)
    assert record["requests"][0]["authorization"] == "Bearer sk-from-env"


def test_the_request_body_leaves_out_what_is_at_its_default() -> None:
    policy = OpenAIPolicy("http://127.0.0.1:9/v1", "m")
    body = policy.request_body(_prompt("hi"), [], SamplingParams(temperature=0.7, max_new_tokens=5))
    assert body == {"model": "m", "messages": _prompt("hi"), "temperature": 0.7, "max_tokens": 5}
    assert policy.request_body(_prompt("hi"), None, SamplingParams(top_p=0.9))["top_p"] == 0.9


def test_a_model_that_refuses_max_tokens_and_temperature_gets_what_it_takes_from_then_on() -> None:
    """OpenAI's reasoning models answer these two 400s (their documented error bodies)."""
    def respond(body: dict[str, Any], n: int) -> Reply:
        if "max_tokens" in body:
            return 400, {}, {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this "
                                       "model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error",
                                       "param": "max_tokens", "code": "unsupported_parameter"}}
        if body.get("temperature", 1) != 1:
            return 400, {}, {"error": {"message": "Unsupported value: 'temperature' does not support 0 with this "
                                       "model. Only the default (1) value is supported.",
                                       "type": "invalid_request_error", "param": "temperature",
                                       "code": "unsupported_value"}}
        return _echo(body, n)

    with scripted_server(respond) as (url, record):
        policy = OpenAIPolicy(url, "o-model", max_retries=0)
        first, = policy.generate([_prompt("one")], None, GREEDY)
        second, = policy.generate([_prompt("two")], None, GREEDY)
    assert (first.message["content"], second.message["content"]) == ("you said: one", "you said: two")
    assert [sorted(k for k in r if k in ("max_tokens", "max_completion_tokens", "temperature"))
            for r in record["requests"]] == [["max_tokens", "temperature"], ["max_completion_tokens", "temperature"],
                                             ["max_completion_tokens"], ["max_completion_tokens"]]
    assert record["requests"][-1]["max_completion_tokens"] == 8
    assert policy.adaptations == ["max_tokens -> max_completion_tokens",
                                  "temperature=0.0 refused: the model's own is used"]


def test_a_refused_setting_it_cannot_mend_is_a_refusal_naming_the_servers_words() -> None:
    def respond(body: dict[str, Any], n: int) -> Reply:
        return 400, {}, {"error": {"message": "Unsupported parameter: 'tools' is not supported with this model.",
                                   "type": "invalid_request_error", "param": "tools",
                                   "code": "unsupported_parameter"}}

    with scripted_server(respond) as (url, record):
        with pytest.raises(EndpointError, match="HTTP 400 .Unsupported parameter: 'tools'"):
            OpenAIPolicy(url, "m", max_retries=3).generate([_prompt("hi")], None, GREEDY)
    assert len(record["requests"]) == 1
