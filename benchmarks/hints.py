"""Can the model do what a user's correction asks? ``python -m benchmarks.hints``

    python -m benchmarks.hints persona=all tasks=56 samples=4
    python -m benchmarks.hints persona=all hint=all
    python -m benchmarks.hints persona=<yours> personas_dir=<folder of persona YAML files>

OPD's teacher is the model itself with the user's correction appended to the prompt
(docs/concepts/methods.md; ``trainers.judge_parsing.append_hint``). Its token advantages can only point
somewhere useful if the model, once told, writes a reply that meets the preference. This
measures that, on the chat env (``clawgym/Chat-v0``), before any training:

1. each of ``tasks`` requests (spread through the split, as a run's held-out set is) gets
   ``samples`` replies at the run's temperature and ``max_new_tokens``, played through the
   env: its ``pref/<kind>`` metrics say which preferences each reply met;
2. each reply that missed one gets its hint: ``hint=first``, the env's next state (the
   user's correction of the first unmet preference: what ``judge.hints=next_state`` hands
   OPD); ``hint=all``, one correction per unmet preference, joined (a user who says
   everything at once, which the env's user never does);
3. one reply is sampled from the hinted prompt and played through a fresh episode of the
   same task.

Per persona: the share of replies meeting every preference unprompted and when told, and
the share cut by ``max_new_tokens`` each way. Per persona and preference kind: the share
of unprompted replies meeting it, and of the hinted replies whose hint named it, the share
that then meet it ("fixed when told"). A kind the model neither shows unprompted nor fixes
when told gives GRPO no success to reinforce and OPD no teacher that knows better. Writes
runs/bench/hints.json and .md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spin-waiting threads on a shared CPU

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.args import key_values  # noqa: E402

DEFAULTS = {"persona": "all", "split": "heldout", "tasks": "56", "samples": "4", "temperature": "0.6",
            "max_new_tokens": "128", "hint": "first", "seed": "0", "model": "default", "device": "auto",
            "dtype": "auto", "personas_dir": "", "out": "runs/bench"}
HINTS = ("first", "all")
ENV_ID = "clawgym/Chat-v0"


def parse(argv: list[str]) -> dict[str, Any]:
    """``key=value`` arguments over :data:`DEFAULTS`; a clear error for anything else."""
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        raise SystemExit(0)
    args: dict[str, Any] = dict(key_values(argv, DEFAULTS, positive=("tasks", "samples", "max_new_tokens")))
    for key in ("tasks", "samples", "max_new_tokens"):
        args[key] = int(args[key])
    if not str(args["seed"]).isdigit():
        raise SystemExit(f"seed must be a non-negative integer, got {args['seed']!r}")
    args["seed"] = int(args["seed"])
    try:
        args["temperature"] = float(args["temperature"])
    except ValueError:
        raise SystemExit(f"temperature must be a number, got {args['temperature']!r}") from None
    if args["temperature"] < 0:
        raise SystemExit(f"temperature must be >= 0 (0 is greedy), got {args['temperature']}")
    if args["hint"] not in HINTS:
        raise SystemExit(f"hint must be one of {', '.join(HINTS)}, got {args['hint']!r}")
    return args


def played(env: Any, task_id: str, reply: str, seed: int) -> tuple[dict[str, bool], str]:
    """One first reply to ``task_id`` through the env: which preferences it met (the env's
    ``pref/<kind>`` metrics) and the env's next state (the user's answer)."""
    env.reset(seed=seed, options={"task_id": task_id})
    _, _, _, _, info = env.step({"role": "assistant", "content": reply})
    met = {key.removeprefix("pref/"): bool(value) for key, value in info["metrics"].items()
           if key.startswith("pref/")}
    return met, info.get("next_state", "")


def hint_for(env: Any, task_id: str, met: dict[str, bool], next_state: str, how: str,
             rng: Any) -> tuple[str, list[str]]:
    """The hint a failed reply gets and the preference kinds it names (see the module doc)."""
    unmet = [p for p in env.unwrapped.checks(task_id) if not met.get(p.kind, True)]
    if how == "first":
        return next_state, [unmet[0].kind] if unmet else []
    said = [p.corrections[int(rng.integers(len(p.corrections)))] for p in unmet]
    return " ".join(said), [p.kind for p in unmet]


def measure(policy: Any, env: Any, tasks: list[str], samples: int, sampling: Any, how: str,
            seed: int) -> list[dict[str, Any]]:
    """One record per sampled reply: its task, persona and text, what it met, whether it was
    cut, and, when it missed a preference, ``told``: the hint, the kinds it names, and the
    reply sampled with it (text, what it met, whether it was cut)."""
    import numpy as np

    from trainers.judge_parsing import append_hint

    rng = np.random.default_rng(seed)
    openings = {t: env.reset(seed=seed, options={"task_id": t})[0] for t in tasks}
    rows = [t for t in tasks for _ in range(samples)]
    replies = policy.generate_ids([policy.encode(openings[t]) for t in rows], sampling)
    records: list[dict[str, Any]] = []
    hinted: list[list[dict[str, Any]]] = []
    for i, (task_id, reply) in enumerate(zip(rows, replies)):
        met, next_state = played(env, task_id, reply.text, seed + i)
        record = {"task": task_id, "persona": task_id.partition("/")[0], "reply": reply.text, "met": met,
                  "cut": reply.finish_reason == "length", "told": None}
        records.append(record)
        if not all(met.values()):
            hint, kinds = hint_for(env, task_id, met, next_state, how, rng)
            record["told"] = {"hint": hint, "names": kinds}
            hinted.append(append_hint(openings[task_id], hint))
    failed = [r for r in records if r["told"] is not None]
    told = policy.generate_ids([policy.encode(m) for m in hinted], sampling) if hinted else []
    for i, (record, reply) in enumerate(zip(failed, told)):
        met, _ = played(env, record["task"], reply.text, seed + len(rows) + i)
        record["told"].update(reply=reply.text, met=met, cut=reply.finish_reason == "length")
    return records


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({hits / total:.2f})" if total else "-"


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per persona and per (persona, kind): see the module doc."""
    personas: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    kinds: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in records:
        p = personas[r["persona"]]
        p["replies"] += 1
        p["met"] += all(r["met"].values())
        p["cut"] += r["cut"]
        for kind, ok in r["met"].items():
            k = kinds[f"{r['persona']}/{kind}"]
            k["replies"] += 1
            k["met"] += ok
        told = r["told"]
        if told is None:
            continue
        p["told"] += 1
        p["told_met"] += all(told["met"].values())
        p["told_cut"] += told["cut"]
        for kind in told["names"]:
            k = kinds[f"{r['persona']}/{kind}"]
            k["named"] += 1
            k["fixed"] += told["met"][kind]
    return {"personas": {n: dict(c) for n, c in sorted(personas.items())},
            "kinds": {n: dict(c) for n, c in sorted(kinds.items())}}


