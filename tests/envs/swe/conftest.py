"""Fixtures for the SWE env: a tiny real instance built in a temp dir, real sandboxes, no mocks.

The instance (``tiny.py``): package ``calc`` in a local git repo whose ``add`` subtracts at
base_commit (a later commit holds the fix and must never reach the agent); the gold patch
fixes it; the test_patch adds ``test_add`` and ``test_add_zero`` (FAIL_TO_PASS) next to
``test_mul`` (PASS_TO_PASS). Variants share the repo: a hung test, a failing install, an
install that builds files, one whose repo is missing, one whose test_patch adds a test file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envs.swe.env import SWEEnv
from tests.helpers import SANDBOX_BACKENDS, require_backend

from .tiny import NEW_TEST_PATCH, make_repo, record, write_instances

GOOD = "calc__calc-1"


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An instance file: the good instance and its faulty variants."""
    root = tmp_path_factory.mktemp("swe")
    repo, base = make_repo(root)
    return write_instances(root / "instances.jsonl", [
        record(repo, base),
        record(repo, base, instance_id="calc__hang-1", test_cmd="sleep 60; python3 -m pytest -rA"),
        record(repo, base, instance_id="calc__broken-install-1",
               install="echo building; echo 'no compiler' >&2; exit 3"),
        record(repo, base, instance_id="calc__built-1", split="heldout",
               install="mkdir -p build && echo artifact > build/lib.txt && touch calc/_speedups.so"),
        record(repo, base, instance_id="calc__touchy-install-1", install="echo '# changed' >> calc/__init__.py"),
        record(root / "nowhere", base, instance_id="calc__missing-1"),
        record(repo, base, instance_id="calc__newtest-1", test_patch=NEW_TEST_PATCH,
               FAIL_TO_PASS=["tests/test_add.py::test_add"], PASS_TO_PASS=[]),
    ])


@pytest.fixture(scope="module", params=SANDBOX_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Prepared workspaces for the tests (not the user's cache)."""
    return tmp_path_factory.mktemp("swe-cache")


@pytest.fixture
def make_env(backend: str, tiny: Path, cache_root: Path) -> Iterator[Callable[..., SWEEnv]]:
    """Factory for SWE envs on this test's backend over the tiny instances; all closed after."""
    made: list[SWEEnv] = []

    def make(**kwargs: object) -> SWEEnv:
        kwargs = {"instances": str(tiny), "split": "all", "cache_dir": str(cache_root), **kwargs}
        made.append(SWEEnv(sandbox=backend, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for env in made:
        env.close()
