"""``compute=tinker``: trainers/loop.py's learning loop with the model on the Tinker API.

Per step k (as loop.py: version k-1 rolls out, version k comes out):

1. rollouts sample through version k-1's ``SamplingClient`` (:class:`TinkerPolicy`) and
   are scored here as in a local run (the env's reward, the judge);
2. samples are built by trainers/samples.py, so GRPO, OPD and combine advantages are
   clawgym's own, per token. The OPD teacher's log-probs come from the sampling side:
   ``compute_logprobs`` of the hinted prompt followed by the same completion tokens, on the
   base model's sampler (``opd_teacher=base``) or version k-1's (``policy``);
3. each sample becomes a ``Datum`` (:func:`to_datum`); per epoch and minibatch,
   ``forward_backward`` with ``tinker.loss`` (importance_sampling or ppo), then
   ``optim_step`` (AdamW with lr, betas, weight decay and grad clip from the config);
4. ``save_weights_for_sampler("v<k>")`` and a ``SamplingClient`` of it: version k.

Tinker sums its loss over tokens. Advantages are sent scaled by 1 / (the sample's
completion tokens x the minibatch's samples), so that sum is clawgym's loss: a mean over
each sample's tokens, then over samples (trainers/losses.py), and a long reply weighs as
much as a short one.

A step's time split is logged as ``perf/sample_s`` (rollouts and the replay gate's teacher
replies), ``perf/score_s`` (judge and ``perf/teacher_s``), ``perf/forward_backward_s``,
``perf/optim_step_s`` (the wait after forward_backward's result: the two are sent back to
back, so the service can run them in one go) and ``perf/save_weights_s``; ``python -m
trainers.tinker split RUN_DIR`` prints it.

Against skyrl-tx 0.3.0 (scripts/tinker_server.sh): the adapter's alpha is 32 whatever
``lora.alpha`` says (the API has no field for it); ``grad_clip_norm`` and ppo's thresholds
are accepted and ignored (it clips at 0.8 and 1.2); its optim_step averages the gradient
over sequences where Tinker sums, which Adam's step size does not see.

``TINKER_API_KEY`` and ``TINKER_BASE_URL`` are read by the SDK from the environment and are
no config key: neither reaches config.yaml, a checkpoint or the metrics. A checkpoint holds
the service's paths of the saved state and sampler (``state.json``), no weights.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import torch

from agents.model_cache import resolve_model_dir
from trainers.config import TrainConfig, to_dict
from trainers.distributed import Ranks
from trainers.judge import make_judge
from trainers.loop import Batch, Trainer
from trainers.rollout import Turn
from trainers.rundir import RunDir
from trainers.samples import Sample
from trainers.tinker.policy import TinkerPolicy, model_context
from trainers.tinker.settings import TinkerSettings, tinker_problem
from trainers.update import step_fraction


class TinkerTrainer(Trainer):
    """:class:`trainers.loop.Trainer` with rollouts, OPD teacher and updates on Tinker; env
    setup, collection, judging, evaluation and the run loop are the local trainer's.
    ``settings``: the ``tinker.*`` keys (default: ``config.tinker`` where the config has it)."""

    def __init__(self, config: TrainConfig, run: RunDir, settings: TinkerSettings | None = None) -> None:
        problem = tinker_problem(config)
        if problem:
            raise ValueError(problem)
        self.settings = settings or getattr(config, "tinker", TinkerSettings())
        self.config = config
        self.run = run
        self.ranks = Ranks()  # one process: Tinker's service is the data parallelism
        torch.manual_seed(config.seed)
        model_dir = resolve_model_dir(config.model)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.sampler_path = ""  # the service's path of the current version's sampler
        base_model = self._connect()
        limit = model_context(model_dir)
        self.policy = TinkerPolicy(self.service, base_model, tokenizer, self._sampler_of(0),
                                   max_context=min(config.max_context, limit) if config.max_context else limit,
                                   seed=config.seed)
        self.teacher_s = 0.0
        needs_judge = config.reward != "env" or config.method != "grpo"
        self.judge = make_judge(config.judge, self.policy) if needs_judge else None
        self._setup_envs()

    def _connect(self) -> str:
        """The service client (TINKER_API_KEY, TINKER_BASE_URL: as the SDK reads them) and a
        new LoRA adapter of the base model to train; returns the base model's name."""
        try:
            import tinker
        except ImportError:
            raise RuntimeError("compute=tinker needs the Tinker SDK: pip install tinker==0.16.1 (the tinker extra; "
                               "`make tinker` installs it)") from None
        try:
            self.service = tinker.ServiceClient()
            base_model = self.settings.base_model or self._served_model()
            self.training = self.service.create_lora_training_client(
                base_model=base_model, rank=self.config.lora.rank, seed=self.config.seed, train_unembed=False)
        except tinker.TinkerError as exc:
            raise RuntimeError(_service_failed(exc, "refused or did not answer")) from None
        return base_model

    def _served_model(self) -> str:
        models = [m.model_name for m in self.service.get_server_capabilities().supported_models]
        if len(models) != 1:
            raise ValueError(f"the Tinker service supports {len(models)} base models ({', '.join(models[:5])}); "
                             "pick one with tinker.base_model=<name>")
        return str(models[0])

    def _sampler_of(self, version: int) -> Any:
        """Save the trained weights for sampling as ``v<version>``; their SamplingClient."""
        self.sampler_path = self.training.save_weights_for_sampler(
            f"v{version:05d}", ttl_seconds=self.settings.ttl_s or None).result().path
        return self.service.create_sampling_client(model_path=self.sampler_path)

    # ---- 3-5: learn from a batch on the service ----------------------------------------
    def _teacher(self, turns: list[Turn]) -> list[list[float]]:
        begun = time.perf_counter()
        try:
            return super()._teacher(turns)
        finally:
            self.teacher_s += time.perf_counter() - begun

    def learn(self, batch: Batch) -> dict[str, float]:
        self.teacher_s = 0.0
        metrics = super().learn(batch)
        # one Tinker step's time split: sampling (rollouts, the replay gate's teacher replies),
        # scoring (judge, OPD teacher), and the three service calls of the update
        metrics["perf/sample_s"] = (metrics.get("perf/rollout_generate_s", 0.0)
                                    + metrics.get("perf/gate_generate_s", 0.0))
        metrics["perf/score_s"] = metrics.get("perf/judge_s", 0.0) + self.teacher_s
        metrics["perf/teacher_s"] = self.teacher_s
        return metrics

    def update(self, samples: list[Sample]) -> dict[str, float]:
        stats = self._update(samples)
        self.version += 1
        begun = time.perf_counter()
        # weights that a step of no samples left as they were keep their sampler
        trained = any(s.completion_ids for s in samples)
        sampler = self._sampler_of(self.version) if trained else self.policy.sampler
        self.policy.swap(sampler, self.version)
        stats["perf/save_weights_s"] = stats["perf/push_s"] = time.perf_counter() - begun
        return stats

    def _update(self, samples: list[Sample]) -> dict[str, float]:
        """forward_backward then optim_step per minibatch and epoch; averaged loss stats and
        the seconds spent waiting on each call."""
        from tinker import types

        samples = [s for s in samples if s.completion_ids]
        stats: dict[str, float] = {"perf/forward_backward_s": 0.0, "perf/optim_step_s": 0.0}
        if not samples:
            return stats
        size = self.config.minibatch_size or len(samples)
        batches = [samples[i : i + size] for i in range(0, len(samples), size)]
        totals: dict[str, float] = {}
        passes = 0
        for _ in range(self.config.epochs):
            for batch in batches:
                lr = self.config.lr
                if self.config.step_scale == "evidence":
                    lr *= step_fraction([sum(s.weight for s in batch)], size)
                begun = time.perf_counter()
                backward = self.training.forward_backward([to_datum(s, len(batch)) for s in batch],
                                                          self.settings.loss, self._loss_config())
                optimizer = self.training.optim_step(types.AdamParams(
                    learning_rate=lr, beta1=self.config.adam_beta1, beta2=self.config.adam_beta2, eps=1e-8,
                    weight_decay=self.config.weight_decay, grad_clip_norm=self.config.grad_clip))
                output = backward.result()
                waited = time.perf_counter()
                optimizer.result()
                stats["perf/forward_backward_s"] += waited - begun
                stats["perf/optim_step_s"] += time.perf_counter() - waited
                for k, v in loss_stats(batch, output.loss_fn_outputs, self.settings.loss, self.config).items():
                    totals[k] = totals.get(k, 0.0) + v
                passes += 1
        stats.update({k: v / passes for k, v in totals.items()})
        return stats

    def _loss_config(self) -> dict[str, float] | None:
        if self.settings.loss != "ppo":
            return None
        return {"clip_low_threshold": 1.0 - self.config.eps_low, "clip_high_threshold": 1.0 + self.config.eps_high}

    # ---- resume, checkpoint: the service keeps the weights ------------------------------
    def checkpoint(self) -> None:
        saved = self.training.save_state(f"step{self.step:05d}", ttl_seconds=self.settings.ttl_s or None).result()
        self.run.save_checkpoint(self.step, {}, {}, {"step": self.step, "version": self.policy.weight_version,
                                                     "tinker_state": saved.path, "tinker_sampler": self.sampler_path,
                                                     "config": to_dict(self.config)})

    def resume(self) -> None:
        ckpt = self.run.latest_checkpoint()
        if ckpt is None:
            self.run.truncate_metrics(0)
            return
        _weights, _optimizer, state = self.run.load_checkpoint(ckpt)
        if "tinker_state" not in state:
            raise ValueError(f"{ckpt} holds local weights, not a Tinker state; resume it without compute=tinker")
        self.training.load_state_with_optimizer(state["tinker_state"]).result()  # weights and Adam's moments
        self.step = state["step"]
        self.version = state.get("version", self.step)
        self.sampler_path = state["tinker_sampler"]
        self.policy.swap(self.service.create_sampling_client(model_path=self.sampler_path), self.version)
        self.run.truncate_metrics(self.step)

    def train(self) -> dict[str, float]:
        """As :meth:`Trainer.train`; a service that fails for good mid-run ends it as a failed
        rollout server does (an EngineError, which trainers.run reports in one line)."""
        import tinker

        from agents.engines import EngineError

        try:
            return super().train()
        except tinker.TinkerError as exc:
            raise EngineError(_service_failed(exc, "failed during the run")) from None

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.service.holder.close()  # stops the session's heartbeat: the service frees the adapter


