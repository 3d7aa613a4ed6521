"""Rollout engines: where generation runs (``engine=hf|vllm|sglang``).

``hf`` is :class:`~agents.policy.TransformersPolicy` itself, in this process. ``vllm`` and
``sglang`` put an inference server behind the same policy interface
(:class:`~agents.engines.base.EnginePolicy`): the local policy keeps scoring and training,
the server samples. base.py holds all they share; vllm.py and sglang.py map the wire format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.engines.base import ENGINE_KINDS, Engine, EngineError, EnginePolicy, EngineSettings

if TYPE_CHECKING:
    from agents.policy import TransformersPolicy

__all__ = ["ENGINE_KINDS", "Engine", "EngineError", "EnginePolicy", "EngineSettings", "make_engine", "with_engine"]


def make_engine(kind: str, max_model_len: int = 2048) -> Engine:
    """The wire format of engine ``kind`` (vllm or sglang)."""
    if kind == "vllm":
        from agents.engines.vllm import VLLM

        return VLLM(max_model_len)
    if kind == "sglang":
        from agents.engines.sglang import SGLang

        return SGLang(max_model_len)
    raise ValueError(f"engine.kind={kind!r} has no server; choose one of: vllm, sglang")


def with_engine(local: TransformersPolicy, settings: EngineSettings, seed: int = 0) -> TransformersPolicy | EnginePolicy:
    """``local`` itself for ``engine=hf``, else an :class:`EnginePolicy` generating on the
    server ``settings`` name (launched here with ``engine.launch=true``)."""
    if settings.kind == "hf":
        return local
    return EnginePolicy(local, make_engine(settings.kind, local.max_context), settings, seed=seed)
