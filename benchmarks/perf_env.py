"""Env throughput and reset latency per sandbox backend, against the raw exec floor.

    python -m benchmarks.perf_env [--env terminal|swe] [--parallel 8] [--steps 10] [--repeats 5] \
        [--backends bwrap docker]

For the terminal env (``--env terminal``, the default; ``python -m benchmarks.perf_terminal``
is the same) and the SWE env (``--env swe``), for each backend, in the same run:

- **floor**: ``parallel`` bare sandboxes, one thread each, run the scripted agent's
  commands back to back with ``Sandbox.exec``: the most commands per second the machine
  gives that backend, with no env around them. For SWE the bare sandboxes are those of
  ``parallel`` envs reset onto the instance (the repository checked out, its environment
  installed), so the commands see the same files.
- **env**: a thread vector env of ``parallel`` envs; a scripted agent sends the same
  commands as ``bash`` tool calls. Steps per second over the batch, and that as a
  fraction of the floor (1.0 means the env adds nothing). Floor and env alternate within
  every repeat, and the fraction is the median of the per-repeat ratios.
- **reset**: one env reset ``resets`` times in a row, p50/p95, against the bare work a
  reset must do (terminal: ``Sandbox.reset()`` plus the task's files; SWE: a
  ``Sandbox.reset()`` only, the floor under its cached-environment checkout); and the
  first reset, which starts the sandbox (and for SWE may build the instance's cache).

Every figure is the median of ``repeats`` (min and max beside it). The machine is shared:
compare rows of one run, not absolute times across runs. Results go to
``<out>/perf_<env>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dataclasses import dataclass

from envs import make_vec
from envs.sandbox import Sandbox, backend_status, make_sandbox
from envs.terminal.verify import tool_call


@dataclass(frozen=True)
class Workload:
    env: str
    """The env id (or alias) measured."""
    task: str
    commands: tuple[str, ...]
    """What the scripted agent runs, in a loop: cheap, typical first commands."""
    finish: str | None
    """The tool that ends an episode after each timed round, None to leave it to the next
    reset (SWE's ``submit`` grades, seconds that are not stepping)."""


WORKLOADS = {
    "terminal": Workload("terminal", "text-count-errors",  # setup only writes a file: reset cost is the sandbox's
                         ("ls -la", "grep -c ERROR app.log", "grep ERROR app.log | cut -d' ' -f4- | sort | uniq -c",
                          "wc -l app.log", "head -3 app.log"), "submit"),
    "swe": Workload("swe", "",  # the first train instance
                    ("ls", "git status --short", "grep -rn 'def ' --include=*.py . | wc -l",
                     "git log --oneline -1", "find . -name '*.py' -path '*test*' | head -5"), None),
}


def _probe(workload: Workload, backend: str) -> Any:
    import envs

    return envs.make(workload.env, sandbox=backend).unwrapped


def _task(workload: Workload, probe: Any) -> str:
    return workload.task or probe.task_ids()[0]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _floor_once(boxes: list[Sandbox], steps: int, commands: tuple[str, ...]) -> float:
    """Commands per second of bare sandboxes, one thread each, running ``commands``."""
    barrier = threading.Barrier(len(boxes) + 1)

    def work(box: Sandbox) -> None:
        barrier.wait()
        for i in range(steps):
            box.exec(commands[i % len(commands)], timeout=30)

    threads = [threading.Thread(target=work, args=(box,)) for box in boxes]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return len(boxes) * steps / (time.perf_counter() - started)


def _env_once(vec: Any, steps: int, seed: int, workload: Workload, task: str) -> float:
    """Env steps per second of the vector env, the scripted agent sending the workload's commands."""
    _, infos = vec.reset(seed=seed, options={"task_id": task})
    errors = [i["error"] for i in infos if "error" in i]
    if errors:
        raise RuntimeError(f"an env failed to reset: {errors[0]}")
    started = time.perf_counter()
    commands = workload.commands
    for i in range(steps):
        vec.step([tool_call("bash", {"command": commands[i % len(commands)]})] * vec.num_envs)
    elapsed = time.perf_counter() - started
    if workload.finish:
        vec.step([tool_call(workload.finish, {})] * vec.num_envs)
    return vec.num_envs * steps / elapsed


def _bare_boxes(workload: Workload, backend: str, parallel: int, task: str) -> tuple[list[Sandbox], list[Any]]:
    """``parallel`` sandboxes ready for the commands, and the envs that own them (closed by the caller)."""
    if workload.env == "terminal":
        probe = _probe(workload, backend)
        files = probe.task(task).files
        boxes = [make_sandbox(backend, probe.sandbox_config) for _ in range(parallel)]
        for box in boxes:
            for path, text in files:
                box.put_file(path, text)
        probe.close()
        return boxes, []
    owners = [_probe(workload, backend) for _ in range(parallel)]
    for env in owners:
        env.reset(options={"task_id": task})
    return [env._sandbox for env in owners], owners  # noqa: SLF001 (the env's own sandbox, bare)


def measure_throughput(workload: Workload, backend: str, parallel: int, steps: int,
                       repeats: int) -> tuple[list[float], list[float]]:
    """(floor, env) rates per repeat. They alternate within each repeat, so a change in
    the machine's load hits both alike; the first round (starting everything) is not timed."""
    probe = _probe(workload, backend)
    task = _task(workload, probe)
    probe.close()
    boxes, owners = _bare_boxes(workload, backend, parallel, task)
    kwargs = {"sandbox": backend, "task_ids": [task], "max_turns": steps + 2}
    floor, env = [], []
    try:
        with make_vec(workload.env, parallel, backend="thread", env_kwargs=kwargs) as vec:
            for repeat in range(repeats + 1):
                f = _floor_once(boxes, steps, workload.commands)
                e = _env_once(vec, steps, repeat, workload, task)
                if repeat:
                    floor.append(f)
                    env.append(e)
    finally:
        for owner in owners:
            owner.close()
        if not owners:
            for box in boxes:
                box.close()
    return floor, env


def measure_reset(workload: Workload, backend: str, resets: int) -> dict[str, Any]:
    """Reset latencies (ms) of one env reusing its sandbox, and of the bare sandbox."""
    env = _probe(workload, backend)
    task = _task(workload, env)
    files = env.task(task).files if workload.env == "terminal" else []
    try:
        started = time.perf_counter()
        env.reset(options={"task_id": task})
        first_ms = (time.perf_counter() - started) * 1000
        env_ms = []
        for _ in range(resets):
            started = time.perf_counter()
            env.reset(options={"task_id": task})
            env_ms.append((time.perf_counter() - started) * 1000)
    finally:
        env.close()
    box = make_sandbox(backend, env.sandbox_config)
    try:
        bare_ms = []
        for _ in range(resets):
            started = time.perf_counter()
            box.reset()
            for path, text in files:
                box.put_file(path, text)
            bare_ms.append((time.perf_counter() - started) * 1000)
    finally:
        box.close()
    return {"task": task, "first_ms": first_ms,
            "p50_ms": statistics.median(env_ms), "p95_ms": _percentile(env_ms, 0.95),
            "bare_p50_ms": statistics.median(bare_ms), "bare_p95_ms": _percentile(bare_ms, 0.95)}


def run(workload: Workload, backends: list[str], parallel: int, steps: int, repeats: int,
        resets: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    status = backend_status()
    for backend in backends:
        if status.get(backend) is not None:
            rows.append({"backend": backend, "skipped": status[backend]})
            continue
        floor, env = measure_throughput(workload, backend, parallel, steps, repeats)
        rows.append({"backend": backend, "parallel": parallel,
                     "floor_exec_per_s": _spread(floor), "env_steps_per_s": _spread(env),
                     "fraction_of_floor": statistics.median(e / f for e, f in zip(env, floor)),
                     "reset": measure_reset(workload, backend, resets)})
        print(markdown(rows[-1:]), flush=True)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| backend | env steps/s (parallel) | floor exec/s | env / floor | reset p50 ms | reset p95 ms "
             "| bare reset p50 ms | first reset ms |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['backend']} | skipped: {r['skipped']} | | | | | | |")
            continue
        e, f, x, z = r["env_steps_per_s"], r["floor_exec_per_s"], r["fraction_of_floor"], r["reset"]
        lines.append(f"| {r['backend']} | {e['median']:.0f} ({r['parallel']}) [{e['min']:.0f}-{e['max']:.0f}] "
                     f"| {f['median']:.0f} [{f['min']:.0f}-{f['max']:.0f}] | {x:.2f} "
                     f"| {z['p50_ms']:.1f} | {z['p95_ms']:.1f} | {z['bare_p50_ms']:.1f} | {z['first_ms']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks.perf_env") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="terminal", choices=sorted(WORKLOADS))
    parser.add_argument("--backends", nargs="+", default=["bwrap", "docker"], choices=["bwrap", "docker"])
    parser.add_argument("--parallel", type=int, default=8, help="envs (and bare sandboxes) at once")
    parser.add_argument("--steps", type=int, default=10, help="commands per env per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--resets", type=int, default=20, help="resets timed per backend")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.env]
    rows = run(workload, args.backends, args.parallel, args.steps, args.repeats, args.resets)
    table = markdown(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"machine": platform.platform(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "env": workload.env, "commands": workload.commands, "rows": rows}
    name = f"perf_{workload.env}"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2))
    (args.out / f"{name}.md").write_text(f"### {workload.env} env, {args.parallel} envs, scripted agent\n\n{table}\n")
    print(f"\n{table}\nsaved {args.out / f'{name}.json'} and {args.out / f'{name}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
