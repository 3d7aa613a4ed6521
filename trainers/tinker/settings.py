"""The ``tinker.*`` config keys, and what ``compute=tinker`` cannot do (no SDK import here:
trainers/config.py reads this module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COMPUTES = ("local", "tinker")
LOSSES = ("importance_sampling", "ppo")


@dataclass(frozen=True)
class TinkerSettings:
    loss: str = "importance_sampling"
    """The loss Tinker's forward_backward takes the per-token advantages to:
    importance_sampling (``-exp(logp - logp_old) * A`` per token: on-policy, the ratio is 1 and
    this is the policy gradient) or ppo (the ratio clipped at 1 - eps_low and 1 + eps_high,
    sent as its loss_fn_config; skyrl-tx 0.3.0 ignores that config and clips at 0.8 and 1.2)."""
    base_model: str = ""
    """The Tinker base model to train a LoRA adapter of, e.g. meta-llama/Llama-3.2-1B; empty:
    the one model the server supports (a self-hosted skyrl-tx serves exactly one). model= must
    name a local directory with the same tokenizer: prompts are templated and tokenized here."""
    ttl_s: int = 0
    """Seconds the service keeps each saved sampler and state (0: until deleted)."""

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"tinker.loss={self.loss!r} is not allowed; choose one of: {', '.join(LOSSES)}")
        if self.ttl_s < 0:
            raise ValueError(f"tinker.ttl_s must be >= 0 (0: kept until deleted), got {self.ttl_s}")


def tinker_problem(config: Any) -> str | None:
    """Why ``config`` cannot train with ``compute=tinker`` (one sentence that says what to
    pass instead), or None. Tinker trains a LoRA adapter of attention and MLP layers with its
    own losses, so what clawgym adds around its local update has no counterpart there."""
    if config.method == "sft":
        return "compute=tinker trains grpo, opd or combine; method=sft trains locally (drop compute=tinker)"
    if config.data:
        return "compute=tinker rolls out in the env; data= trains on recorded sessions locally (drop compute=tinker)"
    if config.engine.kind != "hf":
        return (f"compute=tinker samples through Tinker's SamplingClient, so engine={config.engine.kind} has "
                "nothing to serve; drop engine=")
    if not config.lora.enabled:
        return "compute=tinker trains a LoRA adapter; keep lora.enabled=true"
    if config.lora.targets != "all-linear":
        return (f"compute=tinker trains Tinker's LoRA on attention and MLP layers, so lora.targets="
                f"{config.lora.targets} cannot be honoured; drop lora.targets=")
    if config.kl_beta > 0:
        return "Tinker's losses have no KL term; pass kl_beta=0 with compute=tinker"
    if config.mode != "sync":
        return "compute=tinker runs mode=sync (async rollouts are not measured there yet); drop mode=async"
    if config.init:
        return "compute=tinker starts from the base model; init= loads local weights (drop it)"
    if config.judge.kind == "self":
        return ("judge.kind=self reads the local base model, which compute=tinker does not load; pass "
                "judge.kind=lexical, model or endpoint")
    return None
