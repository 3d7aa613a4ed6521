"""Data-parallel training: N ranks started by ``torchrun`` (or ``accelerate launch``).

    torchrun --nproc-per-node 2 -m trainers.run env=chat parallel=4       # CPU: gloo
    torchrun --nproc-per-node 8 -m trainers.run env=swe                   # one node's GPUs: NCCL
    accelerate launch --multi_gpu --num_processes 8 -m trainers.run ...   # the same, through accelerate

Without ``WORLD_SIZE`` (or with 1) nothing here runs a collective and a run is the one
process it always was. The choices:

- **Groups, not episodes, are split.** Every rank draws a step's tasks from the same rng
  and rank r rolls out the groups g with ``g % world == r``: a GRPO group never straddles
  ranks, so its advantages are what one process computes. ``parallel`` is per rank.
  (``opd_alone=share`` takes its share of signal groups among the rank's own groups.)
- **Decisions that gate a collective are global**: fill_groups' rounds (and which groups
  they keep, by group id as one process keeps them), min_update_samples' hold, the
  update's minibatch plan. A rank that decided alone would wait in a collective the
  others never enter.
- **The update is one process's update on the union of the ranks' samples**, taken in
  :func:`interleave` order (rank 0's first sample, rank 1's first, ..., rank 0's second):
  minibatch k holds that union's samples ``k*size .. (k+1)*size - 1`` and each rank runs the
  passes over its own of them (:func:`minibatch_shares`). A pass's loss is weighted by its
  share of the minibatch's samples counted over all ranks, the trainable parameters'
  gradients are summed across ranks in one flat bucket per dtype (:meth:`Ranks.sum_grads`),
  and every rank clips and steps the same AdamW state on the same gradient: the weights
  stay bit-identical, which each checkpoint checks (:func:`weights_digest`).
- **Not DDP's wrapper.** A minibatch's passes are cut by the rank's own lengths
  (``row_passes``) and a rank may hold no sample of a minibatch at all, while DDP
  all-reduces in every backward, so ranks would enter different numbers of collectives.
  One bucket per optimizer step also leaves the peft model unwrapped, so its
  ``disable_adapter()`` (the KL's and the base teacher's reference) and the weight swap of
  ``kl_ref=init`` work as in one process.
- **Rank 0 owns the run dir**: config.yaml (with ``world_size``), metrics, TensorBoard,
  evaluation and its replies, checkpoints, the plot; the other ranks never create it.
  It reads the saved config and checkpoint on resume and broadcasts them, so a run resumes
  at any world size and needs no shared filesystem across nodes.
- **Sampling noise differs per rank**: rank r reseeds its policy at
  ``(step * world + r) * 10_000`` (one process: ``step * 10_000``, as before).
- **Metrics** are merged on rank 0 by :func:`merge_metrics`' rule.
- **Faults**: collectives time out after ``dist_timeout_s``; a rank that dies makes
  torchrun stop the others (SIGTERM: rank 0 keeps its last finished step, as on any stop),
  and a collective that fails under a rank says so (:class:`DistributedError`).
- ``mode=async`` runs its rollout thread's collectives on a process group of their own, so
  they never interleave with the update's.
- FSDP2 is not built: the policy keeps a whole copy of the model to generate with, so
  sharding the trained copy would save its gradients and optimizer state only; full
  fine-tuning is data-parallel with whole weights on every rank.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Iterator, Sequence, TypeVar

import torch

T = TypeVar("T")

SUMMED = frozenset({
    "samples/count", "samples/zero_advantage", "samples/skipped_groups", "samples/hinted_turns",
    "samples/gate_failed", "samples/held", "samples/trained", "samples/dropped_stale",
    "rollout/episodes", "rollout/turns", "rollout/env_errors", "rollout/cut_completions",
    "rollout/empty_completions", "rollout/fill_episodes", "judge/unparsed", "judge/hints",
    "gate/checked", "gate/unreplayed"})
"""Counts: a step's is the sum over ranks."""

RANK0 = ("loss/", "eval/", "rollout/weight_version", "rollout/fill_rounds", "samples/signal_groups")
"""Keys (or prefixes) that are rank 0's: the same on every rank (the update's stats are
summed across ranks inside it, fill_groups' counts are global) or rank 0's alone (eval)."""


class DistributedError(RuntimeError):
    """The ranks cannot start or go on together; the message says why and what to do."""


def interleave(shares: Sequence[Sequence[T]]) -> list[T]:
    """The ranks' lists as one: each one's first item in rank order, then each one's second,
    ...; a longer list's tail comes last. The order the update reads the union in."""
    longest = max((len(s) for s in shares), default=0)
    return [s[i] for i in range(longest) for s in shares if i < len(s)]


