"""Fixtures for the terminal env: a real sandbox per backend, no mocks.

A backend that cannot run here is skipped with the reason ``backend_status`` gives, except
under ``CI=true``, where it fails (``tests.helpers.require``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from envs.terminal import TerminalEnv
from tests.helpers import SANDBOX_BACKENDS, require_backend

@pytest.fixture(scope="module", params=SANDBOX_BACKENDS)
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
