"""The policy's own decode loop: prompt ids in, sampled ids with their log-probs out.

:func:`decode` is what :class:`~agents.policy.TransformersPolicy` runs instead of
transformers' ``generate`` (``decoder="fast"``, the default). The contract is the same:

- **Log-probs** are ``log_softmax(logits / temperature)`` of each sampled token, read on
  the last position of each step (greedy: the untempered model's); no step keeps its
  full-vocabulary logits once the token and its log-prob are read. ``top_p < 1`` filters
  what is sampled from, not the recorded log-prob, exactly as before.
- **Sampling** is by inverse CDF: one uniform per row from the global torch generator,
  searched in the row's cumulative softmax (float64). That is ``generate``'s distribution
  (softmax, then ``torch.multinomial``) but not its draws: torch's multinomial draws an
  exponential for every vocabulary entry, 48 ms a step at batch 32 on one CPU core against
  8 ms for this. A seed gives the same tokens on every run.
- **Left padding**: position ids are ``cumsum(mask) - 1`` (0 on padding), as transformers
  computes them, and the KV cache is transformers' own.
- **Rows end independently**: ``stop(row)`` is asked for every running row after each
  step, before any of that step's tokens is streamed; a row it stops is ``cancelled``
  keeping the tokens of the steps before. Then ``on_token(row, token)`` gets each running
  row's token, end token included. A row ends ``stop`` at its end token, ``length`` after
  ``max_new`` tokens.

Two caches, one loop:

- :class:`GrowingBatch` (any device): a ``DynamicCache``; rows that ended are dropped from
  the batch and the cache, so a batch of mixed lengths costs what its running rows cost.
  Identical prompts (a GRPO group's members) are prefilled once and their cache rows
  copied, as an inference engine's prefix cache would: the prompt's forward pass is paid
  per distinct prompt, not per sample.
- :class:`StaticBatch` (CUDA by default): a ``StaticCache`` kept between calls per
  (batch bucket, length bucket), with the decode forward compiled by transformers'
  ``get_compiled_call`` (torch.compile ``mode="reduce-overhead"``: CUDA graphs). Shapes
  are fixed, so ended rows stay in the batch and their tokens are ignored; batches are
  padded up to a power of two rows (copies of the last prompt), and short buckets to 2048
  slots in all (8 rows at 256 positions), so a few graphs serve all.
  Repeated prompts are prefilled once here too, their cache rows written into each slot.
  As no step waits on the host, the loop queues each step before reading the last one's
  tokens (``runs_ahead``), so the host's per-step work overlaps the device's.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

TokenCallback = Callable[[int, int], None]
"""``on_token(row, token_id)``: a token was sampled for row ``row`` of a batch."""

RowStop = Callable[[int], bool]
"""``stop(row)``: True once the caller no longer wants row ``row`` of a batch."""

Shared = tuple[list[int], list[int]]
"""``(first, copy)`` from :func:`distinct_rows`: the row that prefills each distinct prompt,
and for every row the index of its prompt among those."""

RowsHook = Callable[[list[int]], None]
"""``on_rows(rows)``: the next forward pass runs these rows of the batch (indices into its
prompts), in this order. What a per-row weight (agents/multi_lora.py: each row its own
adapter) follows as rows are shared, dropped or padded; called only when they change."""


@dataclass
class RowResult:
    tokens: list[int]
    logprobs: list[float]
    finish_reason: str = "length"
    """``stop``, ``length`` or ``cancelled`` (``context`` is decided before decoding)."""


def position_ids(attn_BL: torch.Tensor) -> torch.Tensor:
    """Positions of a left-padded batch as transformers computes them: 0 on padding."""
    return (attn_BL.long().cumsum(-1) - 1).masked_fill(attn_BL == 0, 0)


def pick_tokens(logits_BV: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row and its log-prob under ``log_softmax(logits / temperature)``.

    ``temperature <= 0`` is greedy (untempered log-probs). Otherwise ``generate``'s
    distribution (temperature, then top-p, softmax), drawn by :func:`inverse_cdf`.
    """
    if temperature <= 0:
        tokens_B = logits_BV.argmax(dim=-1)
        return tokens_B, torch.log_softmax(logits_BV, dim=-1).gather(-1, tokens_B[:, None]).squeeze(-1)
    scores_BV = logits_BV / temperature
    logp_BV = torch.log_softmax(scores_BV, dim=-1)
    probs_BV = torch.softmax(_top_p(scores_BV, top_p), dim=-1) if top_p < 1.0 else logp_BV.exp()
    tokens_B = inverse_cdf(probs_BV)
    return tokens_B, logp_BV.gather(-1, tokens_B[:, None]).squeeze(-1)


