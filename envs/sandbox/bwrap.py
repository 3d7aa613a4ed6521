"""Sandbox backend on bubblewrap: one fresh set of namespaces per command, no daemon.

Each :meth:`BwrapSandbox.exec` runs ``bwrap --unshare-all ... -- /bin/bash -c cmd`` on the
clawgym rootfs (read-only) with this sandbox's ``/workspace``, ``/tmp`` and ``/dev/shm``
bound in; the rest of ``/dev`` is read-only. The new pid namespace gives "no process
outlives its command" for free: when ``bash`` exits, bwrap's pid 1 exits and the kernel
kills everything left in the namespace, setsid-ed or not. The new network namespace holds
only a loopback interface.

Nothing of the host shows inside. bwrap's own pid 1 is visible there and its
``/proc/1/environ`` and ``/proc/1/cmdline`` are readable by the command, so bwrap is
started with an empty environment and reads its options (host paths among them) from a
memfd given with ``--args FD``: its command line is only ``bwrap --args N -- <command>``.

Working directory. bwrap changes into ``/workspace`` after dropping capabilities, so a
command that ran ``chmod 000 /workspace`` would make every later one fail to start. As
runc does for ``docker exec``, the change of directory is done with the one capability it
needs (``CAP_DAC_READ_SEARCH``, kept with ``CAP_SETPCAP``) and ``setpriv`` drops every
capability, bounding set included, before ``bash`` starts: the command runs in
``/workspace`` and can ``chmod`` it back itself.

Limits. As root, each sandbox gets cgroup v1 groups (``pids``, ``memory``, ``cpu``,
``freezer``) nested under this process's own cgroups, so limits imposed on the trainer
still bind its sandboxes. The sandbox process is moved into them before it runs anything:
bwrap reports its child's pid on ``--info-fd`` and waits on ``--block-fd`` until we have
attached it (this keeps ``subprocess`` on its fast vfork path; a ``preexec_fn`` costs ~2 ms
per command). rlimits are set on that child too, as a second line of defence and the only
one without root: ``RLIMIT_AS`` (memory_mb plus headroom), ``RLIMIT_FSIZE`` (disk_mb),
``RLIMIT_CORE`` 0, ``RLIMIT_NPROC``, and ``RLIMIT_MSGQUEUE`` 0 (no POSIX message queues, as
on docker). The kernel never enforces ``RLIMIT_NPROC`` for uid 0, so as root the ``pids``
cgroup is the process cap; without root it counts all of the user's processes, not only
the sandbox's.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from envs.sandbox.base import (
    WORKDIR,
    ExecResult,
    SandboxConfig,
    SandboxError,
    SandboxUnavailable,
    default_rootfs,
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

_CONTROLLERS = ("pids", "memory", "cpu", "freezer")
_KILL_GRACE_S = 2.0
"""After a timeout kill, how long to keep draining output before giving up on the pipes."""
_DROP_CAPS = ["/usr/bin/setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--"]
"""Run first in the sandbox: drops the capabilities kept for the chdir before bash starts."""


def rootfs_path(config: SandboxConfig) -> Path:
    return Path(config.rootfs) if config.rootfs else default_rootfs()


def unavailable_reason(config: SandboxConfig | None = None) -> str | None:
    """None if bwrap sandboxes can run here, else what is missing and how to fix it."""
    config = config or SandboxConfig()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed: apt-get install bubblewrap"
    rootfs = rootfs_path(config)
    if not (rootfs / "bin" / "bash").exists():
        return f"the sandbox rootfs is missing at {rootfs}: run `make rootfs` (scripts/build_rootfs.sh)"
    if not (rootfs / _DROP_CAPS[0].lstrip("/")).exists():
        return f"the sandbox rootfs at {rootfs} has no {_DROP_CAPS[0]} (util-linux): rebuild it with `make rootfs`"
    probe = subprocess.run(
        [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
         "--ro-bind", str(rootfs), "/", "--proc", "/proc", "--", "/bin/true"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        return (
            f"bwrap cannot create namespaces here ({probe.stderr.strip()}): enable unprivileged "
            "user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run as root"
        )
    return None


# --- cgroups -----------------------------------------------------------------------


def _v1_controller_dirs() -> dict[str, Path]:
    """Controller -> the directory of this process's own cgroup in that v1 hierarchy."""
    mounts: dict[str, Path] = {}
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 4 and fields[2] == "cgroup":
                for option in fields[3].split(","):
                    if option in _CONTROLLERS:
                        mounts[option] = Path(fields[1])
    own: dict[str, Path] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(","):
                if controller in mounts:
                    own[controller] = mounts[controller] / path.lstrip("/")
    return own


