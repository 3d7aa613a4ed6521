"""Asking whether docker is there: a clear answer, and nothing left open when it is not."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from envs.sandbox import docker_backend


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("listening", [False, True], ids=["no-socket", "a-socket-that-is-not-docker"])
def test_no_daemon_is_named_and_probing_for_one_leaks_no_descriptor(tmp_path: Path, monkeypatch, listening) -> None:
    path = tmp_path / "docker.sock"
    server = None
    if listening:  # something answers, but it is not a Docker daemon: the client's own probe fails
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(8)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setattr(docker_backend, "_PING_TIMEOUT_S", 0.5)  # the silent socket's probes wait this out
    try:
        docker_backend.unavailable_reason()  # warm up lazy imports and caches
        before = _open_fds()
        reasons = [docker_backend.unavailable_reason() for _ in range(3)]
        assert _open_fds() == before
    finally:
        if server is not None:
            server.close()
    assert all(r and r.startswith(f"no Docker daemon answers at unix://{path}") and "start dockerd" in r
               for r in reasons), reasons
