"""The learning loop: collect -> score -> advantages -> clipped update -> push weights.

Per step k (weight version k-1 rolls out, version k comes out):

1. ``batch_size`` tasks, each rolled out ``group_size`` times by the vector env and policy
   (with ``fill_groups``, more rounds of fresh tasks while too few groups' returns differ);
2. every turn scored from its next state (the env's reward, the judge, or both) and, for
   opd/combine, given a hindsight hint (with ``opd_gate=replay``, the teacher's own reply to
   each hinted turn is then replayed in the env and scored);
3. samples built (GRPO group advantages, OPD teacher gaps, or their sum), see samples.py;
4. one clipped-objective update of the trainable copy, whose weights are then pushed to
   the serving policy as version k (requests in flight finish on their version); with
   ``min_update_samples``, a step with too few samples holds them for the next instead, and
   versions then count updates, not steps;
5. metrics logged (rollout/, reward/, judge/, samples/, loss/, perf/, eval/), a checkpoint
   written, held-out tasks evaluated greedily.

``mode=async`` runs 1-2 in a background thread one step ahead, so rollout of step k+1
overlaps training on step k; samples are then one version stale and corrected by
truncated importance weights (update.py). Under ``torchrun`` each rank rolls out its share
of a step's groups and the update sums their gradients; rank 0 alone evaluates and writes
the run dir (distributed.py). The trainer knows nothing family-specific: everything it
needs comes through the env contract.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import envs
from agents.engines import with_engine
from agents.adapters import load_trainable_state, trainable_state
from agents.policy import SamplingParams, TransformersPolicy
from trainers.config import TrainConfig, to_dict
from trainers.distributed import DistributedError, Ranks, merge_metrics, weights_digest
from trainers.judge import TurnToJudge, make_judge
from trainers.judge_parsing import append_hint
from trainers.metrics import mean, postfix, rollout_metrics, turn_metrics
from trainers.progress import EpisodeProgress, run_plan, step_bar
from trainers.rollout import Episode, Job, Replay, RolloutTimes, Turn, UserPolicy, collect, replay_steps
from trainers.rundir import RunDir
from trainers.samples import (Sample, assign_rewards, build_samples, opd_wanted, run_reward, signal_groups,
                              teacher_logprobs)
from trainers.update import (SettledHeap, base_reference, frozen_heap, frozen_weights, load_optimizer_state,
                             train_step, trainable_copy)


@dataclass
class Batch:
    step: int
    episodes: list[Episode]
    metrics: dict[str, float]


class Trainer:
    user_policy: UserPolicy | None = None
    """adapters=per_user: what rolls out and evaluates each episode with its user's adapter
    (trainers/per_user.py); None: ``policy`` does."""

    def __init__(self, config: TrainConfig, run: RunDir | None, ranks: Ranks | None = None) -> None:
        """``run``: the run dir, None on a rank other than 0 (trainers/distributed.py), which
        neither reads nor writes it; ``ranks``: this process's place among several."""
        self.config = config
        self.ranks = ranks = ranks or Ranks()
        self.run = run
        torch.manual_seed(config.seed)
        device, dtype = config.placement()
        self.config = config = dataclasses.replace(config, device=device, dtype=dtype)  # config.yaml records them
        local = TransformersPolicy(config.model, config.lora, device=device, dtype=dtype, seed=config.seed,
                                   max_context=config.max_context)
        # engine=vllm|sglang: rollouts sample on a server; scoring and training stay on `local`.
        self.policy = with_engine(local, config.engine, seed=config.seed)
        self.train_model, self.optimizer = trainable_copy(self.policy, config)
        self.kl_reference = base_reference(self.train_model, config)  # before init= and any update
        if config.init:
            if ranks.main:  # the others take rank 0's: the init run may be on its disk alone
                self._start_from(config.init)
            if ranks.distributed:
                weights = {k: v.cpu() for k, v in self._trainable_state().items()}  # not onto rank 0's GPU
                self._load(ranks.broadcast(weights, what="receiving init='s weights"), 0)
            if config.kl_beta > 0 and config.kl_reference() == "init":
                self.kl_reference = frozen_weights(self.train_model)
        needs_judge = config.method != "sft" and (config.reward != "env" or config.method != "grpo")
        self.judge = make_judge(config.judge, self.policy) if needs_judge else None
        self._setup_envs()

    def _setup_envs(self) -> None:
        """The env half of setup (a trainer whose model lives elsewhere, Tinker's, shares it):
        vector envs, task pools, what the env says about itself (rollout temperature, OPD
        gate, headline metric), evaluation on rank 0, and the run's counters."""
        config, ranks = self.config, self.ranks
        self.env_id = envs.resolve(config.env)
        self.env_cls = gym.spec(self.env_id).entry_point
        kwargs = dict(config.env_kwargs)
        if config.sandbox:
            kwargs["sandbox"] = config.sandbox
        self.vec = self._rollout_vec(kwargs)
        probe = envs.make(self.env_id, **kwargs).unwrapped  # what the env says about itself
        self.train_tasks = list(probe.task_ids())
        self.eval_turns = probe.eval_max_turns
        self.max_turns: int | None = getattr(probe, "max_turns", None)  # what the run's plan states
        if config.temperature is None:
            self.config = config = dataclasses.replace(config, temperature=probe.rollout_temperature)
        if config.opd_gate == "auto":  # config.yaml records what the env made of it
            self.config = config = dataclasses.replace(config, opd_gate=config.gate(probe.opd_gate))
        self.headline_key = f"eval/first/{probe.headline_metric}" if probe.headline_metric else "eval/env_return"
        probe.close()
        eval_kwargs = {**kwargs, "split": config.eval_split} if self._accepts("split") else kwargs
        self.eval_tasks = spread(self._task_pool(eval_kwargs), config.eval_tasks)
        self.eval_vec = (self._vec(min(config.parallel * 2, max(len(self.eval_tasks), 1)), eval_kwargs)
                         if config.eval_tasks and ranks.main else None)  # rank 0 evaluates
        self.step = 0
        self.version = 0  # the trainer's weight version: the updates made (min_update_samples can skip one)
        self.held: list[Sample] = []  # samples min_update_samples kept for the next step
        self.mid_step = False  # weights may differ from those of `step` (an update is under way)
        # (weight version, metrics, replies) of the last evaluation: greedy decoding on fixed
        # seeds gives the same again until the weights change, as on a held step (with
        # user=llm only the first replies are the same; the user's later turns are sampled)
        self._last_eval: tuple[int, dict[str, float], list[dict[str, Any]]] | None = None

    # ---- setup helpers -------------------------------------------------------------------
    def _rollout_vec(self, kwargs: dict[str, Any]) -> Any:
        return self._vec(self.config.parallel, kwargs)

    def _vec(self, num_envs: int, kwargs: dict[str, Any]) -> Any:
        config = self.config
        return envs.make_vec(self.env_id, num_envs, backend=config.backend, env_kwargs=kwargs,
                             ray_address=config.ray_address or None,
                             ray_actor_options=config.ray_actor_options or None)

    def _start_from(self, where: str) -> None:
        """``init=``: another run's trained weights as this run's start (its version 0)."""
        from trainers.config import ConfigError
        from trainers.rundir import find_checkpoint

        run, checkpoint, saved = find_checkpoint(where)
        for key, mine in (("model", self.config.model), ("lora", to_dict(self.config)["lora"])):
            if saved.get(key) != mine:
                raise ConfigError(f"init={where} was trained with {key}={saved.get(key)!r} and this run has "
                                  f"{key}={mine!r}; pass the same (its config.yaml has them)")
        weights, _state = run.load_weights(checkpoint)
        self._load(weights, 0)

    def _load(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Trainable weights into the trained copy, and into the policy as ``version``."""
        load_trainable_state(self.train_model, weights, self.config.lora.enabled)
        self.policy.load_trainable_state(self._trainable_state(), version=version)

    def _accepts(self, name: str) -> bool:
        """Whether the env's constructor takes ``name``, through ``**kwargs`` handed to a base
        class too (ToolMathEnv passes ``split`` on to ToolCallEnv)."""
        cls = gym.envs.registration.load_env_creator(self.env_cls) if isinstance(self.env_cls, str) else self.env_cls
        for klass in cls.__mro__:
            if "__init__" not in vars(klass):
                continue
            params = inspect.signature(klass.__init__).parameters
            if name in params:
                return True
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                return False
        return False

    def _task_pool(self, kwargs: dict[str, Any]) -> list[str]:
        env = envs.make(self.env_id, **kwargs).unwrapped
        try:
            return list(env.task_ids())
        finally:
            env.close()

    def _jobs(self, step: int, fill_round: int = 0) -> list[Job]:
        """A step's tasks, ``group_size`` jobs each; ``fill_round`` > 0 draws a fill_groups
        round's fresh tasks, numbered after the earlier rounds' groups."""
        rng = np.random.default_rng([self.config.seed, step] + ([fill_round] if fill_round else []))  # alike on every rank
        n = self.config.batch_size
        if self.train_tasks:
            tasks: list[str | None] = list(rng.choice(self.train_tasks, size=n, replace=len(self.train_tasks) < n))
        else:
            tasks = [None] * n
        jobs = []
        for g, task in enumerate(tasks, start=fill_round * n):
            group_seed = int(rng.integers(1 << 31))
            if not self.ranks.mine(g):  # another rank's group (its seed drawn all the same)
                continue
            for j in range(self.config.group_size):
                # Without task ids, group members share a seed so they share a task.
                jobs.append(Job(g, None if task is None else str(task), group_seed if task is None else group_seed + j))
        return jobs

    def _progress(self, desc: str, episodes: int) -> EpisodeProgress:
        """A batch's live count of episodes and turns, shown on rank 0 (trainers/progress.py)."""
        return EpisodeProgress(desc, episodes, enabled=self.config.progress and self.run is not None)

    # ---- 1-2: collect and score ------------------------------------------------------------
    def collect_and_score(self, step: int) -> Batch:
        """Roll out and score a step's batch. With ``fill_groups``, groups whose returns all
        agree are made up for by further rounds (DAPO's dynamic sampling); the metrics cover
        every episode rolled out, the batch only those kept. With several ranks, this rank's
        groups; fill_groups counts and keeps groups over all ranks."""
        jobs = self._jobs(step)
        share = " (rank 0's groups)" if self.ranks.distributed else ""
        with self._progress(f"rollout step {step}{share}", len(jobs)) as progress:
            return self._collect_and_score(step, jobs, progress)

    def _collect_and_score(self, step: int, jobs: list[Job], progress: EpisodeProgress) -> Batch:
        started = time.perf_counter()
        self.policy.reseed(self.ranks.reseed_offset(step))
        sampling = SamplingParams(float(self.config.temperature or 0.0), max_new_tokens=self.config.max_new_tokens)
        rollout_s = 0.0
        times = RolloutTimes()

        def roll(fill_round: int) -> list[Episode]:
            nonlocal rollout_s
            round_jobs = jobs if fill_round == 0 else self._jobs(step, fill_round)
            if fill_round:
                progress.expect(len(round_jobs))
            begun = time.perf_counter()
            episodes = collect(self.vec, self.policy, round_jobs, sampling, times=times, progress=progress,
                               users=self.user_policy)
            rollout_s += time.perf_counter() - begun
            if self.judge is not None:
                progress.note("judging the turns")
            self._judge(episodes)
            assign_rewards(episodes, self.config)
            return episodes

        def signals(episodes: list[Episode]) -> list[int]:  # every rank's, in group order as one process has them
            found = signal_groups(episodes, self.config)
            return sorted(g for mine in self.ranks.gather(found, rollout=True) for g in mine) \
                if self.ranks.distributed else found

        episodes = roll(0)
        rolled, first = list(episodes), len(episodes)
        rounds = 0
        have = len(signals(episodes)) if self.config.fill_groups else 0
        while rounds < self.config.fill_groups and have < self.config.batch_size:
            rounds += 1
            more = roll(rounds)
            rolled += more
            keep = set(signals(more)[:self.config.batch_size - have])
            episodes += [e for e in more if e.group in keep]
            have += len(keep)
        gate: dict[str, float] = {}
        if self.config.opd_gate == "replay":
            progress.note("replaying the teacher's replies")
            begun, gate_times = time.perf_counter(), RolloutTimes()  # apart from the rollout's own
            gate = self._check_teacher(episodes, sampling, gate_times)
            gate["perf/gate_s"] = time.perf_counter() - begun
            gate["perf/gate_generate_s"], gate["perf/gate_env_s"] = gate_times.generate_s, gate_times.env_s
        metrics = self._judge_metrics(rolled)
        metrics.update(rollout_metrics(rolled))
        metrics.update(gate)
        if self.config.fill_groups:
            metrics["rollout/fill_rounds"] = float(rounds)
            metrics["rollout/fill_episodes"] = float(len(rolled) - first)
            metrics["samples/signal_groups"] = float(have)
        metrics["perf/rollout_s"] = rollout_s
        metrics["perf/rollout_generate_s"] = times.generate_s
        metrics["perf/rollout_env_s"] = times.env_s
        metrics["perf/judge_s"] = time.perf_counter() - started - rollout_s - gate.get("perf/gate_s", 0.0)
        metrics["rollout/weight_version"] = float(self.policy.weight_version)
        return Batch(step, episodes, metrics)

    def _judge(self, episodes: list[Episode]) -> None:
        """Each turn's judge score (None: unparsed) and hindsight hint, when the run has a judge."""
        if self.judge is None:
            return
        turns = [t for e in episodes if e.error is None for t in e.turns]
        want_hints = self.config.method in ("opd", "combine")
        verdicts = self.judge.judge([TurnToJudge(t.context, t.completion.text, t.next_state, t.next_role,
                                                 t.env_reward) for t in turns], want_hints)
        for turn, verdict in zip(turns, verdicts):
            turn.judge_score = verdict.score if verdict.parsed else None
            turn.hint = verdict.hint

    def _check_teacher(self, episodes: list[Episode], sampling: SamplingParams,
                       times: RolloutTimes) -> dict[str, float]:
        """``opd_gate=replay``: each hinted turn whose OPD term could reach the loss has its
        teacher (the model told the hint: the base model for ``opd_teacher=base``, else the
        policy) sample its own reply; the env, replayed to that turn, steps it, and the
        reply is scored as the run scores a turn (``reward=``: the env's reward, the judge's
        score of the replayed next state, or both) into ``turn.teacher_reward``, comparable
        with ``turn.reward``. Returns the gate's metrics: turns checked, replays that could
        not reach their turn, how often and by how much the teacher's reply beat the
        student's, and how often the env's reward alone would have decided otherwise."""
        episode_of = {id(t): e for e in episodes for t in e.turns}
        found = [(episode_of[id(t)], t) for t in opd_wanted(episodes, self.config)]
        if not found:
            return {"gate/checked": 0.0}
        encoded = [self.policy.encode(append_hint(t.context, t.hint or ""), t.tools) for _e, t in found]
        begun = time.perf_counter()
        replies = self.policy.generate_ids(encoded, sampling, adapter=self.config.teacher() != "base")
        times.generate_s += time.perf_counter() - begun
        steps = replay_steps(self.vec, [Replay(e, t.index, c.message) for (e, t), c in zip(found, replies)], times)
        reached = [(t, c, s) for (_e, t), c, s in zip(found, replies, steps) if s is not None]
        scores: list[int | None] = [None] * len(reached)
        if self.judge is not None and self.config.reward != "env":  # judged as the turn itself was
            verdicts = self.judge.judge([TurnToJudge(t.context, c.text, s.next_state, s.next_role, s.env_reward)
                                         for t, c, s in reached])
            scores = [v.score if v.parsed else None for v in verdicts]
        for (turn, _c, step), score in zip(reached, scores):
            turn.teacher_reward = run_reward(self.config, step.env_reward, score)
        out = {"gate/checked": float(len(found)), "gate/unreplayed": float(len(found) - len(reached))}
        if reached:
            out["gate/teacher_wins"] = mean([float(t.teacher_reward > t.reward) for t, _c, _s in reached])
            out["gate/teacher_reward"] = mean([t.teacher_reward for t, _c, _s in reached])
            out["gate/student_reward"] = mean([t.reward for t, _c, _s in reached])
            out["gate/env_disagrees"] = mean([float((s.env_reward > t.env_reward) != (t.teacher_reward > t.reward))
                                               for t, _c, s in reached])
        return out

    def _judge_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        if self.judge is None:
            return {}
        turns = [t for e in episodes if e.error is None for t in e.turns]
        scores = [t.judge_score or 0 for t in turns]  # an unparsed verdict scores 0
        out = {"judge/unparsed": float(sum(t.judge_score is None for t in turns)),
               "judge/score_mean": mean(scores),
               "judge/hints": float(sum(t.hint is not None for t in turns))}
        scored = [(t, s) for t, s in zip(turns, scores) if t.env_reward != 0]
        if scored:  # how often the judge's sign matches the env's own verdict
            out["judge/agree_env"] = mean([float(s == (t.env_reward > 0) - (t.env_reward < 0)) for t, s in scored])
        return out

    def _teacher(self, turns: list[Turn]) -> list[list[float]]:
        return teacher_logprobs(self.policy, self.config, [t.context for t in turns], [t.hint for t in turns],
                                [t.tools for t in turns], [t.completion.completion_ids for t in turns],
                                [t.completion.logprobs for t in turns],
                                turns[0].completion.temperature if turns else 1.0)

    # ---- 3-5: learn from a batch -------------------------------------------------------
    def learn(self, batch: Batch) -> dict[str, float]:
        started = time.perf_counter()
        samples, stats = build_samples(batch.episodes, self.config, self._teacher)
        trainable = self._take_or_hold(samples, stats)
        if trainable is not None:
            stats.update(self.update(trainable))
        stats["perf/train_s"] = time.perf_counter() - started
        return {**batch.metrics, **stats}

    def _take_or_hold(self, samples: list[Sample], stats: dict[str, float]) -> list[Sample] | None:
        """The samples to update on now (those held before first), or None when there are
        too few to step on (``min_update_samples``, counted over all ranks): they are kept for
        the next step, which rolls out on these same weights, so they stay on-policy; no
        update, no new weight version. A step of no samples still updates."""
        samples = self.held + samples
        gathered = sum(self.ranks.gather(len(samples), what="counting samples")) if self.config.min_update_samples \
            else len(samples)
        hold = 0 < gathered < self.config.min_update_samples
        self.held = samples if hold else []
        if self.config.min_update_samples:
            stats["samples/held"] = float(len(self.held))
            if not hold:
                stats["samples/trained"] = float(len(samples))
        return None if hold else samples

    def update(self, samples: list[Sample]) -> dict[str, float]:
        """One update on ``samples``: the optimizer step(s), weight version + 1, the push of
        the new weights to the policy. Its stats."""
        stats = train_step(self.train_model, self.optimizer, samples, self.config, self.version,
                           self.policy.tokenizer.pad_token_id, self.kl_reference, self.ranks)
        self.version += 1
        stats["perf/push_s"] = self._push(self.version)
        return stats

    def _push(self, version: int) -> float:
        """Load the trained weights into the policy as ``version``; returns the seconds it took."""
        started = time.perf_counter()
        self.policy.load_trainable_state(self._trainable_state(), version=version)
        return time.perf_counter() - started

    def _trainable_state(self) -> dict[str, torch.Tensor]:
        return trainable_state(self.train_model, self.config.lora.enabled)

    def evaluate(self) -> dict[str, float]:
        """Greedy first replies to the held-out tasks. Weights that have not changed since the
        last evaluation (a step min_update_samples held) give its results again, logged
        for this step with ``perf/eval_reused``, instead of decoding them twice. Rank 0 alone
        evaluates (the others have no eval envs)."""
        if self.eval_vec is None or not self.eval_tasks or self.run is None:
            return {}
        version = self._eval_version()
        if self._last_eval is not None and self._last_eval[0] == version:
            _, out, replies = self._last_eval
            self.run.log_replies(self.step, replies)
            return {**out, "perf/eval_reused": 1.0}
        jobs = [Job(i, t, seed=i) for i, t in enumerate(self.eval_tasks)]
        with self._progress(f"eval step {self.step}", len(jobs)) as progress:
            episodes = collect(self.eval_vec, self.policy, jobs, SamplingParams(0.0, max_new_tokens=self.config.max_new_tokens),
                               max_turns=self.eval_turns, progress=progress, users=self.user_policy)
        replies = [{"task_id": e.task_id, "error": e.error, "env_return": e.env_return,
                    "reply": e.turns[0].completion.text if e.turns else "",
                    "finish_reason": e.turns[0].completion.finish_reason if e.turns else "",
                    "metrics": e.turns[0].metrics if e.turns else {}} for e in episodes]
        self.run.log_replies(self.step, replies)
        out = self._eval_metrics(episodes)
        self._last_eval = (version, out, replies)
        return dict(out)

    def _eval_version(self) -> int:
        """What the evaluated weights are: the same value again means the same replies."""
        return self.policy.weight_version

    def _eval_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        out = turn_metrics([e for e in episodes if e.error is None], "eval")
        out["eval/env_return"] = mean([e.env_return for e in episodes if e.error is None])
        out["eval/errors"] = float(sum(e.error is not None for e in episodes))
        return out

    # ---- resume, checkpoint -----------------------------------------------------------
    def resume(self) -> None:
        """Continue from the run dir's last checkpoint, if it has one. Rank 0 reads it and the
        other ranks take it from rank 0: the weights and optimizer state are the same on every
        rank, so a run resumes at any world size."""
        found = None
        if self.run is not None:
            ckpt = self.run.latest_checkpoint()
            if ckpt is None:  # killed before the first checkpoint: keep only the baseline eval
                self.run.truncate_metrics(0)
            else:
                found = self.run.load_checkpoint(ckpt)
        found = self.ranks.broadcast(found, what="receiving the checkpoint to resume from")
        if found is None:
            return
        weights, optimizer, state = found
        load_optimizer_state(self.optimizer, optimizer, self.config)  # a changed lr= wins over the saved one
        self.step = state["step"]
        self.version = state.get("version", self.step)  # differs from step once min_update_samples held one
        self._load(weights, self.version)
        if self.run is not None:
            self.run.truncate_metrics(self.step)

    def checkpoint_if_stopped(self) -> int | None:
        """After the run was stopped (SIGTERM): checkpoint its last finished step unless a
        checkpoint has it already; the step a resume starts after, or None for none. A stop
        in the middle of a step keeps the checkpoint before it: the weights may be
        half-updated, and the step's metrics are not logged. Only rank 0 checkpoints."""
        if self.run is None:
            return None
        saved = self.run.latest_checkpoint()
        saved_step = json.loads((saved / "state.json").read_text())["step"] if saved else 0
        if self.mid_step or self.step <= saved_step:
            return saved_step or None
        self.checkpoint()
        return self.step

    def checkpoint(self) -> None:
        assert self.run is not None, "only rank 0 writes checkpoints"
        self.run.save_checkpoint(self.step, self._trainable_state(), self.optimizer.state_dict(),
                                 {"step": self.step, "version": self.policy.weight_version,
                                  "config": to_dict(self.config)})

    # ---- the run --------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        self.resume()
        if self.run is not None:
            print(run_plan(self), flush=True)
        if self.run is not None and self.step == 0 and not self.run.metrics():
            self.run.log(0, {**self.evaluate(), "rollout/weight_version": 0.0})
        bar = step_bar(self.config.steps, self.step, f"{self.config.method} on {self.env_id}",
                       enabled=self.config.progress and self.run is not None)
        last: dict[str, float] = {}
        heap = SettledHeap()
        with frozen_heap():  # what setup loaded outlives the run: each step's collection skips it
            for batch in self._batches():
                started = time.perf_counter()
                self.mid_step = True
                metrics = self.learn(batch)
                freed = time.perf_counter()
                heap.settle()  # and so does what the first step (or a compiling one) left
                metrics["perf/free_s"] = time.perf_counter() - freed
                self.step = batch.step
                if self.step % self.config.eval_every == 0 or self.step == self.config.steps:
                    metrics.update(self.evaluate())
                metrics["perf/step_s"] = time.perf_counter() - started + metrics.get("perf/rollout_s", 0.0) \
                    + metrics.get("perf/judge_s", 0.0)
                if self.config.device.startswith("cuda"):  # the run's own GPU, not whichever is current
                    metrics["perf/gpu_peak_mib"] = torch.cuda.max_memory_allocated(self.config.device) / 2**20
                save = self.step % self.config.save_every == 0 or self.step == self.config.steps
                if self.ranks.distributed:
                    metrics = self._merged(metrics, save)
                if self.run is not None:
                    self.run.log(self.step, metrics)
                self.mid_step = False  # the weights and the log both stand at `step` now
                if save and self.run is not None:
                    self.checkpoint()
                last = metrics
                bar.set_postfix(postfix(metrics, self.headline_key), refresh=False)
                bar.update(1)  # one redraw, with the step's numbers
        bar.close()
        return last

    def _merged(self, metrics: dict[str, float], save: bool) -> dict[str, float]:
        """Rank 0: the step's metrics over all ranks (distributed.merge_metrics); the others:
        their own. Before a checkpoint the ranks' weights are checked to be bit-identical,
        since rank 0's checkpoint stands for every rank's."""
        digest = weights_digest(self._trainable_state()) if save else ""
        gathered = self.ranks.gather((metrics, digest), what="gathering the step's metrics")
        if save and len({d for _m, d in gathered}) > 1:
            raise DistributedError(f"the ranks' trained weights differ after step {self.step} (digests "
                                   f"{[d[:12] for _m, d in gathered]}), so a data-parallel update went wrong; "
                                   "this step is not checkpointed: report it with the run's config.yaml")
        return merge_metrics([m for m, _d in gathered]) if self.ranks.main else metrics

    def _batches(self) -> Any:
        steps = range(self.step + 1, self.config.steps + 1)
        if self.config.mode == "sync":
            for step in steps:
                yield self.collect_and_score(step)
            return
        ready: queue.Queue[Batch | BaseException | None] = queue.Queue(maxsize=1)
        stop = threading.Event()

        def produce() -> None:
            try:
                for step in steps:
                    if stop.is_set():
                        return
                    ready.put(self.collect_and_score(step))
                ready.put(None)
            except BaseException as exc:  # surfaced in the trainer's thread
                ready.put(exc)

        worker = threading.Thread(target=produce, daemon=True, name="clawgym-rollout")
        worker.start()
        try:
            while (item := ready.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()

    def close(self) -> None:
        if self.vec is not None:
            self.vec.close()
        if self.eval_vec is not None:
            self.eval_vec.close()
        if hasattr(self.policy, "close"):  # an engine policy stops the server it launched
            self.policy.close()
        if self.run is not None:
            self.run.close()


def spread(pool: list[str], n: int) -> list[str]:
    """``n`` tasks evenly spaced through ``pool`` (all of it when it is smaller): held-out
    pools are sorted by persona or category, so their first ``n`` would cover only a few."""
    n = min(n, len(pool))
    return [pool[i * len(pool) // n] for i in range(n)] if n else []
