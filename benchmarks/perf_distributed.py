"""One rank against two on this machine: ``python -m benchmarks.perf_distributed``.

``python -m benchmarks.perf_distributed steps=5 repeats=5 batch_size=4 group_size=2 max_new_tokens=24``

Two measurements, each run in one process and under ``torchrun --nproc-per-node 2``, with
the same work and all cores either way: one rank runs torch on every core
(``OMP_NUM_THREADS`` = the cores), each of two ranks on its half of them.

- **Steps**: the same run (the chat env's friend persona, method=grpo, reward=both, cut
  replies trained, no evaluation), ``batch_size`` groups of ``group_size`` episodes a step:
  one rank steps them all at once (``parallel = batch_size * group_size``), each of two
  ranks its half. A run's first step is left out (warm-ups); the table gives medians over
  the other steps of all repeats of ``perf/step_s`` and its parts ``perf/rollout_s`` and
  ``perf/train_s`` (with two ranks, the slowest rank's), and the samples trained a step:
  ranks sample with noise of their own, so the two runs' rollouts, and so their samples,
  differ, and ``train_s`` compares unequal work.
- **Update**: hence the update alone on fixed samples: ``update_samples`` seeded samples of
  ``prompt`` + ``reply`` random tokens through ``trainers.update.train_step`` (the defaults:
  AdamW, minibatches of 8, 2 epochs), all in one process or half on each rank, timed on
  rank 0 after both ranks are ready; a warm-up call first, then ``repeats`` timed calls.

The step runs alternate (one rank, then two) within each repeat, the two update runs follow;
ratios are two ranks over one, measured in the same call. Writes runs/bench/perf_distributed.json and .md.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.args import key_values

DEFAULTS = {"steps": "5", "repeats": "5", "batch_size": "4", "group_size": "2", "max_new_tokens": "24",
            "update_samples": "16", "prompt": "120", "reply": "24", "out": "runs/bench"}
PARTS = ("perf/step_s", "perf/rollout_s", "perf/train_s", "samples/count")
ROOT = Path(__file__).resolve().parents[1]


def parse(argv: list[str]) -> dict[str, str]:
    args = key_values(argv, DEFAULTS, internal=("_update",), positive=[k for k in DEFAULTS if k != "out"])
    if int(args["steps"]) < 2 or int(args["batch_size"]) < 2:
        raise SystemExit("steps and batch_size must be >= 2: a run's first step is left out, and each rank needs a group")
    return args


def launch(ranks: int, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """``python -m <argv>`` as one process or as ``ranks`` torchrun ranks, with its threads."""
    threads = max(1, (os.cpu_count() or 1) // ranks)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(threads)}
    if ranks == 1:
        return [sys.executable, "-m", *argv], env
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
            "-m", *argv], env


def _run(ranks: int, argv: list[str]) -> None:
    command, env = launch(ranks, argv)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {ranks}-rank run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")


def steps_run(ranks: int, args: dict[str, str], out: Path) -> dict[str, list[float]]:
    """A training run's steps after the first: each part's value per step."""
    episodes = int(args["batch_size"]) * int(args["group_size"])
    shutil.rmtree(out, ignore_errors=True)
    _run(ranks, ["trainers.run", "env=chat", "env_kwargs.persona=friend", "env_kwargs.partial_credit=true",
                 "env_kwargs.patience=1", "method=grpo", "reward=both", "judge.kind=lexical", "train_cut=true",
                 "temperature=1.0", "epochs=1", "seed=5", "eval_tasks=0", "progress=false", f"steps={args['steps']}",
                 f"batch_size={args['batch_size']}", f"group_size={args['group_size']}",
                 f"max_new_tokens={args['max_new_tokens']}", f"parallel={max(1, episodes // ranks)}", f"out={out}"])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {part: [r.get(part, 0.0) for r in rows if r["step"] >= 2] for part in PARTS}


def update_run(ranks: int, args: dict[str, str], out: Path) -> list[float]:
    """The fixed-samples update's timed calls (seconds each), as rank 0 saw them."""
    spec = {k: int(args[k]) for k in ("update_samples", "prompt", "reply", "repeats")}
    _run(ranks, ["benchmarks.perf_distributed", f"_update={json.dumps({**spec, 'out': str(out)})}"])
    return json.loads(out.read_text())


