"""Does it learn, over seeds? ``python -m benchmarks.learning chat seeds=4``.

Trains the default model on a suite's env once per method and seed (each run is
``python -m trainers.run`` with the CLI's defaults plus ``env=``, ``method=`` and ``seed=``)
and reports its held-out headline before training and after each update step: for
``chat`` the rate at which the FIRST reply meets every hidden preference, for
``toolmath`` the share of held-out problems solved, for ``miniwob`` the share of
held-out-seed episodes of MiniWoB's default subset solved, for ``bfcl`` the share of
held-out BFCL single-turn questions answered right by its AST checker, spread over the
categories (the default arm of these three is ``method=sft`` on the oracle's
demonstrations: the default model never calls a tool there, so RL alone has no signal).
Per method it reports the final and the peak rate as median [min-max] over seeds and the
largest drop from a seed's own peak to its end, and what the held-out replies look like
at the start and the end (median words, cut at the token limit, repeating a 4-word run,
on topic: a rate that falls with replies that shrink or loop is collapse, not a harder
split); with several personas (``env_kwargs.persona=all``) also the final rate
per persona. Writes ``learning_chat.md``, ``.json`` and a PNG with one line per seed
under ``out=`` (for chat, with the on-topic rate in a second panel).

    python -m benchmarks.learning chat seeds=4                       # combine, grpo, opd
    python -m benchmarks.learning chat seeds=4 jobs=12 device=cuda   # all runs side by side on a GPU
    python -m benchmarks.learning chat seeds=4 methods=combine,grpo env_kwargs.persona=all
    python -m benchmarks.learning chat seeds=4 arm.c1="method=combine opd_clip=1"
    python -m benchmarks.learning chat seeds=4 report=true           # tables from runs already there
    python -m benchmarks.learning toolmath seeds=3 steps=6 batch_size=16   # method=sft from the oracle
    python -m benchmarks.learning miniwob seeds=3 steps=4 batch_size=16    # the same on MiniWoB's default subset
    python -m benchmarks.learning bfcl seeds=3 steps=8 batch_size=16       # and on BFCL v4 single-turn

Keys: ``seeds`` (4; seeds 0..n-1), ``methods`` (combine,grpo,opd), ``arm.<label>`` (a named
set of trainers.run overrides, in addition to or instead of methods; ``{seed}`` in a value
becomes the run's seed, e.g. ``arm.rl="method=grpo init=runs/sft/toolmath-sft-s{seed}"``),
``jobs`` (runs at once, 1; each is its own process), ``out`` (runs/learning), ``report``
(only aggregate), ``fresh`` (delete earlier runs first). Every other ``key=value`` goes to every run. A run
folder that exists is resumed (trainers.run picks up at its last checkpoint), so a
stopped sweep continues where it was.

OpenClaw-RL reports 0.17 -> 0.76 in 8 combine steps (4B-8B model, GPUs); this measures
the same quantity with a 135M model.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LearningSuite:
    """A suite's env, the figure read back from each run, and the arms trained by default."""

    env: str
    """The env every run trains on (``env=``)."""
    headline: str
    """The metrics.jsonl key reported (held-out, evaluated greedily after every step)."""
    ylabel: str
    """What the plot's y axis says."""
    metric: str = ""
    """A first-turn metric of each eval reply, broken down per task group ("" : none)."""
    methods: str = "combine,grpo,opd"
    guard: str = ""
    """A second held-out metrics.jsonl key, plotted under the headline: one a collapsing
    policy loses while the headline may hold ("" : none)."""
    guard_label: str = ""


SUITES = {
    "chat": LearningSuite("chat", "eval/first/preference_met", "first reply meets all preferences",
                          metric="preference_met", guard="eval/first/pref/on_topic",
                          guard_label="first reply on topic"),
    "toolmath": LearningSuite("toolmath", "eval/env_return", "held-out problems solved", methods="sft"),
    "miniwob": LearningSuite("gui", "eval/env_return", "held-out episodes solved", methods="sft"),
    "bfcl": LearningSuite("bfcl", "eval/env_return", "held-out questions answered right", methods="sft"),
}
"""What ``python -m benchmarks.learning <suite>`` trains on and reads back."""
OWN_KEYS = ("seeds", "methods", "jobs", "out", "report", "fresh")
SHAPE_KEYS = ("words", "cut", "repeating", "on_topic")
"""What :func:`reply_shape` reports of an evaluation's replies, in the table's order."""


