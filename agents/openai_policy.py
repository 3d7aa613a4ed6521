"""A policy behind an OpenAI-compatible chat-completions API: hosted models, vLLM, this
project's own live server.

``OpenAIPolicy.generate(prompts, tools, sampling)`` sends one request per prompt through
the ``openai`` client, at most ``concurrency`` at once, and returns
:class:`agents.policy.Completion` objects the rollout code takes as it takes a local
model's. What an API cannot give is left empty: no token ids, no log-probs, weight version
0. That is enough to evaluate, never to train.

The reply becomes the action as follows. Tool calls the API returns natively
(``message.tool_calls``) are passed through; a reply that writes them as text, the
``<tool_call>{...}</tool_call>`` convention of small models, is parsed by
:func:`envs.messages.parse_text_action`, exactly as :class:`~agents.policy.TransformersPolicy`
parses its own text. A prompt over the model's context (HTTP 400 ``context_length_exceeded``)
gets an empty reply with ``finish_reason`` ``context``, as the local policy gives.

Failures: a timeout, a refused connection, HTTP 408/409/429 or 5xx is retried up to
``max_retries`` times, waiting ``0.5 s * 2^attempt`` (jittered, at most 30 s) or what
the server's ``Retry-After`` asks; then, or at once for any other refusal (a wrong key,
an unknown model), :class:`EndpointError` says in one sentence what failed and what to fix.

Models that refuse a setting (OpenAI's reasoning models take ``max_completion_tokens``, not
``max_tokens``, and only their default temperature) answer HTTP 400 ``unsupported_parameter``
or ``unsupported_value`` naming it: the request is sent again with ``max_completion_tokens``
or without ``temperature``, the change is kept for every later request, and
:attr:`OpenAIPolicy.adaptations` says what was changed (a results file records it: sampling
at the model's own temperature is not a greedy evaluation).

The key: ``api_key`` is either the key or the *name* of an environment variable holding
it (:func:`resolve_api_key`), so that the key itself need never be typed on a command line
or written to a results file: :func:`key_record` is what a record may keep.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

from agents.policy import Completion, SamplingParams
from envs.messages import Message, parse_text_action

RETRY_STATUSES = frozenset({408, 409, 429})
"""HTTP statuses worth a retry besides 5xx: a timeout, a conflict, a rate limit."""

BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 60.0
"""The longest a server's ``Retry-After`` is obeyed; beyond it the run waits this long."""

NO_KEY = "none"
"""Sent when no key is configured: local servers ignore it, and the openai client wants one."""

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


class EndpointError(RuntimeError):
    """The endpoint failed a request for good (after retries, or a refusal no retry mends)."""


def resolve_api_key(value: str) -> str:
    """The key to send for the ``api_key`` setting: the value of the environment variable
    it names, the key itself, or :data:`NO_KEY` when empty.

    A value spelled like a variable name (``OPENAI_API_KEY``) that is not set is an error
    rather than a key: sending the name as a key would fail later with a puzzling 401.
    """
    if not value:
        return NO_KEY
    if value in os.environ:
        if not os.environ[value]:
            raise ValueError(f"api_key={value}: the environment variable ${value} is empty; export the key in it")
        return os.environ[value]
    if _ENV_NAME.fullmatch(value):
        raise ValueError(f"api_key={value} names an environment variable that is not set; export {value}=<key> "
                         "(or pass the key itself)")
    return value


def key_record(value: str) -> str:
    """What a results file may say about the ``api_key`` setting: the environment
    variable's name, ``""`` for none, ``"<redacted>"`` for a key given in clear."""
    if not value or value in os.environ or _ENV_NAME.fullmatch(value):
        return value
    return "<redacted>"