def _update_child(spec: dict[str, Any]) -> None:
    """In each rank (or the one process): time train_step on its share of fixed samples."""
    import torch

    from agents.policy import TransformersPolicy
    from trainers.config import TrainConfig
    from trainers.distributed import start_ranks
    from trainers.samples import Sample
    from trainers.update import train_step, trainable_copy

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    ranks = start_ranks("cpu", 600)
    policy = TransformersPolicy("default", seed=0)
    rng, samples = random.Random(0), []
    for i in range(spec["update_samples"]):
        prompt_ids = [rng.randrange(100, 40000) for _ in range(spec["prompt"])]
        reply_ids = [rng.randrange(100, 40000) for _ in range(spec["reply"])]
        samples.append(Sample(prompt_ids, reply_ids, policy.score([prompt_ids], [reply_ids])[0],
                              [0.5 - 0.07 * i] * spec["reply"], 0, 1.0))
    mine = samples[ranks.rank::ranks.world]
    config = TrainConfig(device="cpu")
    model, optimizer = trainable_copy(policy, config)
    seconds = []
    for call in range(spec["repeats"] + 1):
        ranks.gather(0)  # both ranks ready: the clock starts together
        started = time.perf_counter()
        train_step(model, optimizer, mine, config, version=0, pad_id=policy.tokenizer.pad_token_id, ranks=ranks)
        if call:  # the first call warms up
            seconds.append(time.perf_counter() - started)
    if ranks.main:
        Path(spec["out"]).write_text(json.dumps(seconds))
    ranks.close()


def report(args: dict[str, str], steps: dict[int, dict[str, list[float]]],
           updates: dict[int, list[float]]) -> tuple[dict[str, Any], str]:
    medians = {r: {**{p: statistics.median(v) for p, v in parts.items()}, "update_s": statistics.median(updates[r])}
               for r, parts in steps.items()}
    ratio = {k: medians[2][k] / medians[1][k] if medians[1][k] else float("nan") for k in medians[1]}
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"### 1 vs 2 CPU ranks ({stamp}, {os.cpu_count()} cores, {args['repeats']} repeats)", "",
             f"Steps: chat, grpo, batch_size={args['batch_size']} x group_size={args['group_size']}, "
             f"max_new_tokens={args['max_new_tokens']}, steps 2-{args['steps']} of each run. Update: "
             f"{args['update_samples']} fixed samples of {args['prompt']} + {args['reply']} tokens, train_step defaults.",
             "", "| ranks | step_s | rollout_s | train_s | samples a step | update of fixed samples |",
             "|---|---|---|---|---|---|"]
    for r, row in medians.items():
        lines.append(f"| {r} | {row['perf/step_s']:.2f} | {row['perf/rollout_s']:.2f} | {row['perf/train_s']:.2f} | "
                     f"{row['samples/count']:.1f} | {row['update_s']:.2f} s |")
    lines.append(f"| 2 / 1 | {ratio['perf/step_s']:.2f}x | {ratio['perf/rollout_s']:.2f}x | "
                 f"{ratio['perf/train_s']:.2f}x | {ratio['samples/count']:.2f}x | {ratio['update_s']:.2f}x |")
    return {"args": args, "cores": os.cpu_count(), "medians": medians, "ratio_2_over_1": ratio,
            "steps": steps, "updates": updates}, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if "_update" in args:
        _update_child(json.loads(args["_update"]))
        return 0
    folder = Path(args["out"]) / "perf_distributed_runs"
    folder.mkdir(parents=True, exist_ok=True)
    steps: dict[int, dict[str, list[float]]] = {1: {p: [] for p in PARTS}, 2: {p: [] for p in PARTS}}
    for repeat in range(int(args["repeats"])):
        for ranks in (1, 2):
            for part, values in steps_run(ranks, args, folder / f"r{repeat}_{ranks}rank").items():
                steps[ranks][part] += values
            print(f"steps, repeat {repeat + 1}/{args['repeats']}, {ranks} rank(s): "
                  f"step_s {statistics.median(steps[ranks]['perf/step_s']):.2f} so far", file=sys.stderr)
    updates = {ranks: update_run(ranks, args, folder / f"update_{ranks}rank.json") for ranks in (1, 2)}
    data, text = report(args, steps, updates)
    (Path(args["out"]) / "perf_distributed.json").write_text(json.dumps(data, indent=1))
    (Path(args["out"]) / "perf_distributed.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
