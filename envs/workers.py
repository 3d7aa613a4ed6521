"""Where a vector env's members run: the caller's order, a thread, a process, a Ray actor.

Each member owns one env and runs every call on it in one place (one thread, one process,
one actor): envs such as Playwright's browser must be used from the thread that made them.
A member that crashed or hung is *abandoned*: what can be killed is killed, and the next
call builds a fresh env. The vector env (``envs.vector``) does the timing and bookkeeping.
Ray actors are in :mod:`envs.ray_members`.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import gymnasium as gym

Call = tuple[str, tuple[Any, ...], dict[str, Any]]
"""(method name, args, kwargs) to run on a member's env."""


class MemberTimeout(Exception):
    """A member did not answer before the deadline."""


class RemoteError(Exception):
    """An exception raised inside a member, carried back as text."""


def describe(exc: BaseException) -> str:
    """One line of what went wrong plus the innermost frames: what ``info["error"]`` holds."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "".join(traceback.format_list(frames)).rstrip()
    head = f"{type(exc).__name__}: {exc}"
    return f"{head}\n{where}" if where else head


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for one env: a Gymnasium spec (entry point and all) plus kwargs.

    Carrying the spec, not just the id, lets a worker process or Ray actor build envs that
    were registered only in the parent (a test's or a plugin's).
    """

    spec: gym.envs.registration.EnvSpec
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env:
        return gym.make(self.spec, **self.kwargs)


class Member(Protocol):
    def submit(self, call: Call) -> None: ...
    def result(self, timeout: float) -> Any:
        """The call's return value; raises RemoteError or MemberTimeout."""
        ...
    def abandon(self) -> None: ...
    def close(self) -> None: ...


def _run(env: gym.Env, call: Call) -> Any:
    method, args, kwargs = call
    return getattr(env, method)(*args, **kwargs)


class ThreadMember:
    """Runs its env on a dedicated daemon thread (also the ``sync`` backend's member)."""

    def __init__(self, factory: Callable[[], gym.Env]) -> None:
        self._factory = factory
        self._start()

    def _start(self) -> None:
        self._inbox: queue.Queue[Call | None] = queue.Queue()
        self._outbox: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, args=(self._inbox, self._outbox),
                                        daemon=True, name="clawgym-env")
        self._thread.start()

    def _loop(self, inbox: queue.Queue[Call | None], outbox: queue.Queue[tuple[bool, Any]]) -> None:
        env: gym.Env | None = None
        try:
            while (call := inbox.get()) is not None:
                try:
                    if env is None:
                        env = self._factory()
                    outbox.put((True, _run(env, call)))
                except Exception as exc:
                    outbox.put((False, describe(exc)))
        finally:
            if env is not None:
                try:
                    env.close()
                except Exception:
                    pass

    def submit(self, call: Call) -> None:
        self._inbox.put(call)

    def result(self, timeout: float) -> Any:
        try:
            ok, value = self._outbox.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise MemberTimeout() from None
        if not ok:
            raise RemoteError(value)
        return value

    def abandon(self) -> None:
        # A hung thread cannot be killed: tell it to close its env when (if) it wakes,
        # and start over with a new thread and a new env.
        self._inbox.put(None)
        self._start()

    def close(self) -> None:
        self._inbox.put(None)
        self._thread.join(timeout=30)


def _process_main(conn: Any, factory: Callable[[], gym.Env]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # `timeout` and schedulers signal the whole process group: close the env (its sandbox)
    # on the way out instead of dying with it held.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    env: gym.Env | None = None
    try:
        while (call := conn.recv()) is not None:
            try:
                if env is None:
                    env = factory()
                conn.send((True, _run(env, call)))
            except Exception as exc:
                conn.send((False, describe(exc)))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        if env is not None:
            env.close()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one unwinding, not cut short by another
    raise SystemExit(128 + signum)


class ProcessMember:
    """Runs its env in a child process: a crash or a hang is killed, not waited on."""

    _ctx = mp.get_context("spawn")  # fork after threads (docker SDK, tqdm) is unsafe

    def __init__(self, factory: Callable[[], gym.Env]) -> None:
        self._factory = factory
        self._proc: Any = None
        self._conn: Any = None
        self._lost: str | None = None  # why the call just submitted cannot be answered

    def _ensure(self) -> None:
        if self._proc is None or not self._proc.is_alive():
            self._conn, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=_process_main, args=(child, self._factory),
                                           daemon=True, name="clawgym-env")
            self._proc.start()
            child.close()

    def submit(self, call: Call) -> None:
        if call[0] != "reset" and self._proc is not None and not self._proc.is_alive():
            # Killed while idle (OOM killer, an operator): its env and the episode in it are
            # gone. A fresh process would answer this step with ResetNeeded, hiding why.
            self._lost = (f"the env process died between calls (exit code {self._proc.exitcode}); "
                          "its episode is lost")
            return
        self._ensure()
        try:
            self._conn.send(call)
        except (OSError, ValueError):  # the child died between calls; result() reports it
            pass

    def result(self, timeout: float) -> Any:
        if self._lost is not None:
            lost, self._lost = self._lost, None
            raise RemoteError(lost)
        try:
            if not self._conn.poll(max(timeout, 0.0)):
                raise MemberTimeout()
            ok, value = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=5)
            raise RemoteError(f"the env process died (exit code {self._proc.exitcode})") from None
        if not ok:
            raise RemoteError(value)
        return value

    def abandon(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=10)
        self._proc = self._conn = None

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            self._conn.send(None)
            self._proc.join(timeout=30)
        except (BrokenPipeError, OSError):
            pass
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=10)
        self._proc = self._conn = None
