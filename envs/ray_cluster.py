"""A real Ray cluster on this machine for the ``ray`` vector backend: a head node plus worker
nodes, each started with ``ray start --block`` in a session of its own, so one node can be
killed (a real fault) and the whole cluster torn down without touching any other Ray on the
machine.

    with LocalCluster(head_cpus=2, worker_cpus=(1,)) as cluster, cluster.as_driver() as address:
        vec = make_vec("guess", 4, backend="ray", ray_address=address)

``python -m scripts.ray_cluster`` keeps one up from a shell. The cluster uses token
authentication with a token of its own (``RAY_AUTH_TOKEN``): a driver needs
:attr:`LocalCluster.driver_env` in its environment to join. Tests
(``tests/envs/test_ray_cluster.py``) and ``benchmarks/perf_ray.py`` use the same class.
On one machine the "nodes" share its cores: this measures overhead and faults, not scale.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

START_TIMEOUT_S = 60.0
WORKER_RESOURCE = "clawgym_worker"
"""The custom resource every worker node offers (1 each), so a test can place actors there."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """``head_cpus`` (and ``head_resources``) on the head node, and one worker node per entry
    of ``worker_cpus``."""

    def __init__(self, head_cpus: int = 2, worker_cpus: tuple[int, ...] = (1,),
                 head_resources: dict[str, float] | None = None) -> None:
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        self.head_resources = dict(head_resources or {})
        self.temp_dir = ""
        self.port = 0
        token = secrets.token_hex(32)
        self.driver_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        """The environment variables a driver (or ``ray status``) needs to join."""
        self._head: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes] | None] = []
        self._logs: list[IO[bytes]] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalCluster:
        # Short: Ray's Unix sockets live under it, and their paths are capped at 107 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="cgray", dir="/tmp")
        self.port = free_port()
        try:
            self._head = self._launch("head", ["--head", "--port", str(self.port), "--num-cpus",
                                               str(self.head_cpus), "--temp-dir", self.temp_dir,
                                               "--include-dashboard=false",
                                               "--resources", json.dumps(self.head_resources),
                                               "--ray-client-server-port", str(free_port())])
            for cpus in self.worker_cpus:
                self.add_worker(cpus)
        except BaseException:
            self.close()
            raise
        return self

    def add_worker(self, cpus: int = 1, resources: dict[str, float] | None = None) -> int:
        """Start one more worker node; returns its index ``i``. It offers ``cpus`` CPUs,
        ``clawgym_worker: 1``, ``clawgym_worker_<i>: 1`` (to find or target this node) and
        ``resources``."""
        i = len(self._workers)
        resources = {WORKER_RESOURCE: 1, f"{WORKER_RESOURCE}_{i}": 1, **(resources or {})}
        # A temp dir of its own, as on a machine of its own: nodes sharing one would unpack
        # the same runtime env into the same folder, each under the others' feet.
        temp_dir = Path(self.temp_dir) / f"w{i}"
        temp_dir.mkdir()
        self._workers.append(self._launch(f"worker{i}", [
            "--address", self.address, "--num-cpus", str(cpus), "--resources", json.dumps(resources),
            "--temp-dir", str(temp_dir)]))
        return i

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log_path = Path(self.temp_dir) / f"{name}.log"
        log = open(log_path, "wb")
        self._logs.append(log)
        ray = str(Path(sys.executable).with_name("ray"))
        proc = subprocess.Popen([ray, "start", "--block", "--disable-usage-stats", *args],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **self.driver_env})
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"Ray runtime started" not in log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`ray start` for the {name} node did not come up; see {log_path}")
            time.sleep(0.2)
        return proc

    @contextmanager
    def as_driver(self) -> Iterator[str]:
        """This process set up to join the cluster: :attr:`driver_env` in ``os.environ`` and in
        Ray's settings, which Ray reads once at import (refreshed through its private
        ``Config``); yields the address. Restores both on exit."""
        saved = {k: os.environ.get(k) for k in self.driver_env}
        os.environ.update(self.driver_env)
        _refresh_ray_auth()
        try:
            yield self.address
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            _refresh_ray_auth()

    def kill_worker(self, i: int = 0) -> None:
        """SIGKILL worker node ``i``: its raylet, its agents and every actor process it runs,
        as a machine that loses power would. The head notices by missed health checks."""
        proc = self._workers[i]
        if proc is not None:
            _kill_tree(proc)
            self._workers[i] = None

    def close(self) -> None:
        for proc in [*self._workers, self._head]:
            if proc is not None:
                _kill_tree(proc)
        self._workers, self._head = [], None
        for log in self._logs:
            log.close()
        self._logs = []
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _refresh_ray_auth() -> None:
    if "ray" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and all its descendants: Ray's worker processes start sessions of
    their own, so the process group alone would miss them."""
    pids = _descendants(proc.pid)
    for pid in [proc.pid, *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
