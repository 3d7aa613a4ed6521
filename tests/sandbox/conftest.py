"""Fixtures for the sandbox suite: one real sandbox per backend per module, no mocks.

A backend that cannot run here is skipped with the reason ``backend_status`` gives,
except under ``CI=true``, where it fails: a green CI run must have exercised both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envs.sandbox import Sandbox, SandboxConfig, make_sandbox
from tests.helpers import SANDBOX_BACKENDS, require_backend

TEST_CONFIG = SandboxConfig(memory_mb=512, pids=128, cpus=1.0, disk_mb=64, default_timeout_s=20.0)
"""Small limits, so the fault tests hit them fast; max_output_bytes stays at 1 MiB."""

KILL_SLACK_S = 15.0
"""How long past its timeout an exec may take to return in a test. Killing and reaping take
about 0.1 s (docker) and stay well under a second on a loaded machine; each failure these
bounds catch (a kill that waits for the command, or for a far longer timeout) takes minutes."""


@pytest.fixture(scope="module", params=SANDBOX_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture(scope="module")
def module_sandbox(backend: str) -> Iterator[Sandbox]:
    sandbox = make_sandbox(backend, TEST_CONFIG)
    yield sandbox
    sandbox.close()


@pytest.fixture
def sandbox(module_sandbox: Sandbox) -> Sandbox:
    """The module's sandbox for this backend, reset: each test starts a fresh episode."""
    module_sandbox.reset()
    return module_sandbox


@pytest.fixture
def new_sandbox(backend: str) -> Iterator[Callable[..., Sandbox]]:
    """Factory for sandboxes a test owns (to close, or with other limits); all closed after."""
    made: list[Sandbox] = []

    def make(config: SandboxConfig = TEST_CONFIG) -> Sandbox:
        made.append(make_sandbox(backend, config))
        return made[-1]

    yield make
    for sandbox in made:
        sandbox.close()


@pytest.fixture(scope="session")
def sandbox_config() -> SandboxConfig:
    return TEST_CONFIG


@pytest.fixture(scope="session")
def require() -> Callable[[str], None]:
    """:func:`require_backend`, for tests that pick their backend themselves."""
    return require_backend


@pytest.fixture(scope="session")
def host_processes() -> Callable[[str], list[str]]:
    """:func:`host_processes_matching`: the host-side check that no process outlived its command."""
    return host_processes_matching


def host_processes_matching(needle: str) -> list[str]:
    """Command lines of live host processes containing ``needle`` (zombies have none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            found.append(cmdline.strip())
    return found
