"""Tools that run in Python, in a child process where a time limit can stop them.

BFCL's backends and tau2's domain tools are Python objects. Run in the env's own process,
one costly call (``power(base=10, exponent=10**7)``, tau2's ``calculate("9**9**9**9")``,
which the wheel evaluates with ``eval``) holds the interpreter lock, so every other thread
of a trainer stops with it, and no timeout can interrupt it. A :class:`Worker` hosts those
objects in a child process instead: each request has a time limit; past it the child is
killed (:class:`ToolStopped`) and the next request starts a fresh one. The child also has
a memory limit (:data:`MEMORY_BYTES`) and kills itself if a call outlives its limit by
:data:`GRACE_S` (the parent may be gone), and its module-level state (BFCL sets
``mpmath.mp.dps`` and the ``decimal`` context from agent arguments) stays its own.

The protocol is one JSON object per line each way: ``{"op": ..., **fields}`` to the
child, ``{"ok": value}`` or ``{"error": "..."}`` (a fault of the host's code) back. A host
is a class with one ``op_<name>`` method per operation (:data:`HOSTS`). Answers come on a
pipe of their own; the child's standard output goes to the null device, so what an
import or a tool prints cannot corrupt them.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from envs.errors import EnvError

HOSTS = {
    "bfcl": "envs.toolcall.bfcl_backends:BFCLBackends",
    "tau2": "envs.toolcall.tau2_host:Tau2Host",
}
"""Host kind -> ``module:Class`` run in the child."""
MEMORY_BYTES = 4 << 30
"""The child's address-space limit: a call that tries to build a bigger value fails with
``MemoryError`` (its own error message) instead of taking the machine's memory."""
START_TIMEOUT_S = 120.0
"""How long a child may take to start and import its host (slow on a loaded machine)."""
GRACE_S = 5.0
MAX_RESPONSE_BYTES = 64 << 20


class ToolStopped(Exception):
    """A request ran past its time limit (``reason`` ``"timeout"``), or the child died
    during it (``"died"``: out of memory, a crash); the child is gone."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def stopped_message(name: str, stop: ToolStopped, limit_s: float) -> str:
    """The tool message of a call that was stopped: the episode ends with it."""
    if stop.reason == "timeout":
        return (f"Error: `{name}` ran past its {limit_s:g} s limit and was stopped; the "
                "episode ends (the tools' state went with their process).")
    return (f"Error: `{name}` ended the tools' process (out of memory, or a crash) and was "
            "stopped; the episode ends.")


def tool_options(call_timeout_s: float, max_output_chars: int) -> None:
    """Check a suite's ``call_timeout_s`` and ``max_output_chars``."""
    if not 0 < call_timeout_s <= 300:
        raise ValueError(f"call_timeout_s must be in (0, 300], got {call_timeout_s}")
    if max_output_chars < 100:
        raise ValueError(f"max_output_chars must be >= 100, got {max_output_chars}")


class Worker:
    """A child process hosting one kind of tool (``bfcl`` or ``tau2``), started on first use.
    Not shared between threads: one env, one worker."""

    def __init__(self, kind: str) -> None:
        if kind not in HOSTS:
            raise ValueError(f"kind must be one of {', '.join(HOSTS)}, got {kind!r}")
        self.kind = kind
        self._process: subprocess.Popen[bytes] | None = None
        self._answers = -1
        """The read end of the pipe the child answers on (its own standard output, where
        imports and tools may print, goes to the null device)."""
        self._buffer = b""

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The child's process id while one is started."""
        return self._process.pid if self._process is not None else None

    def request(self, op: str, timeout_s: float, **fields: Any) -> Any:
        """Run ``op`` in the child; its answer. Raises :class:`ToolStopped` when it runs past
        ``timeout_s`` or the child dies (the child is then gone), :class:`EnvError` when the
        host's code fails or the child cannot start."""
        if not self.alive:
            self._start()
        assert self._process is not None and self._process.stdin is not None
        line = json.dumps({"op": op, "timeout_s": timeout_s, **fields})  # ASCII: one line
        try:
            self._process.stdin.write(line.encode() + b"\n")
            self._process.stdin.flush()
            answer = json.loads(self._read_line(time.monotonic() + timeout_s))
        except (BrokenPipeError, EOFError) as exc:
            self.close()
            raise ToolStopped("died") from exc
        except TimeoutError as exc:
            self.close()
            raise ToolStopped("timeout") from exc
        if "error" in answer:
            raise EnvError(f"the {self.kind} tool process failed at {op!r}: {answer['error']}")
        return answer["ok"]

    def request_or_fail(self, op: str, timeout_s: float, **fields: Any) -> Any:
        """:meth:`request` for the env's own work (loading, hashing): a stop is an
        :class:`EnvError`, not the agent's doing."""
        try:
            return self.request(op, timeout_s, **fields)
        except ToolStopped as exc:
            what = f"ran past {timeout_s:g} s" if exc.reason == "timeout" else "died"
            raise EnvError(f"the {self.kind} tool process {what} at {op!r}; is the machine "
                           "out of memory or overloaded?") from None

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[2])
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        self._buffer = b""
        self._answers, write_end = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "envs.toolcall.worker", self.kind, str(write_end)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(write_end,), env=environment, cwd=root)
        finally:
            os.close(write_end)
        try:
            self.request("ping", START_TIMEOUT_S)
        except ToolStopped as exc:
            if exc.reason == "timeout":
                raise EnvError(f"the {self.kind} tool process did not start within "
                               f"{START_TIMEOUT_S:g} s; is the machine overloaded?") from None
            raise EnvError(f"the {self.kind} tool process exited as it started; run "
                           f"`python -m envs.toolcall.worker {self.kind} 1 < /dev/null` to see why") from None

    def _read_line(self, deadline: float) -> bytes:
        fd = self._answers
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if not select.select([fd], [], [], remaining)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self._buffer += chunk
            if len(self._buffer) > MAX_RESPONSE_BYTES:
                self.close()
                raise EnvError(f"the {self.kind} tool process sent more than "
                               f"{MAX_RESPONSE_BYTES} bytes in one answer")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def close(self) -> None:
        """Kill the child (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.wait()
        if process.stdin is not None:
            process.stdin.close()
        os.close(self._answers)
        self._answers = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit the modules may be gone
            pass


# ---- the child ---------------------------------------------------------------------------
class WorkerHolder:
    """What a suite whose tools run in a :class:`Worker` shares: the child of kind
    :attr:`worker_kind`, started on first use and kept across episodes, closed with the
    suite, and left behind when the suite is pickled (the copy starts its own)."""

    worker_kind: str = ""
    _worker: Worker | None = None

    def worker(self) -> Worker:
        if self._worker is None:
            self._worker = Worker(self.worker_kind)
        return self._worker

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_worker"] = None  # a live process does not travel
        return state


def _serve(kind: str, answers_fd: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    protocol = os.fdopen(answers_fd, "w", encoding="ascii")
    module, _, name = HOSTS[kind].partition(":")
    host = getattr(importlib.import_module(module), name)()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        op, timeout_s = request.pop("op"), request.pop("timeout_s")
        signal.alarm(math.ceil(timeout_s + GRACE_S))  # the default action ends the process
        try:
            answer = {"ok": None if op == "ping" else getattr(host, f"op_{op}")(**request)}
        except Exception as exc:  # noqa: BLE001 - the host's own fault, reported to the parent
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        signal.alarm(0)
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
