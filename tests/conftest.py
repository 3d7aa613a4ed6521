"""Test session setup. OpenMP threads that spin-wait on an oversubscribed 2-core machine
slow torch down >10x; passive waiting keeps model tests fast when other work runs too.

After each test module (its module-scoped fixtures are finalized by then) the freed heap is
handed back to the system: many modules load a model or run a trainer in-process, and glibc
keeps what they freed, so without this the suite's resident memory only grows."""

import os
import sys

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    if "torch" in sys.modules and (nextitem is None or nextitem.module is not item.module):
        from trainers.update import release_freed_memory

        release_freed_memory()
