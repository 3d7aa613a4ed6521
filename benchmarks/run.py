"""Task success of a policy on a suite: ``python -m benchmarks.run suite=terminal [key=value ...]``.

Examples::

    python -m benchmarks.run suite=terminal                          # default model, held-out split
    python -m benchmarks.run suite=terminal model=runs/terminal-grpo-20250101-120000
    python -m benchmarks.run suite=intercode split=all tasks=5 max_new_tokens=256
    python -m benchmarks.run suite=chat policy=openai api_base=http://127.0.0.1:30000/v1  # trainers.serve
    python -m benchmarks.run suite=bfcl policy=openai api_base=https://api.openai.com/v1 \\
        api_key=OPENAI_API_KEY model=gpt-4o-mini
    python -m benchmarks.run suite=toolmath episodes_per_task=4 temperature=0.7 out=runs/eval/tm  # pass@4, pass^4
    python -m benchmarks.run suite=all tasks=20 out=runs/eval/all-default      # every suite, resumable
    python -m benchmarks.run suite=swe policy=oracle                           # the ground truth: must score 100%

With ``policy=local`` (the default) ``model`` is ``default`` (SmolLM2-135M-Instruct), a
transformers model directory, a trainer's run directory (its latest checkpoint) or one
checkpoint directory (``<run>/checkpoints/step_0000k``): the checkpoint's LoRA weights are
loaded onto the base model named in the run's config.yaml. With ``policy=openai`` the
model is whatever an OpenAI-compatible chat-completions API at ``api_base`` serves under
the name ``model`` (a hosted model, vLLM, ``python -m trainers.serve``), asked through
:class:`agents.openai_policy.OpenAIPolicy`; ``api_key`` is best the *name* of an
environment variable holding the key, and results never contain the key itself.
``dry_run=true`` prints the first request and sends nothing. With ``policy=oracle`` no model
plays: each family's own ground-truth agent does, through the env's tools, in in-process
envs (:mod:`envs.oracle`: the reference solution, the gold patch, the MiniWoB
scripts, the ground-truth calls); a suite without one (chat) is refused.

Each task of the split is played ``episodes_per_task`` times (default once), greedily by
default, through a vector env (``trainers.rollout.collect``); episode ``e`` of the ``i``-th
task is seeded ``seed + i + 1000003 e``, so the same seed plays the same episodes. Writes
``results.json``, ``results.md`` (a per-episode table and a summary line: the success rate
with its 95% Wilson interval over the episodes that ran, env errors counted apart, the mean
return with a bootstrap 95% interval, mean turns, and with several episodes per task pass@k
and pass^k, :mod:`benchmarks.stats`), ``results.png`` (success per category, or per task,
with Wilson error bars) and ``transcripts.jsonl`` (each episode's replies) under ``out``
(default ``runs/eval/<suite>-<split>-<model>-<time>``); a suite whose env returns a patch
(swe) also writes ``predictions.jsonl`` (``instance_id, model_name_or_path, model_patch``),
which SWE-bench's harness grades with ``--predictions_path``.

Episodes are appended to ``<out>/episodes.jsonl`` wave by wave (:mod:`benchmarks.episode_log`):
run the same command again with the same ``out=`` after a crash and only the missing
episodes are played; a folder holding another run's episodes is refused, naming the keys that
differ. ``suite=all`` (:mod:`benchmarks.suite_all`) runs every suite (or those of
``suites=``) into ``<out>/<suite>/`` with one model load, and writes ``summary.md``,
``summary.json`` and ``summary.png`` (a row per suite; a suite this machine cannot run, e.g.
without a sandbox backend, is a row with its error, and the exit code is 1). ``python -m benchmarks.compare <run dir> ...`` puts several runs side by side.

A suite is a name for an env and its arguments (:data:`SUITES`); another env plugs in by
adding a line there.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see trainers.run

import dataclasses  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from benchmarks.episode_log import FINGERPRINT_KEYS, EpisodeLog  # noqa: E402
from agents.engines.base import EngineSettings  # noqa: E402
from trainers.config import ConfigError, apply_overrides, config_help, resolve_placement  # noqa: E402

if TYPE_CHECKING:
    from agents.policy import Policy
    from trainers.rollout import Episode


@dataclass(frozen=True)
class Suite:
    env: str
    """An env alias or id."""
    kwargs: dict[str, Any]
    description: str
    split: str = "heldout"
    """The split evaluated when ``split=`` is not given (a leaderboard's own, e.g. BFCL's all)."""
    toolcall: str | None = None
    """A tool-call suite name: its rows are summarized the way its leaderboard reports them."""


def _toolcall_suites() -> dict[str, Suite]:
    from envs.toolcall.benchmark import BENCHMARK_SUITES

    return {name: Suite(spec.env, dict(spec.kwargs), spec.description, spec.split, toolcall=name)
            for name, spec in BENCHMARK_SUITES.items()}


SUITES: dict[str, Suite] = {
    "terminal": Suite("terminal", {"suite": "clawgym"}, "clawgym's shell tasks (files, text, git, sqlite, ...)"),
    "intercode": Suite("terminal", {"suite": "intercode"}, "InterCode's bash tasks, graded against their gold commands"),
    "chat": Suite("chat", {}, "personal chat: does the first reply meet every hidden preference"),
    "swe": Suite("swe", {}, "SWE: real PyPI projects with injected bugs, resolved as SWE-bench grades"),
    "miniwob": Suite("gui", {"suite": "miniwob"},
                     "MiniWoB++'s default subset in a real Chromium (held-out split: unseen page seeds)"),
    **_toolcall_suites(),
}


POLICIES = ("local", "openai", "oracle")
PICKS = ("first", "spread")
"""How ``tasks=N`` chooses its N tasks."""


@dataclass
class EvalConfig:
    suite: str = "terminal"
    """A key of SUITES, or all: every suite (or those of suites=) into out/<suite>/, with summary.md, .json, .png."""
    policy: str = "local"
    """Who plays: local (a transformers model run here), openai (an OpenAI-compatible
    chat-completions API: api_base=, api_key=, model=) or oracle (the suite's ground truth
    replayed through the env, envs.oracle; no model, sampling keys ignored; miniwob only
    on tasks with an oracle, its default subset, and any other task named is an error)."""
    model: str = "default"
    """What plays: with policy=local default, a transformers model dir, a trainer run dir or a
    checkpoint dir; with policy=openai the model name the API serves (python -m trainers.serve
    answers to default too); policy=oracle takes none."""
    api_base: str = ""
    """policy=openai: the API's base URL, e.g. https://api.openai.com/v1 or http://127.0.0.1:30000/v1."""
    api_key: str = ""
    """policy=openai: the name of an environment variable holding the key (e.g. OPENAI_API_KEY) or
    the key itself, empty for none; results record only the name (or <redacted>)."""
    concurrency: int = 8
    """policy=openai: requests in flight at once (one per env at most, so parallel= caps it too)."""
    timeout_s: float = 120.0
    """policy=openai: seconds a request may take before it counts as failed (and is retried)."""
    max_retries: int = 5
    """policy=openai: retries of a request after a timeout, a refused connection, HTTP 408, 409,
    429 or 5xx, waiting 0.5 s doubling each time (jittered, at most 30 s) or the server's
    Retry-After; then the run stops with exit code 2."""
    dry_run: bool = False
    """policy=openai: print the first request (messages, tools, sampling) and exit without sending anything."""
    device: str = "auto"
    """policy=local: where the model runs: auto (the first CUDA GPU when torch sees one, else cpu),
    cpu, cuda or cuda:N."""
    dtype: str = "auto"
    """policy=local: the model's precision: auto (bfloat16 on a GPU that has it, else float32),
    float32 or bfloat16."""
    split: str = ""
    """The env's split argument (train, heldout, all); empty: the suite's own (heldout, or
    all for BFCL, whose leaderboard numbers use every question)."""
    tasks: int = 0
    """Evaluate only N tasks of the split (0: all), chosen by pick=."""
    pick: str = "first"
    """Which N tasks=N takes: first (the split's first N) or spread (N evenly spaced through
    the split, which is sorted by category where the suite has them, so each category is
    sampled in proportion: bfcl's categories, tau2's domains)."""
    parallel: int = 8
    """Envs stepped at once (policy=oracle: envs played at once, each in its own thread)."""
    sandbox: str = ""
    """Sandbox backend for envs that take one; empty: the env's default (auto)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """More env arguments: env_kwargs.max_turns=10."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""
    max_new_tokens: int = 256
    """Completion limit of each turn."""
    max_context: int = 0
    """policy=local: tokens of prompt plus reply the model may hold (0: the model's own limit,
    8192 for the default); a longer prompt gets an empty reply (finish_reason "context")."""
    seed: int = 0
    """Seeds the envs' tasks and sampling (episode e of the i-th task: seed + i + 1000003 e)."""
    episodes_per_task: int = 1
    """Episodes played per task, each with its own seed; above 1 the summary adds pass@k and
    pass^k for k = this (unbiased estimators over each task's scored episodes)."""
    out: str = ""
    """Results folder (empty: runs/eval/<suite>-<split>-<model>-<time>); one whose episodes.jsonl has the
    same settings resumes that run, playing only the missing episodes."""
    suites: str = ""
    """suite=all only: the suites to run, comma-separated (empty: every suite), each into out/<suite>/."""
    engine: EngineSettings = field(default_factory=EngineSettings)

    def __post_init__(self) -> None:
        if self.suite not in SUITES and self.suite != "all":
            raise ConfigError(f"suite={self.suite!r} is unknown; choose one of: {', '.join(SUITES)}, "
                              "or all (every suite)")
        unknown = [name for name in self.suite_names() if name not in SUITES]
        if unknown:
            raise ConfigError(f"suites= names {', '.join(unknown)}, not a suite; choose from: {', '.join(SUITES)}")
        if self.suites and self.suite != "all":
            raise ConfigError("suites= applies only to suite=all; drop it or pass suite=all")
        if self.dry_run and self.suite == "all":
            raise ConfigError("dry_run=true shows one suite's first request; pass suite=<name>, not all")
        if self.episodes_per_task < 1:
            raise ConfigError(f"episodes_per_task={self.episodes_per_task} must be >= 1 (1: each task once)")
        if self.policy not in POLICIES:
            raise ConfigError(f"policy={self.policy!r} is not allowed; choose one of: {', '.join(POLICIES)}")
        if self.parallel < 1 or self.max_new_tokens < 1 or self.tasks < 0 or self.max_context < 0:
            raise ConfigError("parallel and max_new_tokens must be >= 1, tasks and max_context >= 0")
        if self.pick not in PICKS:
            raise ConfigError(f"pick={self.pick!r} is not allowed; choose one of: {', '.join(PICKS)}")
        if self.engine.kind != "hf" and self.policy != "local":
            raise ConfigError(f"engine={self.engine.kind} serves policy=local's model; drop it for policy={self.policy}")
        if self.policy == "openai":
            self._check_api()
            return
        stray = [f"{key}=" for key in ("api_base", "api_key", "dry_run") if getattr(self, key)]
        if stray:
            raise ConfigError(f"{', '.join(stray)} {'applies' if len(stray) == 1 else 'apply'} only to "
                              "policy=openai; add policy=openai or drop them")
        if self.policy == "oracle":
            self._check_oracle()
            return
        resolve_placement(self.device, self.dtype)  # a device this machine lacks fails before anything loads

    def suite_names(self) -> list[str]:
        """The suites this config runs: ``suite``, or with ``suite=all`` those of ``suites=`` (all when empty)."""
        if self.suite != "all":
            return [self.suite]
        return [name.strip() for name in self.suites.split(",") if name.strip()] or list(SUITES)

    def _check_oracle(self) -> None:
        from benchmarks.oracle import family_oracle, suites_with_oracle

        if self.model != "default":
            raise ConfigError(f"model={self.model!r} does not apply to policy=oracle, which replays each task's "
                              "ground truth and loads no model; drop model=")
        if self.suite != "all":
            family_oracle(self.suite, SUITES)
            return
        have = suites_with_oracle(SUITES)
        lacking = [name for name in self.suite_names() if name not in have] if self.suites else []
        if lacking:
            raise ConfigError(f"suites= names {', '.join(lacking)}, which {'has' if len(lacking) == 1 else 'have'} "
                              f"no oracle; policy=oracle runs on {', '.join(have)} (leave suites= empty to run "
                              "those and skip the rest)")

    def _check_api(self) -> None:
        from agents.openai_policy import resolve_api_key

        if not self.api_base:
            raise ConfigError("policy=openai needs api_base=<the API's base URL>, e.g. https://api.openai.com/v1, "
                              "or http://127.0.0.1:30000/v1 for python -m trainers.serve")
        if not self.api_base.startswith(("http://", "https://")):
            raise ConfigError(f"api_base={self.api_base!r} must be an http:// or https:// URL, "
                              "e.g. https://api.openai.com/v1")
        if self.concurrency < 1 or self.max_retries < 0 or not self.timeout_s > 0:
            raise ConfigError("concurrency must be >= 1, max_retries >= 0 and timeout_s > 0")
        try:
            resolve_api_key(self.api_key)  # an unset variable fails here, before any env starts
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def load_policy(model: str, seed: int, device: str = "cpu", dtype: str = "float32",
                max_context: int = 0) -> tuple[Any, str]:
    """A TransformersPolicy for ``model`` on ``device`` in ``dtype`` holding ``max_context`` tokens (0: the
    model's own limit), and a short label naming what was loaded."""
    from agents.adapters import LoraSettings
    from agents.policy import TransformersPolicy

    path = Path(model).expanduser()
    if not (path / "weights.safetensors").exists() and not (path / "checkpoints").is_dir():
        return (TransformersPolicy(model, device=device, dtype=dtype, seed=seed, max_context=max_context),
                "default" if model == "default" else path.name)
    from trainers.rundir import find_checkpoint

    run, checkpoint, config = find_checkpoint(model)
    lora = LoraSettings(**config.get("lora", {}))
    policy = TransformersPolicy(config.get("model", "default"), lora, device=device, dtype=dtype, seed=seed,
                                max_context=max_context)
    weights, state = run.load_weights(checkpoint)
    policy.load_trainable_state(weights, version=int(state.get("step", 0)))
    return policy, f"{run.path.name}-{checkpoint.name}"


