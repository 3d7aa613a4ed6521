"""An update on a real rollout's multi-turn samples: ``python -m benchmarks.perf_turns``.

``python -m benchmarks.perf_turns env=chat batch_size=2 group_size=4 max_new_tokens=48 repeats=3``

Rolls out one step of ``env`` with the default model (any ``trainers.run`` key passes
through), makes every non-empty turn a sample (advantages +1 and -1 in turn, so the loss
has a gradient whatever the rewards were), then times ``trainers.update.train_step`` on
those samples two ways, alternating, from the same adapter and a fresh optimizer each time:

- **turns merged**: the trainer as it runs, where a turn whose prompt and reply begin a
  later turn's prompt is read inside that turn's row (``agents.scoring.prefix_hosts``);
- **a row per turn**: the same code with that merge turned off.

Prints the samples, the rows and tokens each way runs, the median update time of each and
their ratio, and the loss and gradient norm of both (they should agree to float rounding).
Writes runs/bench/perf_turns.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spin-waiting threads on a shared CPU

import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

OWN = {"repeats": "3", "out": "runs/bench"}


def split_args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """This benchmark's own keys, and the rest for the trainer's config."""
    own, rest = dict(OWN), []
    for item in argv:
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"unknown argument {item!r}; pass key=value")
        if key in OWN:
            own[key] = value
        else:
            rest.append(item)
    if not own["repeats"].isdigit() or int(own["repeats"]) < 1:
        raise SystemExit(f"repeats must be a positive integer, got {own['repeats']!r}")
    return own, rest


def turn_samples(episodes: list[Any]) -> list[Any]:
    """Every non-empty turn as a sample on weight version 0, advantages alternating +1/-1."""
    from trainers.samples import Sample

    samples = []
    for episode in episodes:
        for turn in episode.turns:
            c = turn.completion
            if c.completion_ids:
                sign = 1.0 if len(samples) % 2 else -1.0
                samples.append(Sample(c.prompt_ids, c.completion_ids, c.logprobs, [sign] * len(c.completion_ids),
                                      0, c.temperature))
    return samples


def main(argv: list[str] | None = None) -> int:
    own, overrides = split_args(sys.argv[1:] if argv is None else argv)
    import torch

    import agents.scoring as scoring_module
    import trainers.update as update_module
    from trainers.config import TrainConfig, apply_overrides
    from trainers.loop import Trainer
    from trainers.rundir import RunDir

    folder = Path(tempfile.mkdtemp(prefix="perf_turns-"))
    config = apply_overrides(TrainConfig(), ["env=chat", *overrides, "eval_tasks=0", "progress=false", f"out={folder}"])
    trainer = Trainer(config, RunDir(folder))
    merge = scoring_module.prefix_hosts

    def use(hosts_of: Any) -> None:  # both modules read prefix_hosts by name
        scoring_module.prefix_hosts = update_module.prefix_hosts = hosts_of

    try:
        samples = turn_samples(trainer.collect_and_score(1).episodes)
        if not samples:
            raise SystemExit("the rollout gave no non-empty turn to train on")
        prompts, replies = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
        hosts = set(merge(prompts, replies))
        shape = {"samples": len(samples), "turn_tokens": sum(len(p) + len(r) for p, r in zip(prompts, replies)),
                 "merged_rows": len(hosts), "merged_tokens": sum(len(prompts[h]) + len(replies[h]) for h in hosts)}
        start = {k: v.detach().clone() for k, v in trainer.train_model.named_parameters() if v.requires_grad}
        ways = {"turns merged": merge, "a row per turn": lambda p, c: list(range(len(p)))}
        times: dict[str, list[float]] = {name: [] for name in ways}
        stats: dict[str, dict[str, float]] = {}
        for _ in range(int(own["repeats"])):
            for name, hosts_of in ways.items():
                use(hosts_of)
                with torch.no_grad():
                    for key, value in trainer.train_model.named_parameters():
                        if key in start:
                            value.copy_(start[key])
                trainer.optimizer.state.clear()
                began = time.perf_counter()
                row = update_module.train_step(trainer.train_model, trainer.optimizer, samples, trainer.config, 0,
                                               trainer.policy.tokenizer.pad_token_id, trainer.kl_reference)
                times[name].append(time.perf_counter() - began)
                stats[name] = {"loss/total": row["loss/total"], "loss/grad_norm": row["loss/grad_norm"]}
    finally:
        use(merge)
        trainer.close()
    medians = {name: statistics.median(t) for name, t in times.items()}
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result = {"time": stamp, "env": config.env, "overrides": overrides, **shape, "update_s": times,
              "median_s": medians, "ratio": medians["a row per turn"] / medians["turns merged"], "stats": stats}
    out = Path(own["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf_turns.json").write_text(json.dumps(result, indent=2))
    print(f"{stamp}, env={config.env}: {shape['samples']} samples, {shape['turn_tokens']} tokens as a row per turn, "
          f"{shape['merged_rows']} rows of {shape['merged_tokens']} tokens merged")
    for name in ways:
        print(f"  {name}: update {medians[name]:.2f} s (median of {own['repeats']}: "
              f"{', '.join(f'{t:.2f}' for t in times[name])}), loss {stats[name]['loss/total']:.6f}, "
              f"grad norm {stats[name]['loss/grad_norm']:.5f}")
    print(f"  merged is {result['ratio']:.2f}x as fast; saved {out / 'perf_turns.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