def minibatch_shares(counts: Sequence[int], rank: int, size: int) -> list[list[int]]:
    """Rank ``rank``'s indices into its own samples, per minibatch of the union of every
    rank's (``counts[r]`` samples on rank r) in :func:`interleave` order, cut every ``size``
    (0: one minibatch). Every rank gets the same number of minibatches, some maybe empty."""
    order = interleave([[(r, i) for i in range(n)] for r, n in enumerate(counts)])
    size = size or len(order) or 1
    return [[i for r, i in order[start:start + size] if r == rank] for start in range(0, len(order), size)]


def merge_metrics(per_rank: Sequence[dict[str, float]]) -> dict[str, float]:
    """A step's metrics from each rank's (rank 0's first), by key: counts (:data:`SUMMED`)
    are summed; ``perf/`` seconds are the slowest rank's (the step waits for it); keys of
    :data:`RANK0` are rank 0's; every other key is a mean, taken over the ranks that report
    it, each weighted by the episodes it rolled out (``rollout/episodes``; equally where no
    rank has any). That weight is exact for per-episode means (``reward/``) when no episode
    failed, and an approximation for per-turn and per-token ones (``judge/score_mean``,
    ``adv/``)."""
    merged: dict[str, float] = {}
    keys = dict.fromkeys(k for metrics in per_rank for k in metrics)
    weights = [m.get("rollout/episodes", 0.0) for m in per_rank]
    for key in keys:
        have = [(m[key], w) for m, w in zip(per_rank, weights) if key in m]
        if key in SUMMED:
            merged[key] = float(sum(v for v, _w in have))
        elif key.startswith("perf/"):
            merged[key] = float(max(v for v, _w in have))
        elif key.startswith(RANK0):
            merged[key] = per_rank[0][key] if key in per_rank[0] else have[0][0]
        else:
            total = sum(w for _v, w in have)
            merged[key] = (float(sum(v * w for v, w in have) / total) if total > 0
                           else float(sum(v for v, _w in have) / len(have)))
    return merged


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """A hash of trainable weights (names, dtypes, shapes and bytes, in name order): equal on
    two ranks exactly when their weights are bit-identical."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


@dataclass
class Ranks:
    """This process's place among the data-parallel ranks; with ``world == 1`` every
    collective below returns its input and nothing touches torch.distributed."""

    world: int = 1
    rank: int = 0
    local_rank: int = 0
    device: str = "cpu"
    """Where the gradient bucket is reduced: the rank's GPU under NCCL, else the CPU."""
    groups: dict[str, Any] = field(default_factory=dict, repr=False)
    """gloo process groups for small CPU collectives: ``update`` (the trainer's thread) and
    ``rollout`` (async mode's rollout thread), so two threads never share one group."""

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def label(self) -> str:
        """How this process signs its messages."""
        return f"rank {self.rank} of {self.world}" if self.distributed else ""

    def mine(self, group: int) -> bool:
        """Whether this rank rolls out ``group``."""
        return group % self.world == self.rank

    def reseed_offset(self, step: int) -> int:
        """The policy's sampling offset for ``step`` on this rank (distinct per rank)."""
        return (step * self.world + self.rank) * 10_000

    # ---- collectives ----------------------------------------------------------------------
    def gather(self, obj: T, rollout: bool = False, what: str = "") -> list[T]:
        """Every rank's ``obj``, in rank order."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world
        with _collective(what or "gathering"):
            torch.distributed.all_gather_object(out, obj, group=self._group(rollout))
        return out

    def broadcast(self, obj: T, what: str = "") -> T:
        """Rank 0's ``obj`` on every rank (pickled; CPU tensors travel as they are)."""
        if not self.distributed:
            return obj
        box = [obj if self.main else None]
        with _collective(what or "receiving rank 0's state"):
            torch.distributed.broadcast_object_list(box, src=0, group=self._group(False))
        return box[0]

    def sum_rows(self, rows: list[list[float]]) -> list[list[float]]:
        """``rows`` summed elementwise over the ranks (all ranks pass the same shape)."""
        if not self.distributed or not rows:
            return rows
        table = torch.tensor(rows, dtype=torch.float64)
        with _collective("summing the minibatch plan"):
            torch.distributed.all_reduce(table, group=self._group(False))
        return table.tolist()

    def sum_grads(self, params: Sequence[torch.Tensor]) -> None:
        """Sum the parameters' gradients over the ranks, in place; one flat bucket per dtype.
        A rank that ran no pass for a parameter adds zeros; a parameter no rank has a
        gradient for keeps none, so the optimizer skips it as one process's would."""
        if not self.distributed:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for p in params:
            by_dtype.setdefault(p.dtype, []).append(p)
        for same in by_dtype.values():
            grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(self.device) for p in same]
            had = torch.tensor([float(p.grad is not None) for p in same], dtype=same[0].dtype, device=self.device)
            flat = torch.cat([*grads, had])
            with _collective("summing gradients"):
                torch.distributed.all_reduce(flat)  # the default group: NCCL on GPUs
            offset, had_any = 0, flat[-len(same):].tolist()
            for p, anywhere in zip(same, had_any):
                part = flat[offset:offset + p.numel()].view_as(p).to(p.device)
                offset += p.numel()
                if not anywhere:
                    continue
                if p.grad is None:
                    p.grad = part.clone()
                else:
                    p.grad.copy_(part)

    def _group(self, rollout: bool) -> Any:
        return self.groups["rollout" if rollout else "update"]

    def close(self) -> None:
        if self.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