def _task_rows(episodes: list[Any], probe: Any) -> list[dict[str, Any]]:
    rows = []
    for episode in episodes:
        last = episode.turns[-1].metrics if episode.turns else {}
        first = episode.turns[0].metrics if episode.turns else {}
        if probe.headline_metric:
            success = first.get(probe.headline_metric, 0.0)
        else:
            success = last.get("solved", float(episode.env_return > 0))
        task = probe.task(episode.task_id) if hasattr(probe, "task") else None
        rows.append({"task_id": episode.task_id,
                     "category": getattr(task, "category", ""),
                     "difficulty": getattr(task, "difficulty", ""),
                     "success": float(success) if episode.error is None else None,
                     "return": episode.env_return, "turns": len(episode.turns),
                     "stop_reason": episode.stop_reason, "error": episode.error})
    return rows


def make_policy(config: EvalConfig) -> tuple[Policy, str, EvalConfig]:
    """The policy ``config`` asks for, a short label naming it, and the config as it ran
    (``device``/``dtype`` resolved for a local model)."""
    if config.policy == "oracle":
        from benchmarks.oracle import OraclePlayer

        return OraclePlayer(), "oracle", config
    if config.policy == "openai":
        from agents.openai_policy import OpenAIPolicy

        policy = OpenAIPolicy(config.api_base, config.model, config.api_key, concurrency=config.concurrency,
                              timeout_s=config.timeout_s, max_retries=config.max_retries)
        return policy, re.sub(r"[^\w.-]+", "_", config.model).strip("_") or "model", config
    device, dtype = resolve_placement(config.device, config.dtype)
    config = dataclasses.replace(config, device=device, dtype=dtype)  # results.json records what ran
    policy, label = load_policy(config.model, config.seed, device, dtype, config.max_context)
    if config.engine.kind != "hf":  # the same weights (a checkpoint's adapter included), sampled on a server
        from agents.engines import with_engine

        policy = with_engine(policy, config.engine, seed=config.seed)
    return policy, label, config


