"""Training on recorded turns: ``python -m trainers.run data=<trajectories.jsonl>``.

The file is what ``python -m trainers.serve export`` writes: one session per line, each
main turn with its exact prompt and completion ids, rollout log-probs, next state, and
the live judge's score and hint when it had them. Each step takes ``batch_size`` main
turns (a seeded shuffle, cycling), judges those the server had not scored, and makes one
update on them as the live learner would: every turn a group of one (``A = r``), plus
the OPD term on its hint. The data came from other weights, so every sample is
corrected with truncated importance weights and none is dropped for staleness.

``env=`` is used only for evaluation (held-out tasks, as in an online run).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainers.config import ConfigError, TrainConfig
from trainers.live.learner import record_samples, to_judge
from trainers.live.store import TurnRecord
from trainers.loop import Batch, Trainer
from trainers.rundir import RunDir
from trainers.samples import teacher_logprobs
from trainers.serve import EXPORT_OMITS
from trainers.update import train_step


RECORD_FIELDS = {f.name for f in dataclasses.fields(TurnRecord)} - set(EXPORT_OMITS)


def load_trajectories(path: Path) -> list[TurnRecord]:
    """The trainable main turns of an exported file: delivered to their client, with a next
    state or a score (a reply nobody read judges nothing and is never trained on)."""
    if not path.exists():
        raise FileNotFoundError(f"data={path} does not exist; write one with "
                                "`python -m trainers.serve export run_dir=<serve run dir>`")
    records: list[TurnRecord] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            session = json.loads(line)
            for turn in session["turns"]:
                if (turn["turn_type"] != "main" or not turn.get("delivered", True)
                        or (turn.get("next_state") is None and turn.get("score") is None)):
                    continue
                fields = {k: v for k, v in turn.items() if k in RECORD_FIELDS}
                records.append(TurnRecord(id=len(records), session_id=session["session_id"], **fields))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number} is not a trainers.serve export line ({type(exc).__name__}: {exc})") from None
    if not records:
        raise ValueError(f"{path} holds no main turn with a next state or score to train on")
    return records


@dataclass
class RecordBatch(Batch):
    records: list[TurnRecord] = field(default_factory=list)


class OfflineTrainer(Trainer):
    def __init__(self, config: TrainConfig, run: RunDir) -> None:
        if config.reward == "env":
            raise ConfigError("data= trains on recorded turns, which have no env reward; use reward=judge")
        self.records = load_trajectories(Path(config.data))
        super().__init__(config, run)

    def _pick(self, step: int) -> list[TurnRecord]:
        """Turns ``(step-1)*n .. step*n-1`` of a stream of seeded shuffles of the data."""
        n, total = self.config.batch_size, len(self.records)
        picked = []
        for k in range((step - 1) * n, step * n):
            order = np.random.default_rng([self.config.seed, k // total]).permutation(total)
            picked.append(self.records[int(order[k % total])])
        return picked

    def collect_and_score(self, step: int) -> Batch:
        started = time.perf_counter()
        records = self._pick(step)
        unscored = [r for r in records if r.score is None]
        want_hints = self.config.method in ("opd", "combine")
        if unscored and self.judge is not None:
            verdicts = self.judge.judge([to_judge(r, self.config.judge.history_messages) for r in unscored],
                                        want_hints)
            for record, verdict in zip(unscored, verdicts):
                record.score, record.hint = verdict.score, verdict.hint
        scores = [float(r.score or 0) for r in records]
        metrics = {"perf/judge_s": time.perf_counter() - started, "reward/return": float(np.mean(scores)),
                   "offline/judged_now": float(len(unscored)), "rollout/turns": float(len(records)),
                   "rollout/weight_version": float(self.policy.weight_version)}
        return RecordBatch(step, [], metrics, records)

    def learn(self, batch: Batch) -> dict[str, float]:
        assert isinstance(batch, RecordBatch)
        started = time.perf_counter()
        ready, no_sample = record_samples(batch.records, self.config, self._record_teacher, off_policy=True)
        version = batch.step - 1
        stats = {"samples/count": float(len(ready)), "samples/zero_advantage": float(len(no_sample))}
        stats.update(train_step(self.train_model, self.optimizer, [s for _, s in ready], self.config, version,
                                self.policy.tokenizer.pad_token_id, self.kl_reference))
        stats["perf/push_s"] = self._push(batch.step)
        stats["perf/train_s"] = time.perf_counter() - started
        return {**batch.metrics, **stats}

    def _record_teacher(self, records: list[TurnRecord]) -> list[list[float]]:
        return teacher_logprobs(self.policy, self.config, [r.messages for r in records], [r.hint for r in records],
                                [r.tools or None for r in records], [r.completion_ids for r in records], [r.logprobs for r in records],
                                records[0].temperature if records else 1.0)
