"""Learning with an adapter per user (``adapters=per_user``): each user's turns train only theirs.

The same loop as :class:`~trainers.live.learner.Learner` (score, samples, train), with the
samples waiting per user. A user's update is due once ``batch_size`` of their samples wait,
or their oldest has waited ``train_after_s``. It runs on the one trainable copy: the
user's adapter and AdamW state are loaded into it (a new user starts from the copy's first
adapter, fresh A and zero B, and a fresh optimizer), one clipped-objective step is taken at
the user's own weight version, and adapter, optimizer and version ``v+1`` are saved back
to ``<out>/adapters/<user>/`` (trainers/live/users.py), where the next generation batch
reads them. The policy's own adapter is never trained: it stays the base model, which the
judge and the OPD teacher read.

A restart marks each user's last-trained turns from their ``state.json`` (written after
the adapter), so no turn is trained twice.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from agents.policy import TransformersPolicy
from trainers.judge import Judge
from trainers.live.config import ServeConfig
from trainers.live.learner import Learner, record_samples
from trainers.live.store import Store
from trainers.live.users import UserAdapters
from trainers.per_user import train_user
from trainers.rundir import RunDir
from trainers.samples import Sample
from trainers.update import release_freed_memory


class UserLearner(Learner):
    def __init__(self, config: ServeConfig, policy: TransformersPolicy, store: Store, run: RunDir, judge: Judge,
                 adapters: UserAdapters) -> None:
        self.adapters = adapters
        self._user_of: dict[int, str] = {}  # turn id -> its user, for the samples waiting
        self.lock = threading.Lock()
        """Held while a user's samples are taken or trained, and while a user is deleted."""
        super().__init__(config, policy, store, run, judge)
        self.fresh = self.policy_state()  # the copy's first adapter: fresh A, zero B
        self.fresh_optimizer = copy.deepcopy(self.optimizer.state_dict())

    def _resume(self) -> None:
        for user in self.adapters.users():
            state = self.adapters.state(user)
            self.store.mark_trained(list(state.get("turn_ids", [])), int(state["version"]))
            self.version += int(state["version"])  # optimizer steps over all users

    # ---- 2. samples -------------------------------------------------------------------------
    def collect_samples(self, limit: int = 256) -> int:
        with self.lock:
            records = [r for r in self.store.turns_to_train(limit) if r.id not in self._pending_ids]
            if not records:
                return 0
            ready, no_sample = record_samples(records, self.config, self._teacher)
            users = {r.id: r.user_id for r in records}
            now = time.monotonic()
            for turn_id, sample in ready:
                user = users[turn_id]
                if user is None:  # recorded by a shared-adapter run of this dir: no one's to train
                    no_sample.append(turn_id)
                    continue
                self._ready.append((turn_id, sample, now))
                self._pending_ids.add(turn_id)
                self._user_of[turn_id] = user
            if no_sample:
                self.store.drop_turns(no_sample)
        return len(records)

    # ---- 3. train ---------------------------------------------------------------------------
    def due_user(self) -> str | None:
        """The user whose update is due: a full batch, or an oldest sample past train_after_s."""
        size, after, now = self.config.batch_size, self.config.train_after_s, time.monotonic()
        waiting: dict[str, list[float]] = {}
        for turn_id, _, ready_at in self._ready:
            waiting.setdefault(self._user_of[turn_id], []).append(ready_at)
        return next((user for user, times in waiting.items()
                     if len(times) >= size or (after is not None and now - times[0] >= after)), None)

    def train_if_ready(self) -> int:
        with self.lock:
            user = self.due_user()
            if user is None:
                return 0
            mine = [item for item in self._ready if self._user_of[item[0]] == user][:self.config.batch_size]
            ids = [turn_id for turn_id, _, _ in mine]
            taken = set(ids)
            self._ready = [item for item in self._ready if item[0] not in taken]
            started = time.perf_counter()
            version, stats = self._train_user(user, [s for _, s, _ in mine], ids)
            self.store.mark_trained(ids, version)
            self._pending_ids.difference_update(ids)
            for turn_id in ids:
                self._user_of.pop(turn_id, None)
        trained = time.perf_counter()
        release_freed_memory(collect=False)
        advantages = [sum(s.advantages) / max(len(s.advantages), 1) for _, s, _ in mine]
        self.stats.last_staleness = stats.get("samples/staleness_mean", 0.0)
        row = {**stats, "perf/train_s": trained - started, "perf/free_s": time.perf_counter() - trained,
               "live/version": float(self.version), "live/user_version": float(version),
               "live/advantage_mean": sum(advantages) / len(advantages),
               **{f"live/{k}": float(v) for k, v in self.store.counts().items()}}
        self.run.log(self.version, row)
        return len(mine)

    def _train_user(self, user: str, samples: list[Sample], ids: list[int]) -> tuple[int, dict[str, Any]]:
        """One step on ``user``'s adapter and optimizer state; saves both; their new version."""
        version, stats = train_user(self.adapters, user, samples, self.train_model, self.optimizer, self.fresh,
                                    self.fresh_optimizer, self.config, self.policy.tokenizer.pad_token_id,
                                    self.kl_reference, ids)
        self.version += 1
        return version, stats

    def forget(self, user: str) -> None:
        """Drop ``user``'s waiting samples (the caller holds :attr:`lock` and deletes the rest)."""
        gone = {turn_id for turn_id, u in self._user_of.items() if u == user}
        self._ready = [item for item in self._ready if item[0] not in gone]
        self._pending_ids.difference_update(gone)
        for turn_id in gone:
            del self._user_of[turn_id]

