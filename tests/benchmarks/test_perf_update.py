"""benchmarks.perf_update: each memory setting measured in its own process, on the real model."""

from __future__ import annotations

import json

import pytest

from benchmarks.perf_update import main, parse


@pytest.mark.parametrize("argv, words", [(["sample=4"], "unknown argument 'sample=4'"),
                                         (["repeats=0"], "repeats must be a positive integer")])
def test_bad_arguments_are_refused(argv, words) -> None:
    with pytest.raises(SystemExit, match=words):
        parse(argv)


@pytest.mark.slow
def test_checkpointing_and_small_passes_lower_the_updates_peak(tmp_path, capsys) -> None:
    assert main(["samples=2", "prompt=60", "reply=10", "repeats=1", f"out={tmp_path}"]) == 0
    rows = {r["setting"]: r for r in json.loads((tmp_path / "perf_update.json").read_text())["rows"]}
    update = {label: r["peak_mb"] - r["before_mb"] for label, r in rows.items()}
    assert rows["one pass"]["peak_ratio"] == 1.0 and rows["one pass"]["time_ratio"] == 1.0
    assert update["gradient_checkpointing=true"] < update["one pass"]
    assert update["microbatch_size=1, gradient_checkpointing=true"] < update["microbatch_size=1"] < update["one pass"]
    assert "| microbatch_tokens=70 |" in (tmp_path / "perf_update.md").read_text()
