"""Sandbox backend on Docker: one long-lived container per sandbox, one ``docker exec`` per command.

The container runs the clawgym base image with a read-only root, no network
(``network_mode="none"``), no capabilities, ``no-new-privileges``, and memory (no swap),
pids and CPU caps. ``/workspace``, ``/tmp`` and ``/dev/shm`` are bind mounts of the host
directories :class:`~envs.sandbox.workspace.Workspace` owns, so file transfer never goes
through the daemon and they share the bwrap backend's size limits.

``/dev``. Docker's own ``/dev`` is a writable 64 MB tmpfs that lasts as long as the
container, outside ``disk_mb``; here it is replaced by a read-only one (runc makes the
device nodes first, then remounts it read-only). A user ``/dev`` also drops Docker's
``/dev/pts`` and ``/dev/mqueue``: there are no pseudo-terminals, and POSIX message queues
are off (``RLIMIT_MSGQUEUE`` 0), since without their mount :meth:`DockerSandbox.reset`
could not find and remove them. System V IPC objects, which live in the container's IPC
namespace across commands, are removed by ``reset()`` (``ipcrm --all``).

"No process outlives its command" is enforced inside: every command runs as ::

    /bin/sh -c 'timeout --foreground -s KILL T /bin/bash -c CMD; rc=$?; kill -9 -1; exit $rc'

``kill -9 -1`` kills every process in the container except PID 1 and the caller, which
catches background and setsid-ed children that ``timeout`` (which only kills its own child
in ``--foreground`` mode, and would miss setsid-ed ones in any mode) leaves behind. PID 1 is therefore not Docker's ``init`` but a few
lines of Python that reap zombies and ignore every catchable signal.

Timeouts. GNU ``timeout -s KILL`` exits 137 (128+SIGKILL) when it fires, the same status
as a command killed otherwise (the OOM killer, ``kill -9 $$``). So a command is reported as
timed out when the wrapper exits 137 or 124 *and* the exec took at least ``timeout``
seconds as measured here, which always holds when the in-container timer fired (it starts
later). The one misreport possible is a command SIGKILL-ed by something else within the
last few milliseconds before its deadline. Should the exec stream still be open
``_GUARD_S`` seconds past the deadline, a separate exec runs ``kill -9 -1`` and the
command is reported as timed out.
"""

from __future__ import annotations

import gc
import os
import select
import socket
import struct
import threading
import time
import weakref
from typing import TYPE_CHECKING

from envs.sandbox.base import (
    DEFAULT_IMAGE,
    WORKDIR,
    ExecResult,
    SandboxConfig,
    SandboxError,
    SandboxUnavailable,
    exec_timeout,
)
from envs.sandbox.workspace import (
    HOSTNAME,
    SANDBOX_SHM,
    SANDBOX_TMP,
    OutputBuffer,
    Workspace,
    WorkspaceSandbox,
    command_env,
    encodable,
    new_sandbox_id,
    owner_alive,
    refusal,
    sweep_stale_workspaces,
)

if TYPE_CHECKING:
    import docker

LABEL = "clawgym.sandbox"
_GUARD_S = 5.0
_PING_TIMEOUT_S = 3.0
_WRAPPER = 'timeout --foreground -s KILL "$1" /bin/bash -c "$2"; rc=$?; kill -9 -1 2>/dev/null; exit $rc'
_RESET = "kill -9 -1 2>/dev/null; ipcrm --all 2>/dev/null; exit 0"
"""Files are wiped on the host (Workspace.wipe); processes and System V IPC only from inside."""
_DEV_TMPFS = "ro,nosuid,dev,noexec,mode=755,size=64k"
"""``/dev``: ``dev`` so its device nodes open, read-only once runc has made them."""
# PID 1: reap every orphan, ignore signals; `kill -9 -1` never reaches PID 1.
_INIT = """\
import os, signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
while True:
    signal.sigwait({signal.SIGCHLD})
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
"""


def _client(timeout_s: float = 60.0) -> docker.DockerClient:
    """A connected Docker client, or SandboxUnavailable saying what to install or start."""
    try:
        import docker
    except ImportError:
        raise SandboxUnavailable("the docker Python SDK is not installed: pip install docker") from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if where.startswith("unix://") and not _accepts(where.removeprefix("unix://")):
        # no daemon: say so before docker's client, whose failed version probe leaks its socket
        raise SandboxUnavailable(f"no Docker daemon answers at {where}: start dockerd (or set DOCKER_HOST)")
    client, failure = None, ""
    try:
        # a short timeout while probing: a hung daemon must not hang make_sandbox for 60 s
        client = docker.from_env(timeout=_PING_TIMEOUT_S)
        client.ping()
    except Exception as exc:  # DockerException, requests and socket errors all mean the same here
        failure = type(exc).__name__
        if client is not None:
            client.close()
    if failure:
        # docker's client, failing inside its constructor, is left in reference cycles
        # holding an open socket: collect them now rather than at some later gc pass.
        gc.collect()
        raise SandboxUnavailable(f"no Docker daemon answers at {where} ({failure}): start dockerd (or set DOCKER_HOST)")
    assert client is not None
    client.api.timeout = timeout_s
    return client


