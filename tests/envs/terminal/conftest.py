"""Fixtures for the terminal env: a real sandbox per backend, no mocks.

A backend that cannot run here is skipped with the reason ``backend_status`` gives, except
under ``CI=true``, where it fails (``tests.helpers.require``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest

from envs.sandbox import backend_status
from envs.terminal import TerminalEnv
from tests.helpers import require

BACKEND_PARAMS = [
    pytest.param("docker", marks=pytest.mark.docker, id="docker"),
    pytest.param("bwrap", marks=pytest.mark.bwrap, id="bwrap"),
]


@functools.cache
def _status() -> dict[str, str | None]:
    return backend_status()


def require_backend(name: str) -> None:
    reason = _status()[name]
    require(reason is None, f"sandbox backend {name} unavailable: {reason}")


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture
def make_env(backend: str) -> Iterator[Callable[..., TerminalEnv]]:
    """Factory for terminal envs on this test's backend; every one is closed after."""
    made: list[TerminalEnv] = []

    def make(**kwargs: object) -> TerminalEnv:
        made.append(TerminalEnv(sandbox=backend, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for env in made:
        env.close()
