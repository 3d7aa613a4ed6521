"""The LoRA adapter a policy trains: its settings, a base model wrapped with a new one, and
the weights training changes, read and loaded in place.

    model = with_new_adapter(base, LoraSettings(rank=8, alpha=16), seed=0)
    state = trainable_state(model, lora=True)       # a copy of the adapter's tensors
    load_trainable_state(model, state, lora=True)    # between requests, as a weight update lands

With ``LoraSettings(enabled=False)`` the full weights train instead, and the same two
functions read and load the whole state dict.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from agents.lora_linear import fuse_lora


@dataclass(frozen=True)
class LoraSettings:
    enabled: bool = True
    """false trains the full weights instead of an adapter."""
    rank: int = 16
    """r, the adapter's rank."""
    alpha: int = 32
    """LoRA alpha (the update is scaled by alpha / rank); 2 x rank, the convention
    OpenClaw-RL reports working."""
    targets: str = "all-linear"
    """peft target_modules: "all-linear" or a comma-separated list of module names."""
    dropout: float = 0.0
    """Dropout on the adapter's input during training."""

    def __post_init__(self) -> None:
        if self.rank < 1 or self.alpha <= 0:
            raise ValueError(f"lora.rank must be >= 1 and lora.alpha > 0, got rank={self.rank}, alpha={self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout}")


def with_new_adapter(base: Any, lora: LoraSettings, seed: int) -> Any:
    """``base`` with a new adapter. peft draws its A matrices (B starts at zero) from
    torch's CPU generator, so they are drawn here from ``seed`` on a forked generator:
    the same seed gives the same adapter whatever ran before, and the caller's draws
    after it are not moved."""
    if not lora.enabled:
        return base
    from peft import LoraConfig, get_peft_model

    targets: Any = lora.targets if lora.targets == "all-linear" else [t.strip() for t in lora.targets.split(",")]
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=targets,
                        lora_dropout=lora.dropout, task_type="CAUSAL_LM")
    # A bfloat16 base gets float32 adapter weights (peft's default, stated here because
    # the optimizer relies on it): AdamW steps on bfloat16 would lose small updates.
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        model = get_peft_model(base, config, autocast_adapter_dtype=True)
    fuse_lora(model)  # the adapter term as one addmm (agents/lora_linear.py); same outputs
    return model


# model -> (its adapters' names, {peft's state-dict key: the model's own tensor under it})
_ADAPTER_SLOTS: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], dict[str, torch.Tensor] | None]] = \
    weakref.WeakKeyDictionary()


def adapter_slots(model: Any) -> dict[str, torch.Tensor] | None:
    """For each key of peft's ``get_peft_model_state_dict(model)``, the parameter or buffer of
    ``model`` whose values it holds: found once per model (by where each value's data lies)
    and kept while the model's adapters keep their names. peft's own functions walk the
    whole model's state dict on every call (0.10 and 0.16 s for the default model on this
    CPU, once each per trainer step); reading these tensors directly takes milliseconds and
    gives the same keys and values. None where a value is not a view of one of the model's own
    tensors (then peft's functions serve every call)."""
    names = tuple(getattr(model, "peft_config", {}))
    cached = _ADAPTER_SLOTS.get(model)
    if cached is not None and cached[0] == names:
        return cached[1]
    from peft import get_peft_model_state_dict

    owned = {(t.data_ptr(), t.shape, t.stride(), t.dtype): t
             for t in itertools.chain(model.parameters(), model.buffers()) if t.numel()}
    slots: dict[str, torch.Tensor] | None = {}
    for key, value in get_peft_model_state_dict(model).items():
        tensor = owned.get((value.data_ptr(), value.shape, value.stride(), value.dtype)) if value.numel() else None
        if tensor is None:
            slots = None
            break
        slots[key] = tensor
    _ADAPTER_SLOTS[model] = (names, slots)
    return slots


def trainable_state(model: Any, lora: bool) -> dict[str, torch.Tensor]:
    """A copy of the weights training changes in ``model``: its adapter's with LoRA, else all."""
    if lora:
        from peft import get_peft_model_state_dict

        slots = adapter_slots(model)
        source = slots if slots is not None else get_peft_model_state_dict(model)
        return {k: v.detach().clone() for k, v in source.items()}
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def load_trainable_state(model: Any, state: dict[str, torch.Tensor], lora: bool) -> None:
    """Load what :func:`trainable_state` returned into ``model``."""
    if lora:
        slots = adapter_slots(model)
        if slots is not None and slots.keys() == state.keys() \
                and all(slots[k].shape == v.shape for k, v in state.items()):
            with torch.no_grad():
                for key, value in state.items():
                    slots[key].copy_(value)
            return
        from peft import set_peft_model_state_dict  # other keys or shapes: peft loads them, or says why not

        set_peft_model_state_dict(model, state)
    else:
        model.load_state_dict(state)