def _accepts(path: str) -> bool:
    """Whether something listens on the unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(_PING_TIMEOUT_S)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def unavailable_reason(config: SandboxConfig | None = None) -> str | None:
    """None if docker sandboxes can run here, else what is missing and how to fix it."""
    image = (config or SandboxConfig()).image or DEFAULT_IMAGE
    try:
        client = _client()
    except SandboxUnavailable as exc:
        return str(exc)
    try:
        client.images.get(image)
    except Exception:
        return f"image {image} is missing: run `make rootfs` (scripts/build_rootfs.sh)"
    finally:
        client.close()
    return None


def sweep_stale_containers(client: docker.DockerClient) -> list[str]:
    """Remove clawgym sandbox containers whose creating process (on this host) is gone, and
    return their names. Sweepers racing for one container may each be told it was removed
    (dockerd can answer every forced removal of it with success), so a name can be in
    more than one sweeper's list."""
    from docker.errors import APIError

    removed = []
    host = socket.gethostname()
    # The list call's own summaries: inspecting each container would race with other
    # sandboxes removing theirs meanwhile (404 on a container that was just listed).
    for summary in client.api.containers(all=True, filters={"label": LABEL}):
        owner_host, _, sandbox_id = (summary.get("Labels") or {}).get("clawgym.owner", "").partition(":")
        if owner_host == host and sandbox_id and not owner_alive(sandbox_id):
            try:
                client.api.remove_container(summary["Id"], force=True)
            except APIError as exc:  # 404 gone, 409 removal in progress: another sweeper has it
                if exc.status_code in (404, 409):
                    continue
                raise
            removed.append((summary.get("Names") or [summary["Id"]])[0].lstrip("/"))
    return removed


class _Resources:
    """What a sandbox holds; released by close() or by the GC/atexit finalizer."""

    def __init__(self, client: docker.DockerClient, workspace: Workspace) -> None:
        self.client = client
        self.workspace = workspace
        self.container_id: str | None = None

    def remove_container(self) -> None:
        if self.container_id is None:
            return
        try:
            self.client.api.remove_container(self.container_id, force=True)
        except Exception as exc:
            if getattr(exc, "status_code", None) != 404:
                raise
        self.container_id = None

    def release(self) -> None:
        try:
            self.remove_container()
        finally:
            self.workspace.close()
            self.client.close()


