"""``python -m trainers.run env=swe`` runs as docs/envs/swe.md writes it, on the shipped instances,
with small settings: one step, the real default model, real sandboxes and real grading."""

from __future__ import annotations

import json

import pytest

from envs.swe.env import DEFAULT_INSTANCES
from tests.helpers import require_backend
from trainers.run import main


@pytest.mark.slow
@pytest.mark.bwrap
def test_one_training_step_on_the_swe_env(tmp_path):
    require_backend("bwrap")
    assert DEFAULT_INSTANCES.exists()
    out = tmp_path / "run"
    code = main(["env=swe", "parallel=2", "steps=1", "batch_size=1", "group_size=2", "max_new_tokens=48",
                 "env_kwargs.max_turns=2", "sandbox=bwrap", "eval_tasks=1", "progress=false", f"out={out}"])
    assert code == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "rollout/episodes" in r)
    assert step["rollout/episodes"] == 2 and step["rollout/env_errors"] == 0
    assert step["rollout/turns"] >= 2  # each episode played its turns; grading ran at the budget's end
    assert "eval/env_return" in rows[-1]
    assert (out / "checkpoints").is_dir() and (out / "learning_curve.png").exists()
