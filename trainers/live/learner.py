"""Learning in the background of a live server: score settled turns, train, swap weights.

A daemon thread loops over the durable record (store.py):

1. **score**: main turns whose next state has arrived (or whose session closed) get the
   judge's score and, for opd/combine, a hint; both are written back to the record.
2. **samples**: each scored turn becomes at most one sample. Live turns are groups of one
   (docs/concepts/methods.md): the RL term is the raw score ``r``, no normalisation; the OPD term is the
   teacher gap on the hint-augmented prompt. Empty completions, cut-off ones unless
   ``train_cut``, and turns with no signal are settled without a sample.
3. **train**: once ``batch_size`` samples wait, or the oldest has waited ``train_after_s``
   (a quiet server still learns), one clipped-objective update of the trainable copy;
   its weights are pushed to the serving policy as version ``v+1``
   (between generations: in-flight requests finish on their version), a checkpoint is
   written, and the turns are marked with the version they went into.

After a crash nothing is lost: scores and trained versions live in the record, the
adapter and optimizer in the last checkpoint, and the learner picks up where they stop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch

from agents.adapters import load_trainable_state, trainable_state
from agents.policy import TransformersPolicy
from trainers.judge import Judge, TurnToJudge
from trainers.config import UpdateConfig
from trainers.live.config import ServeConfig
from trainers.live.store import Store, TurnRecord
from trainers.rundir import RunDir
from trainers.samples import (Sample, alone_weight, opd_applies, sample_weight, teacher_logprobs, token_advantages,
                              usable_completion)
from trainers.update import base_reference, load_optimizer_state, release_freed_memory, train_step, trainable_copy


@dataclass
class LearnerStats:
    """What /metrics reports beyond the record's own counts (and the version)."""

    last_staleness: float = 0.0
    errors: int = 0
    last_error: str = ""


class Learner:
    def __init__(self, config: ServeConfig, policy: TransformersPolicy, store: Store, run: RunDir,
                 judge: Judge) -> None:
        self.config = config
        self.policy = policy
        self.store = store
        self.run = run
        self.judge = judge
        self.stats = LearnerStats()
        self.train_model, self.optimizer = trainable_copy(policy, config)
        self.kl_reference = base_reference(self.train_model, config)
        self.version = 0
        self._ready: list[tuple[int, Sample, float]] = []  # (turn id, sample, monotonic time it became ready)
        self._pending_ids: set[int] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.idle = False
        """True when the last pass found nothing to score or train (until notified)."""
        self._resume()

    # ---- lifecycle --------------------------------------------------------------------------
    def _resume(self) -> None:
        latest = self.run.latest_checkpoint()
        if latest is None:
            return
        weights, optimizer, state = self.run.load_checkpoint(latest)
        load_trainable_state(self.train_model, weights, self.config.lora.enabled)
        load_optimizer_state(self.optimizer, optimizer, self.config)  # a changed lr= wins over the saved one
        self.version = int(state["version"])
        # Killed between the checkpoint and the record's update: settle those turns now,
        # so no turn is trained twice.
        self.store.mark_trained(list(state.get("turn_ids", [])), self.version)
        self.policy.load_trainable_state(self.policy_state(), self.version)

    def policy_state(self) -> dict[str, torch.Tensor]:
        return trainable_state(self.train_model, self.config.lora.enabled)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="live-learner", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """A turn was recorded or a session closed: there may be work."""
        self.idle = False
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=120)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.score_pending() + self.collect_samples() + self.train_if_ready()
            except Exception as exc:  # a bad batch must not stop serving, nor learning for good
                self.stats.errors += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                busy = 0
                self._stop.wait(1.0)
            if not busy:  # idle: nothing to score, no batch due (samples may wait for one)
                self.idle = not self._wake.is_set()
                self._wake.wait(timeout=1.0)
                self._wake.clear()

    # ---- 1. score ---------------------------------------------------------------------------
    def score_pending(self, limit: int = 64) -> int:
        records = self.store.turns_to_score(limit)
        if not records:
            return 0
        want_hints = self.config.method != "grpo"
        dropped = [r for r in records if r.closed and r.next_state is None and self.config.last_turn == "drop"]
        judged = [r for r in records if r not in dropped]
        verdicts = self.judge.judge([to_judge(r, self.config.judge.history_messages) for r in judged],
                                    want_hints=want_hints) if judged else []
        scores = [(r.id, v.score, list(v.votes), v.hint) for r, v in zip(judged, verdicts)]
        scores += [(r.id, 0, [], None) for r in dropped]
        self.store.save_scores(scores)
        if dropped:
            self.store.drop_turns([r.id for r in dropped])
        return len(records)

    # ---- 2. samples -------------------------------------------------------------------------
    def collect_samples(self, limit: int = 256) -> int:
        records = [r for r in self.store.turns_to_train(limit) if r.id not in self._pending_ids]
        if not records:
            return 0
        ready, no_sample = record_samples(records, self.config, self._teacher)
        now = time.monotonic()
        self._ready.extend((turn_id, sample, now) for turn_id, sample in ready)
        self._pending_ids.update(turn_id for turn_id, _ in ready)
        if no_sample:
            self.store.drop_turns(no_sample)
        return len(records)

    def _teacher(self, records: list[TurnRecord]) -> list[list[float]]:
        return teacher_logprobs(self.policy, self.config, [r.messages for r in records], [r.hint for r in records],
                                [r.tools or None for r in records], [r.completion_ids for r in records], [r.logprobs for r in records],
                                records[0].temperature if records else 1.0)

    # ---- 3. train ---------------------------------------------------------------------------
    def samples_waiting(self) -> int:
        return len(self._ready)

    def train_if_ready(self) -> int:
        size, after = self.config.batch_size, self.config.train_after_s
        overdue = after is not None and bool(self._ready) and time.monotonic() - self._ready[0][2] >= after
        if len(self._ready) < size and not overdue:
            return 0
        batch, self._ready = self._ready[:size], self._ready[size:]
        started = time.perf_counter()
        stats = train_step(self.train_model, self.optimizer, [s for _, s, _ in batch], self.config, self.version,
                           self.policy.tokenizer.pad_token_id, self.kl_reference)
        self.version += 1
        weights = self.policy_state()
        self.policy.load_trainable_state(weights, self.version)  # swapped in between requests
        ids = [turn_id for turn_id, _, _ in batch]
        self.run.save_checkpoint(self.version, weights, self.optimizer.state_dict(),
                                 {"step": self.version, "version": self.version, "turn_ids": ids})
        self.store.mark_trained(ids, self.version)
        self._pending_ids.difference_update(ids)
        self.stats.last_staleness = stats.get("samples/staleness_mean", 0.0)
        trained = time.perf_counter()
        # the update's freed activations back to the system: on the CPU a train_step on 16
        # samples of 150 + 128 tokens left RSS at 4.0-4.5 GB, 1.4 GB after this (0.26-0.32 s,
        # on this thread); no garbage collection, whose pass would pause the request threads
        release_freed_memory(collect=False)
        advantages = [sum(s.advantages) / max(len(s.advantages), 1) for _, s, _ in batch]
        row = {**stats, "perf/train_s": trained - started, "perf/free_s": time.perf_counter() - trained,
               "live/version": float(self.version),
               "live/advantage_mean": sum(advantages) / len(advantages), **{f"live/{k}": float(v)
                                                                        for k, v in self.store.counts().items()}}
        self.run.log(self.version, row)
        return len(batch)


