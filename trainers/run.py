"""``python -m trainers.run [key=value ...]``: train an agent on a clawgym env.

With no arguments it runs the personal-chat demo on the default model: the simulated
user's hidden preferences, learned from its replies with ``method=combine``.

    python -m trainers.run env=chat parallel=8 method=combine steps=8
    python -m trainers.run env=guess method=grpo reward=env judge.kind=env
    python -m trainers.run env=toolmath method=sft           # demonstrations first (trainers/sft.py)
    python -m trainers.run out=runs/mine          # resumes runs/mine from its last checkpoint
    python -m trainers.run env=chat env_kwargs.persona=all adapters=per_user   # an adapter per user (trainers/per_user.py)
    torchrun --nproc-per-node 2 -m trainers.run parallel=4   # data-parallel ranks (trainers/distributed.py)

Every key of ``trainers.config.TrainConfig`` can be set (``python -m trainers.run --help``
lists them). The run folder gets config.yaml, metrics.jsonl, TensorBoard events,
checkpoints and learning_curve.png.
"""

from __future__ import annotations

import os

# Spin-waiting OpenMP threads slow torch >10x when the two cores are shared (rollout
# and judge threads, other jobs); this must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from trainers.config import ConfigError, TrainConfig, apply_overrides, config_help, from_dict, to_dict  # noqa: E402

if TYPE_CHECKING:
    from trainers.distributed import Ranks


def _help() -> str:
    return config_help(TrainConfig, __doc__ or "")


def resolve_config(argv: list[str]) -> tuple[TrainConfig, Path]:
    """Overrides on the defaults, or on a resumed run's saved config (overrides still win)."""
    config = apply_overrides(TrainConfig(), argv)
    out = Path(config.out) if config.out else Path("runs") / f"{config.env}-{config.method}-{time.strftime('%Y%m%d-%H%M%S')}"
    saved = out / "config.yaml"
    if saved.exists():
        import yaml

        data = yaml.safe_load(saved.read_text())
        # The saved device is checked when the saved config is rebuilt, so a run moved to
        # another machine needs its device=/dtype= override applied before that check.
        data.update(item.split("=", 1) for item in argv if item.split("=", 1)[0] in ("device", "dtype"))
        config = apply_overrides(from_dict(data), argv)
        saved_adapters = data.get("adapters", "shared")
        if config.adapters != saved_adapters and (out / "checkpoints" / "latest").exists():
            raise ConfigError(f"run dir {out} trains adapters={saved_adapters}; resume it with that (drop "
                              f"adapters=), or start a new out= for adapters={config.adapters}")
    return dataclasses.replace(config, out=str(out)), out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(_help())
        return 0
    try:
        config, out = resolve_config(argv)
    except ConfigError as exc:
        print(f"trainers.run: {exc}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    from trainers.distributed import DistributedError, adopt, start_ranks

    try:  # several ranks under torchrun: all train rank 0's config (which read a resumed run's)
        ranks = start_ranks(config.placement()[0], config.dist_timeout_s)
        config = adopt(config, ranks, asked_world=any(a.split("=", 1)[0] == "world_size" for a in argv))
    except (ConfigError, DistributedError) as exc:
        print(f"trainers.run: {exc}", file=sys.stderr)
        return 2
    try:
        return _train(config, Path(config.out), ranks)
    finally:
        ranks.close()


def _train(config: TrainConfig, out: Path, ranks: Ranks) -> int:
    """Build the trainer and run it; rank 0 alone writes ``out``."""
    from agents.engines import EngineError
    from trainers.distributed import DistributedError, weights_digest
    from trainers.loop import Trainer
    from trainers.offline import OfflineTrainer
    from trainers.preemption import Preempted, stop_on_sigterm
    from trainers.rundir import RunDir
    from trainers.sft import SFTTrainer

    who = f"trainers.run ({ranks.label()})" if ranks.distributed else "trainers.run"
    run = RunDir(out) if ranks.main else None
    if run is not None:
        run.save_config(to_dict(config))
    with stop_on_sigterm():
        try:
            if config.compute == "tinker":
                from trainers.tinker.trainer import TinkerTrainer

                trainer = TinkerTrainer(config, run)
            elif config.adapters == "per_user":
                from trainers.per_user import UserTrainer

                trainer = UserTrainer(config, run, ranks)
            else:
                trainer = (SFTTrainer(config, run) if config.method == "sft" else OfflineTrainer(config, run)
                           if config.data else Trainer(config, run, ranks))
        except (FileNotFoundError, KeyError, RuntimeError, ValueError) as exc:
            print(f"{who}: {exc}", file=sys.stderr)
            return 2
        except Preempted as stop:
            print(f"{who}: stopped by {stop.signal_name} while starting; nothing to keep", file=sys.stderr)
            return stop.code
        if run is not None:
            run.save_config(to_dict(trainer.config))  # with what the env resolved (temperature)
        started = time.perf_counter()
        try:
            last = trainer.train()
        except EngineError as exc:  # the rollout server failed for good: say why, no traceback
            print(f"{who}: {exc}", file=sys.stderr)
            return 2
        except DistributedError as exc:  # another rank failed, or the ranks' weights differ
            print(f"{who}: {exc}", file=sys.stderr)
            return 1
        except Preempted as stop:  # timeout, a scheduler's preemption: end as a normal exit would
            kept = trainer.checkpoint_if_stopped()
            where = ("rank 0 keeps the checkpoints" if run is None else f"step {kept} is checkpointed" if kept
                     else "no step is checkpointed yet")
            print(f"{who}: stopped by {stop.signal_name} during step {trainer.step + 1}; {where}; "
                  f"the same command resumes from it (run dir {out})", file=sys.stderr)
            return stop.code
        finally:
            trainer.close()
    digest = f"; trainable weights blake2b {weights_digest(trainer._trainable_state())}" if ranks.distributed else ""
    if run is None:
        print(f"{who}: done, {trainer.step} steps{digest}")
        return 0
    plot_keys = [trainer.headline_key, "loss/nll" if config.method == "sft" else "reward/return"]
    curve = run.plot(plot_keys, f"{config.method} on {config.env}")
    summary = ", ".join(f"{k}={last[k]:.3f}" for k in plot_keys if k in last)
    print(f"done: {trainer.step} steps in {time.perf_counter() - started:.0f} s; {summary}; run dir {out}"
          + (f"; curve {curve}" if curve else "") + digest)
    return 0


if __name__ == "__main__":
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):  # under torchrun: an uncaught error reaches its summary
        from torch.distributed.elastic.multiprocessing.errors import record

        sys.exit(record(main)())
    sys.exit(main())
