"""A LoRA linear layer whose adapter term is one ``addmm``: ``base(x) + s * (x A^T) B^T``.

peft's ``lora.Linear`` computes ``result + lora_B(lora_A(dropout(x))) * scaling``: besides
the two small products, a multiply and an add over the layer's whole output, and in the
backward pass a multiply again. With 7 adapted layers in each of the default model's 30
blocks, that is ~630 full-width elementwise passes per forward and backward; on a CPU the
fused layer takes an update from 3.85 to 3.56 s (8 samples of 31 + 48 tokens, 2 cores,
alternating A/B in one process). ``torch.addmm(result, h,
B^T, alpha=scaling)`` does the product, the scaling and the sum in one call, and its
backward scales only the ``rank``-wide gradient.

:func:`fuse_lora` turns every plain peft LoRA linear of a model into
:class:`FusedLoraLinear` (the class is swapped; weights, names and saving are unchanged).
It takes the one-call path only for vanilla LoRA: one active adapter, no dropout, no DoRA
or other variant, not merged, adapters enabled, adapter and input in one dtype, no
``adapter_names``. Anything else is peft's own forward. The result equals peft's up to
float rounding (the scaling is applied before the sum instead of after).
"""

from __future__ import annotations

import functools
from typing import Any

import torch


def _lora_linear_class() -> type:
    from peft.tuners.lora.layer import Linear

    return Linear


@functools.cache
def _fused_class() -> type:
    """Built on first use (importing peft costs a second); pickled as
    ``agents.lora_linear.FusedLoraLinear`` through the module's ``__getattr__``."""
    base = _lora_linear_class()

    class FusedLoraLinear(base):  # type: ignore[misc, valid-type]
        """peft's ``lora.Linear`` with the vanilla adapter term as one ``addmm``."""

        def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            adapter = self._plain_adapter(x, args, kwargs)
            if adapter is None:
                return super().forward(x, *args, **kwargs)
            result = self.base_layer(x)
            h = torch.nn.functional.linear(x, self.lora_A[adapter].weight)
            out = result.shape[-1]
            fused = torch.addmm(result.reshape(-1, out), h.reshape(-1, h.shape[-1]),
                                self.lora_B[adapter].weight.t(), alpha=self.scaling[adapter])
            return fused.view(result.shape)

        def _plain_adapter(self, x: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
            """The one active adapter when this call can take the fused path, else None."""
            if args or kwargs or self.disable_adapters or self.merged:
                return None
            active = [a for a in self.active_adapters if a in self.lora_A]
            if len(active) != 1:
                return None
            adapter = active[0]
            if (adapter in self.lora_variant or not isinstance(self.lora_dropout[adapter], torch.nn.Identity)
                    or self.lora_B[adapter].bias is not None or x.dtype != self.lora_A[adapter].weight.dtype
                    or getattr(self.base_layer, "weight", x).dtype != x.dtype):
                return None
            return adapter

    FusedLoraLinear.__module__, FusedLoraLinear.__qualname__ = __name__, "FusedLoraLinear"
    return FusedLoraLinear


def __getattr__(name: str) -> Any:
    if name == "FusedLoraLinear":
        return _fused_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fuse_lora(model: Any) -> int:
    """Swap every plain peft ``lora.Linear`` in ``model`` for :class:`FusedLoraLinear`;
    return how many layers now are one (0 when peft is absent or nothing is adapted)."""
    try:
        linear = _lora_linear_class()
    except ImportError:
        return 0
    fused = _fused_class()
    count = 0
    for module in model.modules():
        if type(module) is linear:
            module.__class__ = fused
        count += isinstance(module, fused)
    return count