def record_samples(records: list[TurnRecord], config: UpdateConfig,
                   teacher: Callable[[list[TurnRecord]], list[list[float]]],
                   off_policy: bool = False) -> tuple[list[tuple[int, Sample]], list[int]]:
    """Scored turns -> ``(turn id, sample)`` pairs, and the ids that yield no sample.

    Each turn is a group of one (docs/concepts/methods.md): RL term ``r`` = its score, unnormalised;
    OPD term from the teacher on its hint. Empty completions yield nothing, nor do cut-off
    ones unless ``config.train_cut``.
    ``off_policy=True`` (recorded data trained offline) tags samples with version -1, so
    the update always corrects them with truncated importance weights.
    """
    use_rl = config.method in ("grpo", "combine")
    use_opd = config.method in ("opd", "combine")
    usable = [r for r in records if usable_completion(r.completion_ids, r.finish_reason, config.train_cut)]
    alone = alone_weight(config, sum(bool(r.score) for r in usable) / len(usable) if usable else 0.0)
    hinted = [r for r in usable if use_opd and r.hint and opd_applies(config, bool(r.score), alone)]
    teacher_logps = dict(zip((r.id for r in hinted), teacher(hinted))) if hinted else {}
    ready: list[tuple[int, Sample]] = []
    no_sample = [r.id for r in records if r not in usable]
    for r in usable:
        old_T = torch.tensor(r.logprobs, dtype=torch.float32)
        rl = float(r.score) if use_rl and r.score else None
        t_logp = teacher_logps.get(r.id)
        adv_T = token_advantages(config, old_T, rl,
                                 torch.tensor(t_logp, dtype=torch.float32) if t_logp is not None else None, alone)
        if adv_T is None:
            no_sample.append(r.id)
            continue
        ready.append((r.id, Sample(r.prompt_ids, r.completion_ids, r.logprobs, adv_T.tolist(),
                                   -1 if off_policy else r.weight_version, r.temperature,
                                   sample_weight(config, rl, alone))))
    return ready, no_sample


def to_judge(record: TurnRecord, keep: int) -> TurnToJudge:
    response = record.response
    text = str(response.get("content") or "")
    for call in response.get("tool_calls") or []:
        fn = call.get("function", {})
        text += f"\n<tool_call>{fn.get('name', '')} {fn.get('arguments', '')}</tool_call>"
    return TurnToJudge(context=record.messages[-keep:], response=text.strip(),
                       next_state=record.next_state_text(), next_role=record.next_role or "user")

