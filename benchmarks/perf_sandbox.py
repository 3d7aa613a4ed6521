"""Per-command latency of each sandbox backend against the floor: a bare ``bash -c`` on the host.

An RL episode runs tens of commands per turn across many parallel envs, so exec
latency is rollout throughput. Every row is measured in the same run, on the same
machine, so ``ratio_to_floor`` compares like with like.

    python -m benchmarks.perf_sandbox [repeats]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from envs.sandbox import SandboxConfig, SandboxError, backend_status, make_sandbox

COMMANDS = {"true": "true", "write+read": "echo hi > f && cat f"}
_WARMUP = 3


def _timings_ms(run: Callable[[], object], repeats: int) -> list[float]:
    for _ in range(_WARMUP):
        run()
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def _row(name: str, timings: list[float], floor_p50: float | None) -> dict[str, float | str | None]:
    ordered = sorted(timings)
    p50 = statistics.median(ordered)
    return {
        "name": name,
        "p50_ms": round(p50, 2),
        "min_ms": round(ordered[0], 2),
        "max_ms": round(ordered[-1], 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "ratio_to_floor": round(p50 / floor_p50, 2) if floor_p50 else 1.0,
    }


def measure_exec_latency(
    repeats: int = 50, backends: Sequence[str] = ("bwrap", "docker")
) -> list[dict[str, float | str | None]]:
    """Latency rows ``{name, p50_ms, min_ms, max_ms, p95_ms, ratio_to_floor}`` per backend and command.

    The floor is ``subprocess.run(["bash", "-c", cmd])`` in a scratch directory. A backend
    that cannot run here gives one row with ``skipped`` set to the reason instead.
    """
    import tempfile

    rows: list[dict[str, float | str | None]] = []
    floors: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for label, cmd in COMMANDS.items():
            timings = _timings_ms(lambda: subprocess.run(["bash", "-c", cmd], cwd=scratch, capture_output=True), repeats)
            floors[label] = statistics.median(timings)
            rows.append(_row(f"bare bash/{label}", timings, floors[label]))
    status = backend_status()
    for backend in backends:
        if status.get(backend) is not None:
            rows.append({"name": backend, "skipped": status[backend]})
            continue
        try:
            sandbox = make_sandbox(backend, SandboxConfig())
        except SandboxError as exc:
            rows.append({"name": backend, "skipped": str(exc)})
            continue
        try:
            for label, cmd in COMMANDS.items():
                timings = _timings_ms(lambda: sandbox.exec(cmd), repeats)
                rows.append(_row(f"{backend}/{label}", timings, floors[label]))
        finally:
            sandbox.close()
    return rows


if __name__ == "__main__":
    results = measure_exec_latency(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
    print(f"{'name':<24}{'p50_ms':>9}{'p95_ms':>9}{'min_ms':>9}{'max_ms':>9}{'x floor':>9}")
    for row in results:
        if "skipped" in row:
            print(f"{row['name']:<24} skipped: {row['skipped']}")
        else:
            print(f"{row['name']:<24}{row['p50_ms']:>9}{row['p95_ms']:>9}{row['min_ms']:>9}{row['max_ms']:>9}{row['ratio_to_floor']:>9}")