def inverse_cdf(probs_BV: torch.Tensor) -> torch.Tensor:
    """One draw per row from ``probs_BV`` (non-negative, each row's sum > 0): the first
    entry whose cumulative sum exceeds a uniform draw scaled to the row's total. A zero
    entry is never drawn; summed in float64, so no entry's share drifts with its place in
    a 49k-token row."""
    cdf_BV = probs_BV.cumsum(dim=-1, dtype=torch.float64)
    u_B1 = torch.rand(cdf_BV.shape[0], 1, dtype=torch.float64, device=cdf_BV.device) * cdf_BV[:, -1:]
    return torch.searchsorted(cdf_BV, u_B1, right=True).squeeze(1).clamp_(max=cdf_BV.shape[-1] - 1)


def _top_p(scores_BV: torch.Tensor, top_p: float) -> torch.Tensor:
    """transformers' ``TopPLogitsWarper``: keep the smallest set whose mass reaches top_p."""
    sorted_BV, order_BV = torch.sort(scores_BV, descending=False)
    cumulative_BV = sorted_BV.softmax(dim=-1).cumsum(dim=-1)
    remove_BV = cumulative_BV <= (1 - top_p)
    remove_BV[..., -1:] = False
    return scores_BV.masked_fill(remove_BV.scatter(1, order_BV, remove_BV), -float("inf"))


class Batch(Protocol):
    """The model side of a decode: a batch's KV cache and how one step runs on it."""

    runs_ahead: bool
    """True where a step needs nothing the host decides: :func:`decode` then queues each
    step before reading the last one's tokens (see :class:`StaticBatch`)."""

    def prefill(self) -> torch.Tensor:
        """Run the prompts; return the next-token logits ``[rows, vocab]`` in float32."""
        ...

    def step(self, tokens_B: torch.Tensor, keep: list[int]) -> tuple[torch.Tensor, list[int]]:
        """Feed ``tokens_B`` (one per slot of the last logits) for the slots in ``keep``;
        return the next logits and where each kept row now sits in them."""
        ...


def decode(batch: Batch, *, max_new: int, eos_id: int, temperature: float, top_p: float = 1.0,
           on_token: TokenCallback | None = None, stop: RowStop | None = None, rows: int) -> list[RowResult]:
    """Sample up to ``max_new`` tokens for each of ``rows`` prompts held by ``batch``."""
    results = [RowResult([], []) for _ in range(rows)]
    active, slots = list(range(rows)), list(range(rows))
    ahead = batch.runs_ahead
    logits_BV = batch.prefill()
    for step in range(max_new):
        tokens_B, logp_B = pick_tokens(logits_BV, temperature, top_p)
        if ahead:  # the next step is queued before this one's tokens reach the host: see StaticBatch
            picked = _to_host(tokens_B, logp_B)
            if step < max_new - 1:
                logits_BV, _ = batch.step(tokens_B, slots)
            tokens, logps = picked()
        else:
            tokens, logps = tokens_B.tolist(), logp_B.tolist()
        # Asked for every running row before any of this step's tokens is streamed, as
        # transformers' stopping criteria are: a stop triggered from on_token is seen next step.
        cancelled = {row for row in active if stop is not None and stop(row)}
        going: list[tuple[int, int]] = []
        for row, slot in zip(active, slots):
            result = results[row]
            if row in cancelled:
                result.finish_reason = "cancelled"
                continue
            result.tokens.append(tokens[slot])
            result.logprobs.append(logps[slot])
            if on_token is not None:
                on_token(row, tokens[slot])
            if tokens[slot] == eos_id:
                result.finish_reason = "stop"
                continue
            going.append((row, slot))
        if not going or step == max_new - 1:
            break  # the rows still going keep finish_reason "length"
        active = [row for row, _ in going]
        if ahead:
            slots = [slot for _, slot in going]
        else:
            logits_BV, slots = batch.step(tokens_B, [slot for _, slot in going])
    return results


