"""A run's folder: resolved config, metrics (JSONL + TensorBoard), checkpoints, the plot.

Its layout::

    runs/<name>/config.yaml        the resolved config (what actually ran)
    runs/<name>/metrics.jsonl      one line per step: {"step": k, "<namespace>/<name>": value, ...}
    runs/<name>/eval_replies.jsonl one line per held-out episode per evaluation: step, task, first reply, metrics
    runs/<name>/tb/                TensorBoard events
    runs/<name>/checkpoints/step_000k/   trainable weights, optimizer, trainer state
                                         (adapters=per_user: and users/<id>/, each user's adapter)
    runs/<name>/adapters/<id>/     adapters=per_user: each user's adapter as it trains
    runs/<name>/checkpoints/latest       the name of the newest complete checkpoint
    runs/<name>/learning_curve.png

Checkpoints are written to a temporary folder and renamed into place, and ``latest`` is
replaced atomically, so a trainer killed at any instant resumes from a whole checkpoint.
On resume, metric lines past that checkpoint are dropped: no step is lost or duplicated.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.ckpt_dir = path / "checkpoints"
        self.metrics_path = path / "metrics.jsonl"
        self.replies_path = path / "eval_replies.jsonl"
        self.path.mkdir(parents=True, exist_ok=True)
        self._tb: Any = None

    # ---- config ----------------------------------------------------------------------
    def save_config(self, config: dict[str, Any]) -> None:
        _atomic_write(self.path / "config.yaml", yaml.safe_dump(config, sort_keys=False))

    def load_config(self) -> dict[str, Any] | None:
        path = self.path / "config.yaml"
        return yaml.safe_load(path.read_text()) if path.exists() else None

    # ---- metrics ---------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in sorted(metrics.items())}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        writer = self._writer()
        if writer is not None:
            for key, value in row.items():
                if key != "step":
                    writer.add_scalar(key, value, step)
            writer.flush()

    def _writer(self) -> Any:
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard missing: JSONL still has everything
                self._tb = False
            else:
                self._tb = SummaryWriter(str(self.path / "tb"))
        return self._tb or None

    def metrics(self) -> list[dict[str, float]]:
        return _read_jsonl(self.metrics_path)

    def log_replies(self, step: int, rows: list[dict[str, Any]]) -> None:
        """The held-out episodes of one evaluation (what the curve's numbers were made of)."""
        with self.replies_path.open("a") as f:
            f.writelines(json.dumps({"step": step, **row}) + "\n" for row in rows)

    def replies(self) -> list[dict[str, Any]]:
        return _read_jsonl(self.replies_path)

    def truncate_metrics(self, last_step: int) -> None:
        """Drop metric and reply lines past ``last_step`` (a resumed run redoes those steps)."""
        for path, rows in ((self.metrics_path, self.metrics()), (self.replies_path, self.replies())):
            if path.exists():
                kept = [r for r in rows if r["step"] <= last_step]
                _atomic_write(path, "".join(json.dumps(r) + "\n" for r in kept))

    # ---- checkpoints -----------------------------------------------------------------
    def save_checkpoint(self, step: int, weights: dict[str, torch.Tensor], optimizer: dict[str, Any],
                        state: dict[str, Any], folders: dict[str, Path] | None = None) -> Path:
        """``folders``: directories copied into the checkpoint under their names (with
        ``adapters=per_user``, every user's adapter), inside the same atomic rename."""
        from safetensors.torch import save_file

        self.ckpt_dir.mkdir(exist_ok=True)
        final = self.ckpt_dir / f"step_{step:05d}"
        tmp = self.ckpt_dir / f".tmp_step_{step:05d}_{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp / "weights.safetensors"))
        torch.save(optimizer, tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps(state))
        for name, folder in (folders or {}).items():  # a writer's temporary files (dot names) stay behind
            shutil.copytree(folder, tmp / name, ignore=shutil.ignore_patterns(".*"))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _atomic_write(self.ckpt_dir / "latest", final.name)
        return final

    def latest_checkpoint(self) -> Path | None:
        pointer = self.ckpt_dir / "latest"
        if not pointer.exists():
            return None
        path = self.ckpt_dir / pointer.read_text().strip()
        return path if (path / "state.json").exists() else None

    def load_checkpoint(self, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
        from safetensors.torch import load_file

        weights = load_file(str(path / "weights.safetensors"))
        # On the CPU, so a GPU run resumes on a CPU machine; AdamW's load_state_dict moves
        # each state tensor to its parameter's device.
        optimizer = torch.load(path / "optimizer.pt", weights_only=False, map_location="cpu")
        return weights, optimizer, json.loads((path / "state.json").read_text())

    def load_weights(self, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """A checkpoint's trained weights and state, without its optimizer."""
        from safetensors.torch import load_file

        return load_file(str(path / "weights.safetensors")), json.loads((path / "state.json").read_text())

    # ---- plot ------------------------------------------------------------------------
    def plot(self, keys: list[str], title: str) -> Path | None:
        rows = self.metrics()
        series = {k: [(r["step"], r[k]) for r in rows if k in r] for k in keys}
        series = {k: v for k, v in series.items() if v}
        if not series:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6))
        for key, points in series.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
        ax.set_xlabel("optimizer step (weight version)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        out = self.path / "learning_curve.png"
        fig.savefig(out, dpi=120)
        plt.close(fig)
        return out

    def close(self) -> None:
        if self._tb:
            self._tb.close()


def find_checkpoint(where: str) -> tuple[RunDir, Path, dict[str, Any]]:
    """``where`` (a run directory, meaning its latest checkpoint, or one checkpoint directory)
    as its run, the checkpoint's path and the run's saved config; FileNotFoundError saying
    what is missing otherwise."""
    path = Path(where).expanduser()
    if (path / "weights.safetensors").exists():
        checkpoint, run = path, RunDir(path.parent.parent)
    elif (path / "checkpoints").is_dir():
        run = RunDir(path)
        found = run.latest_checkpoint()
        if found is None:
            raise FileNotFoundError(f"run dir {where} has no complete checkpoint yet")
        checkpoint = found
    else:
        raise FileNotFoundError(f"{where} is neither a run directory (with checkpoints/) nor a checkpoint "
                                "directory (with weights.safetensors)")
    config = run.load_config()
    if config is None:
        raise FileNotFoundError(f"{run.path} has no config.yaml, so the base model of checkpoint "
                                f"{checkpoint} is unknown; pass the run directory a trainer wrote")
    return run, checkpoint, config


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill mid-write
            continue
    return rows


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
