"""Sandboxes where agents' commands run: :func:`~envs.sandbox.make_sandbox` picks and starts one.

Two backends implement :class:`Sandbox` with the same guarantees (see ``base.py``):

- ``docker``: one container per sandbox, a ``docker exec`` per command (~50 ms each).
- ``bwrap``: no daemon; fresh bubblewrap namespaces per command (~10 ms each).

``"auto"`` prefers docker when a daemon answers and the image exists (it isolates with
the stack most operators already audit), else bwrap. :func:`backend_status` says which
backends can run here and, for those that cannot, what to install or start.
"""

from __future__ import annotations

from envs.sandbox.base import (
    DEFAULT_IMAGE,
    WORKDIR,
    ExecResult,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxUnavailable,
    cache_dir,
    config_from,
    default_rootfs,
)

BACKENDS = ("auto", "docker", "bwrap")

__all__ = [
    "BACKENDS",
    "DEFAULT_IMAGE",
    "WORKDIR",
    "ExecResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxUnavailable",
    "backend_status",
    "cache_dir",
    "config_from",
    "default_rootfs",
    "make_sandbox",
]


def backend_status(config: SandboxConfig | None = None) -> dict[str, str | None]:
    """``{"docker": reason | None, "bwrap": reason | None}``: None means usable here."""
    from envs.sandbox import bwrap, docker_backend

    return {
        "docker": docker_backend.unavailable_reason(config),
        "bwrap": bwrap.unavailable_reason(config),
    }


def make_sandbox(backend: str = "auto", config: SandboxConfig | None = None) -> Sandbox:
    """Start a sandbox (container created, workspace made); the caller must close() it.

    Raises ValueError for an unknown backend and SandboxUnavailable, saying what is
    missing, when the backend cannot run here.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; use one of {', '.join(map(repr, BACKENDS))}")
    config = config or SandboxConfig()
    if backend == "auto":
        from envs.sandbox import bwrap, docker_backend

        docker_reason = docker_backend.unavailable_reason(config)
        if docker_reason is None:
            backend = "docker"
        elif (bwrap_reason := bwrap.unavailable_reason(config)) is None:
            backend = "bwrap"
        else:
            raise SandboxUnavailable(f"no sandbox backend can run here: docker: {docker_reason}; bwrap: {bwrap_reason}")
    if backend == "docker":
        from envs.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(config)
    from envs.sandbox.bwrap import BwrapSandbox

    return BwrapSandbox(config)
