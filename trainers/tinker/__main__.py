"""``python -m trainers.tinker``: train through Tinker, and report a run's Tinker step time split.

    python -m trainers.tinker train env=chat lora.rank=8 steps=4 out=runs/tinker   # any trainers.run key, tinker.*
    python -m trainers.tinker split runs/tinker                                     # the median split over its steps

``train`` reads ``TINKER_API_KEY`` and ``TINKER_BASE_URL`` from the environment, as the SDK
does (scripts/tinker_server.sh serves a local skyrl-tx); it resumes an existing ``out=``.
``split`` prints each step's seconds in sampling, scoring (judge and OPD teacher),
forward_backward, optim_step and save_weights, then their medians.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PARTS = ("sample", "score", "forward_backward", "optim_step", "save_weights")


def split(run: Path) -> str:
    """The time split table of ``run``'s metrics.jsonl: one row per step, then the medians."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("step", 0) > 0 and "perf/forward_backward_s" in r]
    if not steps:
        raise SystemExit(f"trainers.tinker: {run}/metrics.jsonl has no Tinker step; train one first")
    keys = [f"perf/{p}_s" for p in PARTS] + ["perf/step_s"]
    lines = ["step  " + "  ".join(f"{k[5:-2]:>16}" for k in keys)]
    lines += [f"{int(r['step']):>4}  " + "  ".join(f"{r.get(k, 0.0):>16.2f}" for k in keys) for r in steps]
    lines.append("med.  " + "  ".join(f"{statistics.median(r.get(k, 0.0) for r in steps):>16.2f}" for k in keys))
    return "\n".join(lines)


def train(argv: list[str]) -> int:
    from trainers.config import ConfigError, apply_overrides, to_dict
    from trainers.rundir import RunDir
    from trainers.run import resolve_config
    from trainers.tinker.settings import TinkerSettings
    from trainers.tinker.trainer import TinkerTrainer

    ours = [a.removeprefix("tinker.") for a in argv if a.startswith("tinker.")]
    try:
        config, out = resolve_config([a for a in argv if not a.startswith("tinker.")])
        settings = apply_overrides(TinkerSettings(), ours, prefix="tinker.")
    except ConfigError as exc:
        print(f"trainers.tinker: {exc}", file=sys.stderr)
        return 2
    run = RunDir(out)
    trainer = TinkerTrainer(config, run, settings)
    try:
        run.save_config(to_dict(trainer.config))  # as trainers.run: with what the env resolved
        trainer.train()
    finally:
        trainer.close()
    print(split(out))
    print(f"done: {trainer.step} steps through Tinker; run dir {out}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "split":
        print(split(Path(argv[1])))
        return 0
    if argv and argv[0] == "train":
        return train(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