def _service_failed(exc: Exception, what: str) -> str:
    """One sentence on a failed Tinker call: where (TINKER_BASE_URL without any userinfo) and
    what to set. The SDK's messages name neither the key nor the URL."""
    url = urlsplit(os.environ.get("TINKER_BASE_URL") or "")
    where = url._replace(netloc=url.netloc.rsplit("@", 1)[-1]).geturl() or "Tinker's default URL"
    return (f"the Tinker service at {where} {what} ({type(exc).__name__}: {exc}); set TINKER_BASE_URL to a "
            "running service (scripts/tinker_server.sh serve) and TINKER_API_KEY to its key")


def to_datum(sample: Sample, batch_samples: int) -> Any:
    """A sample as Tinker's ``Datum``: the model reads prompt + completion but its last token,
    position j predicting token j + 1 (``target_tokens``); ``logprobs`` (the rollout's) and
    ``advantages`` are 0 on the prompt's positions, so only completion tokens carry a loss.
    Advantages are scaled by 1 / (completion tokens x ``batch_samples``): the module docstring's why."""
    from tinker import types

    tokens = list(sample.prompt_ids) + list(sample.completion_ids)
    before = [0.0] * (len(sample.prompt_ids) - 1)
    scale = 1.0 / (len(sample.completion_ids) * batch_samples)
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": np.asarray(tokens[1:], dtype=np.int64),
                                       "logprobs": np.asarray(before + list(sample.old_logprobs), dtype=np.float32),
                                       "advantages": np.asarray(before + [a * scale for a in sample.advantages],
                                                                dtype=np.float32)})


