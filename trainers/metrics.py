"""What a training step reports about its episodes: ``reward/``, ``rollout/`` and the
env's own per-turn metrics (``<prefix>/first/`` and ``<prefix>/last/``), and the progress
bar's short summary. Several ranks' metrics are merged by trainers.distributed.merge_metrics."""

from __future__ import annotations

import statistics
from collections import defaultdict

from trainers.rollout import Episode


def mean(values: list[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def rollout_metrics(episodes: list[Episode]) -> dict[str, float]:
    ok = [e for e in episodes if e.error is None]
    turns = [t for e in ok for t in e.turns]
    out = {
        "reward/env_return": mean([e.env_return for e in ok]),
        "reward/return": mean([e.reward_return for e in ok]),
        "rollout/turns_per_episode": mean([len(e.turns) for e in ok]),
        "rollout/completion_tokens": mean([len(t.completion.completion_ids) for t in turns]),
    }
    out.update(turn_metrics(ok, "rollout"))
    return out


def turn_metrics(episodes: list[Episode], prefix: str) -> dict[str, float]:
    """The env's metrics of each episode's first turn (``<prefix>/first/<k>``: the first
    reply, the chat demo's headline) and of its last (``<prefix>/last/<k>``: where an episode
    is graded, e.g. ``solved``), each averaged over the episodes whose turn reports it."""
    out: dict[str, float] = {}
    for where, index in (("first", 0), ("last", -1)):
        values: dict[str, list[float]] = defaultdict(list)
        for e in episodes:
            if e.turns:
                for k, v in e.turns[index].metrics.items():
                    values[k].append(v)
        out.update({f"{prefix}/{where}/{k}": mean(v) for k, v in values.items()})
    return out


def postfix(metrics: dict[str, float], headline_key: str) -> dict[str, str]:
    shown = {"ret": metrics.get("reward/return"), "step_s": metrics.get("perf/step_s"),
             "eval": metrics.get(headline_key)}
    return {k: f"{v:.2f}" for k, v in shown.items() if v is not None}