@dataclass
class Sweep:
    suite: str
    seeds: int = 4
    arms: dict[str, list[str]] = field(default_factory=dict)
    jobs: int = 1
    out: Path = Path("runs/learning")
    report: bool = False
    fresh: bool = False
    overrides: list[str] = field(default_factory=list)


def parse(argv: list[str]) -> Sweep:
    if not argv or argv[0] in ("-h", "--help", "help"):
        raise SystemExit(__doc__)
    suite, rest = argv[0], argv[1:]
    if suite not in SUITES:
        raise SystemExit(f"benchmarks.learning: unknown suite {suite!r}; the suites are: {', '.join(SUITES)}")
    sweep = Sweep(suite)
    methods = SUITES[suite].methods
    named: dict[str, list[str]] = {}
    for item in rest:
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"benchmarks.learning: {item!r} must look like key=value (e.g. seeds=4)")
        if key.startswith("arm."):
            named[key[4:]] = shlex.split(value)
        elif key in OWN_KEYS:
            try:
                if key in ("seeds", "jobs"):
                    setattr(sweep, key, int(value))
                    if getattr(sweep, key) < 1:
                        raise ValueError
                elif key in ("report", "fresh"):
                    if value.lower() not in ("true", "false", "1", "0"):
                        raise ValueError
                    setattr(sweep, key, value.lower() in ("true", "1"))
                elif key == "out":
                    sweep.out = Path(value)
                else:
                    methods = value
            except ValueError:
                raise SystemExit(f"benchmarks.learning: {key}={value!r} is not valid "
                                 f"(seeds and jobs: integers >= 1; report and fresh: true or false)") from None
        else:
            sweep.overrides.append(item)
    sweep.arms = {m: [f"method={m}"] for m in methods.split(",") if m} if methods else {}
    if named and "methods" not in {i.partition("=")[0] for i in rest}:
        sweep.arms = {}  # named arms alone, unless methods= was also given
    sweep.arms.update(named)
    if not sweep.arms:
        raise SystemExit("benchmarks.learning: nothing to run; give methods= or arm.<label>=")
    return sweep


def run_dir(sweep: Sweep, label: str, seed: int) -> Path:
    return sweep.out / f"{sweep.suite}-{label}-s{seed}"


def run_argv(sweep: Sweep, label: str, seed: int) -> list[str]:
    """The trainers.run arguments of one run: the suite's env, the sweep's overrides, the arm's
    (``{seed}`` filled in), its seed and folder."""
    given = [a.replace("{seed}", str(seed)) for a in (*sweep.overrides, *sweep.arms[label])]
    return [f"env={SUITES[sweep.suite].env}", *given, f"seed={seed}", f"out={run_dir(sweep, label, seed)}",
            "progress=false"]


def train(sweep: Sweep, label: str, seed: int) -> int:
    """One trainers.run in its own process, its output in the run folder's ``log.txt``."""
    path = run_dir(sweep, label, seed)
    path.mkdir(parents=True, exist_ok=True)
    argv = run_argv(sweep, label, seed)
    with (path / "log.txt").open("a") as log:
        log.write(f"$ python -m trainers.run {shlex.join(argv)}\n")
        log.flush()
        return subprocess.run([sys.executable, "-m", "trainers.run", *argv], stdout=log,
                              stderr=subprocess.STDOUT, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}).returncode


def read_run(path: Path, suite: LearningSuite = SUITES["chat"]) -> dict[str, Any] | None:
    """A run folder's curve, step times, device and final per-task-group rates; None if absent."""
    from trainers.rundir import RunDir

    run = RunDir(path)
    rows = run.metrics()
    curve = [(int(r["step"]), float(r[suite.headline])) for r in rows if suite.headline in r]
    if not curve:
        return None
    guard = [(int(r["step"]), float(r[suite.guard])) for r in rows if suite.guard and suite.guard in r]
    config = run.load_config() or {}
    step_s = [float(r["perf/step_s"]) for r in rows if "perf/step_s" in r]
    last = curve[-1][0]
    groups: dict[str, list[float]] = defaultdict(list)
    replies = run.replies()
    for reply in replies:
        if (suite.metric and reply["step"] == last and not reply.get("error")
                and suite.metric in reply.get("metrics", {})):
            groups[str(reply["task_id"]).split("/")[0]].append(float(reply["metrics"][suite.metric]))
    first = curve[0][0]
    return {"curve": curve, "guard_curve": guard, "median_step_s": statistics.median(step_s) if step_s else None,
            "device": config.get("device", "?"), "dtype": config.get("dtype", "?"),
            "steps": int(config.get("steps", 0)), "per_group": {g: statistics.fmean(v) for g, v in groups.items()},
            "shape": {"start": reply_shape([r for r in replies if r["step"] == first]),
                      "final": reply_shape([r for r in replies if r["step"] == last])},
            "adv": {k: [r.get(k) for r in rows[1:]] for k in ("adv/opd_abs", "adv/rl_abs", "adv/opd_clipped")}}