class OpenAIPolicy:
    """Chat completions with tools from ``{api_base}/chat/completions``. Thread-safe."""

    weight_version = 0

    def __init__(self, api_base: str, model: str, api_key: str = "", *, concurrency: int = 8,
                 timeout_s: float = 120.0, max_retries: int = 5) -> None:
        """``api_key`` is resolved by :func:`resolve_api_key` (a key or a variable's name)."""
        self.api_base = api_base.rstrip("/")
        self.model = model
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        # The client's own retries are off: this class retries, so it can say how often it tried.
        self.client = openai.OpenAI(base_url=self.api_base, api_key=resolve_api_key(api_key),
                                    timeout=timeout_s, max_retries=0)
        self._calls = 0
        self._lock = threading.Lock()
        self._jitter = random.Random()
        self.adaptations: list[str] = []
        """Settings this endpoint refused and the policy changed, in order (see the module doc)."""
        self._token_key = "max_tokens"
        self._send_temperature = True

    def request_body(self, messages: list[Message], tools: list[dict[str, Any]] | None,
                     sampling: SamplingParams) -> dict[str, Any]:
        """The JSON body of the request for one prompt (what a dry run prints)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, self._token_key: sampling.max_new_tokens}
        if self._send_temperature:
            body["temperature"] = sampling.temperature
        if sampling.top_p != 1.0:  # left out at its default: some models refuse the key itself
            body["top_p"] = sampling.top_p
        if tools:  # OpenAI refuses an empty list
            body["tools"] = tools
        return body

    def generate(self, prompts: list[list[Message]], tools: list[list[dict[str, Any]]] | None = None,
                 sampling: SamplingParams = SamplingParams()) -> list[Completion]:
        bodies = [self.request_body(m, tools[i] if tools else None, sampling) for i, m in enumerate(prompts)]
        if not bodies:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(bodies)),
                                thread_name_prefix="openai-policy") as pool:
            futures = [pool.submit(self._complete, body, sampling) for body in bodies]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:  # requests not yet sent are not sent
                    future.cancel()
                raise

    # ---- one request ---------------------------------------------------------------------
    def _complete(self, body: dict[str, Any], sampling: SamplingParams) -> Completion:
        with self._lock:
            self._calls += 1
            call_id_prefix = f"call_{self._calls}"
        temperature = sampling.temperature if sampling.temperature > 0 else 1.0
        response = self._send(body)
        if response is None:  # the prompt does not fit the model's context
            return Completion({"role": "assistant", "content": ""}, "", [], [], [], self.weight_version,
                              "context", temperature)
        if not response.choices:
            raise EndpointError(f"the endpoint {self.api_base} returned no choices for model {self.model!r}; "
                                "is it an OpenAI-compatible chat-completions server?")
        choice = response.choices[0]
        text = choice.message.content or ""
        calls = [{"id": call.id or f"{call_id_prefix}_{i}", "type": "function",
                  "function": {"name": call.function.name, "arguments": call.function.arguments or ""}}
                 for i, call in enumerate(choice.message.tool_calls or []) if getattr(call, "function", None)]
        if calls:
            message: Message = {"role": "assistant", "content": text, "tool_calls": calls}
        else:
            message = parse_text_action(text, call_id_prefix=call_id_prefix)
        finish = "length" if choice.finish_reason == "length" else "stop"  # tool_calls, content_filter: ended
        return Completion(message, text, [], [], [], self.weight_version, finish, temperature)

    def _send(self, body: dict[str, Any]) -> Any:
        """The ChatCompletion for ``body``, None when the prompt exceeds the context, or
        EndpointError once retries are spent or the refusal is final."""
        attempts = self.max_retries + 1
        attempt = 0
        while attempt < attempts:
            wait: float | None = None
            try:
                return self.client.chat.completions.create(**body)
            except openai.BadRequestError as exc:
                adapted = self._adapt(body, exc)
                if adapted is None:
                    if _context_exceeded(exc):
                        return None
                    raise EndpointError(self._refusal(exc)) from None
                body = adapted  # a changed request, not a retry: the attempt is not spent
                continue
            except openai.APITimeoutError:
                problem = f"did not answer within timeout_s={self.timeout_s:g}"
            except openai.APIConnectionError as exc:
                problem = f"could not be reached ({exc.__cause__ or exc})"
            except openai.APIStatusError as exc:
                if _context_exceeded(exc):
                    return None
                if exc.status_code < 500 and exc.status_code not in RETRY_STATUSES:
                    raise EndpointError(self._refusal(exc)) from None
                problem = f"answered HTTP {exc.status_code} ({_error_text(exc)})"
                wait = _retry_after(exc.response.headers)
            attempt += 1
            if attempt < attempts:
                backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1)) * self._jitter.uniform(0.5, 1.0)
                time.sleep(backoff if wait is None else wait)
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        raise EndpointError(f"the endpoint {self.api_base} {problem} on {tries}; "
                            "start the server or fix api_base= (timeout_s= and max_retries= tune the patience)")

    def _adapt(self, body: dict[str, Any], exc: openai.BadRequestError) -> dict[str, Any] | None:
        """``body`` rewritten to what the endpoint said it takes, or None when the refusal
        is not one this policy knows how to mend. Each change is made once and kept."""
        param, code, text = _error_field(exc, "param"), _error_field(exc, "code"), _error_text(exc)
        with self._lock:
            if param == "max_tokens" or (code == "unsupported_parameter" and "max_completion_tokens" in text):
                if self._token_key == "max_tokens":
                    self._token_key = "max_completion_tokens"
                    self.adaptations.append("max_tokens -> max_completion_tokens")
            elif param == "temperature" and code == "unsupported_value" and self._send_temperature:
                self._send_temperature = False
                self.adaptations.append(f"temperature={body.get('temperature')} refused: the model's own is used")
        adapted = {k: v for k, v in body.items() if k not in ("max_tokens", "max_completion_tokens", "temperature")}
        adapted[self._token_key] = body.get("max_tokens", body.get("max_completion_tokens"))
        if self._send_temperature and "temperature" in body:
            adapted["temperature"] = body["temperature"]
        return None if adapted == body else adapted

    def _refusal(self, exc: openai.APIStatusError) -> str:
        status = exc.status_code
        fix = {401: "check api_key= (a key, or the name of the environment variable holding it)",
               403: "check api_key= and that it may use this model",
               404: f"check model= (the endpoint does not serve {self.model!r}?) and api_base= (ending in /v1?)"
               }.get(status, "the request may use a setting this model does not take")
        return f"the endpoint {self.api_base} refused the request with HTTP {status} ({_error_text(exc)}); {fix}"


def _error_text(exc: openai.APIStatusError) -> str:
    """The server's own words (its error body's message), one line, bounded."""
    body = exc.body  # the client has already unwrapped {"error": {...}}
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        text = body["message"]
    else:
        text = re.sub(r"^Error code: \d+ - ", "", exc.message)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _error_field(exc: openai.APIStatusError, name: str) -> str | None:
    """A field of the server's error body (``param``, ``code``), when it gave one."""
    value = getattr(exc, name, None)
    if value is None and isinstance(exc.body, dict):
        value = exc.body.get(name)
    return value if isinstance(value, str) else None


def _context_exceeded(exc: openai.APIStatusError) -> bool:
    if exc.status_code != 400:
        return False
    code = getattr(exc, "code", None)
    return code == "context_length_exceeded" or "maximum context length" in _error_text(exc).lower()


def _retry_after(headers: Any) -> float | None:
    """Seconds a 429/503 asks to wait (``retry-after-ms`` or ``retry-after`` in seconds),
    at most :data:`RETRY_AFTER_MAX_S`; None when absent or an HTTP date."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name, ""))
        except (TypeError, ValueError):
            continue
        if value >= 0:
            return min(RETRY_AFTER_MAX_S, value / scale)
    return None
