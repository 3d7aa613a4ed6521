"""Stopping on SIGTERM as on a normal exit.

Python's default SIGTERM action ends the process on the spot: no ``finally``, no
``atexit``, no weakref finalizers. That is how ``timeout``, ``kill``, Slurm and Kubernetes
stop a job, and a trainer stopped that way left its Docker sandboxes running (16
containers of ``env=swe parallel=8`` stayed up until the next clawgym process swept them).
Inside :func:`stop_on_sigterm` a SIGTERM raises :class:`Preempted` in the main thread
instead: the run unwinds through its ``finally`` blocks (vector envs close, sandboxes are
removed, the run dir is flushed) and the command returns 128 + the signal's number, as a
shell reports a signal's exit. Later SIGTERMs during that cleanup are ignored so that
they cannot cut it short; SIGKILL still ends the process at once, and what it leaves is
swept by the next clawgym process (``envs.sandbox``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Preempted(SystemExit):
    """A stop signal arrived. A ``SystemExit`` (not an ``Exception``), so no ``except
    Exception`` on the way up swallows it; its ``code`` is 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Preempted` in the main thread (once).
    Outside the main thread, where Python cannot install handlers, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handle(signum: int, frame: object) -> None:
        nonlocal raised
        if not raised:  # one unwinding; a second signal must not interrupt its cleanup
            raised = True
            raise Preempted(signum)

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