class Cgroups:
    """This sandbox's cgroup v1 groups: ``<own cgroup>/clawgym/<sandbox id>`` per controller."""

    def __init__(self, sandbox_id: str, config: SandboxConfig) -> None:
        self.dirs: dict[str, Path] = {}
        try:
            for controller, own in _v1_controller_dirs().items():
                parent = own / "clawgym"
                parent.mkdir(exist_ok=True)
                _sweep_stale_cgroups(parent)
                path = parent / sandbox_id
                path.mkdir()
                self.dirs[controller] = path
            if "pids" not in self.dirs or "memory" not in self.dirs:
                raise OSError("the pids or memory cgroup v1 controller is not mounted")
            self._write("pids", "pids.max", config.pids)
            self._write("memory", "memory.limit_in_bytes", config.memory_mb << 20)
            if (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                self._write("memory", "memory.memsw.limit_in_bytes", config.memory_mb << 20)
            if "cpu" in self.dirs:
                self._write("cpu", "cpu.cfs_period_us", 100_000)
                self._write("cpu", "cpu.cfs_quota_us", int(config.cpus * 100_000))
        except OSError:
            self.remove()
            raise

    def _write(self, controller: str, name: str, value: int | str) -> None:
        (self.dirs[controller] / name).write_text(str(value))

    def attach(self, pid: int) -> None:
        for controller in self.dirs:
            self._write(controller, "cgroup.procs", pid)

    def procs(self) -> list[int]:
        try:
            return [int(p) for p in (self.dirs["pids"] / "cgroup.procs").read_text().split()]
        except (KeyError, FileNotFoundError):
            return []

    def kill_all(self) -> None:
        """SIGKILL every process in the sandbox; frozen first, so a fork bomb cannot outrun it."""
        if not self.procs():
            return
        freezer = self.dirs.get("freezer")
        try:
            for _ in range(100):
                if freezer is not None:
                    self._write("freezer", "freezer.state", "FROZEN")
                    _wait_for(lambda: (freezer / "freezer.state").read_text().strip() == "FROZEN", 1.0)
                pids = self.procs()
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if freezer is not None:  # frozen tasks die only once thawed
                    self._write("freezer", "freezer.state", "THAWED")
                if not pids or _wait_for(lambda: not self.procs(), 0.5):
                    return
        finally:
            if freezer is not None:
                self._write("freezer", "freezer.state", "THAWED")

    def remove(self) -> None:
        self.kill_all()
        for path in self.dirs.values():
            _rmdir_cgroup(path)
        self.dirs.clear()


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


def _rmdir_cgroup(path: Path) -> None:
    """rmdir fails with EBUSY for a moment after the last task was killed; retry briefly."""
    for _ in range(200):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.005)


