"""One training step: the clipped token-level objective over a batch of samples.

``logpi_old`` is what the rollout recorded. A sample produced by an older weight version
than the trainer's (async mode) is corrected with truncated importance weights
``min(pi_train_old / pi_rollout, C)`` and the ratio is taken against ``pi_train_old``;
samples more than ``max_staleness`` versions behind are dropped. Optional k3 KL to a
reference: the base model (the LoRA adapter turned off, or with full weights a frozen copy
of the weights the run started from) or fixed weights such as an ``init=`` run's
(:func:`frozen_weights`), swapped in for the reference's forward pass.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import gc
import sys
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from agents.scoring import prefix_hosts, sequence_logprobs
from trainers.config import UpdateConfig
from trainers.distributed import Ranks, minibatch_shares
from trainers.losses import clipped_token_loss, truncated_importance_weights
from trainers.samples import Sample


try:
    _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc: nothing to hand back
    _MALLOC_TRIM = None


def release_freed_memory(collect: bool = True) -> None:
    """Hand the heap that a backward pass freed back to the system. glibc keeps freed
    activations (tensors under its 32 MiB mmap threshold) for reuse, so without this a
    training process stays at its peak through the rollouts and evaluation that follow,
    which is what runs side by side on one machine compete for. ``collect=False`` skips
    the garbage collection first: reference counts free a step's tensors anyway, and a full
    collection holds the GIL while it walks every tracked object (~300 ms in a loaded
    process), a pause a serving process's request threads would share."""
    if collect:
        gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class SettledHeap:
    """A training loop's memory after each step: :func:`release_freed_memory`, then, after
    the first step and after any step in which torch compiled a graph, ``gc.freeze`` of what
    survived, for :func:`frozen_heap`'s reason.

    A step can leave behind objects that live as long as the process: the optimizer's state
    and, on a GPU, the decoder's compiled graphs (dynamo's guards, FX graphs, CUDA graph
    trees). ``torch.compile`` of the default model's forward left 502k tracked objects on
    this CPU, and each full collection after it took 143 ms (none once frozen); trainer steps
    on an H200 logged ``perf/free_s`` of 0.30-0.35 s in a process that compiled afresh and
    0.07-0.11 s with a warm compile cache; with this, the chat demo's later steps there
    logged 3-5 ms (docs/results/perf-gpu-step.md). Only steps that may have added such objects
    freeze: what survives any other step (a batch the next one still holds, say) is left to
    the collection, since a reference cycle among frozen objects waits for the block's end."""

    def __init__(self) -> None:
        self.first, self.graphs = True, compiled_graphs()

    def settle(self) -> bool:
        """Call after each step; True where it froze."""
        release_freed_memory()
        graphs = compiled_graphs()
        freeze = self.first or graphs != self.graphs
        self.first, self.graphs = False, graphs
        if freeze:
            gc.freeze()
        return freeze


def compiled_graphs() -> int:
    """How many graphs torch.compile has traced in this process (0 before dynamo loads)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    return int(dynamo.counters["stats"]["unique_graphs"]) if dynamo is not None else 0


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Leave the objects that exist now out of every garbage collection inside the block.

    Once torch, transformers and a model are loaded a trainer process tracks ~470k Python
    objects, nearly all of them alive until it exits, and a full collection walks every one:
    :func:`release_freed_memory`'s took 300 ms a step on this CPU (the chat demo on the
    default model), a cost that does not shrink with a GPU's faster step. Frozen
    (``gc.freeze``), they are skipped, and a step's collection walks only what the steps
    made since (7 ms). They are unfrozen on the way out, so a process that goes on (a test
    session, a notebook) collects them once they die; inside the block a reference cycle
    among them waits until then. Nested blocks freeze more and leave the unfreezing to the
    outermost."""
    outermost = gc.get_freeze_count() == 0
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if outermost:
            gc.unfreeze()