def _suite_env(config: EvalConfig, **overrides: Any) -> tuple[EvalConfig, dict[str, Any], Any, list[str]]:
    """The config with its split settled, the env's arguments, one env to ask about tasks,
    and the task ids to play."""
    import envs

    suite = SUITES[config.suite]
    config = dataclasses.replace(config, split=config.split or suite.split)
    kwargs = {**suite.kwargs, **config.env_kwargs, **overrides}
    if config.sandbox:
        kwargs["sandbox"] = config.sandbox
    probe = envs.make(suite.env, **kwargs, split=config.split).unwrapped
    task_ids = pick_tasks(probe.task_ids(), config.tasks, config.pick)
    if not task_ids:
        probe.close()
        raise ConfigError(f"suite={config.suite} split={config.split} has no tasks")
    return config, kwargs, probe, task_ids


def summarize_rows(rows: list[dict[str, Any]], k: int = 1, seed: int = 0) -> dict[str, Any]:
    """Success over the episodes that ran, with its 95% Wilson interval; env errors (``success``
    None) are neither successes nor failures and are counted apart. The mean return gets a
    bootstrap 95% interval (whole tasks resampled, seeded by ``seed``). ``k`` > 1 adds pass@k
    and pass^k, where an episode counts as solved at ``success >= 1``; a task with fewer than
    ``k`` scored episodes is left out of both and named in ``pass_k.short``."""
    from benchmarks.stats import bootstrap_interval, pass_at_k, pass_hat_k, wilson_interval

    scored = [r for r in rows if r["success"] is not None]
    solved = sum(r["success"] for r in scored)
    per_task = _per_task(rows)
    summary = {"tasks": len(per_task), "episodes": len(rows), "scored": len(scored),
               "errors": len(rows) - len(scored), "solved": solved,
               "success_rate": solved / len(scored) if scored else 0.0,
               "success_ci95": list(wilson_interval(solved, len(scored))),
               "mean_return": sum(r["return"] for r in scored) / len(scored) if scored else 0.0,
               "mean_return_ci95": list(bootstrap_interval([t["returns"] for t in per_task.values()], seed)),
               "mean_turns": sum(r["turns"] for r in scored) / len(scored) if scored else 0.0}
    if k > 1:
        counted = {t: c for t, c in per_task.items() if c["scored"] >= k}
        summary["pass_k"] = {
            "k": k, "tasks": len(counted), "short": [t for t in per_task if t not in counted],
            "pass_at_k": _mean([pass_at_k(c["scored"], c["solved"], k) for c in counted.values()]),
            "pass_hat_k": _mean([pass_hat_k(c["scored"], c["solved"], k) for c in counted.values()])}
    return summary


