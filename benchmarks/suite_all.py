"""``python -m benchmarks.run suite=all``: every suite of :data:`benchmarks.run.SUITES`, one after the other.

Each suite runs into ``<out>/<suite>/`` exactly as ``suite=<name>`` would (and resumes the
same way), with the model loaded once; ``<out>/summary.md``, ``summary.json`` and
``summary.png`` hold one row per suite. A suite this machine cannot run (no sandbox backend,
no Chromium, a missing extra) is a row with its error, and the others go on. With
``policy=oracle`` the suites without an oracle (chat) are skipped, each named with the
reason in ``summary.md`` and ``summary.json`` (``skipped``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.run import SUITES, EvalConfig, evaluate, make_policy, summary_line, write_results


def evaluate_all(config: EvalConfig) -> tuple[Path, list[dict[str, Any]]]:
    """Each suite of ``config.suite_names()`` into ``<out>/<suite>/`` (resumable as one suite
    is), the model loaded once; returns ``out`` and one summary row per suite. A suite that
    cannot run here (no sandbox backend, no Chromium, a missing extra) becomes a row with
    its error and the others go on; an endpoint that refuses the policy stops them all."""
    from agents.openai_policy import EndpointError

    player = make_policy(config)
    out = Path(config.out or f"runs/eval/all-{config.split or 'default'}-{player[1]}-{time.strftime('%Y%m%d-%H%M%S')}")
    rows = []
    skipped = _skipped(config)
    for name, why in skipped.items():
        print(f"benchmarks.run: suite={name} skipped: no oracle ({why})", file=sys.stderr)
    for name in (n for n in config.suite_names() if n not in skipped):
        started = time.perf_counter()
        try:
            sub = dataclasses.replace(config, suite=name, suites="", out=str(out / name),
                                      sandbox=config.sandbox if _takes_sandbox(name) else "")
            result = evaluate(sub, out / name, player)
            write_results(out / name, result)
        except EndpointError:
            raise
        except Exception as exc:  # one suite's missing requirement must not cost the others
            message = " ".join(str(exc).split()) or type(exc).__name__
            rows.append({"suite": name, "error": message, "seconds": time.perf_counter() - started})
            print(f"benchmarks.run: suite={name} failed: {message}", file=sys.stderr)
            continue
        s = result["summary"]
        print(f"{name}/{s['split']}, model {s['label']}: {summary_line(s)}", file=sys.stderr)
        rows.append({key: s[key] for key in ("suite", "split", "label", "tasks", "episodes", "scored", "errors",
                                             "solved", "success_rate", "success_ci95", "mean_return", "seconds")}
                    | ({"pass_k": s["pass_k"]} if "pass_k" in s else {}) | {"error": None})
    from agents.openai_policy import key_record

    from benchmarks.plots import plot_bars

    ran = dataclasses.replace(config, device=player[2].device, dtype=player[2].dtype)
    recorded = {**dataclasses.asdict(ran), "out": str(out), "api_key": key_record(config.api_key)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"config": recorded, "suites": rows, "skipped": skipped}, indent=2))
    (out / "summary.md").write_text(all_markdown(rows, player[1], skipped))
    plot_bars({player[1]: [(r["suite"], r["solved"], r["scored"]) for r in rows if r["error"] is None]},
              out / "summary.png", f"every suite, model {player[1]}", "suite")
    return out, rows


def _skipped(config: EvalConfig) -> dict[str, str]:
    """policy=oracle: the suites of the run that have no oracle, each with why (none otherwise)."""
    if config.policy != "oracle":
        return {}
    from benchmarks.oracle import suites_with_oracle, why_no_oracle

    have = suites_with_oracle(SUITES)
    return {name: why_no_oracle(name, SUITES) for name in config.suite_names() if name not in have}


def _takes_sandbox(suite: str) -> bool:
    """Whether the suite's env has a ``sandbox`` argument (where ``sandbox=`` goes under suite=all)."""
    import inspect

    import gymnasium as gym

    from envs.registration import resolve

    creator = gym.envs.registration.load_env_creator(gym.spec(resolve(SUITES[suite].env)).entry_point)
    return "sandbox" in inspect.signature(creator.__init__).parameters


def all_markdown(rows: list[dict[str, Any]], label: str, skipped: dict[str, str] | None = None) -> str:
    """One row per suite: tasks, success with its 95% Wilson interval, env errors, or why it did not run;
    then the suites ``skipped`` (policy=oracle: those without an oracle), with why."""
    lines = [f"### Every suite, model {label}", "", "| suite | split | tasks | solved | success | 95% CI | env errors "
             "| seconds |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["error"] is not None:
            lines.append(f"| {r['suite']} | | | | did not run: {r['error'].replace('|', '/')} | | | "
                         f"{r['seconds']:.0f} |")
            continue
        low, high = r["success_ci95"]
        lines.append(f"| {r['suite']} | {r['split']} | {r['tasks']} | {r['solved']:g}/{r['scored']} "
                     f"| {r['success_rate']:.1%} | {low:.1%}-{high:.1%} | {r['errors']} | {r['seconds']:.0f} |")
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"{name} (no oracle: {why})" for name, why in skipped.items())]
    return "\n".join(lines) + "\n"
