"""Step time with one rank and with two: ``python -m benchmarks.perf_distributed``.

``python -m benchmarks.perf_distributed steps=4 repeats=3 batch_size=4 group_size=2 max_new_tokens=24``

The same run (the chat env's friend persona, method=grpo, reward=both, cut replies trained,
no evaluation) in one process and under ``torchrun --nproc-per-node 2``; the comparison is
of the same work on the same machine:

- a step rolls out ``batch_size`` groups of ``group_size`` episodes either way: one rank
  steps them all at once (``parallel = batch_size * group_size``), each of two ranks its
  half (``parallel`` half that);
- all cores either way: one rank runs torch on every core (``OMP_NUM_THREADS`` = the
  cores), each of two ranks on half of them (torchrun's own default is 1 thread a rank).

Each repeat runs both, interleaved, each in fresh processes; a run's first step is left
out (first-call warm-ups), and the table gives the medians over the other steps of all
repeats of ``perf/step_s`` and its parts: ``perf/rollout_s`` (generation and env steps),
``perf/train_s`` (samples, the update, the weight push), with two ranks the slowest rank's
(distributed.merge_metrics), and the ratio to one rank's, measured in the same call.
Writes runs/bench/perf_distributed.json and .md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULTS = {"steps": "4", "repeats": "3", "batch_size": "4", "group_size": "2", "max_new_tokens": "24",
            "out": "runs/bench"}
PARTS = ("perf/step_s", "perf/rollout_s", "perf/train_s")
ROOT = Path(__file__).resolve().parents[1]


def parse(argv: list[str]) -> dict[str, str]:
    args = dict(DEFAULTS)
    for item in argv:
        key, eq, value = item.partition("=")
        if not eq or key not in DEFAULTS:
            raise SystemExit(f"unknown argument {item!r}; pass key=value with key one of: {', '.join(DEFAULTS)}")
        args[key] = value
    for key in ("steps", "repeats", "batch_size", "group_size", "max_new_tokens"):
        if not args[key].isdigit() or int(args[key]) < 1:
            raise SystemExit(f"{key} must be a positive integer, got {args[key]!r}")
    if int(args["steps"]) < 2:
        raise SystemExit("steps must be >= 2: a run's first step is left out")
    if int(args["batch_size"]) < 2:
        raise SystemExit("batch_size must be >= 2: each of two ranks needs a group")
    return args


def command(ranks: int, args: dict[str, str], out: Path) -> tuple[list[str], dict[str, str]]:
    """The trainers.run command line and environment of a run with ``ranks`` ranks."""
    episodes = int(args["batch_size"]) * int(args["group_size"])
    keys = ["env=chat", "env_kwargs.persona=friend", "env_kwargs.partial_credit=true", "env_kwargs.patience=1",
            "method=grpo", "reward=both", "judge.kind=lexical", "train_cut=true", "temperature=1.0", "epochs=1",
            "seed=5", "eval_tasks=0", "progress=false", f"steps={args['steps']}", f"batch_size={args['batch_size']}",
            f"group_size={args['group_size']}", f"max_new_tokens={args['max_new_tokens']}",
            f"parallel={max(1, episodes // ranks)}", f"out={out}"]
    threads = max(1, (os.cpu_count() or 1) // ranks)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(threads)}
    if ranks == 1:
        return [sys.executable, "-m", "trainers.run", *keys], env
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
            "-m", "trainers.run", *keys], env


def one_run(ranks: int, args: dict[str, str], out: Path) -> dict[str, Any]:
    """Run it; its steps' timings (the first step left out) and the process's wall time."""
    argv, env = command(ranks, args, out)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the {ranks}-rank run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 2]
    return {"wall_s": wall, **{part: [r[part] for r in steps] for part in PARTS},
            "samples": [r.get("samples/count", 0.0) for r in steps]}


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    folder = Path(args["out"]) / "perf_distributed_runs"
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for repeat in range(int(args["repeats"])):
        for ranks in (1, 2):
            out = folder / f"r{repeat}_{ranks}rank"
            if out.exists():
                import shutil

                shutil.rmtree(out)
            runs[ranks].append(one_run(ranks, args, out))
            print(f"repeat {repeat + 1}/{args['repeats']}, {ranks} rank(s): "
                  f"step_s {statistics.median(runs[ranks][-1]['perf/step_s']):.2f}", file=sys.stderr)
    table = {ranks: {part: statistics.median(v for run in done for v in run[part]) for part in PARTS}
             | {"wall_s": statistics.median(run["wall_s"] for run in done)} for ranks, done in runs.items()}
    report = {"args": args, "cores": os.cpu_count(), "medians": table, "runs": runs,
              "ratio_2_over_1": {k: table[2][k] / table[1][k] for k in table[1]}}
    lines = [f"# 1 vs 2 CPU ranks per step ({os.cpu_count()} cores; {args['repeats']} repeats x "
             f"{int(args['steps']) - 1} steps; batch_size={args['batch_size']} x group_size={args['group_size']}, "
             f"max_new_tokens={args['max_new_tokens']})", "",
             "| ranks | step_s | rollout_s | train_s | process wall_s |", "|---|---|---|---|---|"]
    for ranks, row in table.items():
        lines.append(f"| {ranks} | " + " | ".join(f"{row[k]:.2f}" for k in (*PARTS, "wall_s")) + " |")
    ratio = report["ratio_2_over_1"]
    lines.append("| 2 / 1 | " + " | ".join(f"{ratio[k]:.2f}x" for k in (*PARTS, "wall_s")) + " |")
    Path(args["out"]).mkdir(parents=True, exist_ok=True)
    (Path(args["out"]) / "perf_distributed.json").write_text(json.dumps(report, indent=1))
    (Path(args["out"]) / "perf_distributed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
