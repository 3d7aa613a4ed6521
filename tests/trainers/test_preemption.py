"""SIGTERM inside ``stop_on_sigterm`` unwinds like an exception: ``finally`` blocks run."""

from __future__ import annotations

import os
import signal
import time

import pytest

from trainers.preemption import Preempted, stop_on_sigterm


def _wait_for_signal() -> None:
    # a signal is handled between bytecodes of the main thread: give it a few to arrive
    for _ in range(1000):
        time.sleep(0.001)


def test_sigterm_raises_preempted_once_and_cleanup_runs_to_the_end():
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(Preempted) as stopped:
        with stop_on_sigterm():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                _wait_for_signal()
                cleaned.append("not reached")
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # a second one must not cut the cleanup short
                _wait_for_signal()
                cleaned.append("closed")
    assert cleaned == ["closed"]
    assert stopped.value.code == 128 + signal.SIGTERM and stopped.value.signal_name == "SIGTERM"
    assert isinstance(stopped.value, SystemExit) and not isinstance(stopped.value, Exception)
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back