def loss_stats(batch: list[Sample], outputs: list[dict[str, Any]], loss: str, config: TrainConfig) -> dict[str, float]:
    """A minibatch's loss stats from what forward_backward returned per datum (the learner's
    log-probs and each position's loss), named as trainers/losses.py names them:
    ``loss/policy`` (= ``loss/total``: the summed, scaled loss, i.e. clawgym's mean of means),
    ``loss/ratio_mean``, ``loss/adv_mean`` and, for ppo, ``loss/clip_frac`` (clawgym's eps)."""
    policy, ratios, advantages, clipped = 0.0, [], [], 0
    for sample, output in zip(batch, outputs):
        n = len(sample.completion_ids)
        policy += float(np.sum(output["elementwise_loss"].to_numpy()[-n:]))
        ratio_T = np.exp(output["logprobs"].to_numpy()[-n:] - np.asarray(sample.old_logprobs))
        adv_T = np.asarray(sample.advantages)
        ratios.extend(ratio_T.tolist())
        advantages.extend(sample.advantages)
        clipped += int(np.sum(((adv_T > 0) & (ratio_T > 1 + config.eps_high))
                              | ((adv_T < 0) & (ratio_T < 1 - config.eps_low))))
    out = {"loss/policy": policy, "loss/total": policy, "loss/ratio_mean": float(np.mean(ratios)),
           "loss/adv_mean": float(np.mean(advantages))}
    if loss == "ppo":
        out["loss/clip_frac"] = clipped / len(ratios)
    return out