def trainable_copy(policy: Any, config: UpdateConfig) -> tuple[Any, torch.optim.Optimizer]:
    """The model an update trains (a copy of the policy's, pushed back after each step so
    generation never sees half-updated weights) and its AdamW optimizer. The frozen weights
    (the base model under a LoRA adapter) are the policy's own tensors, not copies: nothing
    writes them, and a copy would cost the whole model's size again."""
    frozen = {id(p): p for p in policy.model.parameters() if not p.requires_grad}
    model = copy.deepcopy(policy.model, memo=frozen)
    if config.gradient_checkpointing or config.checkpoint_tokens:
        # non-reentrant: it needs no input that requires grad (the LoRA base's embeddings do not)
        kwargs = {"use_reentrant": False}
        try:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x's name
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        except ValueError:  # an architecture without checkpointing: refused only when asked for by name
            if config.gradient_checkpointing:
                raise
        set_checkpointing(model, config.gradient_checkpointing)  # checkpoint_tokens turns it on per pass
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, betas=(config.adam_beta1, config.adam_beta2),
                                  weight_decay=config.weight_decay)
    return model, optimizer


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any], config: UpdateConfig) -> None:
    """A checkpoint's optimizer state (Adam's moments and step counts) into ``optimizer``,
    under this run's settings: a run resumed with ``lr=`` (or ``adam_beta1``, ``adam_beta2``,
    ``weight_decay``) changed trains with the new value, as its config.yaml then says,
    rather than the one saved with the moments. ``step_scale=evidence``'s ``base_lr`` is
    reset to it too."""
    optimizer.load_state_dict(saved)
    for group in optimizer.param_groups:
        group["lr"] = config.lr
        if "base_lr" in group:
            group["base_lr"] = config.lr
        group["betas"] = (config.adam_beta1, config.adam_beta2)
        group["weight_decay"] = config.weight_decay


def set_checkpointing(model: Any, on: bool) -> None:
    """Turn activation checkpointing on or off for the passes that follow, on a model that
    :func:`trainable_copy` enabled it for (the checkpoint function stays set; only the
    flags change: each decoder layer's, and the model's own, which otherwise turns every
    training pass's KV cache off, the cache a group's shared prompt is scored with)."""
    if not any(isinstance(m, GradientCheckpointingLayer) and hasattr(m, "_gradient_checkpointing_func")
               for m in model.modules()):
        return  # never enabled: nothing to recompute with
    for module in model.modules():  # the layers and the model that holds them
        if isinstance(getattr(module, "gradient_checkpointing", None), bool):
            module.gradient_checkpointing = on


def checkpointed(lengths: list[int], config: UpdateConfig) -> bool:
    """Whether a pass over samples of these lengths (prompt + reply) recomputes its
    activations: always with ``gradient_checkpointing``, else when its padded tokens (rows
    times the longest) exceed ``checkpoint_tokens``."""
    padded = len(lengths) * max(lengths, default=0)
    return config.gradient_checkpointing or 0 < config.checkpoint_tokens < padded