@contextlib.contextmanager
def _collective(what: str) -> Iterator[None]:
    """A failed collective as a :class:`DistributedError` naming what was under way."""
    try:
        yield
    except DistributedError:
        raise
    except RuntimeError as exc:  # gloo: a peer's connection closed; NCCL: a timeout or abort
        raise DistributedError(
            f"lost the other ranks while {what} ({(str(exc).splitlines() or [''])[0][:200]}); another rank most "
            "likely failed first: its own error, or torchrun's summary, names it") from exc


def start_ranks(device: str, timeout_s: int) -> Ranks:
    """This process's :class:`Ranks`: one rank unless ``WORLD_SIZE`` > 1, else the process
    group through accelerate (gloo for ``device=cpu``, NCCL on GPUs, each rank on
    ``cuda:LOCAL_RANK``). Refuses a world that torch.distributed does not see as the
    launcher said: a rank that silently trained alone would be no data-parallel run."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return Ranks()
    how = f"launch it as torchrun --nproc-per-node {world} -m trainers.run ... (or unset WORLD_SIZE for one process)"
    missing = [k for k in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise DistributedError(f"WORLD_SIZE={world} but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                               f"unset, so no other rank can be found; {how}")
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    cpu = not device.startswith("cuda")
    accelerator = Accelerator(cpu=cpu, kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=timeout_s))])
    if accelerator.num_processes != world:
        raise DistributedError(
            f"the launcher started {world} ranks but torch.distributed sees {accelerator.num_processes}, so each "
            f"rank would train alone; {'pass device=cpu (gloo) on a machine without GPUs, and ' if not cpu else ''}"
            f"{how}")
    timeout = timedelta(seconds=timeout_s)
    groups = {name: torch.distributed.new_group(backend="gloo", timeout=timeout) for name in ("update", "rollout")}
    return Ranks(world=world, rank=accelerator.process_index, local_rank=accelerator.local_process_index,
                 device=str(accelerator.device) if not cpu else "cpu", groups=groups)


def refuse_unsupported(config: Any, world: int) -> None:
    """A DistributedError for settings a data-parallel run does not build."""
    if world <= 1:
        return
    if config.method == "sft" or config.data:
        raise DistributedError(f"{'method=sft' if config.method == 'sft' else 'data='} trains in one process; "
                               "run it with python -m trainers.run, without torchrun")
    if config.compute != "local":
        raise DistributedError(f"compute={config.compute} trains on the service, whose own workers are the data "
                               "parallelism; run it in one process, without torchrun")
    if config.engine.kind != "hf":
        raise DistributedError(f"engine={config.engine.kind} with several ranks is not built (each rank would "
                               "launch its own server); use engine=hf, or one process")
    if config.batch_size < world:
        raise DistributedError(f"batch_size={config.batch_size} leaves some of the {world} ranks no group to roll "
                               f"out; pass batch_size >= {world} (it counts all ranks' groups)")


def adopt(config: Any, ranks: Ranks, asked_world: bool) -> Any:
    """The config every rank trains with: rank 0's (which read a resumed run's config.yaml),
    on this rank's own GPU, with ``world_size`` as launched. ``asked_world``: the command
    line set ``world_size=`` itself, which must match."""
    if asked_world and config.world_size != ranks.world:
        raise DistributedError(f"world_size={config.world_size} was passed but {ranks.world} rank(s) were "
                               "launched; world_size is recorded, not set: drop it and launch that many ranks")
    if ranks.distributed:
        config = ranks.broadcast(config, what="receiving rank 0's config")
        refuse_unsupported(config, ranks.world)
        if config.placement()[0].startswith("cuda"):  # auto and cuda:N alike: each rank its own GPU
            config = dataclasses.replace(config, device=ranks.device)
    return dataclasses.replace(config, world_size=ranks.world)
