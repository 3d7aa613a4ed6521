"""Many LoRA adapters on one frozen base, decoded in one batch where each row has its own.

One base model serves every user; each user has an adapter (agents/adapters.py makes and
trains it, agents/adapter_store.py keeps it on disk). For row ``b`` of a batch, whose user
sits in slot ``s_b`` of an :class:`AdapterBank`, every adapted linear layer computes

    y_b = W x_b + scaling * B[s_b] (A[s_b] x_b)

(Punica's BGMV). Slot 0 is reserved and holds zeros: a row there is the base model. The
bank stacks every slot's A and B per layer (``A_NIR``, ``B_NRO``: N = capacity + 1 slots),
so its shapes never change as users come and go, and the rows' slots are one index, set
before each forward pass by the decoder's ``on_rows`` hook (agents/decode.py).

Two ways to run the adapter term, chosen by the batch:

- **grouped** (the growing cache, any device): rows are grouped by slot on the host once
  per batch composition (a decode's rows change only when one ends); a layer gathers its
  rows' inputs into ``[groups, rows per group, ...]`` and runs two ``bmm`` over the groups'
  adapters, so a step reads each distinct adapter once, not once per row. Groups are padded
  to the largest (the padding's outputs are never read). Where the batch's slots are one
  contiguous range the adapters are views of the bank; otherwise the few distinct ones are
  gathered once per composition and reused every step.
- **gathered** (``static=True``: a static cache, CUDA graphs): shapes cannot depend on how
  rows group, so each layer gathers every row's A and B (``A_NIR[slots_B]``) and runs the
  per-row ``bmm``; the index is copied into a tensor kept per batch size, so a captured
  graph replays with new slots.

Inference only: the bank is filled from adapters' state dicts (peft's keys, as
:func:`agents.adapters.trainable_state` returns them) and never trained. The results equal
peft's mixed-batch inference (``model(..., adapter_names=[...])``) up to float32 rounding
(tests/agents/test_multi_lora.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from agents.adapters import LoraSettings
from agents.decode import (GrowingBatch, RowResult, RowStop, StaticCaches, TokenCallback, decode, distinct_rows,
                           left_padded)

NO_ADAPTER = 0
"""The reserved slot: zeros, so its rows are the base model (``-1`` is read as this too)."""

ONE_THREAD_INPUT = 64
"""Rows (tokens) of input up to which a CPU runs the adapter term on one thread: a decode
step's (see :meth:`MultiLoraLinear.forward`), not a prompt's."""

PEFT_PREFIX = "base_model.model."
"""What peft's state-dict keys put before a module's name in the base model."""


def lora_targets(peft_model: nn.Module) -> list[str]:
    """The base model's names of the layers peft adapted in ``peft_model`` (one made by
    :func:`agents.adapters.with_new_adapter`): the adapter's target discovery is peft's,
    whatever ``LoraSettings.targets`` says."""
    from peft.tuners.lora import LoraLayer

    return [name.removeprefix(PEFT_PREFIX) for name, module in peft_model.named_modules()
            if isinstance(module, LoraLayer)]


@dataclass(frozen=True)
class Groups:
    """The rows of a batch grouped by slot, for the grouped path (host-side, once per composition)."""

    slots: tuple[int, ...]
    """The distinct slots, ascending (U of them)."""
    per_group: int
    """Rows in the largest group (C): every group is padded to it."""
    src_UC: torch.Tensor | None
    """For each padded place, the batch row it reads; None where the groups are the batch itself
    in order (rows already sorted by slot, groups of one size: one slot, or every row its own)."""
    pos_B: torch.Tensor | None
    """For each row, its place in the flattened ``[U * C]`` groups; None as above."""
    slots_B: torch.Tensor
    """Each row's slot, for a pass of many tokens per row (a prompt's), which reads every row's
    own adapter rather than moving its tokens into groups and back."""

    @staticmethod
    def of(slots_B: list[int], device: torch.device) -> Groups:
        distinct = sorted(set(slots_B))
        members = [[row for row, s in enumerate(slots_B) if s == slot] for slot in distinct]
        width = max(len(m) for m in members)
        index = torch.tensor(slots_B, device=device)
        if [row for m in members for row in m] == list(range(len(slots_B))) and \
                all(len(m) == width for m in members):
            return Groups(tuple(distinct), width, None, None, index)
        src = [m + [m[0]] * (width - len(m)) for m in members]
        pos = [0] * len(slots_B)
        for g, m in enumerate(members):
            for c, row in enumerate(m):
                pos[row] = g * width + c
        return Groups(tuple(distinct), width, torch.tensor(src, device=device), torch.tensor(pos, device=device),
                      index)


class RowAdapters:
    """The slot each row of the forward pass in flight reads: one object shared by every
    layer of a bank, set by :meth:`use` between passes (under the caller's lock)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.one_thread = device.type == "cpu"
        """Run the adapter term on one thread (see :meth:`MultiLoraLinear.forward`)."""
        self.slots: list[int] | None = None
        self.static = False
        self.gathered = False
        """Static and some row has an adapter: the one flag a compiled forward guards on (never
        the slots themselves, which would recompile it for every batch)."""
        self.groups: Groups | None = None
        self.slots_B: torch.Tensor | None = None  # gathered path: the index, fixed per batch size
        self._indices: dict[int, torch.Tensor] = {}

    def use(self, slots: list[int] | None, static: bool = False) -> None:
        """The next passes run rows with these ``slots`` (``None``: no adapters, the base)."""
        slots = None if slots is None else [NO_ADAPTER if s < 0 else s for s in slots]
        if slots == self.slots and static == self.static:
            return
        self.slots, self.static = slots, static
        self.groups = None
        self.gathered = static and slots is not None and any(slots)
        if slots is None or not any(slots):
            return
        if static:
            index = self._indices.get(len(slots))
            if index is None:
                index = self._indices[len(slots)] = torch.empty(len(slots), dtype=torch.long, device=self.device)
            index.copy_(torch.tensor(slots))  # in place: a captured graph reads this address
            self.slots_B = index
        else:
            self.groups = Groups.of(slots, self.device)


class MultiLoraLinear(nn.Module):
    """A linear layer (``nn.Linear``, or agents/packed_linear.py's) plus a per-row adapter
    term from the bank's slots. ``A_NIR``/``B_NRO`` are stored transposed for ``bmm``."""

    def __init__(self, base: nn.Module, rows: RowAdapters, slots: int, rank: int, scaling: float) -> None:
        super().__init__()
        self.base, self.rows, self.scaling = base, rows, scaling
        self.in_features, self.out_features = base.in_features, base.out_features
        weight = getattr(base, "weight", None)
        dtype = weight.dtype if weight is not None else torch.float32
        self.A_NIR = torch.zeros(slots, self.in_features, rank, dtype=dtype, device=rows.device)
        self.B_NRO = torch.zeros(slots, rank, self.out_features, dtype=dtype, device=rows.device)
        self._grouped: tuple[Any, torch.Tensor, torch.Tensor] | None = None  # (key, A_UIR, B_URO)
        self.version = 0  # bumped on every load: a cached gather of its slots is stale

    def load(self, slot: int, A_RI: torch.Tensor, B_OR: torch.Tensor) -> None:
        self.A_NIR[slot].copy_(A_RI.t())
        self.B_NRO[slot].copy_(B_OR.t())
        self.version += 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        rows = self.rows
        gathered = rows.gathered
        if not gathered and rows.groups is None:
            return y
        if not rows.one_thread or x.numel() > ONE_THREAD_INPUT * self.in_features:
            return self._gathered(x, y, rows.slots_B) if gathered else self._grouped_term(x, y, rows.groups)
        # On a CPU a decode step's adapter products are too small to share: two OpenMP threads
        # waking for each took 145 us where one took 17 (a 32x576 by 576x16 bmm, 2 cores,
        # passive waits). A prompt's are not (one thread made the prefill's adapter term slower).
        # omp's setting is the calling thread's; MKL's is process-wide for these few microseconds.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._gathered(x, y, rows.slots_B) if gathered else self._grouped_term(x, y, rows.groups)
        finally:
            torch.set_num_threads(threads)

    def _gathered(self, x: torch.Tensor, y: torch.Tensor, slots_B: torch.Tensor, in_place: bool = False
                  ) -> torch.Tensor:
        """Every row's own A and B, gathered each pass: static shapes (BGMV). ``in_place``: into
        ``y`` (the grouped path's prompt pass; the static path keeps its out-of-place add)."""
        rows = slots_B.shape[0]
        x_BKI = x.reshape(rows, -1, self.in_features).to(self.A_NIR.dtype)
        h_BKR = torch.bmm(x_BKI, self.A_NIR.index_select(0, slots_B))
        B_BRO = self.B_NRO.index_select(0, slots_B)
        if in_place:
            return _add_product(y, h_BKR, B_BRO, self.scaling)
        y_BKO = y.reshape(rows, -1, self.out_features)  # a new tensor: what a captured graph expects
        return torch.baddbmm(y_BKO, h_BKR, B_BRO.to(y.dtype), alpha=self.scaling).view(y.shape)

    def _grouped_term(self, x: torch.Tensor, y: torch.Tensor, groups: Groups) -> torch.Tensor:
        """Rows grouped by slot: each distinct adapter is read once per pass."""
        count, width = len(groups.slots), groups.per_group
        rows = len(self.rows.slots or ())
        x_BKI = x.reshape(rows, -1, self.in_features)
        tokens = x_BKI.shape[1]
        if groups.src_UC is None:  # the groups are the batch itself: no moving of rows
            A_UIR, B_URO = self._adapters(groups.slots)
            h_UJR = torch.bmm(x_BKI.reshape(count, width * tokens, self.in_features).to(A_UIR.dtype), A_UIR)
            return _add_product(y, h_UJR, B_URO, self.scaling)  # J = C * K
        if tokens >= self.A_NIR.shape[-1]:
            # A prompt's pass: gathering every row's adapter (rank-sized) moves fewer bytes than
            # gathering its tokens into groups and their outputs back (token-sized).
            return self._gathered(x, y, groups.slots_B, in_place=True)
        A_UIR, B_URO = self._adapters(groups.slots)
        x_GKI = x_BKI.to(A_UIR.dtype).index_select(0, groups.src_UC.view(-1))
        h_UJR = torch.bmm(x_GKI.reshape(count, width * tokens, self.in_features), A_UIR)  # J = C * K
        d_GKO = torch.bmm(h_UJR, B_URO).view(count * width, tokens, self.out_features)
        d_BKO = d_GKO.index_select(0, groups.pos_B)
        return _add_to(y, d_BKO.view(y.shape).to(y.dtype), self.scaling)

    def _adapters(self, slots: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``slots``' A and B: views where they are a contiguous range of the bank, else a
        gather kept until the slots or the weights change."""
        lo, hi = slots[0], slots[-1] + 1
        if hi - lo == len(slots):
            return self.A_NIR[lo:hi], self.B_NRO[lo:hi]
        key = (slots, self.version)
        if self._grouped is None or self._grouped[0] != key:
            index = torch.tensor(slots, device=self.A_NIR.device)
            self._grouped = (key, self.A_NIR.index_select(0, index), self.B_NRO.index_select(0, index))
        return self._grouped[1], self._grouped[2]

    def extra_repr(self) -> str:
        slots, _, rank = self.A_NIR.shape
        return f"in_features={self.in_features}, out_features={self.out_features}, slots={slots}, rank={rank}"


def _add_product(y: torch.Tensor, h_GJR: torch.Tensor, B_GRO: torch.Tensor, scaling: float) -> torch.Tensor:
    """``y + scaling * h @ B`` for ``y`` of any shape whose rows are ``G x J`` in order, written
    into ``y`` where it can be viewed so (a base layer's fresh output): a prompt's pass is big
    enough that a new tensor's allocation costs more than the product."""
    groups, width, rank = h_GJR.shape
    B_GRO = B_GRO.to(y.dtype)
    try:
        y_GJO = y.view(groups, width, B_GRO.shape[-1])
    except RuntimeError:  # strides a view cannot merge
        return torch.baddbmm(y.reshape(groups, width, -1), h_GJR, B_GRO, alpha=scaling).view(y.shape)
    if y.requires_grad:
        return torch.baddbmm(y_GJO, h_GJR, B_GRO, alpha=scaling).view(y.shape)
    return y_GJO.baddbmm_(h_GJR, B_GRO, alpha=scaling).view(y.shape)


def _add_to(y: torch.Tensor, d: torch.Tensor, scaling: float) -> torch.Tensor:
    """``y + scaling * d``, in ``y`` where no gradient is recorded (as :func:`_add_product`)."""
    return torch.add(y, d, alpha=scaling) if y.requires_grad else y.add_(d, alpha=scaling)


class AdapterBank:
    """``capacity`` adapters of one shape (``lora``) on a plain base ``model``, whose
    ``targets`` layers (:func:`lora_targets`) are wrapped in place by :class:`MultiLoraLinear`.
    Slots are 1..capacity; slot 0 is the base. Pack the model (agents/packed_linear.py)
    before building the bank, so that sibling layers are still packed as one product."""

    def __init__(self, model: nn.Module, targets: list[str], lora: LoraSettings, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an adapter bank needs capacity >= 1, got {capacity}")
        if not lora.enabled:
            raise ValueError("an adapter bank holds LoRA adapters; LoraSettings(enabled=False) trains full weights")
        self.model, self.lora, self.capacity = model, lora, capacity
        device = next(model.parameters()).device
        self.rows = RowAdapters(device)
        modules = dict(model.named_modules())
        missing = [name for name in targets if name not in modules]
        if missing:
            raise ValueError(f"the model has no layer {missing[0]!r} (of {len(missing)} targets missing); "
                             "build the bank on the base model the adapters were made for")
        self.layers: dict[str, MultiLoraLinear] = {}
        for name in targets:
            parent_name, _, child = name.rpartition(".")
            layer = MultiLoraLinear(modules[name], self.rows, capacity + 1, lora.rank, lora.alpha / lora.rank)
            setattr(modules[parent_name] if parent_name else model, child, layer)
            self.layers[name] = layer

    def load(self, slot: int, state: dict[str, torch.Tensor]) -> None:
        """Put an adapter (peft's state-dict keys, adapter name removed) into ``slot``."""
        self._check_slot(slot)
        pairs = self._pairs(state)
        with torch.no_grad():
            for name, layer in self.layers.items():
                A_RI, B_OR = pairs[name]
                layer.load(slot, A_RI, B_OR)

    def clear(self, slot: int) -> None:
        """Zero ``slot``: its rows are the base model until it is loaded again."""
        self._check_slot(slot)
        with torch.no_grad():
            for layer in self.layers.values():
                layer.A_NIR[slot].zero_()
                layer.B_NRO[slot].zero_()
                layer.version += 1

    def state(self, slot: int) -> dict[str, torch.Tensor]:
        """What :meth:`load` put into ``slot``, under the same keys (copies)."""
        out: dict[str, torch.Tensor] = {}
        for name, layer in self.layers.items():
            out[f"{PEFT_PREFIX}{name}.lora_A.weight"] = layer.A_NIR[slot].t().clone()
            out[f"{PEFT_PREFIX}{name}.lora_B.weight"] = layer.B_NRO[slot].t().clone()
        return out

    def _pairs(self, state: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        pairs = {}
        for name, layer in self.layers.items():
            a, b = state.get(f"{PEFT_PREFIX}{name}.lora_A.weight"), state.get(f"{PEFT_PREFIX}{name}.lora_B.weight")
            want_a, want_b = (self.lora.rank, layer.in_features), (layer.out_features, self.lora.rank)
            if a is None or b is None or tuple(a.shape) != want_a or tuple(b.shape) != want_b:
                raise ValueError(f"the adapter has no lora_A {want_a} / lora_B {want_b} for layer {name!r}; "
                                 f"it was made for another model or LoraSettings than this bank's "
                                 f"(rank={self.lora.rank}, targets={self.lora.targets})")
            pairs[name] = (a, b)
        extra = len(state) - 2 * len(pairs)
        if extra:
            raise ValueError(f"the adapter has {extra} tensors this bank has no layer for; "
                             "it was made with other LoraSettings.targets")
        return pairs

    def _check_slot(self, slot: int) -> None:
        if not 1 <= slot <= self.capacity:
            raise ValueError(f"slot {slot} is not one of this bank's 1..{self.capacity} (0 is the base model)")

    def bytes_per_adapter(self) -> int:
        return sum((l.A_NIR[0].numel() + l.B_NRO[0].numel()) * l.A_NIR.element_size() for l in self.layers.values())


def decode_mixed(bank: AdapterBank, prompt_ids: list[list[int]], slots: list[int], *, pad_id: int, eos_id: int,
                 max_new: int, temperature: float = 0.0, top_p: float = 1.0, static: StaticCaches | None = None,
                 share_prompts: bool = True, on_token: TokenCallback | None = None,
                 stop: RowStop | None = None) -> list[RowResult]:
    """Decode ``prompt_ids`` in one batch, row ``i`` under the adapter in ``slots[i]`` (0 or -1:
    none), with agents/decode.py's loop: the growing cache, or ``static``'s fixed shapes (then
    the gathered path). The caller holds the bank's lock: the rows' slots are the bank's state.
    ``on_token(row, token)`` and ``stop(row)`` are :func:`agents.decode.decode`'s (streaming,
    and rows whose client left)."""
    if len(slots) != len(prompt_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(slots)} slots: give every row a slot (0: none)")
    device = bank.rows.device
    ids_BL, attn_BL = left_padded(prompt_ids, pad_id, device)
    shared = distinct_rows(prompt_ids, [max(s, NO_ADAPTER) for s in slots]) if share_prompts else None
    gathered = static is not None

    def on_rows(rows: list[int]) -> None:
        bank.rows.use([slots[r] for r in rows], static=gathered)

    with torch.no_grad():
        if static is None:
            batch: Any = GrowingBatch(bank.model, ids_BL, attn_BL, shared, room=max_new, on_rows=on_rows)
        else:
            batch = static.batch(bank.model, ids_BL, attn_BL, max_new, shared, on_rows=on_rows)
        try:
            return decode(batch, rows=len(prompt_ids), max_new=max_new, eos_id=eos_id, temperature=temperature,
                          top_p=top_p, on_token=on_token, stop=stop)
        finally:
            bank.rows.use(None)