class DockerSandbox(WorkspaceSandbox):
    """A sandbox in its own Docker container; every command is a ``docker exec`` in it."""

    backend = "docker"

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.image = self.config.image or DEFAULT_IMAGE
        client = _client()
        try:
            client.images.get(self.image)
        except Exception:
            client.close()
            raise SandboxUnavailable(f"image {self.image} is missing: run `make rootfs` (scripts/build_rootfs.sh)") from None
        try:
            sweep_stale_containers(client)
            sweep_stale_workspaces(self.backend)
            self.id = new_sandbox_id(self.backend)
            self.workspace = Workspace(self.id, self.config)
        except BaseException:
            client.close()
            raise
        self._resources = _Resources(client, self.workspace)
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._api = client.api
        self._lock = threading.Lock()
        self._env = [f"{k}={v}" for k, v in command_env(self.config).items()]
        try:
            self._start_container()
        except BaseException:
            self._finalizer()
            raise

    def _start_container(self) -> None:
        from docker.types import Ulimit

        c = self.config
        api = self._api
        host_config = api.create_host_config(
            binds=[f"{self.workspace.workspace}:{WORKDIR}:rw", f"{self.workspace.tmp}:{SANDBOX_TMP}:rw",
                   f"{self.workspace.shm}:{SANDBOX_SHM}:rw",
                   *(f"{self.workspace.workspace}:{alias}:rw" for alias in c.workspace_aliases)],
            tmpfs={"/dev": _DEV_TMPFS},
            network_mode="none", read_only=True,
            mem_limit=f"{c.memory_mb}m", memswap_limit=f"{c.memory_mb}m",
            pids_limit=c.pids, nano_cpus=int(c.cpus * 1e9),
            cap_drop=["ALL"], security_opt=["no-new-privileges"],
            ulimits=[Ulimit(name="msgqueue", soft=0, hard=0)],
        )  # fmt: skip
        try:
            created = api.create_container(
                self.image, command=["python3", "-I", "-S", "-c", _INIT], name=f"clawgym-{self.id}",
                hostname=HOSTNAME, working_dir=WORKDIR, host_config=host_config,
                labels={LABEL: "1", "clawgym.owner": f"{socket.gethostname()}:{self.id}"},
            )  # fmt: skip
            self._resources.container_id = self.container_id = created["Id"]
            api.start(self.container_id)
        except Exception as exc:
            raise SandboxError(f"could not start a sandbox container from {self.image}: {exc}") from exc

    # --- Sandbox protocol ----------------------------------------------------------

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        timeout = exec_timeout(timeout, self.config.default_timeout_s)
        with self._lock:
            self._check_open()
            if (refused := refusal(cmd)) is not None:
                return refused
            start = time.monotonic()
            argv = ["/bin/sh", "-c", _WRAPPER, "sh", f"{timeout:.3f}", encodable(cmd)]
            exec_id = self._exec_create(argv)
            out, err, guard_fired = self._stream(exec_id, start + timeout + _GUARD_S)
            elapsed = time.monotonic() - start
            code = 137 if guard_fired else self._exit_code(exec_id)
            timed_out = guard_fired or (code in (124, 137) and elapsed >= timeout)
            return ExecResult(
                exit_code=137 if timed_out else code,
                stdout=out.text(),
                stderr=err.text(),
                timed_out=timed_out,
                truncated=out.truncated or err.truncated,
                duration_s=elapsed,
            )

    def reset(self) -> None:
        """Kill everything, wipe the files; a container that died is replaced by a fresh one."""
        with self._lock:
            self._check_open()
            if self._running():
                self._run_quick(_RESET)
            else:
                self._resources.remove_container()
                self._start_container()
            self.workspace.wipe()

    # --- internals -----------------------------------------------------------------

    def _running(self) -> bool:
        try:
            return bool(self._api.inspect_container(self.container_id)["State"]["Running"])
        except Exception:
            return False

    def _died(self, exc: Exception) -> SandboxError:
        try:
            state = self._api.inspect_container(self.container_id)["State"]
            why = f"status {state['Status']}, OOMKilled={state['OOMKilled']}, exit code {state['ExitCode']}"
        except Exception as inspect_exc:
            why = f"it is gone ({inspect_exc})"
        return SandboxError(
            f"sandbox container clawgym-{self.id} is not running ({why}): {exc}; "
            "call reset() to start a fresh one"
        )

    def _exec_create(self, argv: list[str]) -> str:
        try:
            return self._api.exec_create(
                self.container_id, argv, stdout=True, stderr=True, stdin=False,
                environment=self._env, workdir=WORKDIR,
            )["Id"]  # fmt: skip
        except Exception as exc:
            if getattr(exc, "status_code", None) in (404, 409):
                raise self._died(exc) from exc
            raise SandboxError(f"docker exec failed in sandbox {self.id}: {exc}") from exc

    def _run_quick(self, script: str) -> None:
        """Run a housekeeping script (no user code) to completion, discarding output."""
        exec_id = self._exec_create(["/bin/sh", "-c", script])
        self._stream(exec_id, time.monotonic() + 10.0, guard=False)

    def _exit_code(self, exec_id: str) -> int:
        # the stream can end a moment before the daemon records the exit code
        for _ in range(100):
            info = self._api.exec_inspect(exec_id)
            if info["ExitCode"] is not None and not info["Running"]:
                return int(info["ExitCode"])
            time.sleep(0.005)
        raise SandboxError(f"docker never reported an exit code for exec {exec_id} in sandbox {self.id}")

    def _stream(self, exec_id: str, deadline: float, guard: bool = True) -> tuple[OutputBuffer, OutputBuffer, bool]:
        """Demultiplex the exec's output until it ends, capping each stream.

        Returns (stdout, stderr, guard_fired): guard_fired means the stream was still open
        at ``deadline`` and everything in the container was killed.
        """
        limit = self.config.max_output_bytes
        buffers = {1: OutputBuffer(limit), 2: OutputBuffer(limit)}
        try:
            raw = self._api.exec_start(exec_id, socket=True)
        except Exception as exc:
            raise SandboxError(f"docker exec failed in sandbox {self.id}: {exc}") from exc
        sock = getattr(raw, "_sock", raw)
        poller = select.poll()  # not select(): a trainer may well hold more than 1024 fds
        poller.register(sock, select.POLLIN)
        guard_fired = False
        pending = b""
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if guard_fired or not guard:
                        break
                    guard_fired = True
                    self._kill_everything()
                    deadline = time.monotonic() + 2.0
                    continue
                if not poller.poll(remaining * 1000):
                    continue
                data = sock.recv(1 << 16)
                if not data:
                    break
                pending = _demux(pending + data, buffers)
        except OSError as exc:
            raise SandboxError(f"lost the docker exec stream of sandbox {self.id}: {exc}") from exc
        finally:
            raw.close()
            sock.close()
        return buffers[1], buffers[2], guard_fired

    def _kill_everything(self) -> None:
        try:
            exec_id = self._exec_create(["/bin/sh", "-c", "kill -9 -1"])
            self._api.exec_start(exec_id, detach=True)
        except SandboxError:
            pass  # the container is gone: its processes with it


def _demux(data: bytes, buffers: dict[int, OutputBuffer]) -> bytes:
    """Split Docker's multiplexed stream (8-byte header: stream id, 3 pad, u32 size) into buffers.

    Returns the bytes of an incomplete trailing frame, to be prefixed to the next read.
    """
    view = memoryview(data)
    offset = 0
    while len(view) - offset >= 8:
        stream_id, size = struct.unpack_from(">BxxxL", view, offset)
        if len(view) - offset - 8 < size:
            break
        buffers.get(stream_id, buffers[2]).add(bytes(view[offset + 8 : offset + 8 + size]))
        offset += 8 + size
    return bytes(view[offset:])
