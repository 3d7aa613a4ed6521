"""The trainer's configuration: dataclasses, ``key=value`` overrides, validation.

``python -m trainers.run env=chat parallel=8 method=combine lora.rank=32 judge.kind=self``.
Every field below is a key; nested sections use dots; ``env_kwargs.<name>=<value>``
passes constructor arguments to the env. A wrong key or value fails with one sentence
that names it and says what is allowed.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import json
import re
import textwrap
import types
import typing
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from agents.device import resolve_device, resolve_dtype
from agents.engines.base import EngineSettings
from agents.adapters import LoraSettings
from trainers.tinker.settings import COMPUTES, TinkerSettings, tinker_problem

METHODS = ("grpo", "opd", "combine")
TRAIN_METHODS = (*METHODS, "sft")
"""What ``trainers.run`` takes; sft (supervised fine-tuning on demonstrations) has no reward
to learn from online, so the live server takes METHODS only."""
OPD_TEACHERS = ("auto", "base", "policy", "bounded")
OPD_ALONE = ("true", "false", "share")
STEP_SCALES = ("full", "evidence")
OPD_GATES = ("auto", "none", "replay")
KL_REFS = ("auto", "base", "init")
REWARD_SOURCES = ("env", "judge", "both")
JUDGE_KINDS = ("self", "model", "endpoint", "lexical", "env")
JUDGE_MODES = ("logprob", "generate")
LOOP_MODES = ("sync", "async")
VECTOR_BACKENDS = ("sync", "thread", "process", "ray")
ADAPTER_MODES = ("shared", "per_user")


class ConfigError(ValueError):
    """A bad key or value; the message says which and what is allowed."""


@dataclass
class JudgeConfig:
    kind: str = "lexical"
    """Who scores each turn: self, model, endpoint, lexical or env. self: the policy's base
    model (adapter off), as OpenClaw-RL; model: another local model dir; endpoint: an
    OpenAI-compatible server; lexical: reads the next state's wording; env: the env's own
    reward sign (an oracle, for comparison). The default is lexical because SmolLM2-135M
    judges at chance (docs/results/learning-judge-agreement.md); use self, model or endpoint
    with a model that can judge."""
    mode: str = "logprob"
    """logprob: one forward pass, compare the label tokens' probabilities; generate: m votes."""
    votes: int = 3
    """m, judge samples per turn in generate mode (majority vote)."""
    temperature: float = 0.6
    """Sampling temperature of the votes in generate mode (OpenClaw-RL's: 0.6)."""
    model: str = ""
    """kind=model: a local transformers model directory."""
    endpoint: str = ""
    """kind=endpoint: base URL, e.g. http://localhost:30000/v1."""
    endpoint_model: str = ""
    """kind=endpoint: the model name sent in each request; empty: "default"."""
    history_messages: int = 6
    """Recent messages of context the judge sees before the turn (truncated)."""
    hints: str = "next_state"
    """Where OPD hints come from: next_state or judge. next_state: a turn the judge scores
    -1 gets its next state (the user's correction, the tool's error) as the hint, in the
    user's own words.
    judge: OpenClaw-RL's hint prompt (docs/concepts/methods.md), m sampled votes, longest
    hint kept; it needs a judge that can write instructions (judge.kind=model or endpoint),
    and costs m generations."""

    def __post_init__(self) -> None:
        _choice("judge.kind", self.kind, JUDGE_KINDS)
        _choice("judge.mode", self.mode, JUDGE_MODES)
        _choice("judge.hints", self.hints, ("judge", "next_state"))
        _positive("judge.votes", self.votes)
        if self.kind == "model" and not self.model:
            raise ConfigError("judge.kind=model needs judge.model=<local model dir>")
        if self.kind == "endpoint" and not self.endpoint:
            raise ConfigError("judge.kind=endpoint needs judge.endpoint=<base URL of an OpenAI-compatible server>")