def _to_host(*tensors_B: torch.Tensor) -> Callable[[], list[list[Any]]]:
    """Start copying ``tensors_B`` to the host; the returned call waits for the copies alone
    (on a GPU, not for the work queued after them) and gives their values as lists."""
    if not tensors_B[0].is_cuda:
        return lambda: [t.tolist() for t in tensors_B]
    copies = [t.to("cpu", non_blocking=True) for t in tensors_B]  # into pinned memory
    copied = torch.cuda.Event()
    copied.record()

    def read() -> list[list[Any]]:
        copied.synchronize()
        return [c.tolist() for c in copies]

    return read


def left_padded(prompt_ids: list[list[int]], pad_id: int,
                device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids_BL`` and ``attn_BL`` of prompts padded on the left to the longest."""
    width = max(len(p) for p in prompt_ids)
    ids_BL = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompt_ids], device=device)
    attn_BL = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=device)
    return ids_BL, attn_BL


def distinct_rows(prompt_ids: list[list[int]], tags: list[int] | None = None) -> Shared:
    """The first row of each distinct prompt, and for every row the position of its prompt
    among those. Read from the token lists, before padding: nothing comes back from the device.
    Rows with different ``tags`` (their adapters) never share: the same prompt under another
    adapter has another cache."""
    seen: dict[tuple[int, ...], int] = {}
    first: list[int] = []
    copy: list[int] = []
    for row, ids in enumerate(prompt_ids):
        key = tuple(ids) if tags is None else (tags[row], *ids)
        if key not in seen:
            seen[key] = len(first)
            first.append(row)
        copy.append(seen[key])
    return first, copy


def _shared_on(shared: Shared | None, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``shared`` as index tensors, or None when every row is its own prompt."""
    if shared is None or len(shared[0]) == len(shared[1]):
        return None
    return torch.tensor(shared[0], device=device), torch.tensor(shared[1], device=device)


class GrowingBatch:
    """A ``DynamicCache`` batch that drops rows once they end (cache, mask and positions)."""

    runs_ahead = False  # a step takes the rows the host kept

    def __init__(self, model: Any, ids_BL: torch.Tensor, attn_BL: torch.Tensor, shared: Shared | None = None,
                 room: int = 0, on_rows: RowsHook | None = None) -> None:
        self.model, self.ids_BL, self.attn_BL = model, ids_BL, attn_BL
        self.shared, self.room, self.on_rows = shared, room, on_rows
        self.rows = list(range(ids_BL.shape[0]))  # the prompts the batch's rows hold, in order
        self.cache: Any = None
        self.next_pos_B = torch.empty(0)

    def prefill(self) -> torch.Tensor:
        index = _shared_on(self.shared, self.ids_BL.device)
        ids_UL, attn_UL, copy = self.ids_BL, self.attn_BL, None
        if index is not None:
            first, copy = index
            ids_UL, attn_UL = self.ids_BL[first], self.attn_BL[first]
        if self.on_rows is not None:
            self.on_rows(self.shared[0] if index is not None else self.rows)
        pos_UL = position_ids(attn_UL)
        out = self.model(input_ids=ids_UL, attention_mask=attn_UL, position_ids=pos_UL, use_cache=True,
                         past_key_values=reserved_cache(self.ids_BL.shape[1] + self.room) if self.room else None,
                         logits_to_keep=1)
        self.cache, logits_BV, self.next_pos_B = out.past_key_values, out.logits[:, -1].float(), pos_UL[:, -1] + 1
        if copy is not None:  # every row gets its prompt's cache, logits and position
            self.cache.batch_select_indices(copy)
            logits_BV, self.next_pos_B = logits_BV[copy], self.next_pos_B[copy]
            if self.on_rows is not None:
                self.on_rows(self.rows)
        return logits_BV

    def step(self, tokens_B: torch.Tensor, keep: list[int]) -> tuple[torch.Tensor, list[int]]:
        if len(keep) < tokens_B.shape[0]:
            self.rows = [self.rows[k] for k in keep]
            if self.on_rows is not None:
                self.on_rows(self.rows)
            index = torch.tensor(keep, device=tokens_B.device)
            self.cache.batch_select_indices(index)
            tokens_B, self.attn_BL, self.next_pos_B = tokens_B[index], self.attn_BL[index], self.next_pos_B[index]
            self._trim_left()
        ones_B1 = self.attn_BL.new_ones((self.attn_BL.shape[0], 1))
        self.attn_BL = torch.cat([self.attn_BL, ones_B1], dim=-1)
        out = self.model(input_ids=tokens_B[:, None], attention_mask=self.attn_BL,
                         position_ids=self.next_pos_B[:, None], past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1)
        self.next_pos_B = self.next_pos_B + 1
        return out.logits[:, -1].float(), list(range(len(keep)))

    def _trim_left(self) -> None:
        """Drop the leading columns that are padding for every remaining row (a long
        prompt that ended leaves its batch-mates' padding behind)."""
        lead = int(self.attn_BL.argmax(dim=-1).min())  # first attended column of the least-padded row
        if lead == 0 or any(getattr(layer, "is_sliding", False) for layer in self.cache.layers):
            return
        self.attn_BL = self.attn_BL[:, lead:]
        for layer in self.cache.layers:
            if isinstance(layer, ReservedRoom):
                layer.trim_left(lead)
            elif getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys, layer.values = layer.keys[..., lead:, :], layer.values[..., lead:, :]


def reserved_cache(length: int) -> Any:
    """A ``DynamicCache`` whose layers reserve room for ``length`` positions (see
    :class:`ReservedRoom`)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    layer = _reserved_layer()
    cache.layer_class_to_replicate = lambda: layer(length)
    return cache


@functools.cache
def _reserved_layer() -> type:
    """transformers' ``DynamicLayer`` with :class:`ReservedRoom`'s storage (built on first
    use: importing transformers' cache module costs a second)."""
    from transformers.cache_utils import DynamicLayer

    return type("ReservedLayer", (ReservedRoom, DynamicLayer), {})


class ReservedRoom:
    """The storage of a ``DynamicLayer`` that writes each step's keys and values into room
    reserved up front (mixed into transformers' class by :func:`reserved_cache`).

    transformers' layer concatenates the whole cache with each new token: a fresh tensor,
    and a copy of everything cached, every step (6-7% of a CPU decode step at 450-token
    prompts, docs/results/perf-decode.md). This one allocates ``length`` positions once, writes in place and
    exposes views of the filled part; past ``length`` it grows by doubling.
    """

    def __init__(self, length: int) -> None:
        super().__init__()
        self.length = length
        self._keys: torch.Tensor | None = None  # the reserved storage; self.keys views its filled part
        self._values: torch.Tensor | None = None

    @property
    def filled(self) -> int:
        """Positions written so far: the length of the ``keys`` view (a crop shortens it)."""
        return 0 if self._keys is None else self.keys.shape[-2]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.filled
        end = start + key_states.shape[-2]
        if self._keys is None or end > self._keys.shape[-2]:
            self._grow(key_states, value_states, max(self.length, 2 * start, end))
        self._keys[..., start:end, :].copy_(key_states)
        self._values[..., start:end, :].copy_(value_states)
        return self._show(end)

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int) -> None:
        keys = key_states.new_empty((*key_states.shape[:-2], length, key_states.shape[-1]))
        values = value_states.new_empty((*value_states.shape[:-2], length, value_states.shape[-1]))
        if self.filled:
            keys[..., :self.filled, :].copy_(self.keys)
            values[..., :self.filled, :].copy_(self.values)
        self._keys, self._values = keys, values

    def _show(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = self._keys[..., :end, :], self._values[..., :end, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.filled:
            end = self.filled
            self._keys, self._values = self._keys[indices], self._values[indices]
            self._show(end)

    def trim_left(self, lead: int) -> None:
        """Forget the first ``lead`` positions (padding every row shares)."""
        if self.filled and lead:
            end = self.filled - lead
            self._keys, self._values = self._keys[..., lead:, :], self._values[..., lead:, :]
            self._show(end)

    def reset(self) -> None:
        super().reset()
        self._keys = self._values = None


def _bucket(n: int, floor: int) -> int:
    """The power of two at or above ``n`` (at least ``floor``)."""
    size = floor
    while size < n:
        size *= 2
    return size


class StaticCaches:
    """``StaticCache`` objects kept between calls, one per (model, rows, length) bucket, and the
    decode forward: compiled (CUDA graphs on a GPU) or eager.

    Reusing a cache keeps its tensors at the same addresses, which is what lets a captured
    graph replay; the first call for a bucket compiles (10-85 s on a GPU, measured). Rows
    are padded until rows x length reaches ``min_slots`` (2048: 8 rows at 256 positions, 4
    at 512, 1 from 2048 on). Rows are nearly free in a graphed step of a small model (the
    default's took 2.6 ms at 8 rows and 2.7 at 32 on an H100), while every row bucket is a
    compile of its own (the chat demo's gate replays of 1 and 4 episodes made two, beside
    its 8-row rollouts); the floor falls with length so that padding never holds more
    than ``min_slots`` positions of cache a bucket.
    """

    def __init__(self, compile: bool = True, max_rows: int = 32, min_length: int = 256, min_slots: int = 2048) -> None:
        self.compile = compile
        self.max_rows, self.min_length, self.min_slots = max_rows, min_length, min_slots
        self._caches: dict[tuple[int, int, int], Any] = {}
        self._warned = False
        if compile:
            # a graph per bucket (rows 1..max_rows, lengths 256..context, in powers of two) and per
            # model: past dynamo's default of 8, further shapes would silently run uncompiled
            config = torch._dynamo.config
            name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
            setattr(config, name, max(getattr(config, name), 64))

    def batch(self, model: Any, ids_BL: torch.Tensor, attn_BL: torch.Tensor, max_new: int,
              shared: Shared | None = None, on_rows: RowsHook | None = None) -> StaticBatch:
        length = _bucket(ids_BL.shape[1] + max_new, self.min_length)
        floor = max(1, self.min_slots // length)
        rows = min(_bucket(ids_BL.shape[0], floor), max(self.max_rows, ids_BL.shape[0]))
        key = (id(model), rows, length)
        if key not in self._caches:
            from transformers import StaticCache

            self._caches[key] = StaticCache(config=model.config, max_cache_len=length)
        extra = rows - ids_BL.shape[0]  # filler rows repeat the last prompt; their tokens are ignored
        ids_BL = torch.cat([ids_BL, ids_BL[-1:].expand(extra, -1)]) if extra else ids_BL
        attn_BL = torch.cat([attn_BL, attn_BL[-1:].expand(extra, -1)]) if extra else attn_BL
        if shared is not None and extra:  # a filler row shares the last prompt's prefill
            shared = shared[0], shared[1] + [shared[1][-1]] * extra
        batch = StaticBatch(self, model, self._caches[key], ids_BL, attn_BL, shared)
        if on_rows is not None:  # filler rows are the last prompt's, under its adapter
            batch.on_rows, batch.rows = on_rows, batch.rows[: rows - extra] + [rows - extra - 1] * extra
        return batch

    def forward(self, model: Any) -> Callable[..., Any]:
        if not self.compile:
            return model.__call__
        from transformers import CompileConfig

        return model.get_compiled_call(CompileConfig(fullgraph=False, mode="reduce-overhead"))

    def compile_failed(self, exc: Exception) -> None:
        """A compiled step that raises is run again eagerly; compiling stops for good."""
        if not self._warned:
            warnings.warn(f"the compiled decode step failed ({type(exc).__name__}: {exc}); decoding eagerly from "
                          "now on. Pass cuda_graphs=False to TransformersPolicy to skip compiling.", stacklevel=3)
            self._warned = True
        self.compile = False


class StaticBatch:
    """A batch on a reused ``StaticCache``: fixed shapes, every row runs every step.

    Since a step needs nothing the host decides (ended rows run on, their tokens ignored),
    it ``runs_ahead`` (True unless its caller sets it False): :func:`decode` queues
    step t+1 right after sampling step t and only then waits for step t's tokens, which it
    copies to the host on their own, so on a GPU the host's work of a step (reading tokens,
    streaming, the stop checks, building the next mask, launching the graph) overlaps the
    device's instead of following it. The tokens and log-probs are those of running in
    step (the sampler's draws are the same, in the same order); a batch that ends has run
    one forward pass more than it needed.
    """

    def __init__(self, owner: StaticCaches, model: Any, cache: Any, ids_BL: torch.Tensor,
                 attn_BL: torch.Tensor, shared: Shared | None = None) -> None:
        self.owner, self.model, self.cache = owner, model, cache
        self.runs_ahead = True
        self.on_rows: RowsHook | None = None  # see StaticCaches.batch
        self.rows = list(range(ids_BL.shape[0]))
        self.ids_BL, self.attn_BL, self.shared = ids_BL, attn_BL, shared
        self.next_pos_B = torch.empty(0)
        self.width = ids_BL.shape[1]  # prompt + tokens fed so far
        # the 4D mask of a step is the prompt's padding, then every position fed so far: one
        # comparison on a row kept for the batch, instead of transformers' mask builder (~0.5 ms
        # of Python a step); checked against the builder on the first step, kept only if equal
        slots = cache.get_max_length()
        self.allowed_BS = torch.ones(ids_BL.shape[0], slots, dtype=torch.bool, device=ids_BL.device)
        self.allowed_BS[:, : self.width] = attn_BL.bool()
        self.slots_S = torch.arange(slots, device=ids_BL.device)
        self.own_mask: bool | None = None  # None: not yet checked

    def prefill(self) -> torch.Tensor:
        self.cache.reset()
        pos_BL = position_ids(self.attn_BL)
        self.next_pos_B = pos_BL[:, -1] + 1
        # prefill runs eagerly: its shape changes with every prompt width
        index = _shared_on(self.shared, self.ids_BL.device)
        if self.on_rows is not None:
            self.on_rows([self.rows[i] for i in self.shared[0]] if index is not None else self.rows)
        if index is None:
            out = self.model(input_ids=self.ids_BL, attention_mask=self.attn_BL, position_ids=pos_BL,
                             past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            return out.logits[:, -1].to(dtype=torch.float32, copy=True)
        # repeated prompts (a group's members, the filler rows): each distinct one runs once, on a
        # cache of its own, whose rows are then written into every slot of the static cache
        first, copy = index
        out = self.model(input_ids=self.ids_BL[first], attention_mask=self.attn_BL[first], position_ids=pos_BL[first],
                         use_cache=True, logits_to_keep=1)
        for layer, prefilled in zip(self.cache.layers, out.past_key_values.layers):
            layer.update(prefilled.keys[copy], prefilled.values[copy])
        if self.on_rows is not None:  # every slot from here on (fixed: rows never leave a static batch)
            self.on_rows(self.rows)
        return out.logits[:, -1].float()[copy]

    def _mask(self, pos_B1: torch.Tensor) -> Any:
        """The step's 4D attention mask, built outside the compiled forward as generate does
        for static caches."""
        from transformers.masking_utils import create_masks_for_generate

        own = (self.allowed_BS & (self.slots_S < self.width))[:, None, None, :]
        if self.own_mask:
            return own
        rows = self.allowed_BS.shape[0]
        embeds = torch.empty((rows, 1, 0), dtype=self.model.dtype, device=pos_B1.device)
        mask = create_masks_for_generate(config=self.model.config, inputs_embeds=embeds,
                                         attention_mask=self.allowed_BS[:, : self.width].long(),
                                         past_key_values=self.cache, position_ids=pos_B1)
        mask = {k: v.contiguous() for k, v in mask.items()} if isinstance(mask, dict) else mask.contiguous()
        if self.own_mask is None:  # a boolean mask of this shape (sdpa's) is ours; another kind is the builder's
            self.own_mask = (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
                             and mask.shape == own.shape and bool(torch.equal(mask, own)))
        return mask

    def step(self, tokens_B: torch.Tensor, keep: list[int]) -> tuple[torch.Tensor, list[int]]:
        seen = self.width
        self.width += 1
        pos_B1 = self.next_pos_B[:, None]
        inputs = dict(input_ids=tokens_B[:, None].contiguous(), attention_mask=self._mask(pos_B1), position_ids=pos_B1,
                      past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        try:
            out = self.owner.forward(self.model)(**inputs)
        except Exception as exc:  # noqa: BLE001 - a compiler failure must not lose the batch
            if not self.owner.compile:
                raise
            self.owner.compile_failed(exc)
            for layer in self.cache.layers:  # undo a partial write before running the step again
                if getattr(layer, "is_initialized", False):
                    layer.cumulative_length.fill_(seen)
            out = self.model(**inputs)
        self.next_pos_B = self.next_pos_B + 1
        # copied: a CUDA graph's output buffer is overwritten by its next replay
        return out.logits[:, -1].to(dtype=torch.float32, copy=True), keep
