"""The policy most agents tests share: the real default model with a small fresh adapter, one
per test module, and a way to put its zero-initialised adapter back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.adapters import LoraSettings
from agents.policy import TransformersPolicy

@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    return TransformersPolicy(lora=LoraSettings(rank=8, alpha=16))


@pytest.fixture
def restore(policy: TransformersPolicy) -> Iterator[None]:
    """Put the zero-initialised adapter back after a test that loads other weights."""
    state, version = policy.trainable_state(), policy.weight_version
    yield
    policy.load_trainable_state(state, version)
