"""``python -m trainers.tinker split RUN_DIR``: a ``compute=tinker`` run's Tinker step time split.

Each step's seconds in sampling (rollouts, the replay gate's teacher replies), scoring (judge
and OPD teacher), forward_backward, optim_step (the wait after forward_backward's result:
the two are sent back to back) and save_weights, the step's total, then their medians.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PARTS = ("sample", "score", "forward_backward", "optim_step", "save_weights", "step")


def split(run: Path) -> str:
    """The time split table of ``run``'s metrics.jsonl: one row per Tinker step, then the medians."""
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    steps = [r for r in rows if r.get("step", 0) > 0 and "perf/forward_backward_s" in r]
    if not steps:
        raise SystemExit(f"trainers.tinker: {path} has no Tinker step; train with compute=tinker first")
    lines = ["step  " + "".join(f"{p:>18}" for p in PARTS)]
    lines += [f"{int(r['step']):>4}  " + "".join(f"{r.get(f'perf/{p}_s', 0.0):>18.2f}" for p in PARTS) for r in steps]
    lines.append("med.  " + "".join(f"{statistics.median(r.get(f'perf/{p}_s', 0.0) for r in steps):>18.2f}"
                                    for p in PARTS))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "split":
        print(__doc__, file=sys.stderr)
        return 2
    print(split(Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
