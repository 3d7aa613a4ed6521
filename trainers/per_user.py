"""``trainers.run adapters=per_user``: one frozen base model, one LoRA adapter per user.

For envs whose episodes name their user (reset's ``info["user_id"]``, envs/core.py; the
chat env's persona). The loop is :class:`~trainers.loop.Trainer`'s, with these differences:

- **Rollout and evaluation**: every turn is decoded with its episode's user's adapter, the
  users of a batch mixed in one decode (the live server's
  :class:`~trainers.live.users.UserAdapters`: an :class:`~agents.multi_lora.AdapterBank` on a
  copy of the base and an :class:`~agents.adapter_store.AdapterStore` under
  ``<run>/adapters``). A user new to the run decodes as the base model: a fresh adapter
  (zero B) is exactly that.
- **The update**: a step's samples are built as with one adapter (GRPO advantages per task
  group: a group replays one task, so its episodes share a user), then split by user. Each
  user with samples gets one :func:`~trainers.update.train_step` of the trainable copy with
  their adapter and AdamW state loaded (fresh ones for a new user) at their own weight
  version, and both are saved back (:func:`train_user`, the live server's step too); a user
  with no samples is not touched. The trainer's version counts steps that updated anyone.
- **The base model**: the policy's own adapter is never trained and stays fresh, so the
  judge, the OPD teacher (``opd_teacher=policy`` included) and ``opd_gate=replay``'s
  teacher replies read the base model, as with the live server.
- **Checkpoints**: ``checkpoints/step_k/users/<id>/`` holds each user's
  ``adapter_model.safetensors`` and ``adapter_config.json`` (peft's layout:
  ``PeftModel.from_pretrained`` loads it), ``optimizer.pt`` and ``state.json``
  (``{"version": n}``: the user's updates). A resumed run copies them back to
  ``<run>/adapters`` and every user continues from there.
- **Metrics**, beside the usual overall ones: ``user/<id>/reward/return``,
  ``user/<id>/rollout/episodes``, ``user/<id>/rollout/<headline>`` (the env's headline
  metric on the first turn), ``user/<id>/samples/count``, ``user/<id>/version``, and from
  each evaluation ``user/<id>/eval/<headline>``, ``user/<id>/eval/env_return`` and
  ``user/<id>/eval/episodes``.
"""

from __future__ import annotations

import copy
import shutil
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

import envs
from agents.adapter_store import USER_ID
from agents.adapters import load_trainable_state, trainable_state
from agents.policy import Completion, SamplingParams, TransformersPolicy
from envs.messages import Message
from trainers.config import TrainConfig, UpdateConfig, to_dict
from trainers.distributed import Ranks
from trainers.live.users import UserAdapters
from trainers.loop import Batch, Trainer
from trainers.metrics import mean, turn_metrics
from trainers.rollout import Episode
from trainers.rundir import RunDir
from trainers.samples import Sample
from trainers.update import load_optimizer_state, train_step

USERS = "users"
"""A checkpoint's folder of users' adapters."""


def train_user(adapters: UserAdapters, user: str, samples: list[Sample], model: Any,
               optimizer: torch.optim.Optimizer, fresh: dict[str, torch.Tensor], fresh_optimizer: dict[str, Any],
               config: UpdateConfig, pad_id: int, reference: dict[str, torch.Tensor] | None,
               turn_ids: Sequence[int] = ()) -> tuple[int, dict[str, float]]:
    """One update of ``user``'s adapter: theirs and their AdamW state (``fresh`` and
    ``fresh_optimizer`` for a user with nothing saved) loaded into ``model`` and ``optimizer``,
    one clipped-objective step at their own weight version, both saved back with the version
    after it (and ``turn_ids``, the live record's turns it trained). Their new version and
    the step's stats."""
    version = adapters.version(user)
    weights = adapters.store.read(user) if adapters.store.exists(user) else fresh
    load_trainable_state(model, weights, True)
    load_optimizer_state(optimizer, adapters.optimizer_state(user) or fresh_optimizer, config)
    stats = train_step(model, optimizer, samples, config, version, pad_id, reference)
    version += 1
    adapters.save(user, trainable_state(model, True), optimizer.state_dict(), version, list(turn_ids))
    return version, stats