def _pad(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    """Right-padded float32 rows on ``device``: built on the CPU, moved in one copy."""
    out_BT = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, row in enumerate(rows):
        out_BT[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out_BT.to(device)


def frozen_weights(model: Any) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s trainable parameters by name (the LoRA adapter's, or every
    weight): a KL reference that the updates after it do not move."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def base_reference(model: Any, config: UpdateConfig) -> dict[str, torch.Tensor] | None:
    """The KL term's base-model reference for ``train_step``, taken before any update: None
    with LoRA (the base model is the adapter turned off) or without a KL term; with full
    weights, :func:`frozen_weights` (there is no adapter to turn off)."""
    return frozen_weights(model) if config.kl_beta > 0 and not config.lora.enabled else None


@contextlib.contextmanager
def _reference(model: Any, weights: dict[str, torch.Tensor] | None) -> Iterator[None]:
    """``model`` as the KL reference for a no-grad forward: ``weights`` swapped in (the
    tensors themselves, no copy) and swapped back after, or the adapter turned off."""
    if weights is None:
        if not hasattr(model, "disable_adapter"):
            raise ValueError("a KL to the base model of full weights needs the weights the run started "
                             "from: pass reference=base_reference(model, config), taken before any update")
        with model.disable_adapter():
            yield
        return
    params = dict(model.named_parameters())
    trained = {name: params[name].data for name in weights}
    try:
        for name, tensor in weights.items():
            params[name].data = tensor
        yield
    finally:
        for name, tensor in trained.items():
            params[name].data = tensor


def train_step(model: Any, optimizer: torch.optim.Optimizer, samples: list[Sample], config: UpdateConfig,
               version: int, pad_id: int, reference: dict[str, torch.Tensor] | None = None,
               ranks: Ranks | None = None) -> dict[str, float]:
    """Update ``model`` on ``samples``; return averaged loss stats (empty if nothing to train).
    ``reference``: the KL term's fixed weights (:func:`frozen_weights`); None: the base model,
    the LoRA adapter turned off (full weights need :func:`base_reference`). ``ranks``: with
    several, every rank calls this with its own samples and the update is the one of all of
    them (trainers/distributed.py); the loss stats are then the ranks' together."""
    ranks = ranks or Ranks()
    # weight_version -1 marks recorded off-policy data: always IS-corrected, never dropped.
    fresh = [s for s in samples if s.weight_version < 0 or version - s.weight_version <= config.max_staleness]
    lags = [version - s.weight_version for s in fresh if s.weight_version >= 0]
    stats: dict[str, float] = {"samples/dropped_stale": float(len(samples) - len(fresh)),
                               "samples/staleness_mean": sum(lags) / max(len(lags), 1)}
    counts = [len(fresh)] if not ranks.distributed else [int(n) for n in ranks.gather(len(fresh), what="planning")]
    if not sum(counts):
        return stats
    batches = [[fresh[i] for i in share] for share in minibatch_shares(counts, ranks.rank, config.minibatch_size)]
    # each minibatch's samples, those with completion tokens, any stale one, and the counted
    # ones' weights, over all ranks: what a pass's share and the step's size are taken of
    plan = ranks.sum_rows([[float(len(b)), float(sum(bool(s.completion_ids) for s in b)),
                            float(any(s.weight_version != version for s in b)),
                            sum(s.weight for s in b if s.completion_ids)] for b in batches])
    totals: dict[str, float] = {}
    count = 0
    model.train()
    for _ in range(config.epochs):
        for batch, (size, counted, stale, weight) in zip(batches, plan):
            step_stats = _minibatch(model, optimizer, batch, config, version, pad_id, reference,
                                    Minibatch(int(size), int(counted), stale > 0, weight), ranks)
            for k, v in step_stats.items():
                totals[k] = totals.get(k, 0.0) + v
            count += 1
    model.eval()
    if ranks.distributed:  # the passes' stats are shares of the whole minibatch: summed over ranks
        summed: dict[str, float] = {}
        for rank_totals in ranks.gather({k: v for k, v in totals.items() if k not in _STEP_STATS}, what="loss stats"):
            for k, v in rank_totals.items():
                summed[k] = summed.get(k, 0.0) + v
        totals = {**summed, **{k: v for k, v in totals.items() if k in _STEP_STATS}}
    stats.update({k: v / count for k, v in totals.items()})
    return stats


_STEP_STATS = ("loss/grad_norm", "loss/step_fraction")
"""Stats of the optimizer step itself, taken after the gradients are summed: alike on every rank."""


@dataclass
class Minibatch:
    """What a minibatch holds over all ranks (one process: what it holds)."""

    samples: int
    counted: int
    """Samples with completion tokens: the loss is a mean over these."""
    stale: bool
    """Any sample from another weight version: the whole minibatch is IS-corrected."""
    weight: float
    """The counted samples' weights summed (``step_scale=evidence``)."""


def micro_passes(lengths: list[int], size: int = 0, tokens: int = 0, rows: list[int] | None = None) -> list[list[int]]:
    """The forward/backward passes a minibatch is cut into: index lists, in order, of at
    most ``size`` samples (0: no limit) and at most ``tokens`` padded tokens, i.e. the pass's
    rows x its longest row (0: no limit). ``rows[i]`` names the row sample ``i`` is read in
    (default: a row of its own); samples of one row count as one row, as long as the longest
    of them. A sample longer than ``tokens`` gets a pass of its own: a pass is never empty."""
    passes: list[list[int]] = []
    current: list[int] = []
    longest: dict[int, int] = {}  # the pass's rows and how long each runs
    for i, length in enumerate(lengths):
        row = i if rows is None else rows[i]
        grown = {**longest, row: max(longest.get(row, 0), length)}
        full = bool(size) and len(current) >= size
        too_long = bool(tokens) and len(grown) * max(grown.values()) > tokens
        if current and (full or too_long):
            passes.append(current)
            current, grown = [], {row: length}
        current.append(i)
        longest = grown
    if current:
        passes.append(current)
    return passes


def row_passes(prompts: list[list[int]], completions: list[list[int]], size: int = 0,
               tokens: int = 0) -> list[tuple[list[int], list[int]]]:
    """:func:`micro_passes` for samples of these prompts and completions: ``(sample indices,
    the lengths of the rows the pass runs)`` per pass. A sample that another's row holds (an
    episode's earlier turn, :func:`agents.scoring.prefix_hosts`) is placed next to it, so
    they share a pass where the limits allow and it runs no row of its own there; ``size``
    still counts samples, which bounds the log-probs a pass keeps."""
    hosts = prefix_hosts(prompts, completions)
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    first: dict[int, int] = {}
    for i, host in enumerate(hosts):
        first.setdefault(host, i)
    order = sorted(range(len(hosts)), key=lambda i: (first[hosts[i]], lengths[i]))
    out = []
    for cut in micro_passes([lengths[i] for i in order], size, tokens, [hosts[i] for i in order]):
        picked = [order[j] for j in cut]
        longest: dict[int, int] = {}
        for i in picked:
            longest[hosts[i]] = max(longest.get(hosts[i], 0), lengths[i])
        out.append((picked, list(longest.values())))
    return out


def step_fraction(weights: list[float], nominal: int) -> float:
    """The share of a full optimizer step (``lr``) a minibatch earns under
    ``step_scale=evidence``: its samples' weights summed over the minibatch size it would
    have when full, at most 1. (Adam normalises the gradient's scale away, so the step's
    size is the one place where how much a minibatch holds can count.)"""
    if nominal < 1:
        raise ValueError(f"a full minibatch holds at least one sample, got {nominal}")
    if any(w < 0 for w in weights):
        raise ValueError(f"sample weights are >= 0, got {min(weights)}")
    return min(1.0, sum(weights) / nominal)


def _minibatch(model: Any, optimizer: torch.optim.Optimizer, batch: list[Sample], config: UpdateConfig,
               version: int, pad_id: int, reference: dict[str, torch.Tensor] | None, whole: Minibatch,
               ranks: Ranks) -> dict[str, float]:
    """One optimizer step on ``batch`` (this rank's part of a minibatch that is ``whole``
    over all ranks), its gradient accumulated over passes of ``microbatch_size`` samples
    and ``microbatch_tokens`` tokens (:func:`row_passes`). The loss is a mean over the
    samples that have completion tokens, so a pass's loss weighted by its share of those
    samples sums to the whole batch's (the same update as one pass, on one rank or several:
    the ranks' gradients are summed before the clip); the stats are weighted the same way."""
    optimizer.zero_grad(set_to_none=True)
    stats: dict[str, float] = {}
    for rows, lengths in row_passes([s.prompt_ids for s in batch], [s.completion_ids for s in batch],
                                    config.microbatch_size, config.microbatch_tokens):
        micro = [batch[i] for i in rows]
        counted = whole.counted
        share = sum(bool(s.completion_ids) for s in micro) / counted if counted else len(micro) / whole.samples
        if counted and not share:
            continue  # only empty replies: nothing to learn and nothing to count
        set_checkpointing(model, checkpointed(lengths, config))
        loss, micro_stats = _loss(model, micro, config, whole.stale, pad_id, reference)
        (loss * share).backward()
        for k, v in {**micro_stats, "loss/total": loss.detach()}.items():
            stats[k] = stats.get(k, 0.0) + float(v) * share
    params = [p for p in model.parameters() if p.requires_grad]
    ranks.sum_grads(params)
    stats["loss/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, config.grad_clip))
    if config.step_scale == "evidence":
        fraction = step_fraction([whole.weight], config.minibatch_size or whole.samples)
        for group in optimizer.param_groups:  # base_lr: the optimizer's own lr, kept in its saved state
            group["lr"] = group.setdefault("base_lr", group["lr"]) * fraction
        stats["loss/step_fraction"] = fraction
    optimizer.step()
    return stats


def _loss(model: Any, batch: list[Sample], config: UpdateConfig, stale: bool, pad_id: int,
          reference: dict[str, torch.Tensor] | None) -> tuple[torch.Tensor, dict[str, Any]]:
    temperature = batch[0].temperature
    prompts = [s.prompt_ids for s in batch]
    completions = [s.completion_ids for s in batch]
    width = max(len(c) for c in completions)
    device = next(model.parameters()).device
    rollout_BT = _pad([s.old_logprobs for s in batch], width, device)
    adv_BT = _pad([s.advantages for s in batch], width, device)
    old_BT, is_weight_BT = rollout_BT, None
    if stale:
        with torch.no_grad():
            train_old_BT, _ = sequence_logprobs(model, prompts, completions, temperature, pad_id)
        is_weight_BT = truncated_importance_weights(train_old_BT, rollout_BT, config.is_cap)
        old_BT = train_old_BT
    ref_BT = None
    if config.kl_beta > 0:
        with torch.no_grad(), _reference(model, reference):
            ref_BT, _ = sequence_logprobs(model, prompts, completions, temperature, pad_id)
    logp_BT, mask_BT = sequence_logprobs(model, prompts, completions, temperature, pad_id)
    return clipped_token_loss(logp_BT, old_BT, adv_BT, mask_BT, eps_low=config.eps_low,
                              eps_high=config.eps_high, is_weight_BT=is_weight_BT,
                              kl_ref_logp_BT=ref_BT, kl_beta=config.kl_beta)
