"""benchmarks.perf_turns: a real rollout's turns, updated merged and a row per turn."""

from __future__ import annotations

import json

import pytest

from benchmarks.perf_turns import main, split_args


def test_its_own_keys_are_split_from_the_trainers_and_bad_ones_refused() -> None:
    own, rest = split_args(["repeats=2", "env=terminal", "max_new_tokens=8"])
    assert own["repeats"] == "2" and rest == ["env=terminal", "max_new_tokens=8"]
    with pytest.raises(SystemExit, match="repeats must be a positive integer"):
        split_args(["repeats=0"])
    with pytest.raises(SystemExit, match="pass key=value"):
        split_args(["terminal"])


@pytest.mark.slow
def test_merged_turns_run_fewer_rows_to_the_same_update(tmp_path, capsys) -> None:
    assert main(["env_kwargs.persona=friend", "env_kwargs.patience=2", "batch_size=1", "group_size=2",
                 "max_new_tokens=8", "temperature=1.0", "repeats=1", f"out={tmp_path}"]) == 0
    result = json.loads((tmp_path / "perf_turns.json").read_text())
    assert result["samples"] == 4  # 2 episodes x 2 turns
    assert result["merged_rows"] < result["samples"] and result["merged_tokens"] < result["turn_tokens"]
    merged, apart = result["stats"]["turns merged"], result["stats"]["a row per turn"]
    assert merged["loss/total"] == pytest.approx(apart["loss/total"], rel=1e-4, abs=1e-6)
    assert merged["loss/grad_norm"] == pytest.approx(apart["loss/grad_norm"], rel=1e-4)
    assert "as fast" in capsys.readouterr().out