def check_env_names_users(config: TrainConfig) -> None:
    """A ``ValueError`` unless ``config.env``'s episodes name their user: one reset (on its
    first task) is read before any model loads."""
    kwargs = dict(config.env_kwargs)
    if config.sandbox:
        kwargs["sandbox"] = config.sandbox
    env = envs.make(envs.resolve(config.env), **kwargs)
    try:
        tasks = env.unwrapped.task_ids()
        _, info = env.reset(seed=config.seed, options={"task_id": tasks[0]} if tasks else None)
    finally:
        env.close()
    user = info.get("user_id")
    if not isinstance(user, str) or not user:
        raise ValueError(f"adapters=per_user trains an adapter per user, and env={config.env}'s episodes name no "
                         "user (reset's info has no 'user_id', the env contract's optional user id: envs/core.py); "
                         "use adapters=shared, or an env that names its users (env=chat)")
    if not USER_ID.fullmatch(user):
        raise ValueError(f"env={config.env} names its user {user!r}, which cannot name an adapter's folder: a user "
                         "id is 1-128 letters, digits or ._@+=- (not starting with a dot)")


class UserRollout:
    """Generation for :func:`trainers.rollout.collect` with each row's user's adapter
    (:class:`trainers.rollout.UserPolicy`): a batch whose distinct users outnumber the bank's
    slots is decoded in parts."""

    def __init__(self, policy: TransformersPolicy, adapters: UserAdapters) -> None:
        self.policy, self.adapters = policy, adapters

    def generate_for(self, users: list[str], prompts: list[list[Message]], tools: list[list[dict[str, Any]]],
                     sampling: SamplingParams) -> list[Completion]:
        for user in set(users):
            self.adapters.store.path(user)  # a ValueError for an id that cannot name a folder
        encoded = [self.policy.encode(m, t) for m, t in zip(prompts, tools)]
        # one batch when its distinct users fit the bank, else parts of the bank's size
        size = len(encoded) if len(set(users)) <= self.adapters.bank.capacity else self.adapters.bank.capacity
        out: list[Completion] = []
        for start in range(0, len(encoded), size):
            out.extend(self.adapters(encoded[start:start + size], list(users[start:start + size]), sampling,
                                     None, None))
        return out


