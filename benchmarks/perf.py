"""Performance benchmarks: ``python -m benchmarks.perf [sandbox] [vector]``.

Every figure is a median of repeats with min and max, against a baseline measured in the
same run (the machine is shared and noisy: absolute times mean little). Results are
printed as Markdown tables and saved as JSON and Markdown under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

SECTIONS = ("sandbox", "vector")


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    head = "| " + " | ".join(title for _, title, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    lines = [head, rule]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['name']} | skipped: {row['skipped']} |" + " |" * (len(columns) - 2))
            continue
        cells = [format(row[key], fmt) if fmt else str(row[key]) for key, _, fmt in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_sandbox(repeats: int) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.perf_sandbox import measure_exec_latency

    rows = measure_exec_latency(repeats=repeats)
    table = _table(rows, [("name", "command runner", ""), ("p50_ms", "p50 ms", ".1f"),
                          ("p95_ms", "p95 ms", ".1f"), ("min_ms", "min ms", ".1f"),
                          ("max_ms", "max ms", ".1f"), ("ratio_to_floor", "p50 / floor", ".2f")])
    return rows, "### Sandbox exec latency (goal: bwrap p50 within 2x of the floor; docker p50 < 150 ms)\n\n" + table


def run_vector(repeats: int) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.perf_vector import measure_vector_throughput

    rows = measure_vector_throughput(repeats=repeats)
    table = _table(rows, [("name", "backend", ""), ("steps_per_s", "env steps/s", ".0f"),
                          ("fraction_of_ideal", "fraction of ideal (median)", ".3f"),
                          ("min", "min", ".3f"), ("max", "max", ".3f")])
    return rows, ("### Vector throughput, 8 envs x 10 ms I/O per step (goal: thread >= 0.9 of ideal; "
                  "sync is the baseline)\n\n" + table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf", description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", choices=[*SECTIONS, []], default=list(SECTIONS),
                        help="which benchmarks to run (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per measurement (vector); "
                        "sandbox uses 10x this many commands")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"), help="where to save results")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"machine": platform.platform(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    markdown = []
    for section in args.sections or SECTIONS:
        rows, text = run_sandbox(args.repeats * 10) if section == "sandbox" else run_vector(args.repeats)
        results[section] = rows
        markdown.append(text)
        print(text + "\n", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "perf.json").write_text(json.dumps(results, indent=2))
    (args.out / "perf.md").write_text("\n\n".join(markdown) + "\n")
    print(f"saved {args.out / 'perf.json'} and {args.out / 'perf.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