def repeats_a_run(text: str, n: int = 4, times: int = 3) -> bool:
    """Whether some run of ``n`` words occurs ``times`` times or more in ``text`` (case and
    punctuation ignored): the loops a collapsing policy writes ("The user is a helpful
    personal assistant." over and over)."""
    words = ["".join(ch for ch in w.lower() if ch.isalnum()) for w in text.split()]
    words = [w for w in words if w]
    counts: dict[tuple[str, ...], int] = defaultdict(int)
    for i in range(len(words) - n + 1):
        counts[tuple(words[i:i + n])] += 1
    return any(c >= times for c in counts.values())


def reply_shape(replies: list[dict[str, Any]]) -> dict[str, float]:
    """What one evaluation's replies look like, to tell learning from collapse: the median
    length in words, and the fractions cut at the token limit, repeating a 4-word run three
    times or more (:func:`repeats_a_run`) and on topic (the chat env's ``pref/on_topic``,
    where the suite has it)."""
    replies = [r for r in replies if not r.get("error")]
    if not replies:
        return {}
    shape = {"words": float(statistics.median(len(str(r.get("reply", "")).split()) for r in replies)),
             "cut": statistics.fmean(r.get("finish_reason") == "length" for r in replies),
             "repeating": statistics.fmean(repeats_a_run(str(r.get("reply", ""))) for r in replies)}
    on_topic = [float(r["metrics"]["pref/on_topic"]) for r in replies if "pref/on_topic" in r.get("metrics", {})]
    if on_topic:
        shape["on_topic"] = statistics.fmean(on_topic)
    return shape