def _per_task(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each task's scored episodes, full successes (``success >= 1``), errors and scored returns."""
    tasks: dict[str, dict[str, Any]] = {}
    for r in rows:
        cell = tasks.setdefault(r["task_id"], {"scored": 0, "solved": 0, "errors": 0, "returns": []})
        if r["success"] is None:
            cell["errors"] += 1
        else:
            cell["scored"] += 1
            cell["solved"] += int(r["success"] >= 1)
            cell["returns"].append(r["return"])
    return tasks


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _transcript(episode: Episode, index: int) -> dict[str, Any]:
    return {"task_id": episode.task_id, "episode": index, "error": episode.error,
            "turns": [{"reply": t.completion.message, "finish_reason": t.completion.finish_reason,
                       "next_state": t.next_state} for t in episode.turns]}


def episode_seed(seed: int, task_index: int, episode: int) -> int:
    """The env seed of episode ``episode`` of the split's ``task_index``-th task. Episode 0
    keeps ``seed + task_index``, what a one-episode run has always used; each further
    episode moves by a prime larger than any split, so no two (task, episode) pairs share one."""
    return seed + task_index + 1_000_003 * episode


def evaluate(config: EvalConfig, out: Path | None = None,
             player: tuple[Policy, str, EvalConfig] | None = None) -> dict[str, Any]:
    """Play every (task, episode) of ``config`` that ``out``'s episode log lacks, appending
    each wave to it, and summarize them all. ``out`` None: the default folder, named once
    the model's label is known. ``player``: a policy already loaded (``make_policy``'s answer)."""
    suite = SUITES[config.suite]
    from benchmarks.oracle import check_tasks, env_overrides
    from envs.toolcall.users import bind_user

    oracle = config.policy == "oracle"
    bound = False
    overrides = env_overrides(suite.kwargs, config.env_kwargs) if oracle else {}
    config, kwargs, probe, task_ids = _suite_env(config, **overrides)
    try:
        if oracle:
            check_tasks(config.suite, SUITES, task_ids)
        log = EpisodeLog(out, fingerprint(config)) if out is not None else None  # refused before the model loads
        policy, label, ran = player or make_policy(config)
        config = dataclasses.replace(config, device=ran.device, dtype=ran.dtype)
        if log is None:
            out = default_out(config, label)
            log = EpisodeLog(out, fingerprint(config))
        if suite.toolcall == "tau2" and not oracle:  # the simulated user is the evaluated model unless told otherwise
            from agents.policy_user import PolicyUser

            bind_user(PolicyUser(policy, max_new_tokens=config.max_new_tokens))
            bound = True
        started = time.perf_counter()
        jobs = [(i, e) for e in range(config.episodes_per_task) for i in range(len(task_ids))]
        pending = [n for n, (i, e) in enumerate(jobs) if (task_ids[i], e) not in log.done]
        _play(config, kwargs, probe, task_ids, jobs, pending, policy, label, log)
        records = [log.done[(task_ids[i], e)] for i, e in jobs]
    finally:
        probe.close()
        if bound:  # the process's next env must not find this run's model playing its users
            bind_user(None)
    from agents.openai_policy import key_record

    rows = [r["row"] for r in records]
    summary = {"suite": config.suite, "split": config.split, "policy": config.policy, "model": config.model,
               "label": label, **summarize_rows(rows, config.episodes_per_task, config.seed),
               "episodes_played": len(pending), "episodes_resumed": len(jobs) - len(pending),
               "seconds": time.perf_counter() - started}
    if getattr(policy, "adaptations", None):  # settings the endpoint refused (e.g. its temperature)
        summary["adaptations"] = list(policy.adaptations)
    if suite.toolcall is not None:
        from envs.toolcall.benchmark import summarize

        summary["leaderboard"] = summarize(suite.toolcall, rows)
    recorded = {**dataclasses.asdict(config), "out": str(out), "api_key": key_record(config.api_key)}  # never the key
    return {"config": recorded, "summary": summary, "tasks": rows,
            "predictions": [r["prediction"] for r in records if r.get("prediction")],
            "transcripts": [r["transcript"] for r in records]}


def _play(config: EvalConfig, kwargs: dict[str, Any], probe: Any, task_ids: list[str], jobs: list[tuple[int, int]],
          pending: list[int], policy: Policy, label: str, log: EpisodeLog) -> None:
    """Play the ``pending`` positions of ``jobs`` wave by wave, appending each wave to ``log``.
    Each wave reseeds the local model's sampling from its first job's position, so a resumed
    run samples what the killed run would have whenever its waves are the same jobs."""
    if not pending:
        return
    if config.policy == "oracle":
        _play_oracle(config, kwargs, probe, task_ids, jobs, pending, label, log)
        return
    import envs
    from agents.policy import SamplingParams

    from trainers.progress import EpisodeProgress
    from trainers.rollout import Job, collect

    suite = SUITES[config.suite]
    sampling = SamplingParams(config.temperature, max_new_tokens=config.max_new_tokens)
    with envs.make_vec(suite.env, min(config.parallel, len(pending)),
                       env_kwargs={**kwargs, "split": config.split}) as vec, \
            EpisodeProgress(f"{config.suite}/{config.split} {label}", len(jobs),
                            initial=len(jobs) - len(pending)) as progress:
        for start in range(0, len(pending), vec.num_envs):
            wave = [Job(n, task_ids[jobs[n][0]], seed=episode_seed(config.seed, *jobs[n]))
                    for n in pending[start:start + vec.num_envs]]
            if hasattr(policy, "reseed"):
                policy.reseed(wave[0].group * 1_000)
            episodes = collect(vec, policy, wave, sampling, max_turns=probe.eval_max_turns, progress=progress)
            log.append([_record(e, jobs[e.group], config.seed, task_ids, probe, label) for e in episodes])


def _play_oracle(config: EvalConfig, kwargs: dict[str, Any], probe: Any, task_ids: list[str],
                 jobs: list[tuple[int, int]], pending: list[int], label: str, log: EpisodeLog) -> None:
    """``_play`` for policy=oracle: ``parallel`` in-process envs (:func:`trainers.oracle_rollout.play_episodes`),
    each episode appended to ``log`` as it ends."""
    from tqdm import tqdm

    from trainers.oracle_rollout import play_episodes
    from trainers.rollout import Job

    todo = [Job(n, task_ids[jobs[n][0]], seed=episode_seed(config.seed, *jobs[n])) for n in pending]
    with tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc=f"{config.suite}/{config.split} {label}",
              unit="episode") as bar:
        for episode, note in play_episodes(SUITES[config.suite].env, {**kwargs, "split": config.split}, todo,
                                           config.parallel):
            if note:  # the oracle's own failure, or a miniwob reward that differs from MiniWoB's
                bar.write(f"benchmarks.run: {episode.task_id}: {note}")
            log.append([_record(episode, jobs[episode.group], config.seed, task_ids, probe, label)])
            bar.update(1)