@dataclass
class UpdateConfig:
    """What an update needs, shared by offline training (TrainConfig) and the live server
    (trainers.live.config.ServeConfig): the method, the model and adapter, the optimizer,
    the clipped objective and the judge."""

    method: str = "combine"
    """The learning method: grpo, opd or combine (docs/concepts/methods.md); trainers.run
    also takes sft (supervised fine-tuning on ``demos``: a cold start for envs where the
    model never succeeds, so a reward has nothing to compare)."""
    model: str = "default"
    """default (SmolLM2-135M-Instruct) or a local transformers model directory."""
    device: str = "auto"
    """Where the model runs: auto (the first CUDA GPU when torch sees one, else cpu), cpu,
    cuda or cuda:N. The run's config.yaml records what auto resolved to."""
    dtype: str = "auto"
    """The base model's precision: auto (bfloat16 on a GPU that has it, else float32),
    float32 or bfloat16. Log-probs are computed in float32 from the logits and the LoRA
    weights stay float32 either way; full fine-tuning (lora.enabled=false) needs float32."""
    lora: LoraSettings = field(default_factory=LoraSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    compute: str = "local"
    """Where the model samples and trains: local (this machine; engine= servers may sample)
    or tinker (the Tinker API: rollouts sample through its SamplingClient, the OPD teacher
    reads its compute_logprobs, and GRPO, OPD and combine go to forward_backward as
    per-token advantages, then optim_step, and save_weights_for_sampler gives the next
    version). TINKER_API_KEY and TINKER_BASE_URL are read from the environment, as the SDK
    reads them, and never written to the run dir. Needs the tinker extra; ``make tinker``
    sets up a self-hosted skyrl-tx server on the CPU."""
    tinker: TinkerSettings = field(default_factory=TinkerSettings)
    lr: float = 1e-3
    """AdamW learning rate. OpenClaw-RL reports 1e-4 for LoRA and 1e-5 for full fine-tuning
    with 4B-8B models over many steps; the 8-step CPU demo with a 135M model needs a larger
    LoRA step."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.98
    """AdamW beta2."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this before each optimizer step."""
    epochs: int = 2
    """Passes over each step's samples (>1 makes the clip matter)."""
    step_scale: str = "full"
    """How far one optimizer step moves the weights: full (lr, whatever the minibatch holds)
    or evidence (lr times the minibatch's samples, each at its weight, over minibatch_size,
    at most 1). Adam's update does not depend on the gradient's scale, so under full one
    sample moves the weights as far as a full minibatch, and scaling advantages down (w_opd,
    opd_alone=share) changes nothing in a step of one kind of sample; evidence makes a step
    as big as what it holds, as SGD on a loss summed over a full minibatch would. A sample's
    weight is 1, or opd_alone's weight on a combine turn trained on its OPD term alone.
    docs/results/learning-personas.md: "Scaling an advantage moves nothing"."""
    minibatch_size: int = 8
    """Samples per optimizer step within an update; 0 = the whole batch at once."""
    microbatch_size: int = 0
    """Samples per forward/backward pass within a minibatch (gradient accumulation; 0 = the
    whole minibatch in one pass). The update is the same; what changes is the peak memory,
    which grows with the samples in one pass times their length: long prompts (MiniWoB page
    snapshots, SWE files) need a small one on a small machine."""
    microbatch_tokens: int = 0
    """At most this many tokens in one forward/backward pass, counted as the pass pads them
    (its rows times its longest prompt + reply; an episode's earlier turns read inside a later
    turn's row add no row); 0: no limit. Short samples still share a pass and a long one gets
    a pass of its own, so memory is bounded whatever the env's prompt lengths (verl's dynamic
    batch size). With microbatch_size, both limits hold."""
    gradient_checkpointing: bool = False
    """Keep only each layer's input for the backward and recompute the rest during it (the
    same gradient): training memory drops from the activations of every layer to those of
    one, for ~30% more compute in the update. For long prompts on a small machine."""
    checkpoint_tokens: int = 2048
    """A forward/backward pass over more than this many padded tokens (its rows times its
    longest prompt + reply) recomputes activations as ``gradient_checkpointing=true`` does,
    whatever that key says: a long multi-turn sample (4-5k tokens on toolmath) trains in
    about half the memory while short passes keep the faster path. 0: only
    ``gradient_checkpointing`` decides."""
    w_opd: float = 1.0
    """combine: weight of the OPD term (the teacher's log-prob gap) in the token advantage."""
    w_rl: float = 1.0
    """combine: weight of the RL term (the turn's reward or group advantage)."""
    opd_clip: float = 5.0
    """c: the OPD token advantage is clipped to [-c, c]."""
    opd_center: bool = False
    """Subtract each reply's mean OPD gap from its tokens: OPD then only moves credit
    between a reply's tokens and never pushes a whole reply down (which it otherwise
    mostly does: every hinted reply is a failed one)."""
    opd_alone: str = "true"
    """combine: a hinted turn with no RL term (its GRPO group's returns all equal, or a
    live turn scored 0) trains on the OPD term alone (true), is no sample and gets no
    teacher pass (false: OPD then only reshapes turns the RL term also judges), or trains on
    it scaled by the share of the step's groups that carry an RL term (share; live: of the
    turns collected together, so a turn that arrives alone gets 0 or 1).
    docs/results/learning-personas.md: "OPD never alone"."""
    opd_teacher: str = "auto"
    """Who reads the hint in OPD: auto (policy for combine, base for opd), base (the base
    model, adapter off, as OpenClaw-RL) or policy (the weights that wrote the reply,
    adapter on: the gap is then the hint's effect alone, without the pull back toward
    the base model that the base teacher adds once the adapter has learned something) or
    bounded (per token the median of the reply's own log-prob and those two teachers': the
    policy's gap, stopped where the base model with the hint is, never pulling back).
    docs/results/learning-chat-methods.md: "Why combine's teacher is the policy" has the
    measurement."""
    eps_low: float = 0.2
    """The ratio is clipped below at 1 - eps_low."""
    eps_high: float = 0.28
    """The ratio is clipped above at 1 + eps_high."""
    kl_beta: float = 0.0
    """beta: coefficient of the k3 KL to the reference (kl_ref: the base model unless the run
    starts from init=); 0: no KL term."""
    is_cap: float = 2.0
    """C: cap of truncated importance weights for stale samples."""
    max_staleness: int = 2
    """Drop samples more than this many weight versions behind."""
    train_cut: bool = False
    """Train on replies cut at the token limit too. false: they are counted, not trained on
    (an env task's reward for an unfinished reply mostly says "unfinished": DAPO's overlong
    filtering). The live server defaults to true: its user read exactly the cut reply and
    answered it, so the next state judges those tokens."""
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    seed: int = 0
    """Seeds torch, task sampling and generation."""

    def __post_init__(self) -> None:
        _choice("method", self.method, self._methods())
        _choice("opd_teacher", self.opd_teacher, OPD_TEACHERS)
        self.opd_alone = str(self.opd_alone).lower()  # a config.yaml from before "share" holds a bool
        _choice("opd_alone", self.opd_alone, OPD_ALONE)
        _choice("step_scale", self.step_scale, STEP_SCALES)
        self.placement()  # a device this machine lacks fails here, before anything loads
        _positive("epochs", self.epochs)
        if self.checkpoint_tokens < 0:
            raise ConfigError(f"checkpoint_tokens must be >= 0 (0: only gradient_checkpointing decides), "
                              f"got {self.checkpoint_tokens}")
        if self.minibatch_size < 0 or self.microbatch_size < 0 or self.microbatch_tokens < 0:
            raise ConfigError(f"minibatch_size, microbatch_size and microbatch_tokens must be >= 0 (0: no limit), "
                              f"got {self.minibatch_size}, {self.microbatch_size} and {self.microbatch_tokens}")
        if self.engine.kind != "hf" and not self.lora.enabled:
            raise ConfigError(f"engine={self.engine.kind} loads each update into the server as a LoRA adapter; "
                              "keep lora.enabled=true, or train full weights with engine=hf")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.eps_low < 1 or self.eps_high < 0:
            raise ConfigError("eps_low must be in [0, 1) and eps_high >= 0")
        if self.kl_beta < 0:
            raise ConfigError(f"kl_beta must be >= 0 (0: no KL term), got {self.kl_beta}")
        if not self.lora.enabled:
            # The base model is the LoRA adapter turned off; without one it would be the
            # policy itself, moving with every update.
            if self.method in ("opd", "combine") and self.teacher() in ("base", "bounded"):
                raise ConfigError(f"method={self.method} with opd_teacher={self.teacher()} reads the hint with the "
                                  "base model (the LoRA adapter off), and lora.enabled=false has no adapter to turn off; "
                                  "keep LoRA, or pass opd_teacher=policy")
            if self.judge.kind == "self":
                raise ConfigError("judge.kind=self judges with the base model (the LoRA adapter off), and "
                                  "lora.enabled=false has no adapter to turn off; keep LoRA, or pass "
                                  "judge.kind=model judge.model=<the same model>")

    def _methods(self) -> tuple[str, ...]:
        return METHODS

    def teacher(self) -> str:
        """``opd_teacher`` with auto resolved: the policy for combine (4 seeds: no collapse,
        unlike the base teacher), the base model for opd alone (with the policy teacher it
        degenerates: nothing anchors a signal that only ever comes from failed turns)."""
        if self.opd_teacher != "auto":
            return self.opd_teacher
        return "policy" if self.method == "combine" else "base"

    def placement(self) -> tuple[str, str]:
        """``(device, dtype)`` as this machine runs them, ``auto`` resolved. The config keeps
        ``auto`` (an override of ``device`` must still re-decide the dtype); the entry point
        that loads the model stores what this returns, so config.yaml records it."""
        return resolve_placement(self.device, self.dtype, full_weights=not self.lora.enabled)


@dataclass
class TrainConfig(UpdateConfig):
    env: str = "chat"
    """An env alias or id (python -m envs list)."""
    init: str = ""
    """A run directory (its latest checkpoint) or checkpoint directory whose trained weights
    start this run, e.g. an sft run's before method=grpo; its model and lora settings must
    match. Only the weights: the optimizer and step start fresh."""
    kl_ref: str = "auto"
    """What kl_beta's KL is measured against. base: the base model (LoRA adapter off; with
    full weights, the weights the run started from); init: the init= run's weights, so RL
    after sft stays near the demonstrated behaviour rather than being pulled back to a base
    model that never did it; auto: init when init= is given, else base."""
    demos: str = "oracle"
    """method=sft: the demonstrations. oracle: the env family's own ground-truth agent plays
    ``batch_size`` train-split episodes per step (solved ones are kept and written to the run
    dir's demos.jsonl); or a JSONL file in OpenAI's chat fine-tuning format, one
    ``{"messages": [...], "tools": [...]}`` per line, every assistant message a target
    (``"weight": 0`` skips one)."""
    data: str = ""
    """A JSONL of recorded sessions (python -m trainers.serve export) to train on offline
    instead of rolling out; env= then serves only for evaluation."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments for the env: env_kwargs.persona=student."""
    adapters: str = "shared"
    """shared (one LoRA adapter learns every episode) or per_user (one adapter per user). For
    per_user the env's episodes name their user (reset's ``info["user_id"]``; the chat env's
    persona); each episode is rolled out and evaluated with its user's adapter (users mixed
    in one batch), each user's samples train only their adapter and AdamW state, metrics add
    ``user/<id>/...``, and every checkpoint keeps every user's adapter (peft's layout) under
    ``checkpoints/step_k/users/<id>/``. The judge and the OPD teacher read the base model.
    Needs LoRA, the local model (no engine=, compute=tinker, init= or data=) and one process
    (no torchrun); not method=sft. docs/guides/training.md: "One adapter per user"."""
    opd_gate: str = "auto"
    """opd and combine: replay (the teacher, the model told the hint, writes its own reply to
    the turn; the env is replayed to that turn from the episode's seed and earlier replies
    and steps it; the OPD term is kept only where that reply, scored as the run scores turns
    (reward=), beats the turn's own), none (every hinted turn gets its OPD term), or auto
    (the env's own ``opd_gate`` for combine: replay on the chat env with its scripted user;
    none for opd alone, for data=, and for the other envs, whose replays re-run commands,
    clicks or tool calls and are unmeasured). Costs one more generation per hinted turn and
    a replay of its episode up to it; a replay that cannot reach its turn counts as the
    teacher losing. docs/results/learning-opd-gate.md has the measurements."""
    sandbox: str = ""
    """Sandbox backend for envs that take one (auto, docker, bwrap); empty: the env's default."""
    parallel: int = 8
    """Number of envs stepped at once (on each rank, under torchrun)."""
    backend: str = "thread"
    """Vector backend: sync, thread, process, ray."""
    ray_address: str = ""
    """backend=ray: the Ray cluster for the env actors (head ``host:port``, ``ray://host:port``
    or ``auto``); empty: ``$RAY_ADDRESS``, else a local Ray instance. On a cluster each
    sandboxed env's actor reserves its sandbox's ``cpus`` and ``memory_mb``; a lost node is
    an env error (not trained on) and the next reset starts the actor on a live node."""
    ray_actor_options: dict[str, Any] = field(default_factory=dict)
    """backend=ray: Ray options for every env actor (``ray_actor_options.num_cpus=1``,
    ``...scheduling_strategy=SPREAD``, ``...resources``), overriding the sandbox's
    reservation; ``max_restarts`` cannot be set (an env's state does not survive one)."""
    steps: int = 8
    """Steps to train: each rolls out a batch and updates the weights (a new weight version),
    unless min_update_samples holds its samples for the next."""
    batch_size: int = 8
    """Tasks per step; each is rolled out group_size times. Under torchrun, all ranks'
    together: each rolls out its share of the groups."""
    group_size: int = 4
    """G: rollouts of one task form a GRPO group."""
    fill_groups: int = 0
    """GRPO's dynamic sampling (DAPO): while fewer than batch_size groups have members with
    different returns, roll out up to this many extra rounds of batch_size new tasks and add
    their groups that do, up to batch_size such groups. 0: off."""
    min_update_samples: int = 0
    """An update waits until at least this many samples have gathered: a step that builds
    fewer holds them and rolls out the next step on the same weights (nothing was updated,
    so they are still on-policy), and the step that brings the total up trains on all of
    them. Adam moves the weights as far for one sample as for eight, so a step of 1-2
    samples can steer a run (docs/results/learning-opd-gate.md: "Holding a thin step").
    0: every step updates. Held samples are not checkpointed: a killed run loses them, not a step."""
    max_new_tokens: int = 128
    """Completion limit of each rollout turn."""
    max_context: int = 0
    """Tokens of prompt plus reply the model may hold (0: the model's own limit, 8192 for the
    default); a longer prompt gets an empty reply with finish_reason "context"."""
    temperature: float | None = None
    """Rollout sampling temperature; unset: the env's ``rollout_temperature`` (OpenClaw-RL:
    1.0 for env tracks, 0.6 for the personal-chat track, which imitates live use)."""
    reward: str = "judge"
    """Per-turn reward: env, judge, or both (r_env + prm_coef * r_judge)."""
    prm_coef: float = 1.0
    """reward=both: weight of the judge's score added to the env's reward."""
    normalize_std: bool = True
    """Divide group advantages by their std."""
    mode: str = "sync"
    """sync, or async: rollout of step k+1 overlaps training on step k."""
    eval_tasks: int = 16
    """Held-out tasks evaluated greedily before training and after every step, evenly spaced
    through the held-out pool (0: none)."""
    eval_every: int = 1
    """Evaluate after every this many steps (and before the first and after the last)."""
    eval_split: str = "heldout"
    """Value of the env's `split` argument for evaluation, when it has one."""
    out: str = ""
    """Run directory; empty: runs/<env>-<method>-<time>. An existing run dir resumes."""
    save_every: int = 1
    """Write a checkpoint every this many steps (and after the last)."""
    progress: bool = True
    """Show a progress bar."""
    world_size: int = 1
    """How many data-parallel ranks train (trainers/distributed.py), recorded in config.yaml:
    the launcher decides it (``torchrun --nproc-per-node N -m trainers.run ...`` sets
    ``WORLD_SIZE``), not this key; a value that differs from the ranks launched is refused.
    Rank r rolls out the step's groups g with g % N == r (``batch_size`` counts all ranks'
    groups, ``parallel`` is per rank), gradients are summed across ranks, and rank 0 alone
    writes the run dir and evaluates. A run resumes at any world size."""
    dist_timeout_s: int = 1800
    """Several ranks: seconds a rank waits in a collective for the others before the run
    fails. It must cover what rank 0 does alone between steps (evaluation, a checkpoint);
    a rank that dies ends the run sooner (torchrun stops the others)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("reward", self.reward, REWARD_SOURCES)
        _choice("mode", self.mode, LOOP_MODES)
        _choice("compute", self.compute, COMPUTES)
        if self.compute == "tinker" and (problem := tinker_problem(self)):
            raise ConfigError(problem)
        _choice("backend", self.backend, VECTOR_BACKENDS)
        if (self.ray_address or self.ray_actor_options) and self.backend != "ray":
            raise ConfigError(f"ray_address and ray_actor_options place env actors of backend=ray, and "
                              f"backend={self.backend}; pass backend=ray or drop them")
        _choice("kl_ref", self.kl_ref, KL_REFS)
        _choice("opd_gate", self.opd_gate, OPD_GATES)
        if self.opd_gate == "replay" and self.method not in ("opd", "combine"):
            raise ConfigError(f"opd_gate={self.opd_gate} checks OPD's teacher, and method={self.method} has no OPD "
                              "term; drop opd_gate= or pass method=opd or combine")
        if self.opd_gate == "replay" and self.data:
            raise ConfigError(f"opd_gate={self.opd_gate} replays turns in the env, and data= trains on recorded "
                              "sessions no env can replay; drop one of them")
        if self.kl_ref == "init" and not self.init:
            raise ConfigError("kl_ref=init measures the KL against the init= run's weights; pass init=<run dir> "
                              "too, or kl_ref=base")
        for name in ("parallel", "steps", "batch_size", "group_size", "max_new_tokens", "save_every", "eval_every",
                     "world_size", "dist_timeout_s"):
            _positive(name, getattr(self, name))
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if self.max_context < 0:
            raise ConfigError(f"max_context must be >= 0 (0: the model's own limit), got {self.max_context}")
        if self.fill_groups < 0:
            raise ConfigError(f"fill_groups must be >= 0 (0: off), got {self.fill_groups}")
        if self.min_update_samples < 0:
            raise ConfigError(f"min_update_samples must be >= 0 (0: every step updates), got {self.min_update_samples}")
        if self.min_update_samples and (self.data or self.method == "sft"):
            raise ConfigError("min_update_samples holds samples rolled out on unchanged weights; "
                              + ("data= trains on recorded sessions" if self.data else "method=sft trains on demonstrations")
                              + ", which it does not apply to. Drop min_update_samples=")
        if self.fill_groups and self.method not in ("grpo", "combine"):
            raise ConfigError(f"fill_groups refills groups whose returns are all equal, which only GRPO's "
                              f"advantage needs; method={self.method} has none. Drop fill_groups=")
        if self.method == "grpo" and self.group_size < 2:
            raise ConfigError("method=grpo needs group_size >= 2: a group of one has no baseline")
        if self.method == "sft" and self.data:
            raise ConfigError("method=sft learns from demos=, not from data= (recorded sessions train grpo, "
                              "opd or combine); pass demos=<file.jsonl> instead")
        _choice("adapters", self.adapters, ADAPTER_MODES)
        if self.adapters == "per_user" and (problem := self._per_user_problem()):
            raise ConfigError(problem)
        if self.method == "sft" and self.engine.kind != "hf":
            raise ConfigError(f"method=sft generates nothing to train on, so engine={self.engine.kind} has "
                              "nothing to do; drop engine=")

    def _methods(self) -> tuple[str, ...]:
        return TRAIN_METHODS

    def _per_user_problem(self) -> str:
        """What ``adapters=per_user`` cannot do with these keys (empty: nothing)."""
        if not self.lora.enabled:
            return "adapters=per_user trains a LoRA adapter per user; keep lora.enabled=true"
        if self.engine.kind != "hf" or self.compute != "local":
            return ("adapters=per_user rolls out each user's adapter on this process's own model (mixed batches); "
                    "drop engine= and compute= (per-user adapters on vLLM, SGLang or Tinker are not built)")
        if self.world_size > 1:
            return ("adapters=per_user trains in one process (the users' adapters live in its run dir); "
                    "run it without torchrun, or with adapters=shared")
        if self.method == "sft":
            return "adapters=per_user learns from rollouts (grpo, opd, combine); method=sft has no users to split"
        if self.data:
            return "adapters=per_user rolls out on the env; data= trains on recorded sessions. Drop one of them"
        if self.init:
            return ("adapters=per_user starts every user from a fresh adapter (the base model); init= is not "
                    "built for it. Drop init=")
        return ""

    def gate(self, env_gate: str) -> str:
        """``opd_gate`` with auto resolved against the env's own ``opd_gate`` (``env_gate``):
        the env's for combine (4 CPU seeds each on the chat demo and persona=all: no seed
        ends more than 0.05 below its peak, and persona=all learns where ungated combine
        falls), none for opd alone (the gate starves it: 0-3 samples a step) and for
        data= (recorded sessions have no env to replay in)."""
        if self.opd_gate != "auto":
            return self.opd_gate
        return env_gate if self.method == "combine" and not self.data else "none"

    def kl_reference(self) -> str:
        """``kl_ref`` with auto resolved: init when the run starts from init=, else base."""
        if self.kl_ref != "auto":
            return self.kl_ref
        return "init" if self.init else "base"


def resolve_placement(device: str, dtype: str, full_weights: bool = False) -> tuple[str, str]:
    """The ``device`` and ``dtype`` keys resolved for this machine (agents/device.py), or a
    ConfigError that says what to pass instead. ``full_weights`` (training without LoRA)
    keeps float32 under ``dtype=auto`` and refuses bfloat16: AdamW on bfloat16 weights
    loses every update smaller than their precision."""
    try:
        device = resolve_device(device)
        resolved = resolve_dtype(dtype, device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if full_weights and dtype == "bfloat16":
        raise ConfigError("dtype=bfloat16 with lora.enabled=false would train bfloat16 weights, which drops "
                          "updates below their precision; pass dtype=float32 (or auto), or train a LoRA adapter")
    return device, "float32" if full_weights else resolved


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal under it), from ``cls`` and its bases:
    the one place a key's meaning is written, read by ``--help``."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = after.value.value
    return docs


def plain(text: str) -> str:
    """Docstring markup made terminal text: ``code`` and roles (``:func:`` and the like) lose
    their quoting."""
    return re.sub(r":\w+:`([^`]+)`", r"\1", re.sub(r"``(.+?)``", r"\1", text, flags=re.S))


def _first_sentence(doc: str) -> str:
    text = " ".join(plain(doc).split())
    return re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s+", text, maxsplit=1)[0]


def _cli_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    return str(value)


def config_help(cls: type, doc: str) -> str:
    """``--help`` text: the module docstring, then every key with its default and the first
    sentence of its field docstring (docs/reference/config.md gives them in full)."""
    rows: list[tuple[str, str]] = []

    def add(prefix: str, klass: type, instance: Any, skip: str = "") -> None:
        docs = field_docs(klass)
        for f in dataclasses.fields(klass):
            if f.name == skip:
                continue
            default = getattr(instance, f.name)
            if dataclasses.is_dataclass(default):
                short = shorthand(type(default))
                if short:  # engine=vllm stands for engine.kind=vllm: listed as such
                    rows.append((f"{prefix}{f.name}={_cli_value(getattr(default, short))}",
                                 _first_sentence(field_docs(type(default)).get(short, ""))))
                add(f"{prefix}{f.name}.", type(default), default, skip=short)
            elif isinstance(default, dict):
                rows.append((f"{prefix}{f.name}.<name>=<value>", _first_sentence(docs.get(f.name, ""))))
            else:
                rows.append((f"{prefix}{f.name}={_cli_value(default)}", _first_sentence(docs.get(f.name, ""))))

    add("", cls, _defaults(cls))
    width = min(max(len(key) for key, _ in rows) + 2, 34)
    lines = [plain(doc.strip()), "", "Keys (key=default, then what it means):"]
    for key, meaning in rows:
        wrapped = textwrap.wrap(meaning, 100 - width - 2) or [""]
        if len(key) + 2 > width:  # an overlong key gets the meaning on the next line
            lines.append(f"  {key}")
            lines.extend(" " * (width + 2) + line for line in wrapped)
        else:
            lines.append(f"  {key.ljust(width)}{wrapped[0]}")
            lines.extend(" " * (width + 2) + line for line in wrapped[1:])
    return "\n".join(lines)


def _defaults(cls: type) -> Any:
    """The declared defaults of ``cls`` without running ``__post_init__`` (so ``device=auto``
    shows as auto, not as what this machine resolves it to)."""
    values = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
              for f in dataclasses.fields(cls)}
    return types.SimpleNamespace(**values)


def shorthand(section: type) -> str:
    """The key ``section=value`` sets, for a section that has one (``engine=vllm`` sets
    ``engine.kind``); empty for sections that take only ``section.key=value``."""
    return "kind" if section is EngineSettings else ""


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _positive(key: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{key} must be >= 1, got {value}")


def _convert(key: str, raw: str, kind: Any) -> Any:
    if isinstance(kind, types.UnionType):  # `float | None`: "none" unsets it
        if raw.lower() in ("none", "null", ""):
            return None
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    try:
        if kind is bool:
            lowered = raw.lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return lowered in ("true", "1", "yes")
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        raise ConfigError(f"{key}={raw!r} is not a valid {kind.__name__}") from None
    return raw


def _parse_loose(raw: str) -> Any:
    """The values of dict keys (env_kwargs, ray_actor_options): JSON when it parses (numbers,
    bools, lists), else the string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def apply_overrides(config: Any, overrides: list[str], prefix: str = "") -> Any:
    """Return a copy of ``config`` with ``key=value`` overrides applied and validated."""
    sections: dict[str, list[str]] = {}
    values: dict[str, Any] = {}
    hints = get_type_hints(type(config))
    names = [f.name for f in dataclasses.fields(config)]
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. parallel=8)")
        key, raw = item.split("=", 1)
        head, _, rest = key.partition(".")
        if head not in names:
            close = difflib.get_close_matches(head, names, n=1)
            hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config key {prefix + head!r}{hint} Keys: {', '.join(names)}")
        kind = hints[head]
        loose = typing.get_origin(kind) is dict  # env_kwargs, ray_actor_options: any sub-key
        if rest:
            if dataclasses.is_dataclass(kind):
                sections.setdefault(head, []).append(f"{rest}={raw}")
            elif loose:
                values.setdefault(head, dict(getattr(config, head)))[rest] = _parse_loose(raw)
            else:
                raise ConfigError(f"{prefix}{head} has no sub-keys; use {prefix}{head}=<value>")
        elif dataclasses.is_dataclass(kind) and shorthand(kind):
            sections.setdefault(head, []).append(f"{shorthand(kind)}={raw}")
        elif dataclasses.is_dataclass(kind) or loose:
            raise ConfigError(f"{prefix}{head} is a section; set its keys like {prefix}{head}.<key>=<value>")
        else:
            values[head] = _convert(prefix + head, raw, kind)
    for head, items in sections.items():
        values[head] = apply_overrides(getattr(config, head), items, prefix=f"{prefix}{head}.")
    try:
        return dataclasses.replace(config, **values)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: {exc}") from None


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def from_dict(data: dict[str, Any]) -> TrainConfig:
    """Rebuild a saved config (resume)."""
    data = dict(data)
    data["lora"] = LoraSettings(**data.get("lora", {}))
    data["judge"] = JudgeConfig(**data.get("judge", {}))
    data["engine"] = EngineSettings(**data.get("engine", {}))
    data["tinker"] = TinkerSettings(**data.get("tinker", {}))
    return TrainConfig(**data)
