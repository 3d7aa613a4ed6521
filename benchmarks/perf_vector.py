"""Vector-env throughput: 8 envs whose step does 10 ms of I/O, per backend.

Ideal parallel throughput is every member's step overlapping perfectly: one batch step
takes one member's 10 ms. Each backend's figure is that ideal divided by the measured
median batch-step time; ``sync`` (one member after another) is the baseline and sits
near 1/num_envs by construction.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import gymnasium as gym

from envs import ClawEnv, Opening, Transition, make_vec
from envs.messages import AssistantTurn

BENCH_ID = "clawgymbench/IOBound-v0"


class IOBoundEnv(ClawEnv):
    """Each step waits ``io_s`` (as on a sandbox or a browser) and echoes."""

    def __init__(self, io_s: float = 0.010, **kwargs: Any) -> None:
        super().__init__(max_turns=10_000, **kwargs)
        self.io_s = io_s

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        return Opening([{"role": "user", "content": "go"}], task_id="io")

    def _act(self, turn: AssistantTurn) -> Transition:
        time.sleep(self.io_s)
        return Transition([{"role": "user", "content": "ok"}])


if BENCH_ID not in gym.registry:
    gym.register(id=BENCH_ID, entry_point="benchmarks.perf_vector:IOBoundEnv")


def measure_vector_throughput(num_envs: int = 8, io_ms: float = 10.0, steps: int = 30,
                              repeats: int = 5, backends: tuple[str, ...] = ("sync", "thread", "process", "ray"),
                              ) -> list[dict[str, Any]]:
    rows = []
    for backend in backends:
        if backend == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                rows.append({"name": backend, "skipped": "ray is not installed"})
                continue
        with make_vec(BENCH_ID, num_envs, backend=backend, env_kwargs={"io_s": io_ms / 1000}) as vec:
            _, infos = vec.reset(seed=0)
            errors = [info["error"] for info in infos if "error" in info]
            if errors:
                raise RuntimeError(f"{backend}: a member failed to reset: {errors[0]}")
            vec.step(["warm"] * num_envs)
            per_step = []
            for _ in range(repeats):
                started = time.perf_counter()
                for _ in range(steps):
                    vec.step(["a"] * num_envs)
                per_step.append((time.perf_counter() - started) / steps)
        ideal = io_ms / 1000
        fractions = sorted(ideal / s for s in per_step)
        rows.append({
            "name": backend,
            "steps_per_s": num_envs / statistics.median(per_step),
            "fraction_of_ideal": statistics.median(fractions),
            "min": fractions[0], "max": fractions[-1],
        })
    if "ray" in backends:
        try:
            import ray
            ray.shutdown()
        except ImportError:
            pass
    return rows