def _record(episode: Episode, job: tuple[int, int], seed: int, task_ids: list[str], probe: Any,
            label: str) -> dict[str, Any]:
    """One line of the episode log: the job it answers, its row, transcript and SWE prediction."""
    task_index, index = job
    row = {**_task_rows([episode], probe)[0], "episode": index, "seed": episode_seed(seed, *job)}
    patch = episode.final_info.get("model_patch")
    prediction = ({"instance_id": episode.task_id, "model_name_or_path": label, "model_patch": patch}
                  if isinstance(patch, str) else None)
    return {"task_id": task_ids[task_index], "episode": index, "row": row,
            "transcript": _transcript(episode, index), "prediction": prediction}


def pick_tasks(task_ids: list[str], n: int, pick: str) -> list[str]:
    """``n`` of ``task_ids`` (all of them for 0): the first ``n``, or with ``pick="spread"``
    ``n`` evenly spaced through the list, in its order."""
    from trainers.loop import spread

    if not n or n >= len(task_ids):
        return list(task_ids)
    return spread(task_ids, n) if pick == "spread" else task_ids[:n]


def fingerprint(config: EvalConfig) -> dict[str, Any]:
    """The settings ``out``'s episode log must agree on to be resumed (:data:`FINGERPRINT_KEYS`)."""
    return {key: getattr(config, key) for key in FINGERPRINT_KEYS}


