"""The server side of an engine: JSON over HTTP with retries, and a server process started here.

:class:`Http` retries a refused connection, a timeout, HTTP 408/429 or 5xx (backoff from
0.5 s doubling) and raises :class:`EngineError` with what failed and what to do; it never
waits longer than its timeout per try, so a dead server is an error, not a hang.
:class:`LaunchedServer` starts a command in its own process group and ends the whole group
(engine workers included) at :meth:`LaunchedServer.stop` or at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

RETRY_STATUSES = frozenset({408, 429})
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
LOG_TAIL_CHARS = 3000


class EngineError(RuntimeError):
    """The inference server failed for good: down, too slow, or answering something else."""


class Http:
    """JSON over HTTP to one server (stdlib only), retrying what a retry can mend."""

    def __init__(self, base_url: str, engine: str, timeout_s: float, max_retries: int,
                 alive: Callable[[], str | None] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.engine = engine
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.alive = alive
        """Says why a launched server is gone (None while it runs): no retries into a dead process."""

    def get(self, path: str) -> Any:
        return self.request("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            req = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
                    raw = response.read().decode("utf-8", "replace")
                return _json_or_text(raw)
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")[:500]
                if exc.code in RETRY_STATUSES or exc.code >= 500:
                    failure = f"HTTP {exc.code}: {detail}"
                else:
                    raise EngineError(f"the {self.engine} server refused {method} {path} with HTTP {exc.code}: "
                                      f"{detail}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout) as exc:
                reason = getattr(exc, "reason", exc)
                failure = (f"no answer within engine.timeout_s={self.timeout_s:g} s"
                           if isinstance(reason, (TimeoutError, socket.timeout)) else f"{reason}")
            gone = self.alive() if self.alive is not None else None
            if gone is not None:
                raise EngineError(f"the {self.engine} server is gone ({gone}); {method} {path} failed: {failure}")
            if last:
                break
            time.sleep(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** attempt) * (0.5 + random.random() / 2))
        raise EngineError(f"the {self.engine} server at {self.base_url} failed {method} {path} "
                          f"{self.max_retries + 1} times (last: {failure}); check that it is running and "
                          "reachable (engine.url=), or pass engine.launch=true to start one")


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LaunchedServer:
    """A server process started in its own process group and stopped with it: at
    :meth:`stop`, and at interpreter exit whatever happened before."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        atexit.register(self.stop)

    def exited(self) -> str | None:
        """None while the process runs, else how it ended."""
        code = self.process.poll()
        return None if code is None else f"exit code {code}; log {self.log_path}"

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def wait_ready(self, url: str, timeout_s: float, what: str) -> float:
        """Poll ``url`` until it answers 200; returns the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.process.poll() is not None:
                raise EngineError(f"{what} exited during startup (exit code {self.process.returncode}); "
                                  f"the end of its log ({self.log_path}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout):
                pass
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"{what} did not answer {url} within engine.startup_timeout_s={timeout_s:g} s; "
                          f"the end of its log ({self.log_path}):\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        else:  # the leader ended; its children (engine workers) may not have
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if not self._log.closed:
            self._log.close()
        atexit.unregister(self.stop)
