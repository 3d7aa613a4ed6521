"""benchmarks.run: a policy's task success on a suite, from the default model or a run."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.run import main as eval_main
from trainers.run import main as train_main


def test_default_model_and_a_trained_run_are_evaluated(tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval-default"
    assert eval_main(["suite=chat", "tasks=2", "max_new_tokens=16", f"out={out}"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["summary"]["tasks"] == 2 and 0.0 <= result["summary"]["success_rate"] <= 1.0
    assert "| " in (out / "results.md").read_text()

    run = tmp_path / "run"
    assert train_main(["steps=1", "batch_size=2", "group_size=2", "parallel=4", "max_new_tokens=16",
                       "eval_tasks=0", "progress=false", f"out={run}"]) == 0
    out = tmp_path / "eval-run"
    assert eval_main(["suite=chat", f"model={run}", "tasks=2", "max_new_tokens=16", f"out={out}"]) == 0
    assert json.loads((out / "results.json").read_text())["summary"]["label"] != "default"


def test_bad_arguments_are_named(capsys) -> None:
    assert eval_main(["suite=nope"]) == 2
    assert "suite='nope' is unknown" in capsys.readouterr().err
    assert eval_main(["model=/no/such/dir", "suite=chat", "tasks=1"]) == 2