def default_out(config: EvalConfig, label: str) -> Path:
    """``runs/eval/<suite>-<split>-<label>-<time>``: a fresh folder, so a default run never resumes another."""
    return Path(f"runs/eval/{config.suite}-{config.split}-{label}-{time.strftime('%Y%m%d-%H%M%S')}")


def dry_run(config: EvalConfig) -> str:
    """The first request ``config`` would send, as text; nothing is sent. tau2's simulated
    user, which the evaluated model would play (and so ask first), is scripted here."""
    from agents.openai_policy import OpenAIPolicy, key_record
    from agents.policy import SamplingParams

    overrides = {"user": "scripted"} if SUITES[config.suite].toolcall == "tau2" else {}
    config, _kwargs, probe, task_ids = _suite_env(config, **overrides)
    try:
        messages, info = probe.reset(seed=config.seed, options={"task_id": task_ids[0]})
    finally:
        probe.close()
    policy = OpenAIPolicy(config.api_base, config.model, config.api_key)
    sampling = SamplingParams(config.temperature, max_new_tokens=config.max_new_tokens)
    body = policy.request_body(messages, info.get("tools") or [], sampling)
    record = key_record(config.api_key)
    key = {"": "Bearer none (no api_key=)", "<redacted>": "Bearer <redacted>"}.get(record, f"Bearer <${record}>")
    return (f"dry run: the first request of {config.suite}/{config.split} (task {task_ids[0]}, "
            f"{len(task_ids)} tasks in all), not sent:\n"
            f"POST {policy.api_base}/chat/completions\nAuthorization: {key}\n{json.dumps(body, indent=2)}")


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    several = any(r.get("episode", 0) for r in result["tasks"])
    lines = [f"### {s['suite']} ({s['split']}), model {s['label']}", "", f"{summary_line(s)}; {s['seconds']:.0f} s",
             "", f"| task |{' episode |' if several else ''} category | difficulty | solved | return | turns | stop |",
             "|---|" + "---|" * (7 if several else 6)]
    for r in result["tasks"]:
        solved = "error" if r["success"] is None else ("yes" if r["success"] >= 1 else "no")
        episode = f" {r.get('episode', 0)} |" if several else ""
        lines.append(f"| {r['task_id']} |{episode} {r['category']} | {r['difficulty']} | {solved} | {r['return']:.2f} "
                     f"| {r['turns']} | {r['stop_reason']} |")
    if "leaderboard" in s:
        from envs.toolcall.benchmark import markdown as leaderboard_markdown

        lines += ["", leaderboard_markdown(s["leaderboard"])]
    return "\n".join(lines) + "\n"