def tables(summary: dict[str, Any]) -> str:
    lines = ["| persona | replies | all met, unprompted | all met, told | cut, unprompted | cut, told |",
             "|---|---|---|---|---|---|"]
    for name, c in summary["personas"].items():
        lines.append(f"| {name} | {c['replies']} | {_share(c['met'], c['replies'])} "
                     f"| {_share(c.get('told_met', 0), c.get('told', 0))} | {_share(c['cut'], c['replies'])} "
                     f"| {_share(c.get('told_cut', 0), c.get('told', 0))} |")
    lines += ["", "| persona / preference | met, unprompted | fixed when told |", "|---|---|---|"]
    for name, c in summary["kinds"].items():
        lines.append(f"| {name} | {_share(c['met'], c['replies'])} | {_share(c.get('fixed', 0), c.get('named', 0))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    import torch

    import envs
    from agents.device import resolve_device, resolve_dtype
    from agents.adapters import LoraSettings
    from agents.policy import SamplingParams, TransformersPolicy
    from trainers.loop import spread

    device = resolve_device(args["device"])
    dtype = resolve_dtype(args["dtype"], device)
    if device == "cpu":
        torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    extra = {"personas_dir": args["personas_dir"]} if args["personas_dir"] else {}
    env = envs.make(ENV_ID, persona=args["persona"], split=args["split"], **extra)
    tasks = spread(sorted(env.unwrapped.task_ids()), args["tasks"])
    # a fresh LoRA adapter (the base model's outputs) takes the sampler's packed CPU path
    policy = TransformersPolicy(args["model"], lora=LoraSettings(), device=device, dtype=dtype, seed=args["seed"])
    sampling = SamplingParams(temperature=args["temperature"], max_new_tokens=args["max_new_tokens"])
    started = time.perf_counter()
    records = measure(policy, env, tasks, args["samples"], sampling, args["hint"], args["seed"])
    env.close()
    summary = summarize(records)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = "python -m benchmarks.hints " + " ".join(f"{k}={args[k]}" for k in DEFAULTS if k != "out")
    text = (f"`{command}` on {stamp} ({device}, {dtype}, {time.perf_counter() - started:.0f} s): "
            f"{len(tasks)} requests x {args['samples']} replies, hint={args['hint']}\n\n" + tables(summary))
    print(text)
    out = Path(args["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "hints.md").write_text(text + "\n")
    (out / "hints.json").write_text(json.dumps({"time": stamp, "args": args, "device": device, "dtype": dtype,
                                                "summary": summary, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
