"""``python -m benchmarks.peers trl [key=value ...]``: clawgym's GRPO beside TRL's, same work.

    python -m benchmarks.peers trl steps=3 repeats=2 batch=2 group=4 max_new_tokens=64

Runs TRL's ``GRPOTrainer`` (transformers ``generate``, no vLLM) and ``python -m trainers.run
method=grpo`` alternately (clawgym, TRL, clawgym, TRL, ...), each run in its own
subprocess, and prints completions/s, generated tokens/s and peak memory for both with the
ratio clawgym / TRL: medians over ``repeats``. Writes ``runs/bench/peers_trl.json`` and
``runs/bench/peers_trl.md`` (with date and machine); each run's log and files sit under
``runs/bench/peers_trl/``.

**The peer's venv.** TRL runs in ``.venv-peers``, built on first use (and rebuilt only when
:data:`TRL_PINS` change): TRL at a pinned release, with torch, transformers, peft and
accelerate pinned to what the project's ``.venv`` runs, so both sides share one stack.
``torch==2.13.0`` resolves to the local CPU wheel; vLLM is not installed.

**The task.** The chat env (``clawgym/Chat-v0``, persona ``student``, one reply per
episode, ``partial_credit=True``): single-turn, and its reward is a pure function of the
reply (``2 * fraction of the hidden preferences met - 1``; partial credit so that fewer
groups tie, since clawgym skips equal-return groups and TRL does not). TRL gets the same
prompts in the same order: the tasks clawgym's ``Trainer._jobs`` draws for each step,
rendered by clawgym's own chat-template code (``agents.chat_format.render_prompt``), passed
as text so TRL tokenizes exactly those tokens. Its reward function resets the same env on
the same task and steps it with the reply parsed as clawgym parses it, so both sides are
scored by the same code.

**Same work per step.** ``batch`` prompts x ``group`` completions per step, generated in
one batch on both sides (clawgym ``parallel = batch * group``); completions of at most
``max_new_tokens`` at the env's rollout temperature (0.6), top-p 1; LoRA with clawgym's
defaults (r 16, alpha 32, all linear layers, no dropout) on the float32 model (``dtype``:
on a GPU ``bfloat16`` runs each side's own bfloat16 mode instead: the base model loaded in
bfloat16 on both, clawgym's LoRA, log-probs and loss in float32, TRL's ``bf16=True``
autocast with peft's float32 adapter); one
optimizer step per batch (clawgym ``epochs=1 minibatch_size=0``, TRL ``num_iterations=1``
and no gradient accumulation); the same AdamW settings, clip range (0.2 / 0.28), loss
aggregation (per-sample mean, then batch mean: TRL ``loss_type=grpo``), group-std
advantage scaling, no KL, cut completions trained on; no eval (clawgym ``eval_tasks=0``),
no checkpoint until the last step, no gradient checkpointing and, at ``dtype=float32``, no
bfloat16 autocast (TRL turns both on by default; clawgym uses neither). Both processes get the same torch thread
count and OpenMP wait policy (``omp_wait``: ``PASSIVE`` unless told otherwise).

**What is timed.** Each side's own per-step wall time, summed over the ``steps`` steps
(model load, venv build and process start are excluded): clawgym's ``perf/step_s``
(rollout + reward + update + pushing the weights to its sampler), TRL's time from its
``on_step_begin`` to ``on_step_end`` callbacks (generation, reward, loss, backward,
optimizer). Completions/s = completions / that time; "after step 1" is the same rate
without each side's first step, which holds the warm-up (on a GPU, clawgym's CUDA-graph
compile: tens of seconds); tokens/s counts generated tokens, EOS included. Peak memory is
each subprocess's own max RSS (``os.wait4``), model load included; on a GPU also torch's
``max_memory_allocated`` on each side.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-peers"
PEERS = ("trl",)
TRL_VERSION = "1.16.0"
TRL_PINS = (f"trl=={TRL_VERSION}", "torch==2.13.0", "transformers==5.23.0", "peft==0.21.2",
            "accelerate==1.15.0", "tokenizers==0.23.3", "safetensors==0.8.0", "gymnasium==1.4.0",
            "PyYAML==6.0.3", "numpy==2.4.6")
"""What ``.venv-peers`` holds; torch..numpy as in the project's ``.venv`` (``pip freeze``).
TRL 1.16.0 needs transformers>=4.56.2, accelerate>=1.10.1, peft>=0.13.0: all met."""
ENV_ID = "chat"
OMP_WAITS = ("passive", "active", "default")
ENV_KWARGS = {"persona": "student", "partial_credit": True}


@dataclass
class PeerSettings:
    """The benchmark's keys; everything else is clawgym's default on both sides."""

    steps: int = 3
    """Optimizer steps per run (one batch each)."""
    repeats: int = 2
    """Runs per side; figures are medians over them."""
    batch: int = 2
    """Prompts per step."""
    group: int = 4
    """Completions per prompt (GRPO group size; TRL num_generations)."""
    max_new_tokens: int = 64
    """Completion limit (TRL max_completion_length)."""
    device: str = "auto"
    """auto (the first CUDA GPU when torch sees one, else cpu), cpu or cuda[:N]."""
    dtype: str = "float32"
    """The base model's precision on both sides: ``float32`` or ``bfloat16`` (a GPU's usual
    mode: clawgym ``dtype=bfloat16``, TRL ``bf16=True`` on a bfloat16 model)."""
    seed: int = 0
    """Seeds both trainers and the task draw."""
    out: str = "runs/bench"
    """Where peers_trl.json / .md and the per-run folders go."""
    omp_wait: str = "passive"
    """OpenMP's wait policy: ``passive`` or ``active`` (``OMP_WAIT_POLICY`` set so in both
    processes: idle threads sleep, fair to whatever else runs on a shared machine, or spin),
    or ``default`` (the variable unset: each side's own default, which for clawgym is
    ``PASSIVE``, set by ``trainers.run`` for itself, and for TRL libgomp's short spin)."""
    python: str = ""
    """The interpreter TRL runs in; empty: ``.venv-peers``, built on first use. Name one that
    already holds TRL (and datasets) on a machine with no package registry, e.g. a GPU box
    with the wheels carried in on ``PYTHONPATH``."""

    def __post_init__(self) -> None:
        from trainers.config import ConfigError

        for name in ("steps", "repeats", "batch", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group < 2:
            raise ConfigError(f"group must be >= 2 (a GRPO group of one has no baseline), got {self.group}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"dtype={self.dtype!r}: choose float32 or bfloat16")
        if self.omp_wait not in OMP_WAITS:
            raise ConfigError(f"omp_wait={self.omp_wait!r}: choose one of {', '.join(OMP_WAITS)}")
        if self.batch * self.group > 32:
            raise ConfigError(f"batch * group = {self.batch * self.group} exceeds 32, the policy's generation "
                              "batch: clawgym would generate in several batches and TRL in one; lower batch or group")


def parse_args(argv: list[str]) -> tuple[str, PeerSettings]:
    """``["trl", "steps=3", ...]`` -> ("trl", settings); a ConfigError says what is wrong."""
    from trainers.config import ConfigError, apply_overrides

    if not argv or argv[0] not in PEERS:
        raise ConfigError(f"name the peer first: python -m benchmarks.peers {'|'.join(PEERS)} [key=value ...]")
    return argv[0], apply_overrides(PeerSettings(), argv[1:])


# ---- the equal-settings mapping ------------------------------------------------------------
def clawgym_overrides(settings: PeerSettings, out: str) -> list[str]:
    """``trainers.run`` keys for one clawgym run doing the benchmark's work."""
    from envs.chat.env import PersonalChatEnv

    n = settings.batch * settings.group
    return ([f"env={ENV_ID}", "method=grpo", "reward=env", f"steps={settings.steps}",
             f"batch_size={settings.batch}", f"group_size={settings.group}", f"parallel={n}",
             f"max_new_tokens={settings.max_new_tokens}", f"temperature={PersonalChatEnv.rollout_temperature}",
             "epochs=1", "minibatch_size=0", "train_cut=true", "eval_tasks=0", f"save_every={settings.steps}",
             "progress=false", f"device={settings.device}", f"dtype={settings.dtype}", f"seed={settings.seed}",
             f"out={out}"]
            + [f"env_kwargs.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in ENV_KWARGS.items()])


def clawgym_config(settings: PeerSettings) -> Any:
    """The TrainConfig those overrides make: the one source the TRL side is mapped from."""
    from trainers.config import TrainConfig, apply_overrides

    return apply_overrides(TrainConfig(), clawgym_overrides(settings, out="unused"))


def trl_grpo_kwargs(config: Any, output_dir: str) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments equal to clawgym's ``TrainConfig`` ``config``."""
    device, _ = config.placement()
    return {
        "output_dir": output_dir, "max_steps": config.steps, "seed": config.seed,
        # one generation batch = batch_size prompts x group_size, one optimizer step on it
        "per_device_train_batch_size": config.batch_size * config.group_size,
        "gradient_accumulation_steps": 1, "steps_per_generation": 1, "num_iterations": config.epochs,
        "num_generations": config.group_size, "max_completion_length": config.max_new_tokens,
        "temperature": config.temperature, "top_p": 1.0, "top_k": 0,
        "learning_rate": config.lr, "lr_scheduler_type": "constant", "warmup_steps": 0,
        "weight_decay": config.weight_decay, "adam_beta1": config.adam_beta1, "adam_beta2": config.adam_beta2,
        "max_grad_norm": config.grad_clip, "epsilon": config.eps_low, "epsilon_high": config.eps_high,
        "beta": config.kl_beta, "loss_type": "grpo", "scale_rewards": "group" if config.normalize_std else "none",
        "mask_truncated_completions": not config.train_cut, "shuffle_dataset": False,
        "bf16": config.dtype == "bfloat16", "fp16": False, "gradient_checkpointing": False,
        "use_cpu": device == "cpu",
        "logging_steps": 1, "save_strategy": "no", "report_to": "none", "disable_tqdm": True,
    }


def trl_lora_kwargs(config: Any) -> dict[str, Any]:
    """peft ``LoraConfig`` keyword arguments equal to clawgym's ``lora.*``."""
    lora = config.lora
    targets: Any = lora.targets if lora.targets == "all-linear" else [t.strip() for t in lora.targets.split(",")]
    return {"r": lora.rank, "lora_alpha": lora.alpha, "target_modules": targets,
            "lora_dropout": lora.dropout, "task_type": "CAUSAL_LM"}


def step_tasks(config: Any, train_tasks: list[str]) -> list[list[str]]:
    """Each step's ``batch_size`` tasks, drawn as ``trainers.loop.Trainer._jobs`` draws them."""
    import numpy as np

    out = []
    for step in range(1, config.steps + 1):
        rng = np.random.default_rng([config.seed, step])
        n = config.batch_size
        out.append([str(t) for t in rng.choice(train_tasks, size=n, replace=len(train_tasks) < n)])
    return out


def trl_rows(config: Any) -> list[dict[str, str]]:
    """TRL's dataset: one row per (step, task) in step order, the prompt rendered by
    clawgym's chat-template code from the env's opening messages."""
    import envs
    from transformers import AutoTokenizer

    from agents.chat_format import render_prompt
    from agents.model_cache import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(config.model))
    env = envs.make(ENV_ID, **config.env_kwargs).unwrapped
    rows = []
    for tasks in step_tasks(config, env.task_ids()):
        for task in tasks:
            messages, _ = env.reset(options={"task_id": task})
            prompt = render_prompt(tokenizer, messages, None)  # as TransformersPolicy.encode renders it
            rows.append({"prompt": prompt, "task_id": task,
                         "prompt_ids": json.dumps(tokenizer(prompt, add_special_tokens=False)["input_ids"])})
    env.close()
    return rows


# ---- the TRL side (runs inside .venv-peers) --------------------------------------------------
def trl_worker(spec_path: Path) -> None:
    """Train with TRL's GRPOTrainer as ``spec_path`` says; write the per-step record beside it."""
    import torch

    torch.set_num_threads(int(os.environ.get("PEERS_THREADS", torch.get_num_threads())))
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import envs
    from envs.messages import parse_text_action

    spec = json.loads(spec_path.read_text())
    torch.manual_seed(spec["grpo"]["seed"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    dtype = torch.bfloat16 if spec["grpo"]["bf16"] else torch.float32  # bf16: TRL's autocast on a bfloat16 model
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=dtype)
    rows = spec["rows"]
    # TRL tokenizes text prompts itself: check that it gets clawgym's exact prompt tokens
    ids_match = all(tokenizer(r["prompt"])["input_ids"] == json.loads(r["prompt_ids"]) for r in rows)
    env = envs.make(ENV_ID, **spec["env_kwargs"]).unwrapped
    record: dict[str, Any] = {"steps": [], "prompt_ids_match": ids_match, "generate_s": []}

    def chat_reward(prompts: list[str], completions: list[str], completion_ids: list[list[int]],
                    task_id: list[str], **_: Any) -> list[float]:
        rewards = []
        for text, task in zip(completions, task_id):
            env.reset(options={"task_id": task})
            _, reward, *_ = env.step(parse_text_action(text.strip()))
            rewards.append(float(reward))
        record["steps"].append({"completions": len(completions), "tokens": sum(map(len, completion_ids)),
                                "reward_mean": statistics.fmean(rewards),
                                "cut": sum(len(c) >= spec["grpo"]["max_completion_length"] for c in completion_ids)})
        return rewards

    class StepTimer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            record["steps"][-1]["step_s"] = time.perf_counter() - self.started

    trainer = GRPOTrainer(model=model, reward_funcs=chat_reward, args=GRPOConfig(**spec["grpo"]),
                          train_dataset=Dataset.from_list([{"prompt": r["prompt"], "task_id": r["task_id"]}
                                                           for r in rows]),
                          processing_class=tokenizer, peft_config=LoraConfig(**spec["lora"]),
                          callbacks=[StepTimer()])
    generate = trainer._generate_single_turn  # timed to split TRL's step into generation and the rest

    def timed_generate(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            record["generate_s"].append(time.perf_counter() - started)

    trainer._generate_single_turn = timed_generate
    trainer.train()
    if torch.cuda.is_available():
        record["gpu_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    (spec_path.parent / "trl_steps.json").write_text(json.dumps(record, indent=1))


# ---- the venv --------------------------------------------------------------------------------
def ensure_venv(venv: Path = VENV) -> Path:
    """``.venv-peers`` with :data:`TRL_PINS`, built once (idempotent); returns its python."""
    python = venv / "bin" / "python"
    stamp = venv / "clawgym-pins.txt"
    wanted = "\n".join(TRL_PINS) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"building {venv.name} ({', '.join(TRL_PINS[:3])}, ...): a few minutes, once", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *TRL_PINS])
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.peers: pip could not install {' '.join(TRL_PINS)} into {venv}; "
                         "read pip's message above (torch==2.13.0 must come from the local CPU wheels)")
    stamp.write_text(wanted)
    return python


# ---- running and reading one side -----------------------------------------------------------
def run_env(threads: int, omp_wait: str) -> dict[str, str]:
    """The environment both sides run in: the same threads and OpenMP wait policy."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update({"PEERS_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)})
    if omp_wait != "default":
        env["OMP_WAIT_POLICY"] = omp_wait.upper()
    return env


def _run(cmd: list[str], log: Path, env: dict[str, str]) -> tuple[int, float, float]:
    """Run ``cmd`` at the repo root; return its exit status, its own peak RSS in MiB and
    the CPU seconds it used (user + system, startup included)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime  # ru_maxrss: KiB


def read_clawgym(run_dir: Path) -> dict[str, Any]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m for m in lines if m.get("step", 0) >= 1]
    return {"step_s": [m["perf/step_s"] for m in steps],
            "rollout_s": [m["perf/rollout_s"] for m in steps], "train_s": [m["perf/train_s"] for m in steps],
            "generate_s": [m.get("perf/rollout_generate_s", 0.0) for m in steps],
            "env_s": [m.get("perf/rollout_env_s", 0.0) for m in steps],
            "push_s": [m.get("perf/push_s", 0.0) for m in steps], "free_s": [m.get("perf/free_s", 0.0) for m in steps],
            "completions": [m["rollout/turns"] for m in steps],
            "tokens": [m["rollout/completion_tokens"] * m["rollout/turns"] for m in steps],
            "reward_mean": [m["reward/env_return"] for m in steps],
            "cut": [m["rollout/cut_completions"] for m in steps],
            "trained_samples": [m.get("samples/count", 0.0) for m in steps],
            "gpu_peak_mib": max((m.get("perf/gpu_peak_mib", 0.0) for m in steps), default=0.0)}


def read_trl(run_dir: Path) -> dict[str, Any]:
    record = json.loads((run_dir / "trl_steps.json").read_text())
    steps = record["steps"]
    return {"step_s": [s["step_s"] for s in steps], "rollout_s": record["generate_s"],
            "train_s": [s["step_s"] - g for s, g in zip(steps, record["generate_s"])],
            "completions": [s["completions"] for s in steps], "tokens": [s["tokens"] for s in steps],
            "reward_mean": [s["reward_mean"] for s in steps], "cut": [s["cut"] for s in steps],
            "trained_samples": [s["completions"] for s in steps], "prompt_ids_match": record["prompt_ids_match"],
            "gpu_peak_mib": record.get("gpu_peak_mib", 0.0)}


def throughput(run: dict[str, Any], peak_mib: float, cpu_s: float = 0.0) -> dict[str, Any]:
    """One run's figures: per-second rates over its timed steps, peak RSS, process CPU time
    (a check that leans less on how busy the shared machine was than wall time)."""
    seconds = sum(run["step_s"])
    later = slice(1, None) if len(run["step_s"]) > 1 else slice(None)  # without step 1's warm-up (compiling)
    return {**run, "seconds": seconds, "completions_per_s": sum(run["completions"]) / seconds,
            "tokens_per_s": sum(run["tokens"]) / seconds, "peak_rss_mib": peak_mib, "process_cpu_s": cpu_s,
            "later_completions_per_s": sum(run["completions"][later]) / sum(run["step_s"][later])}


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Medians over repeats per side, and clawgym / TRL."""
    keys = ("completions_per_s", "tokens_per_s", "peak_rss_mib", "seconds", "process_cpu_s", "gpu_peak_mib",
            "later_completions_per_s")
    out = {side: {k: statistics.median(r.get(k, 0.0) for r in rs) for k in keys} for side, rs in runs.items()}
    out["ratio"] = {k: out["clawgym"][k] / out["trl"][k] if out["trl"][k] else 0.0 for k in keys}
    return out


def markdown(summary: dict[str, dict[str, float]], meta: dict[str, Any]) -> str:
    s = meta["settings"]
    gpu = bool(summary["clawgym"].get("gpu_peak_mib"))  # torch's max_memory_allocated, both sides
    lines = [f"`{meta['command']}` on {meta['date']}, {meta['machine']} ({meta['device']}, "
             f"{meta['threads']} torch threads); {s['batch']} prompts x {s['group']} completions x "
             f"<= {s['max_new_tokens']} tokens per step, {s['steps']} steps, medians of {s['repeats']} runs each "
             "(alternating):", "",
             "| trainer | completions/s | after step 1 | generated tokens/s | peak RSS MiB | s for all steps | "
             "process CPU s |" + (" peak GPU MiB |" if gpu else ""),
             "|---|---|---|---|---|---|---|" + ("---|" if gpu else "")]
    names = {"clawgym": "clawgym `trainers.run method=grpo`", "trl": f"TRL {TRL_VERSION} `GRPOTrainer` (no vLLM)",
             "ratio": "clawgym / TRL"}
    for side in ("clawgym", "trl", "ratio"):
        row = summary[side]
        fmt = ".2f" if side == "ratio" else ".3f"
        lines.append(f"| {names[side]} | {row['completions_per_s']:{fmt}} | {row['later_completions_per_s']:{fmt}} | "
                     f"{row['tokens_per_s']:.2f} | "
                     f"{row['peak_rss_mib']:{'.2f' if side == 'ratio' else '.0f'}} | {row['seconds']:.2f} | "
                     f"{row['process_cpu_s']:.2f} |"
                     + (f" {row['gpu_peak_mib']:{'.2f' if side == 'ratio' else '.0f'}} |" if gpu else ""))
    return "\n".join(lines) + "\n"


def _machine() -> str:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model or platform.processor() or platform.machine()}, {os.cpu_count()} cores, {platform.system()}"


def compare_trl(settings: PeerSettings, argv: list[str]) -> dict[str, Any]:
    import torch

    from agents.model_cache import resolve_model_dir
    from trainers.config import to_dict

    python = Path(settings.python) if settings.python else ensure_venv()
    config = clawgym_config(settings)
    device, _ = config.placement()
    threads = max(1, min(torch.get_num_threads(), os.cpu_count() or 1))
    base = Path(settings.out) / "peers_trl"
    spec = {"model_dir": str(resolve_model_dir(config.model)), "env_kwargs": config.env_kwargs,
            "lora": trl_lora_kwargs(config), "rows": trl_rows(config)}
    runs: dict[str, list[dict[str, Any]]] = {"clawgym": [], "trl": []}
    for repeat in range(settings.repeats):
        for side in ("clawgym", "trl"):
            run_dir = (base / f"{side}-{repeat}").resolve()
            if run_dir.exists():  # a clawgym run dir would resume instead of training
                import shutil

                shutil.rmtree(run_dir)
            run_dir.mkdir(parents=True)
            if side == "clawgym":
                cmd = [sys.executable, "-m", "trainers.run", *clawgym_overrides(settings, str(run_dir))]
            else:
                spec_path = run_dir / "spec.json"
                spec_path.write_text(json.dumps({**spec, "grpo": trl_grpo_kwargs(config, str(run_dir / "trl"))}))
                cmd = [str(python), "-m", "benchmarks.peers", "_trl_worker", str(spec_path)]
            print(f"[{repeat + 1}/{settings.repeats}] {side} ...", end=" ", flush=True)
            status, peak, cpu_s = _run(cmd, run_dir / "log.txt", run_env(threads, settings.omp_wait))
            if status != 0:
                tail = "\n".join((run_dir / "log.txt").read_text().splitlines()[-15:])
                raise SystemExit(f"benchmarks.peers: the {side} run failed (exit {status}); its log "
                                 f"{run_dir / 'log.txt'} ends:\n{tail}")
            result = throughput((read_clawgym if side == "clawgym" else read_trl)(run_dir), peak, cpu_s)
            runs[side].append(result)
            print(f"{result['completions_per_s']:.3f} completions/s, {result['tokens_per_s']:.1f} tokens/s, "
                  f"peak {peak:.0f} MiB", flush=True)
    summary = summarize(runs)
    meta = {"command": "python -m benchmarks.peers " + " ".join(argv), "date": time.strftime("%Y-%m-%d %H:%M UTC",
            time.gmtime()), "machine": _machine(), "device": device, "threads": threads,
            "settings": dataclasses.asdict(settings), "pins": list(TRL_PINS), "env": ENV_ID, "env_kwargs": ENV_KWARGS,
            "clawgym_config": to_dict(config), "trl_grpo_config": trl_grpo_kwargs(config, "<run dir>/trl"),
            "trl_lora": spec["lora"]}
    result = {"meta": meta, "summary": summary, "runs": runs}
    out = Path(settings.out)
    (out / "peers_trl.json").write_text(json.dumps(result, indent=1))
    table = markdown(summary, meta)
    (out / "peers_trl.md").write_text(table)
    print("\n" + table)
    r = summary["ratio"]
    print(f"done: clawgym / TRL = {r['completions_per_s']:.2f}x completions/s at {r['peak_rss_mib']:.2f}x peak memory; "
          f"{out / 'peers_trl.json'}")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_trl_worker"]:
        trl_worker(Path(argv[1]))
        return 0
    if any(a in ("-h", "--help", "help") for a in argv):
        print(__doc__)
        return 0
    from trainers.config import ConfigError

    try:
        peer, settings = parse_args(argv)
        clawgym_config(settings)  # a device this machine lacks fails here, before the venv is built
    except ConfigError as exc:
        print(f"benchmarks.peers: {exc}", file=sys.stderr)
        return 2
    if settings.omp_wait != "default":
        os.environ.setdefault("OMP_WAIT_POLICY", settings.omp_wait.upper())
    if peer == "trl":
        compare_trl(settings, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
