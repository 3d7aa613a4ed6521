"""Helpers shared by the test packages."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def require(condition: bool, reason: str) -> None:
    """Skip when a machine part (docker, bwrap, chromium) is missing, with the reason;
    under ``CI=true`` fail instead, so a green CI means every part was really exercised."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true requires this part: {reason}")
    pytest.skip(reason)


def cpu_growth(parse: Callable[[str], object], make: Callable[[int], str], n: int, factor: int = 16,
               repeats: int = 3) -> float:
    """How many times more CPU ``parse`` spends on ``make(factor * n)`` than on ``make(n)``.

    Thread CPU time, not the clock: waiting for a core on a loaded machine does not count, so
    the ratio is the work's own. Each size keeps its cheapest of ``repeats`` calls. A linear
    parser gives about ``factor`` (less where a fixed cost dominates), a quadratic one about
    ``factor ** 2``: ``cpu_growth(...) < 4 * factor`` tells them apart by 4x either way.
    """
    texts = [make(n), make(factor * n)]
    cheapest = [float("inf"), float("inf")]
    for _ in range(repeats):
        for i, text in enumerate(texts):
            started = time.thread_time()
            parse(text)
            cheapest[i] = min(cheapest[i], time.thread_time() - started)
    return cheapest[1] / max(cheapest[0], 1e-6)


SANDBOX_BACKENDS = [
    pytest.param("docker", marks=pytest.mark.docker, id="docker"),
    pytest.param("bwrap", marks=pytest.mark.bwrap, id="bwrap"),
]
"""Parametrize a fixture over both sandbox backends, each with its marker."""
DOCKER_SLOW_BACKENDS = [
    pytest.param("bwrap", marks=pytest.mark.bwrap, id="bwrap"),
    pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow], id="docker"),
]
"""Both backends, docker's run marked slow: for modules whose sweep costs about a minute
on docker and whose default run on bwrap already exercises the same code."""


@functools.cache
def _backend_status() -> dict[str, str | None]:
    from envs.sandbox import backend_status

    return backend_status()


def require_backend(name: str) -> None:
    """Skip (fail under CI=true) when sandbox backend ``name`` cannot run here, with the reason."""
    reason = _backend_status()[name]
    require(reason is None, f"sandbox backend {name} unavailable: {reason}")


@contextlib.contextmanager
def chat_completions_server(reply: Callable[[dict[str, Any]], list[str]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A real OpenAI-compatible ``/chat/completions`` server on 127.0.0.1.

    ``reply(body)`` gives the choices' texts for a request. Yields the base URL (``.../v1``)
    and the list of requests received, each ``{"path": ..., "body": ...}``.
    """
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append({"path": self.path, "body": body})
            payload = json.dumps({"object": "chat.completion", "choices": [
                {"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                for i, text in enumerate(reply(body))]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        yield url, received


@contextlib.contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real threaded HTTP server on 127.0.0.1 with ``handler``; yields its base URL (``.../v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


LOGPROB_TOLERANCE = {"bfloat16": {"mean": 0.1, "max": 1.0}, "float32": {"mean": 1e-3, "max": 1e-2}}
"""|generation - teacher-forced scoring| per token that the GPU tests allow, by dtype."""


def assert_logprobs_match_scoring(policy, out, dtype: str, label: str, capsys) -> None:
    """Each completion's recorded log-probs agree with the policy's teacher-forced scores (adapter
    on) within LOGPROB_TOLERANCE, and clearly less than the adapter-off scores do: generation
    read the served weights, adapter included. Prints the gaps under ``label``."""
    import statistics

    def gaps(scores):
        return [abs(a - b) for c, s in zip(out, scores) for a, b in zip(c.logprobs, s)]

    ids = ([c.prompt_ids for c in out], [c.completion_ids for c in out])
    on = gaps(policy.score(*ids, temperature=out[0].temperature))
    off = gaps(policy.score(*ids, adapter=False, temperature=out[0].temperature))
    with capsys.disabled():
        print(f"\n{label}: |generation - scoring| mean {statistics.mean(on):.2e}, "
              f"max {max(on):.2e} over {len(on)} tokens (adapter off: mean {statistics.mean(off):.2e})")
    bound = LOGPROB_TOLERANCE[dtype]
    assert statistics.mean(on) < bound["mean"] and max(on) < bound["max"], (statistics.mean(on), max(on))
    assert statistics.mean(off) > 2 * statistics.mean(on)
