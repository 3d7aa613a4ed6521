"""Helpers shared by the test packages."""

from __future__ import annotations

import os

import pytest


def require(condition: bool, reason: str) -> None:
    """Skip when a machine part (docker, bwrap, chromium) is missing, with the reason;
    under ``CI=true`` fail instead, so a green CI means every part was really exercised."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true requires this part: {reason}")
    pytest.skip(reason)
