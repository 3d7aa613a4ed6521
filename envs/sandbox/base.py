"""The sandbox interface every backend implements, and the limits it enforces.

A sandbox is where an agent's commands run: never on the host. Its root filesystem is
clawgym's own Debian rootfs (``scripts/build_rootfs.sh``), mounted read-only, as is ``/dev``
(device nodes only). The only writable places are ``/workspace`` (the working directory),
``/tmp`` and ``/dev/shm``, private to the sandbox and wiped by :meth:`Sandbox.reset`. As
root they are tmpfs mounts: ``/workspace`` holds at most ``disk_mb``, ``/tmp`` and
``/dev/shm`` share another quarter of it, and that is all an agent can ever write (without
root, only ``RLIMIT_FSIZE`` caps each file). There is no network. Memory, process count and
CPU are capped. Commands run as root inside (as the caller's uid on bwrap without root)
but hold no capabilities, and get only the environment
:func:`~envs.sandbox.workspace.command_env` gives: no host process, environment variable or
command line shows in ``/proc`` (``/proc/self/mountinfo`` does name the host directories
behind the mounts).

Each :meth:`Sandbox.exec` runs ``bash -c cmd`` as a fresh process tree: when it returns
(normally or by timeout) no process it started is left running, so nothing but files in
those three places (and, on docker, System V IPC objects, whose memory counts against
``memory_mb``) carries from one command to the next, and nothing at all from one episode
to the next. A command holding a NUL byte cannot be run: it is refused with exit code 126.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from envs.errors import EnvError

WORKDIR = "/workspace"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SandboxError(EnvError):
    """The sandbox itself failed (could not start, daemon gone): an infrastructure error."""


class SandboxUnavailable(SandboxError):
    """A backend cannot run on this machine; the message says what to install or start."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and placement of one sandbox. A sandboxed env takes them as ``sandbox_config``, a
    dict of these fields; from the CLI as JSON: ``'env_kwargs.sandbox_config={"memory_mb": 2048}'``."""

    memory_mb: int = 1024
    """Memory cap for everything the sandbox runs (cgroup; an allocation past it fails)."""
    pids: int = 256
    """Maximum number of processes at once: a fork bomb stops here."""
    cpus: float = 1.0
    """CPU share, in cores."""
    disk_mb: int = 512
    """Size of the writable ``/workspace``; ``/tmp`` and ``/dev/shm`` share a quarter of it."""
    default_timeout_s: float = 30.0
    """Per-command timeout when :meth:`Sandbox.exec` is called without one."""
    max_output_bytes: int = 1 << 20
    """stdout and stderr are each cut to this many bytes (the rest is read and dropped)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables for every command, as (name, value) pairs."""
    rootfs: str | None = None
    """Root filesystem directory (bwrap); default: the cached ``rootfs/current``."""
    image: str | None = None
    """Docker image; default ``clawgym-base:current``."""
    workspace_aliases: tuple[str, ...] = ()
    """Other absolute paths where the same ``/workspace`` is mounted too (e.g. ``/testbed``
    for SWE-bench images, whose scripts name that path). Commands still start in
    ``/workspace``; the alias is the same directory, not a copy."""

    def __post_init__(self) -> None:
        for name in ("memory_mb", "pids", "disk_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox.{name} must be a positive integer, got {getattr(self, name)!r}")
        if not _positive_finite(self.cpus):
            raise ValueError(f"sandbox.cpus must be a finite number > 0, got {self.cpus!r}")
        if not _positive_finite(self.default_timeout_s):
            raise ValueError(f"sandbox.default_timeout_s must be a finite number of seconds > 0, "
                             f"got {self.default_timeout_s!r}")
        for alias in self.workspace_aliases:
            parts = alias.split("/") if isinstance(alias, str) else []
            if len(parts) < 2 or parts[0] != "" or "" in parts[1:] or ".." in parts or "\0" in alias \
                    or alias in (WORKDIR, "/tmp", "/dev", "/proc", "/dev/shm"):
                raise ValueError(f"sandbox.workspace_aliases entry {alias!r} must be a plain absolute "
                                 f"path other than {WORKDIR}, /tmp, /dev and /proc")
        for name, value in self.env:
            # bwrap reads its options NUL-separated: a NUL here would become options of its own
            valid_name = isinstance(name, str) and _ENV_NAME.fullmatch(name)
            if not valid_name or not isinstance(value, str) or "\0" in value:
                raise ValueError(
                    f"sandbox.env entry {name!r}={value!r} is not a valid variable: names are "
                    "letters, digits and '_' (not starting with a digit), values hold no NUL byte"
                )


def config_from(overrides: dict[str, object] | None, *, env: tuple[tuple[str, str], ...] = (),
                **defaults: object) -> SandboxConfig:
    """An env's ``sandbox_config`` argument made a :class:`SandboxConfig`: the family's
    ``defaults`` overridden by ``overrides``, whose ``env`` (a dict or pairs) adds to the
    family's ``env``. An unknown field is a ValueError that names it."""
    overrides = dict(overrides or {})
    fields = SandboxConfig.__dataclass_fields__
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"sandbox_config.{unknown[0]} is not a SandboxConfig field; known: {', '.join(fields)}")
    extra = overrides.pop("env", ())
    extra = tuple(extra.items()) if isinstance(extra, dict) else tuple(tuple(p) for p in extra)  # type: ignore[union-attr]
    return SandboxConfig(**{**defaults, "env": env + extra, **overrides})  # type: ignore[arg-type]


@dataclass(frozen=True)
class ExecResult:
    """What one command did. ``exit_code`` is the shell's; 137 means it was killed."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    """The command ran past its timeout; its whole process tree was killed."""
    truncated: bool = False
    """stdout or stderr was longer than ``max_output_bytes`` and was cut."""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _positive_finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


def exec_timeout(timeout: float | None, default: float) -> float:
    """The seconds an :meth:`Sandbox.exec` runs under: ``default`` when ``timeout`` is None;
    a ValueError unless it is a finite number > 0 (NaN compares false with everything, so
    a plain ``<= 0`` check would let it through as no limit at all)."""
    timeout = default if timeout is None else timeout
    if not _positive_finite(timeout):
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    return float(timeout)


@runtime_checkable
class Sandbox(Protocol):
    """One isolated place to run commands. Not thread-safe across calls: one user at a time."""

    backend: str

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Run ``bash -c cmd`` in ``/workspace``; kill its whole process tree after ``timeout`` s.

        A command holding a NUL byte is not run: the result has exit code 126 and a stderr
        line saying why. Lone surrogates in ``cmd`` reach bash as U+FFFD.
        """
        ...

    def put_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file at ``path`` (absolute inside the sandbox, or relative to ``/workspace``)."""
        ...

    def get_file(self, path: str) -> bytes:
        """Read a file written by the sandbox; refuses links that lead outside it."""
        ...

    def reset(self) -> None:
        """Back to pristine: wipe ``/workspace`` and ``/tmp``, kill anything left running."""
        ...

    def close(self) -> None:
        """Release everything (processes, container, mounts). Idempotent."""
        ...


def cache_dir() -> Path:
    """Where clawgym keeps its rootfs, images' source and model caches."""
    return Path(os.environ.get("CLAWGYM_CACHE", Path.home() / ".cache" / "clawgym"))


def default_rootfs() -> Path:
    return cache_dir() / "rootfs" / "current"


DEFAULT_IMAGE = "clawgym-base:current"
