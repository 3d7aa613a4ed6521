"""Shared test helpers.

A test that needs a machine part (docker, bwrap, chromium) calls :func:`require`: with the
part missing it is skipped with the reason, except under ``CI=true``, where the same
condition fails the test, so a green CI means every part was really exercised.
"""

from __future__ import annotations

import os

import pytest


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true requires this part: {reason}")
    pytest.skip(reason)