def _sweep_stale_cgroups(parent: Path) -> None:
    for child in parent.iterdir():
        if child.is_dir() and child.name.startswith("bwrap-") and not owner_alive(child.name):
            for pid in (child / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            state = child / "freezer.state"
            if state.exists():
                state.write_text("THAWED")
            _rmdir_cgroup(child)


# --- the sandbox -------------------------------------------------------------------


class _Resources:
    """What a sandbox holds on the host; released by close() or by the GC/atexit finalizer."""

    def __init__(self, workspace: Workspace, cgroups: Cgroups | None) -> None:
        self.workspace = workspace
        self.cgroups = cgroups

    def release(self) -> None:
        try:
            if self.cgroups is not None:
                self.cgroups.remove()
        finally:
            self.workspace.close()


class BwrapSandbox(WorkspaceSandbox):
    """A sandbox whose every command runs in fresh bubblewrap namespaces on the clawgym rootfs."""

    backend = "bwrap"

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        reason = unavailable_reason(self.config)
        if reason is not None:
            raise SandboxUnavailable(reason)
        self.id = new_sandbox_id(self.backend)
        sweep_stale_workspaces(self.backend)
        self.workspace = Workspace(self.id, self.config)
        self._resources = _Resources(self.workspace, None)
        self._finalizer = weakref.finalize(self, self._resources.release)
        self.cgroups: Cgroups | None = None
        self.limits = "rlimits only (not root: no cgroups)"
        """How memory, process count and CPU are enforced here, for logs and test reports."""
        if os.geteuid() == 0:
            try:
                self.cgroups = self._resources.cgroups = Cgroups(self.id, self.config)
                self.limits = "cgroup v1 + rlimits"
            except OSError as exc:
                self.limits = f"rlimits only (cgroups unavailable: {exc})"
        self._lock = threading.Lock()
        for alias in self.config.workspace_aliases:  # the rootfs is read-only: bwrap cannot make it
            if not (rootfs_path(self.config) / alias.lstrip("/")).is_dir():
                self._finalizer()
                raise SandboxError(f"workspace alias {alias} needs that directory in the rootfs "
                                   f"{rootfs_path(self.config)} on bwrap; use an existing one or docker")
        self._bwrap = shutil.which("bwrap") or "bwrap"
        self._options = _nul_separated(self._bwrap_options())

    def _bwrap_options(self) -> list[str]:
        """Every option but the per-command fds; given on ``--args``, never on the command line."""
        options = [
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--cap-add", "CAP_DAC_READ_SEARCH", "--cap-add", "CAP_SETPCAP",
            "--ro-bind", str(rootfs_path(self.config)), "/",
            "--proc", "/proc", "--dev", "/dev",
            "--bind", str(self.workspace.shm), SANDBOX_SHM, "--remount-ro", "/dev",
            "--bind", str(self.workspace.workspace), WORKDIR,
            *(arg for alias in self.config.workspace_aliases
              for arg in ("--bind", str(self.workspace.workspace), alias)),
            "--bind", str(self.workspace.tmp), SANDBOX_TMP,
            "--chdir", WORKDIR, "--hostname", HOSTNAME, "--clearenv",
        ]  # fmt: skip
        for name, value in command_env(self.config).items():
            options += ["--setenv", name, value]
        return options

    # --- Sandbox protocol ----------------------------------------------------------

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        timeout = exec_timeout(timeout, self.config.default_timeout_s)
        with self._lock:
            self._check_open()
            if (refused := refusal(cmd)) is not None:
                return refused
            start = time.monotonic()
            proc, child = self._spawn(encodable(cmd))
            try:
                out, err, timed_out = self._collect(proc, start + timeout)
                try:
                    proc.wait(timeout=_KILL_GRACE_S)  # pipes hit EOF, so bwrap is exiting
                except subprocess.TimeoutExpired:
                    pass  # killed below
            finally:
                self._kill(proc)
                proc.wait()
                proc.stdout.close()  # type: ignore[union-attr]
                proc.stderr.close()  # type: ignore[union-attr]
                self._end_namespace(child)
            code = proc.returncode
            exit_code = 137 if timed_out else (128 - code if code < 0 else code)
            return ExecResult(
                exit_code=exit_code,
                stdout=out.text(),
                stderr=err.text(),
                timed_out=timed_out,
                truncated=out.truncated or err.truncated,
                duration_s=time.monotonic() - start,
            )

    def reset(self) -> None:
        with self._lock:
            self._check_open()
            if self.cgroups is not None:
                self.cgroups.kill_all()
            self.workspace.wipe()

    # --- internals -----------------------------------------------------------------

    def _spawn(self, cmd: str) -> tuple[subprocess.Popen[bytes], _Process]:
        """Start bwrap, attach its child to the cgroups and rlimits, then let it run ``cmd``."""
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        args_fd = _memfd(self._options + _nul_separated(["--info-fd", str(info_w), "--block-fd", str(block_r)]))
        argv = ["bwrap", "--args", str(args_fd), "--", *_DROP_CAPS, *_default_signals(), "/bin/bash", "-c", cmd]
        try:
            proc = subprocess.Popen(
                argv, executable=self._bwrap, env={}, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(info_w, block_r, args_fd), start_new_session=True,
            )  # fmt: skip
        except BaseException:
            os.close(info_r)
            os.close(block_w)
            raise
        finally:
            os.close(info_w)
            os.close(block_r)
            os.close(args_fd)
        try:
            child = _read_child_pid(info_r)
            if child is None:
                _, err = proc.communicate()
                raise SandboxError(f"bwrap could not start the sandbox: {err.decode(errors='replace').strip()}")
            pinned = _Process(child)
            if self.cgroups is not None:
                self.cgroups.attach(child)
            self._set_rlimits(child)
            os.write(block_w, b"go")
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            os.close(info_r)
            os.close(block_w)
        return proc, pinned

    def _set_rlimits(self, pid: int) -> None:
        mb = 1 << 20
        c = self.config
        # headroom: glibc arenas and thread stacks reserve address space they never touch
        address_space = (c.memory_mb + max(c.memory_mb, 2048)) * mb
        for limit, value in (
            (resource.RLIMIT_AS, address_space),
            (resource.RLIMIT_FSIZE, c.disk_mb * mb),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NPROC, c.pids),
            (resource.RLIMIT_MSGQUEUE, 0),  # as on docker, where reset() could not remove them
        ):
            resource.prlimit(pid, limit, (value, value))

    def _collect(self, proc: subprocess.Popen[bytes], deadline: float) -> tuple[OutputBuffer, OutputBuffer, bool]:
        """Read both pipes until EOF, capping each; kill everything at ``deadline``."""
        out, err = OutputBuffer(self.config.max_output_bytes), OutputBuffer(self.config.max_output_bytes)
        buffers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}  # type: ignore[union-attr]
        poller = select.poll()
        for fd in buffers:
            poller.register(fd, select.POLLIN)
        timed_out = False
        give_up = float("inf")
        while buffers:
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                self._kill(proc)
                give_up = now + _KILL_GRACE_S
            if now >= give_up:
                break
            wait_s = min((give_up if timed_out else deadline) - now, 0.5)
            events = poller.poll(max(wait_s, 0) * 1000)
            if not events and proc.poll() is not None and give_up == float("inf"):
                # bwrap is gone yet a pipe is open: only a process outside it could hold it
                give_up = now + 0.5
            for fd, _ in events:
                data = os.read(fd, 1 << 16)
                if data:
                    buffers[fd].add(data)
                else:
                    poller.unregister(fd)
                    del buffers[fd]
        return out, err, timed_out

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        """Kill bwrap (its sandbox dies with it) and, the sure way, everything in the cgroups."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.cgroups is not None:
            self.cgroups.kill_all()

    def _end_namespace(self, child: _Process) -> None:
        """Return only once the sandbox's pid 1 is dead, which means all its processes are.

        bwrap exits as soon as it learns the command's status, a moment before its pid 1
        (and with it the namespace's background processes) is gone; waiting here is what
        makes "no process outlives its command" hold when exec returns, with or without
        cgroups.
        """
        if not _wait_for(child.dead, 1.0):
            child.kill()
            _wait_for(child.dead, 2.0)
        if self.cgroups is not None:
            self.cgroups.kill_all()


class _Process:
    """A host pid pinned to its start time, so a recycled pid is never mistaken for it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        fields = self._stat()
        self.start_time = fields[19] if fields else ""

    def _stat(self) -> list[str] | None:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return None

    def dead(self) -> bool:
        fields = self._stat()
        return fields is None or fields[19] != self.start_time or fields[0] in ("Z", "X")

    def kill(self) -> None:
        if not self.dead():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _nul_separated(args: list[str]) -> bytes:
    """Arguments as ``--args`` reads them: each one NUL-terminated."""
    return b"".join(os.fsencode(arg) + b"\0" for arg in args)


def _memfd(data: bytes) -> int:
    """A file descriptor to read ``data`` from; a memfd, as a pipe's buffer could be too small."""
    fd = os.memfd_create("bwrap-args")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_child_pid(info_fd: int) -> int | None:
    """The sandbox child's host pid from bwrap's ``--info-fd`` JSON; None if bwrap failed."""
    data = b""
    while not data.rstrip().endswith(b"}"):
        chunk = os.read(info_fd, 4096)
        if not chunk:
            return None
        data += chunk
    return int(json.loads(data)["child-pid"])


def _default_signals() -> list[str]:
    """A prefix that gives commands default SIGINT/SIGQUIT when this process ignores them.

    A process started in the background of a non-interactive shell (``cmd &``, as some CI
    runners do) has SIGINT and SIGQUIT ignored, children inherit that, and a shell cannot
    trap a signal that was ignored when it started: an agent's ``trap ... INT`` would then
    silently do nothing. Docker commands start from the daemon and never inherit it.
    """
    ignored = [name for name, sig in (("INT", signal.SIGINT), ("QUIT", signal.SIGQUIT))
               if signal.getsignal(sig) == signal.SIG_IGN]
    return ["/usr/bin/env", f"--default-signal={','.join(ignored)}"] if ignored else []
