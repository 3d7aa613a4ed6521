"""Memory and time of one training update per memory setting: ``python -m benchmarks.perf_update``.

``python -m benchmarks.perf_update samples=4 prompt=650 reply=40 repeats=3``

One update of the default model (``trainers.update.train_step``, LoRA, the clipped RL loss)
on ``samples`` samples of ``prompt`` + ``reply`` tokens (seeded random ids: memory and
compute depend on the lengths, not on the words), under each setting below. Each
measurement is its own fresh process, so a peak is that setting's alone: the process's
``VmHWM`` is reset once the model and training copy are loaded, and the table gives the
peak resident set during the update, the update's wall time, and both as ratios to the
one-pass baseline. Repeats are interleaved (every setting once per round); figures are
medians. Writes runs/bench/perf_update.json and .md.

Settings: one pass (``microbatch_size=0``), ``gradient_checkpointing=true``,
``microbatch_size=1``, both, and ``microbatch_tokens=<prompt + reply>`` (one sample a pass
by its token budget), each with ``checkpoint_tokens=0``; then the defaults, where a pass over
more than ``checkpoint_tokens`` padded tokens is checkpointed.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.args import key_values

DEFAULTS = {"samples": "4", "prompt": "650", "reply": "40", "repeats": "3", "out": "runs/bench"}


def settings(prompt: int, reply: int) -> dict[str, dict[str, Any]]:
    """Label -> UpdateConfig overrides; the first is the baseline the ratios divide by. All
    but the last turn the default ``checkpoint_tokens`` off, so each setting is itself alone;
    the last is the defaults as a run gets them."""
    off = {"checkpoint_tokens": 0}
    return {"one pass": off,
            "gradient_checkpointing=true": {**off, "gradient_checkpointing": True},
            "microbatch_size=1": {**off, "microbatch_size": 1},
            "microbatch_size=1, gradient_checkpointing=true": {**off, "microbatch_size": 1, "gradient_checkpointing": True},
            f"microbatch_tokens={prompt + reply}": {**off, "microbatch_tokens": prompt + reply},
            "defaults (checkpoint_tokens=2048)": {}}


def parse(argv: list[str]) -> dict[str, str]:
    return key_values(argv, DEFAULTS, internal=("_one",), positive=("samples", "prompt", "reply", "repeats"))


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def one(samples: int, prompt: int, reply: int, overrides: dict[str, Any]) -> dict[str, float]:
    """Run in a child process: load, build the samples, reset the high-water mark, update."""
    import torch

    from agents.policy import TransformersPolicy
    from trainers.config import TrainConfig
    from trainers.samples import Sample
    from trainers.update import release_freed_memory, train_step, trainable_copy

    torch.set_num_threads(1)
    policy = TransformersPolicy("default", seed=0)
    rng = random.Random(0)
    batch = []
    for i in range(samples):
        prompt_ids = [rng.randrange(100, 40000) for _ in range(prompt)]
        reply_ids = [rng.randrange(100, 40000) for _ in range(reply)]
        old = policy.score([prompt_ids], [reply_ids])[0]
        batch.append(Sample(prompt_ids, reply_ids, old, [0.5 - 0.3 * i] * reply, 0, 1.0))
    config = TrainConfig(minibatch_size=samples, epochs=1, **overrides)
    model, optimizer = trainable_copy(policy, config)
    release_freed_memory()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS from here on
    before = _status_mb("VmRSS")
    start = time.perf_counter()
    train_step(model, optimizer, batch, config, version=0, pad_id=policy.tokenizer.pad_token_id)
    return {"seconds": time.perf_counter() - start, "before_mb": before, "peak_mb": _status_mb("VmHWM")}


def measure(args: dict[str, str]) -> list[dict[str, Any]]:
    samples, prompt, reply, repeats = (int(args[k]) for k in ("samples", "prompt", "reply", "repeats"))
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in settings(prompt, reply)}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for _ in range(repeats):
        for label, overrides in settings(prompt, reply).items():
            spec = json.dumps({"samples": samples, "prompt": prompt, "reply": reply, "overrides": overrides})
            done = subprocess.run([sys.executable, "-m", "benchmarks.perf_update", f"_one={spec}"],
                                  capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{label}: the measuring process failed:\n{done.stderr[-2000:]}")
            runs[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"{label}: {runs[label][-1]['peak_mb']:.0f} MB, {runs[label][-1]['seconds']:.1f} s", flush=True)
    rows = [{"setting": label, "peak_mb": statistics.median(r["peak_mb"] for r in measured),
             "before_mb": statistics.median(r["before_mb"] for r in measured),
             "seconds": statistics.median(r["seconds"] for r in measured),
             "seconds_range": [min(r["seconds"] for r in measured), max(r["seconds"] for r in measured)]}
            for label, measured in runs.items()]
    for row in rows:
        row["peak_ratio"], row["time_ratio"] = row["peak_mb"] / rows[0]["peak_mb"], row["seconds"] / rows[0]["seconds"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| setting | peak resident | of which the update | update time | peak vs one pass | time vs one pass |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['peak_mb'] / 1024:.2f} GB | {(r['peak_mb'] - r['before_mb']) / 1024:.2f} GB "
                     f"| {r['seconds']:.1f} s | {r['peak_ratio']:.2f}x | {r['time_ratio']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    if "_one" in args:  # the child: one measurement, one JSON line
        spec = json.loads(args["_one"])
        print(json.dumps(one(spec["samples"], spec["prompt"], spec["reply"], spec["overrides"])))
        return 0
    rows = measure(args)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = (f"### One update, {args['samples']} samples of {args['prompt']} + {args['reply']} tokens, default model, "
            f"LoRA, one thread, median of {args['repeats']} interleaved repeats\n\n{stamp}, {os.cpu_count()} cores\n\n"
            + table(rows))
    print(text)
    out = Path(args["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf_update.json").write_text(json.dumps({"time": stamp, "args": args, "rows": rows}, indent=2))
    (out / "perf_update.md").write_text(text + "\n")
    low = min(rows, key=lambda r: r["peak_mb"])
    print(f"saved {out / 'perf_update.json'}; lowest peak: {low['setting']}, {low['peak_ratio']:.2f}x the one pass's "
          f"memory at {low['time_ratio']:.2f}x its time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
