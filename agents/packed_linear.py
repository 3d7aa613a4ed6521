"""The sampler's linear layers with their weights laid out once for oneDNN (CPU, float32).

On a CPU a decode step is its matrix products: at batch 8 the 211 products of the default
model take ~75 ms through ``F.linear`` (MKL's sgemm), and the model's forward pass little
more. Eight rows are too few for sgemm's kernels: one row takes 41-46 ms, so eight rows cost
1.6x one, where reading the 538 MB of weights once is the whole of the one-row cost. oneDNN's
inner-product kernel, given weights reordered once into its blocked layout (the op
torch's inductor uses when it freezes a CPU model), does the same eight rows in ~46 ms
(README, "Decoding on the CPU"). The sampling copy of the model (``serve_model``) is
the right place for it: its weights change only when the trainer pushes an adapter, and it
never runs backward.

The results are float32 matrix products summed in another order: they differ from
``F.linear``'s by float32 rounding (~1e-5 relative), the size of the gap between any two
BLAS libraries. :func:`pack_linears` checks each layer against ``F.linear`` before it
replaces it and leaves it alone where the op is missing or disagrees.
"""

from __future__ import annotations

import torch
from torch import nn

AGREEMENT = 1e-4
"""Largest |packed - F.linear| / max |F.linear| accepted when a layer is packed."""


def _pack(weight_OI: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight_OI.detach().contiguous(), None)


class PackedLinear(nn.Module):
    """``nn.Linear``'s forward (float32, no gradient) on a oneDNN-reordered weight.

    The plain weight is not kept: a layer holds one copy of its weights either way.
    :meth:`load` replaces them (a new merged adapter).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias
        self.packed = _pack(linear.weight)

    def load(self, weight_OI: torch.Tensor) -> None:
        if weight_OI.shape != (self.out_features, self.in_features):
            raise ValueError(f"a weight of shape {tuple(weight_OI.shape)} cannot replace one of "
                             f"{(self.out_features, self.in_features)}")
        self.packed = _pack(weight_OI.to(torch.float32))

    def forward(self, x_BI: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x_BI, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def packing_error(linear: nn.Linear) -> float:
    """How far the packed product is from ``F.linear``'s on a random batch, relative to
    the largest output (inf where the op is missing or fails)."""
    try:
        x_BI = torch.randn(8, linear.in_features, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            want_BO = nn.functional.linear(x_BI, linear.weight, linear.bias)
            got_BO = PackedLinear(linear)(x_BI)
        return float((got_BO - want_BO).abs().max() / want_BO.abs().max().clamp(min=1e-30))
    except (RuntimeError, AttributeError):  # no mkldnn build, or the op is gone from this torch
        return float("inf")


def pack_linears(model: nn.Module) -> int:
    """Replace every float32 CPU ``nn.Linear`` of ``model`` with a :class:`PackedLinear`
    (in place); return how many were replaced. Nothing is replaced when the first layer's
    check fails. Only for a model that runs forward under ``torch.no_grad``."""
    linears = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is nn.Linear and child.weight.dtype == torch.float32
               and child.weight.device.type == "cpu"]
    if not linears or not torch.backends.mkldnn.is_available() or packing_error(linears[0][2]) > AGREEMENT:
        return 0
    for parent, name, child in linears:
        setattr(parent, name, PackedLinear(child))
    return len(linears)
