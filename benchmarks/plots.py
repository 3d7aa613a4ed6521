"""Success rates as bar charts with 95% Wilson error bars (matplotlib, Agg: no display needed).

``results.png`` of a run (:func:`success_groups`, :func:`plot_run`) draws one bar per
category, or per task when the suite has no categories; ``benchmarks.compare`` draws several
models side by side with :func:`plot_bars`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.stats import wilson_interval

Bar = tuple[str, float, int]
"""A bar's label, its successes (a sum of per-episode success in [0, 1]) and its scored episodes."""


def success_groups(rows: list[dict[str, Any]]) -> tuple[str, list[Bar]]:
    """The run's rows grouped by category, or by task when no row has one: ``(what the groups
    are, bars)`` in first-seen order. Env errors (``success`` None) are left out."""
    key = "category" if any(r.get("category") for r in rows) else "task_id"
    groups: dict[str, list[float]] = {}
    for r in rows:
        cell = groups.setdefault(str(r.get(key) or "(none)"), [0.0, 0])
        if r["success"] is not None:
            cell[0] += r["success"]
            cell[1] += 1
    return key.replace("_id", ""), [(name, solved, int(scored)) for name, (solved, scored) in groups.items()]


def plot_bars(series: dict[str, list[Bar]], path: Path, title: str, xlabel: str) -> None:
    """Grouped bars: one group per label (the union over ``series``, in first-seen order), one
    bar per series (a model) within it, each with its 95% Wilson interval as an error bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(label for bars in series.values() for label, _, _ in bars))
    width = 0.8 / max(1, len(series))
    # a wide split (hundreds of tasks without categories) is capped at a width a screen shows
    fig, ax = plt.subplots(figsize=(min(24.0, max(6.0, 0.5 * len(labels) * max(1, len(series)) + 2)), 4.5))
    for n, (name, bars) in enumerate(series.items()):
        by_label = {label: (solved, scored) for label, solved, scored in bars}
        xs, rates, lows, highs, counts = [], [], [], [], []
        for x, label in enumerate(labels):
            if label not in by_label or not by_label[label][1]:
                continue
            solved, scored = by_label[label]
            low, high = wilson_interval(solved, scored)
            xs.append(x + (n - (len(series) - 1) / 2) * width)
            rates.append(solved / scored)
            lows.append(max(0.0, solved / scored - low))  # at 0% or 100% rounding can leave -1e-16
            highs.append(max(0.0, high - solved / scored))
            counts.append(f"{solved:g}/{scored}")
        ax.bar(xs, rates, width, yerr=[lows, highs], capsize=3, label=name)
        for x, count in zip(xs, counts):  # the counts say how much an interval rests on
            ax.annotate(count, (x, 0.0), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
    ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 4 else 0, ha="right"
                  if len(labels) > 4 else "center", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success (95% Wilson interval)")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_run(result: dict[str, Any], path: Path) -> None:
    """``results.png``: the run's success per category (or per task) with Wilson error bars."""
    s = result["summary"]
    kind, bars = success_groups(result["tasks"])
    plot_bars({s["label"]: bars}, path, f"{s['suite']} ({s['split']}), model {s['label']}", kind)