def summarize(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def aggregate(sweep: Sweep) -> dict[str, Any]:
    arms: dict[str, Any] = {}
    for label in sweep.arms:
        runs = {seed: r for seed in range(sweep.seeds)
                if (r := read_run(run_dir(sweep, label, seed), SUITES[sweep.suite]))}
        complete = {s: r for s, r in runs.items() if r["curve"][-1][0] >= r["steps"] > 0}
        finals = [r["curve"][-1][1] for r in complete.values()]
        peaks = [max(v for _, v in r["curve"]) for r in complete.values()]
        groups = sorted({g for r in complete.values() for g in r["per_group"]})
        arms[label] = {
            "overrides": sweep.arms[label], "seeds_done": sorted(complete), "seeds_started": sorted(runs),
            "start": [r["curve"][0][1] for r in complete.values()], "final": finals, "peak": peaks,
            "drop": [p - f for p, f in zip(peaks, finals)],
            "median_step_s": statistics.median([r["median_step_s"] for r in complete.values() if r["median_step_s"]] or [0]),
            "per_group": {g: [r["per_group"][g] for r in complete.values() if g in r["per_group"]] for g in groups},
            "shape": {when: {k: [r["shape"][when][k] for r in complete.values() if k in r["shape"][when]]
                             for k in SHAPE_KEYS} for when in ("start", "final")},
            "runs": {str(s): r for s, r in runs.items()},
        }
    return arms


def table(arms: dict[str, Any]) -> str:
    lines = ["| method | seeds | step 0 | final, median [min-max] | peak | largest drop from own peak | median step |",
             "|---|---|---|---|---|---|---|"]
    for label, a in arms.items():
        lines.append(f"| {label} | {len(a['seeds_done'])} | {summarize(a['start'])} | **{summarize(a['final'])}** | "
                     f"{summarize(a['peak'])} | {max(a['drop'], default=0):.2f} | {a['median_step_s']:.0f} s |")
    seeds = sorted({int(s) for a in arms.values() for s in a["runs"]})
    lines += ["", "| method | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|" + "---|" * len(seeds)]
    for label, a in arms.items():
        cells = []
        for s in seeds:
            r = a["runs"].get(str(s))
            cells.append(" ".join(f"{v:.2f}" for _, v in r["curve"]) if r else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if any(a["shape"]["final"]["words"] for a in arms.values()):
        lines += ["", "| method, held-out replies: start -> final (median [min-max] over seeds) | words | cut | "
                  "repeating a 4-word run 3+ times | on topic |", "|---|---|---|---|---|"]
        for label, a in arms.items():
            cells = [f"{summarize(a['shape']['start'][k], d)} -> {summarize(a['shape']['final'][k], d)}"
                     if a["shape"]["final"][k] else "-" for k, d in zip(SHAPE_KEYS, (0, 2, 2, 2))]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if any(len(a["per_group"]) > 1 for a in arms.values()):
        groups = sorted({g for a in arms.values() for g in a["per_group"]})
        lines += ["", "| method | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
        for label, a in arms.items():
            lines.append(f"| {label} | " + " | ".join(summarize(a["per_group"].get(g, [])) for g in groups) + " |")
    return "\n".join(lines)


def legend_label(label: str, overrides: list[str]) -> str:
    """An arm's name, with what it overrides unless it is just ``method=<name>``; overrides
    naming a seed's own path (``{seed}``) are left out, the line wrapped at 60 characters."""
    shown = [o for o in overrides if "{seed}" not in o]
    if shown in ([], [f"method={label}"]):
        return label
    return "\n".join(textwrap.wrap(f"{label}: {' '.join(shown)}", 60))


def plot(arms: dict[str, Any], path: Path, title: str, ylabel: str = SUITES["chat"].ylabel,
         guard_label: str = "") -> None:
    """One line per seed and a thick median per arm; beneath it, when the runs logged one,
    the suite's guard metric the same way (a rate that holds while replies fall off topic is
    collapse, not learning)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = [("curve", ylabel)]
    if guard_label and any(r.get("guard_curve") for a in arms.values() for r in a["runs"].values()):
        panels.append(("guard_curve", guard_label))
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.0, 4.0 + 2.6 * (len(panels) - 1)), sharex=True,
                             squeeze=False, height_ratios=[1.5, 1][:len(panels)])
    for ax, (key, label_y) in zip(axes[:, 0], panels):
        for i, (label, a) in enumerate(arms.items()):
            color = f"C{i}"
            curves = [r[key] for r in a["runs"].values() if r.get(key)]
            for curve in curves:
                ax.plot([c[0] for c in curve], [c[1] for c in curve], color=color, alpha=0.35, linewidth=1)
            steps = sorted({c[0] for curve in curves for c in curve})
            median = [statistics.median([v for curve in curves for s, v in curve if s == step]) for step in steps]
            ax.plot(steps, median, color=color, linewidth=2.5, marker="o",
                    label=f"{legend_label(label, a.get('overrides', []))} (median of {len(curves)})")
        ax.set_ylabel(label_y)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("update step")
    axes[-1, 0].xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[0, 0].set_title(title, fontsize=9)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    sweep = parse(list(sys.argv[1:] if argv is None else argv))
    sweep.out.mkdir(parents=True, exist_ok=True)
    jobs = [(label, seed) for seed in range(sweep.seeds) for label in sweep.arms]
    if not sweep.report:
        if sweep.fresh:
            for label, seed in jobs:
                shutil.rmtree(run_dir(sweep, label, seed), ignore_errors=True)
        started = time.perf_counter()
        with ThreadPoolExecutor(sweep.jobs) as pool:
            codes = list(pool.map(lambda job: train(sweep, *job), jobs))
        failed = [f"{label} seed {seed} (see {run_dir(sweep, label, seed) / 'log.txt'})"
                  for (label, seed), code in zip(jobs, codes) if code != 0]
        print(f"{len(jobs)} runs in {(time.perf_counter() - started) / 60:.1f} min"
              + (f"; failed: {', '.join(failed)}" if failed else ""))
    arms = aggregate(sweep)
    text = table(arms)
    print(text)
    any_run = next((r for a in arms.values() for r in a["runs"].values()), None)
    where = f"{any_run['device']}, {any_run['dtype']}" if any_run else "no runs"
    suite = SUITES[sweep.suite]
    plot(arms, sweep.out / f"learning_{sweep.suite}.png",
         f"{sweep.suite}: {suite.ylabel}, SmolLM2-135M ({where}); thin: seeds, thick: median\n"
         + textwrap.fill(' '.join(sweep.overrides) or 'trainers.run defaults', 95), suite.ylabel, suite.guard_label)
    (sweep.out / f"learning_{sweep.suite}.md").write_text(text + "\n")
    (sweep.out / f"learning_{sweep.suite}.json").write_text(json.dumps(arms, indent=1))
    print(f"saved {sweep.out / f'learning_{sweep.suite}.png'}")
    return 1 if not sweep.report and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
