"""Ray actors on a cluster against a local Ray instance and threads: ``python -m benchmarks.perf_ray``.

``python -m benchmarks.perf_ray --num-envs 8 --steps 30 --repeats 5 --io-ms 10``

The same vector workload three ways: ``num_envs`` of ``benchmarks.perf_vector``'s I/O-bound
env (each step waits ``io_ms``, as on a sandbox or a browser), stepped ``steps`` times.

- **thread**: the default backend, the baseline;
- **ray, local**: the ``ray`` backend on a private local instance (``ray.init()``);
- **ray, cluster**: the ``ray`` backend joined to a 2-node cluster started on this machine
  with ``ray start`` (:class:`envs.ray_cluster.LocalCluster`: a head of 2 CPUs and a worker of 1), via
  ``ray_address``, its actors spread over both nodes (``scheduling_strategy="SPREAD"``)
  and running the checkout shipped as Ray's ``working_dir``.

Each repeat runs the three in turn on a fresh vector env: ``startup`` is ``make_vec`` plus the
first ``reset`` (actors started, envs built), ``step`` a batch step's mean over ``steps``
(after one warm-up step). The table gives medians over repeats, min and max, and ratios to
the thread backend's median step and the local instance's median startup, from the same run. On one machine the "cluster" shares its
cores: this measures Ray's overhead per step, not scale. Writes ``--out``/perf_ray.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.perf_vector import BENCH_ID
from envs import make_vec
from envs.ray_cluster import LocalCluster

WAYS = ("thread", "ray, local", "ray, cluster")


def _one_run(way: str, cluster: LocalCluster, num_envs: int, steps: int, io_ms: float) -> dict[str, Any]:
    import ray

    kwargs: dict[str, Any] = {"backend": "thread" if way == "thread" else "ray",
                              "env_kwargs": {"io_s": io_ms / 1000}}
    if way == "ray, cluster":
        kwargs |= {"ray_address": cluster.address, "ray_actor_options": {"scheduling_strategy": "SPREAD"}}
    if way != "thread":
        ray.shutdown()  # a local instance and the cluster take turns; connecting is not timed
        from envs.ray_members import connect_ray
        connect_ray(kwargs.get("ray_address"))
    started = time.perf_counter()
    with make_vec(BENCH_ID, num_envs, **kwargs) as vec:
        _, infos = vec.reset(seed=0)
        startup = time.perf_counter() - started
        errors = [info["error"] for info in infos if "error" in info]
        if errors:
            raise RuntimeError(f"{way}: a member failed to reset: {errors[0]}")
        vec.step(["warm"] * num_envs)
        started = time.perf_counter()
        for _ in range(steps):
            vec.step(["a"] * num_envs)
        step = (time.perf_counter() - started) / steps
        nodes = Counter(m.placement()["node_id"][:8] for m in vec._members) if way != "thread" else Counter()
    return {"startup_s": startup, "step_s": step, "nodes": dict(nodes)}


def measure(num_envs: int = 8, steps: int = 30, repeats: int = 5, io_ms: float = 10.0) -> list[dict[str, Any]]:
    import ray

    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    with LocalCluster(head_cpus=2, worker_cpus=(1,)) as cluster, cluster.as_driver():
        try:
            for _ in range(repeats):
                for way in WAYS:
                    runs[way].append(_one_run(way, cluster, num_envs, steps, io_ms))
        finally:
            ray.shutdown()  # before the cluster goes: a driver whose cluster vanished exits
    base_step = statistics.median(r["step_s"] for r in runs["thread"])
    base_startup = statistics.median(r["startup_s"] for r in runs["ray, local"])  # threads start in ms
    rows = []
    for way, results in runs.items():
        step_ms = sorted(r["step_s"] * 1000 for r in results)
        startup = sorted(r["startup_s"] for r in results)
        rows.append({"name": way, "step_ms": statistics.median(step_ms), "step_min": step_ms[0],
                     "step_max": step_ms[-1], "step_ratio": statistics.median(step_ms) / 1000 / base_step,
                     "fraction_of_ideal": io_ms / statistics.median(step_ms),
                     "startup_s": statistics.median(startup), "startup_min": startup[0], "startup_max": startup[-1],
                     "startup_ratio": statistics.median(startup) / base_startup,
                     "actors_per_node": results[-1]["nodes"]})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| backend | step ms (median) | min | max | step / thread | fraction of ideal | "
             "startup s (min-max) | startup / ray local | actors per node |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        nodes = ", ".join(f"{n}: {k}" for n, k in r["actors_per_node"].items()) or "-"
        lines.append(f"| {r['name']} | {r['step_ms']:.1f} | {r['step_min']:.1f} | {r['step_max']:.1f} | "
                     f"{r['step_ratio']:.2f} | {r['fraction_of_ideal']:.2f} | "
                     f"{r['startup_s']:.2f} ({r['startup_min']:.2f}-{r['startup_max']:.2f}) | "
                     f"{r['startup_ratio']:.1f} | {nodes} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf_ray", description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30, help="timed batch steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--io-ms", type=float, default=10.0, help="each env step's wait")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args(argv)
    rows = measure(args.num_envs, args.steps, args.repeats, args.io_ms)
    title = (f"### Ray actors: a 2-node cluster on this machine vs a local instance vs threads "
             f"({args.num_envs} envs x {args.io_ms:g} ms I/O per step, {args.steps} steps, "
             f"medians of {args.repeats} repeats)")
    text = f"{title}\n\n{table(rows)}\n"
    print(text, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.perf_ray " + " ".join(sys.argv[1:] if argv is None else argv)
    (args.out / "perf_ray.json").write_text(json.dumps({
        "machine": platform.platform(), "time": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command,
        "rows": rows}, indent=2))
    (args.out / "perf_ray.md").write_text(text)
    print(f"saved {args.out / 'perf_ray.json'} and {args.out / 'perf_ray.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
