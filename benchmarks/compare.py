"""Several evaluation runs side by side: ``python -m benchmarks.compare <run dir> [<run dir> ...] [--out DIR]``.

A run dir is a folder ``benchmarks.run`` wrote: one suite's (``results.json``) or a
``suite=all`` one (a folder per suite). Prints a Markdown table per suite: each run's
success rate with its 95% Wilson interval, and its difference to the first run with a 95%
interval for that difference; when the runs share categories, a per-category table follows.
Writes the tables as ``compare.md`` and the models side by side, per suite, as
``compare.png`` into ``--out`` (default: the current folder).

The difference's interval is Newcombe's hybrid score interval for two independent
proportions (:func:`benchmarks.stats.newcombe_difference`), not a paired bootstrap over
shared tasks: it needs only each run's counts, so runs on different splits, task subsets
or episode counts compare too. Where both runs played the same tasks it is conservative,
wider than a paired interval would be, since it ignores that a task hard for one model
tends to be hard for the other. Env errors are left out of both counts, as in each run's
own summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.stats import newcombe_difference, wilson_interval


@dataclass
class Run:
    name: str
    """The model's label, with the folder's name when two runs share a label."""
    suites: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each suite's results.json."""


def load_run(folder: Path) -> dict[str, dict[str, Any]]:
    """The results.json of each suite in ``folder``, keyed by suite."""
    if (folder / "results.json").is_file():
        result = json.loads((folder / "results.json").read_text())
        return {result["summary"]["suite"]: result}
    found = {}
    for path in sorted(folder.glob("*/results.json")):
        result = json.loads(path.read_text())
        found[result["summary"]["suite"]] = result
    if not found:
        raise FileNotFoundError(f"{folder} has no results.json, nor a suite folder holding one; pass a folder "
                                "python -m benchmarks.run wrote (its out=)")
    if (folder / "summary.json").is_file():  # suite=all: keep its order of suites
        order = [r["suite"] for r in json.loads((folder / "summary.json").read_text())["suites"]]
        found = {s: found[s] for s in order if s in found} | found
    return found


def load_runs(folders: list[Path]) -> list[Run]:
    loaded = [(folder, load_run(folder)) for folder in folders]
    labels = [next(iter(suites.values()))["summary"]["label"] for _, suites in loaded]
    return [Run(label if labels.count(label) == 1 else f"{label} ({folder.name})", suites)
            for label, (folder, suites) in zip(labels, loaded)]


def _counts(result: dict[str, Any]) -> tuple[float, int]:
    return result["summary"]["solved"], result["summary"]["scored"]


def _category_counts(result: dict[str, Any]) -> dict[str, tuple[float, int]]:
    counts: dict[str, list[float]] = {}
    for row in result["tasks"]:
        if row.get("category") and row["success"] is not None:
            cell = counts.setdefault(row["category"], [0.0, 0])
            cell[0] += row["success"]
            cell[1] += 1
    return {name: (solved, int(scored)) for name, (solved, scored) in counts.items()}


def _rate(solved: float, scored: int) -> str:
    if not scored:
        return "no scored episode | "
    low, high = wilson_interval(solved, scored)
    return f"{solved / scored:.1%} ({solved:g}/{scored}) | {low:.1%} to {high:.1%}"


def _difference(counts: tuple[float, int], base: tuple[float, int]) -> str:
    if not counts[1] or not base[1]:
        return "| "
    d, low, high = newcombe_difference(*counts, *base)
    return f"{d:+.1%} | {low:+.1%} to {high:+.1%}"


def _table(title: str, runs: list[Run], counts: list[tuple[float, int] | None]) -> list[str]:
    """One table: each run's rate and interval, and its difference to the first run's."""
    first = runs[0].name
    lines = [f"#### {title}", "", f"| model | success | 95% CI | vs {first} | 95% CI of the difference |",
             "|---|---|---|---|---|"]
    for n, (run, cell) in enumerate(zip(runs, counts)):
        if cell is None:
            lines.append(f"| {run.name} | not run | | | |")
            continue
        base = counts[0]
        versus = "(first) | " if n == 0 else ("| " if base is None else _difference(cell, base))
        lines.append(f"| {run.name} | {_rate(*cell)} | {versus} |")
    return lines + [""]


def markdown(runs: list[Run]) -> str:
    suites = list(dict.fromkeys(s for run in runs for s in run.suites))
    lines = [f"### {' vs '.join(run.name for run in runs)}", ""]
    for suite in suites:
        results = [run.suites.get(suite) for run in runs]
        split = next(r["summary"]["split"] for r in results if r is not None)
        lines += _table(f"{suite} ({split})", runs, [None if r is None else _counts(r) for r in results])
        present = [_category_counts(r) for r in results if r is not None]
        shared = [c for c in present[0] if all(c in other for other in present[1:])] if len(present) > 1 else []
        for category in shared if len(shared) > 1 else []:  # one category is the suite again
            lines += _table(f"{suite}: {category}", runs,
                            [None if r is None else _category_counts(r)[category] for r in results])
    return "\n".join(lines)


def plot(runs: list[Run], path: Path) -> None:
    """compare.png: per suite, each model's success with its Wilson interval, side by side."""
    from benchmarks.plots import plot_bars

    series = {run.name: [(suite, *_counts(result)) for suite, result in run.suites.items()] for run in runs}
    plot_bars(series, path, " vs ".join(run.name for run in runs), "suite")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="folders python -m benchmarks.run wrote; the first "
                                                             "is the one the others are compared to")
    parser.add_argument("--out", type=Path, default=Path("."), help="where compare.md and compare.png go")
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.runs)
    except (FileNotFoundError, json.JSONDecodeError, KeyError) as exc:
        print(f"benchmarks.compare: {exc}", file=sys.stderr)
        return 2
    text = markdown(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.md").write_text(text)
    plot(runs, args.out / "compare.png")
    print(text)
    print(f"saved compare.md and compare.png in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
