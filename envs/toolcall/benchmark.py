"""What a benchmark runner needs for the tool-call suites: their settings, the summary each
leaderboard reports, the oracle (``model=oracle``) that replays the ground truth, and the
fairness check that plays it beside an idle agent (``python -m envs.toolcall check``).

``benchmarks.run`` plays each task and collects one row per episode
(``{"task_id", "category", "success", ...}``); :func:`summarize` turns those rows into the
suite's own numbers:

- ``bfcl`` / ``bfcl_multi``: accuracy per BFCL category and BFCL's leaderboard groups
  (:func:`envs.toolcall.scores.bfcl_groups`; rows from both suites may be summarized together
  to get ``multi_turn`` and ``overall``);
- ``tau2``: pass^k per domain and over all tasks for k up to the trials per task
  (rows repeat a task id once per trial);
- ``toolmath``: accuracy per problem kind and overall.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from envs.toolcall.scores import bfcl_groups, category_accuracy, pass_hat_ks


@dataclass(frozen=True)
class BenchmarkSuite:
    env: str
    """The env alias."""
    split: str
    """The split a leaderboard number uses."""
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)


BENCHMARK_SUITES = {
    "bfcl": BenchmarkSuite("bfcl", "all", "BFCL v4 single-turn, per-category accuracy (AST)"),
    "bfcl_multi": BenchmarkSuite("bfcl-multi", "all", "BFCL v4 multi-turn on executable backends"),
    "tau2": BenchmarkSuite("tau2", "heldout", "tau2-bench airline+retail test split, pass^k",
                           {"user": "policy"}),
    "toolmath": BenchmarkSuite("toolmath", "heldout", "toolmath held-out problems with a python tool"),
}


def summarize(suite: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The suite's headline numbers from per-episode rows (``success`` None: an env error,
    counted as a failure, as the leaderboards count a crashed run)."""
    scored = [(r["category"], float(r["success"] or 0.0)) for r in rows]
    if suite in ("bfcl", "bfcl_multi"):
        groups = bfcl_groups(category_accuracy(scored))
        headline = next((groups[k][0] for k in ("overall", "non_live", "live", "multi_turn")
                         if k in groups), _mean([s for _, s in scored]))
        return {"suite": suite, "headline": headline, "accuracy": _table(groups)}
    if suite == "tau2":
        trials: dict[str, list[float]] = defaultdict(list)
        for row in rows:
            trials[row["task_id"]].append(float(row["success"] or 0.0))
        by_domain: dict[str, dict[str, list[float]]] = defaultdict(dict)
        for task_id, rewards in trials.items():
            by_domain[task_id.partition("_")[0]][task_id] = rewards
        overall = pass_hat_ks(trials)
        return {"suite": suite, "headline": overall.get(1, 0.0),
                "pass_hat_k": {"all": overall, **{d: pass_hat_ks(t) for d, t in by_domain.items()}},
                "trials": min((len(r) for r in trials.values()), default=0)}
    accuracy = category_accuracy(scored)
    accuracy["all"] = (_mean([s for _, s in scored]), len(scored))
    return {"suite": suite, "headline": accuracy["all"][0], "accuracy": _table(accuracy)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _table(accuracy: dict[str, tuple[float, int]]) -> dict[str, dict[str, float]]:
    return {k: {"accuracy": a, "count": n} for k, (a, n) in accuracy.items()}


def markdown(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table."""
    if "pass_hat_k" in summary:
        ks = sorted(summary["pass_hat_k"]["all"])
        lines = ["| domain | " + " | ".join(f"pass^{k}" for k in ks) + " |",
                 "|---|" + "---|" * len(ks)]
        for domain, values in summary["pass_hat_k"].items():
            lines.append(f"| {domain} | " + " | ".join(f"{values.get(k, 0.0):.1%}" for k in ks) + " |")
        return "\n".join(lines) + "\n"
    lines = ["| category | accuracy | questions |", "|---|---|---|"]
    for name, cell in summary["accuracy"].items():
        lines.append(f"| {name} | {cell['accuracy']:.2%} | {cell['count']} |")
    return "\n".join(lines) + "\n"


def _scripted_env(suite: str, split: str | None, env_kwargs: dict[str, Any]) -> Any:
    """The suite's env for scripted agents: tau2's user is ``scripted`` unless given (a
    script needs no model)."""
    import envs

    spec = BENCHMARK_SUITES[suite]
    kwargs = {**spec.kwargs, **env_kwargs}
    if suite == "tau2":
        kwargs["user"] = env_kwargs.get("user", "scripted")
    return envs.make(spec.env, split=split or spec.split, **kwargs).unwrapped


def oracle_rows(suite: str, split: str | None = None, tasks: int = 0,
                **env_kwargs: Any) -> list[dict[str, Any]]:
    """Play every task of ``suite`` (the first ``tasks`` if > 0) with the oracle; rows in
    ``benchmarks.run``'s shape (tau2's user: ``scripted`` unless given)."""
    from envs.toolcall.oracle import play

    env = _scripted_env(suite, split, env_kwargs)
    rows = []
    try:
        for task_id in env.task_ids()[: tasks or None]:
            result = play(env, task_id)
            task = env.task(task_id)
            rows.append({"task_id": task_id, "category": task.category, "difficulty": task.difficulty,
                         "success": float(result.info.get("metrics", {}).get("solved", result.reward >= 1)),
                         "return": result.reward, "turns": result.turns,
                         "stop_reason": result.stop_reason, "error": result.info.get("error")})
    finally:
        env.close()
    return rows


def check_rows(suite: str, split: str | None = None, tasks: int = 0,
               **env_kwargs: Any) -> list[dict[str, Any]]:
    """Play every task of ``suite`` with the oracle and with the idle agent; a row per task
    with both outcomes and ``problem``: None when the task is fair (the oracle solves it;
    the idle agent fails it, or passes it where declining is the answer and only there),
    else what is wrong. tau2's user is ``scripted`` unless given."""
    from envs.toolcall.oracle import declining_is_the_answer, idle, play

    env = _scripted_env(suite, split, env_kwargs)
    rows = []
    try:
        for task_id in env.task_ids()[: tasks or None]:
            solved = [float(r.info.get("metrics", {}).get("solved", r.reward >= 1))
                      for r in (play(env, task_id), play(env, task_id, agent_for=idle))]
            declining = declining_is_the_answer(env, task_id)
            problem = None
            if solved[0] < 1:
                problem = "the oracle fails"
            elif solved[1] >= 1 and not declining:
                problem = "an idle agent passes"
            elif solved[1] < 1 and declining:
                problem = "declining is the answer, yet an idle agent fails"
            rows.append({"task_id": task_id, "category": env.task(task_id).category, "oracle": solved[0],
                         "idle": solved[1], "declining_is_the_answer": declining, "problem": problem})
    finally:
        env.close()
    return rows


def check_markdown(rows: list[dict[str, Any]]) -> str:
    """Per category: tasks, oracle solved, idle solved (of which declining is the answer), unfair."""
    lines = ["| category | tasks | oracle solves | idle passes | declining is the answer | unfair |",
             "|---|---|---|---|---|---|"]
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row)
    for name, group in [*sorted(by_category.items()), ("all", rows)]:
        lines.append(f"| {name} | {len(group)} | {sum(r['oracle'] >= 1 for r in group)} | "
                     f"{sum(r['idle'] >= 1 for r in group)} | {sum(r['declining_is_the_answer'] for r in group)} | "
                     f"{sum(r['problem'] is not None for r in group)} |")
    return "\n".join(lines) + "\n"