def summary_line(s: dict[str, Any]) -> str:
    """``70.0% solved (7/10, 95% CI 39.7%-89.2%), mean return 0.400 (95% CI 0.100 to 0.700), 2.5 turns;
    1 env error, not counted``, then pass@k and pass^k when several episodes ran per task."""
    errors = f"{s['errors']} env error{'' if s['errors'] == 1 else 's'}, not counted"
    if not s["scored"]:
        return f"no episode was scored; {errors}"
    low, high = s["success_ci95"]
    r_low, r_high = s["mean_return_ci95"]
    line = (f"{s['success_rate']:.1%} solved ({s['solved']:g}/{s['scored']}, 95% CI {low:.1%}-{high:.1%}), "
            f"mean return {s['mean_return']:.3f} (95% CI {r_low:.3f} to {r_high:.3f}), {s['mean_turns']:.1f} turns; "
            f"{errors}")
    if "pass_k" in s:
        p = s["pass_k"]
        line += (f"; pass@{p['k']} {p['pass_at_k']:.1%}, pass^{p['k']} {p['pass_hat_k']:.1%} "
                 f"over {p['tasks']} task{'' if p['tasks'] == 1 else 's'}")
        if p["short"]:
            line += (f" ({len(p['short'])} with fewer than {p['k']} scored episodes left out: "
                     f"{', '.join(p['short'])})")
    return line


