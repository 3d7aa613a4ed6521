"""The sampler's linear layers with their weights laid out once for oneDNN (CPU, float32).

On a CPU a decode step is its matrix products: at batch 8 the 211 products of the default
model take ~75 ms through ``F.linear`` (MKL's sgemm), and the model's forward pass little
more. Eight rows are too few for sgemm's kernels: one row takes 41-46 ms, so eight rows cost
1.6x one, where reading the 538 MB of weights once is the whole of the one-row cost. oneDNN's
inner-product kernel, given weights reordered once into its blocked layout (the op
torch's inductor uses when it freezes a CPU model), does the same eight rows in ~46 ms
(docs/results/perf-decode.md). The sampling copy of the model (``serve_model``) is
the right place for it: its weights change only when the trainer pushes an adapter, and it
never runs backward.

The results are float32 matrix products summed in another order: they differ from
``F.linear``'s by float32 rounding (~1e-5 relative), the size of the gap between any two
BLAS libraries. :func:`pack_linears` checks the op against ``F.linear`` on the model's
first layer before it replaces any, and leaves the model alone where the op is missing or
disagrees.

Layers that read the same input (a Llama block's ``q_proj``/``k_proj``/``v_proj``, and its
``gate_proj``/``up_proj``) are packed as one product (:class:`PackedGroup`): at eight rows
a step's 211 products become 121 and take 43 ms instead of 60 with OpenMP's threads
sleeping between calls (``OMP_WAIT_POLICY=PASSIVE``, a shared machine's setting), 35
instead of 39 with them spinning. Each member still answers only for its own input: the
product is reused only when a member is called with the very tensor its group last
multiplied, so a model that calls them in another order, or on different inputs, gets the
right numbers at the cost of the fusion.
"""

from __future__ import annotations

import torch
from torch import nn

AGREEMENT = 1e-4
"""Largest ``|packed - F.linear| / max |F.linear|`` accepted when a layer is packed."""

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Sibling layers (by name) that read the same input in Llama-style blocks: packed as one."""


def _pack(weight_OI: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight_OI.detach().contiguous(), None)


def _product(x_BI: torch.Tensor, packed: torch.Tensor, bias_O: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x_BI, packed, bias_O, "none", [], "")


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
        return _product(x_BI, self.packed, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class PackedGroup:
    """Sibling linear layers on one input, packed as one product whose output each member
    slices. The product is kept until every member has read its part of it."""

    def __init__(self, linears: list[nn.Linear]) -> None:
        self.sizes = [linear.out_features for linear in linears]
        self.in_features = linears[0].in_features
        self.packed = _pack(torch.cat([linear.weight.detach() for linear in linears]))
        biases = [linear.bias for linear in linears]
        self.bias = None if all(b is None for b in biases) else torch.cat(
            [b.detach() if b is not None else torch.zeros(n) for b, n in zip(biases, self.sizes)])
        self._input: torch.Tensor | None = None
        self._parts: tuple[torch.Tensor, ...] = ()
        self._unread: set[int] = set()
        self._staged: dict[int, torch.Tensor] = {}

    def part(self, index: int, x_BI: torch.Tensor) -> torch.Tensor:
        if self._input is not x_BI or index not in self._unread:
            if self._staged:
                self._repack()
            self._parts = _product(x_BI, self.packed, self.bias).split(self.sizes, dim=-1)
            self._input, self._unread = x_BI, set(range(len(self.sizes)))
        self._unread.discard(index)
        part = self._parts[index]
        if not self._unread:  # every member has its part: hold nothing between steps
            self._input, self._parts = None, ()
        return part

    def load(self, index: int, weight_OI: torch.Tensor) -> None:
        """Stage member ``index``'s new weights; the group is repacked once, on its next use.
        A float32 tensor is kept as it is until then (not copied): the caller hands it over."""
        if weight_OI.shape != (self.sizes[index], self.in_features):
            raise ValueError(f"a weight of shape {tuple(weight_OI.shape)} cannot replace one of "
                             f"{(self.sizes[index], self.in_features)}")
        self._staged[index] = weight_OI.detach().to(torch.float32)
        self._input, self._parts, self._unread = None, (), set()

    def _repack(self) -> None:
        if len(self._staged) == len(self.sizes):  # every member new (an adapter on each): no unpacking
            dense_OI = torch.cat([self._staged[i] for i in range(len(self.sizes))])
        else:
            dense_OI = self.packed.to_dense()
            starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
            for index, weight_OI in self._staged.items():
                dense_OI[starts[index] : starts[index] + self.sizes[index]] = weight_OI
        self.packed, self._staged = _pack(dense_OI), {}


class PackedMember(nn.Module):
    """One layer of a :class:`PackedGroup`, where its ``nn.Linear`` was."""

    def __init__(self, group: PackedGroup, index: int) -> None:
        super().__init__()
        self.group, self.index = group, index
        self.in_features, self.out_features = group.in_features, group.sizes[index]

    def load(self, weight_OI: torch.Tensor) -> None:
        self.group.load(self.index, weight_OI)

    def forward(self, x_BI: torch.Tensor) -> torch.Tensor:
        return self.group.part(self.index, x_BI)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed with {len(self.group.sizes) - 1} more"


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
    siblings: dict[int, dict[str, nn.Linear]] = {}
    for parent, name, child in linears:
        siblings.setdefault(id(parent), {})[name] = child
    for parent, name, child in linears:
        group = _group_of(siblings[id(parent)], name)
        if group is None:
            setattr(parent, name, PackedLinear(child))
        elif name == group[0]:  # the group is built once, at its first member
            packed = PackedGroup([siblings[id(parent)][n] for n in group])
            for index, member in enumerate(group):
                setattr(parent, member, PackedMember(packed, index))
    return len(linears)


def _group_of(siblings: dict[str, nn.Linear], name: str) -> tuple[str, ...] | None:
    """The names packed together with ``name`` (itself among them), or None."""
    for group in GROUPS:
        if name in group and all(n in siblings for n in group) \
                and len({siblings[n].in_features for n in group}) == 1:
            return group
    return None