class UserTrainer(Trainer):
    """The loop with an adapter per user (module docstring). Rank 0 of one process only."""

    def __init__(self, config: TrainConfig, run: RunDir | None, ranks: Ranks | None = None) -> None:
        if run is None or (ranks is not None and ranks.distributed):
            raise ValueError("adapters=per_user trains in one process, which keeps the users' adapters in its run dir")
        check_env_names_users(config)
        latest = run.latest_checkpoint()
        if latest is not None and not (latest / USERS).is_dir():
            raise ValueError(f"run dir {run.path} was trained with adapters=shared (checkpoint {latest.name} has no "
                             f"{USERS}/); resume it with adapters=shared, or start a new out= for adapters=per_user")
        super().__init__(config, run, ranks)
        self.fresh = trainable_state(self.train_model, True)  # a new user's adapter: fresh A, zero B
        self.fresh_optimizer = copy.deepcopy(self.optimizer.state_dict())
        # a slot per row of a rollout batch (~20 MB each for the default model at rank 16): an
        # evaluation's batch (2 x parallel rows) is split only when it holds more users than that
        self.adapters = UserAdapters(self.policy, run.path / "adapters", config.parallel)
        self.user_policy = UserRollout(self.policy, self.adapters)

    # ---- rollout --------------------------------------------------------------------------
    def collect_and_score(self, step: int) -> Batch:
        self.adapters.reseed(self.ranks.reseed_offset(step))  # as the policy is, for the rollout's own decoder
        batch = super().collect_and_score(step)
        batch.metrics["rollout/weight_version"] = float(self.version)  # the policy's own never moves
        headline = self.headline_key.removeprefix("eval/")
        for user, mine in _by_user(batch.episodes).items():
            ok = [e for e in mine if e.error is None]
            prefix = f"user/{user}"
            batch.metrics[f"{prefix}/reward/return"] = mean([e.reward_return for e in ok])
            batch.metrics[f"{prefix}/rollout/episodes"] = float(len(mine))
            rates = turn_metrics(ok, f"{prefix}/rollout")
            if f"{prefix}/rollout/{headline}" in rates:
                batch.metrics[f"{prefix}/rollout/{headline}"] = rates[f"{prefix}/rollout/{headline}"]
        return batch

    # ---- update ---------------------------------------------------------------------------
    def update(self, samples: list[Sample]) -> dict[str, float]:
        """Each user's samples train their own adapter (:func:`train_user`); the stats are
        averaged over the users' steps by their samples, with ``user/<id>/samples/count`` and
        ``user/<id>/version`` for every user trained."""
        mine: dict[str, list[Sample]] = defaultdict(list)
        for sample in samples:
            if sample.user_id is None:  # collect refuses such episodes before any turn is played
                raise RuntimeError("adapters=per_user: a sample without its episode's user_id")
            mine[sample.user_id].append(sample)
        totals: dict[str, float] = defaultdict(float)
        out: dict[str, float] = {}
        for user in sorted(mine):
            version, stats = train_user(self.adapters, user, mine[user], self.train_model, self.optimizer,
                                        self.fresh, self.fresh_optimizer, self.config,
                                        self.policy.tokenizer.pad_token_id, self.kl_reference)
            for key, value in stats.items():
                totals[key] += value if key == "samples/dropped_stale" else value * len(mine[user])
            out[f"user/{user}/samples/count"] = float(len(mine[user]))
            out[f"user/{user}/version"] = float(version)
        for key, value in totals.items():
            out[key] = value if key == "samples/dropped_stale" else value / max(len(samples), 1)
        self.version += 1
        return out

    # ---- evaluation -----------------------------------------------------------------------
    def _eval_version(self) -> int:
        return self.version  # the users' adapters changed exactly when a step updated one

    def _eval_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        out = super()._eval_metrics(episodes)
        headline = self.headline_key.removeprefix("eval/")
        for user, mine in _by_user(episodes).items():
            ok = [e for e in mine if e.error is None]
            prefix = f"user/{user}/eval"
            rates = turn_metrics(ok, prefix)
            if f"{prefix}/{headline}" in rates:
                out[f"{prefix}/{headline}"] = rates[f"{prefix}/{headline}"]
            out[f"{prefix}/env_return"] = mean([e.env_return for e in ok])
            out[f"{prefix}/episodes"] = float(len(mine))
        return out

    # ---- checkpoint, resume ---------------------------------------------------------------
    def checkpoint(self) -> None:
        assert self.run is not None
        users = {user: self.adapters.version(user) for user in self.adapters.users()}
        self.run.save_checkpoint(self.step, self.fresh, self.fresh_optimizer,
                                 {"step": self.step, "version": self.version, "users": users,
                                  "config": to_dict(self.config)},
                                 folders={USERS: self.adapters.store.root})

    def resume(self) -> None:
        """The shared part (step, version, the fresh adapter), then every user's adapter,
        optimizer and version from the checkpoint's ``users/``; adapters a killed run saved
        after it (or before any checkpoint) are dropped, as its metric lines are."""
        super().resume()
        assert self.run is not None
        root = self.adapters.store.root
        shutil.rmtree(root, ignore_errors=True)
        latest = self.run.latest_checkpoint()
        if latest is not None:
            shutil.copytree(latest / USERS, root)
        root.mkdir(parents=True, exist_ok=True)


def _by_user(episodes: list[Episode]) -> dict[str, list[Episode]]:
    out: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        out[str(e.user_id)].append(e)
    return dict(sorted(out.items()))