def write_results(out: Path, result: dict[str, Any]) -> list[str]:
    """results.json, results.md, results.png, transcripts.jsonl and (swe) predictions.jsonl; their names
    (with episodes.jsonl, written as the run went)."""
    out.mkdir(parents=True, exist_ok=True)
    predictions = result.pop("predictions")
    transcripts = result.pop("transcripts")
    written = ["results.json", "results.md", "transcripts.jsonl", "episodes.jsonl"]
    if predictions:
        from envs.swe.grading import write_predictions

        write_predictions(out / "predictions.jsonl", predictions)
        written.append("predictions.jsonl")
    (out / "results.json").write_text(json.dumps(result, indent=2))
    (out / "results.md").write_text(markdown(result))
    (out / "transcripts.jsonl").write_text("".join(json.dumps(t) + "\n" for t in transcripts))
    from benchmarks.plots import plot_run

    plot_run(result, out / "results.png")
    return [*written, "results.png"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(config_help(EvalConfig, __doc__ or ""))
        print("\nSuites:", "; ".join(f"{k}: {v.description}" for k, v in SUITES.items()))
        return 0
    from trainers.preemption import Preempted, stop_on_sigterm

    try:
        with stop_on_sigterm():
            return _main(argv)
    except Preempted as stop:  # the vector envs closed on the way up: no sandbox is left running
        print(f"benchmarks.run: stopped by {stop.signal_name}; the episodes that finished are in "
              "episodes.jsonl, and the same command resumes from them", file=sys.stderr)
        return stop.code


def _main(argv: list[str]) -> int:
    from agents.openai_policy import EndpointError
    from envs.errors import EnvError

    try:
        config = apply_overrides(EvalConfig(), argv)
        if config.dry_run:
            print(dry_run(config))
            return 0
        if config.suite == "all":
            from benchmarks.suite_all import evaluate_all

            out, rows = evaluate_all(config)
            print((out / "summary.md").read_text())
            failed = [r["suite"] for r in rows if r["error"] is not None]
            print(f"{len(rows) - len(failed)} of {len(rows)} suites ran" + (f" ({', '.join(failed)} failed)"
                  if failed else "") + f"; saved summary.json, summary.md, summary.png and a folder per suite in {out}")
            return 1 if failed else 0
        result = evaluate(config, Path(config.out) if config.out else None)
    except (ConfigError, FileNotFoundError, KeyError, ValueError, EndpointError, EnvError) as exc:
        print(f"benchmarks.run: {exc}", file=sys.stderr)
        return 2
    s = result["summary"]
    out = Path(result["config"]["out"])
    written = write_results(out, result)
    print(markdown(result))
    resumed = f"; {s['episodes_resumed']} episodes resumed from episodes.jsonl" if s["episodes_resumed"] else ""
    print(f"{s['suite']}/{s['split']}, model {s['label']}: {summary_line(s)}{resumed}; "
          f"saved {', '.join(written)} in {out}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
