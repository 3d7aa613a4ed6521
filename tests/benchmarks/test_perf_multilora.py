"""benchmarks.perf_multilora: a mixed-adapter batch against the merged single adapter, on tiny sizes
(no timing thresholds: the figures are checked for presence and sanity, not speed)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.perf_multilora import MERGED, main


@pytest.mark.parametrize("argv, words", [(["users=4"], "unknown argument 'users=4'"),
                                         (["batch=0"], "batch must be a positive integer")])
def test_bad_arguments_are_refused(argv, words) -> None:
    with pytest.raises(SystemExit, match=words):
        main(argv)


@pytest.mark.slow
def test_every_variant_is_measured_against_the_merged_adapter(tmp_path, capsys) -> None:
    assert main(["batch=4", "adapters=1,2,4", "new_tokens=2", "repeats=1", "rank=4", f"out={tmp_path}"]) == 0
    result = json.loads((tmp_path / "perf_multilora.json").read_text())
    variants = [MERGED, "bank, base rows", "bank, 1 distinct", "bank, 2 distinct", "bank, 4 distinct",
                "bank, 4 distinct, shuffled"]
    speeds = result["tokens_per_s"]
    assert list(speeds) == variants
    for name, speed in speeds.items():
        for key in ("tok_s", "tok_cpu_s"):
            ratio = speed[key] / speeds[MERGED][key]
            assert math.isfinite(speed[key]) and speed[key] > 0, (name, key)
            assert 0.01 < ratio < 100, (name, key, ratio)  # same work, same machine: the same order
    assert result["adapter_bytes"] == 4 * result["adapter_params"] > 0
    assert result["file_bytes"] >= result["adapter_bytes"] and result["cold_load_s"] > 0
    table = (tmp_path / "perf_multilora.md").read_text()
    for name in variants:
        assert f"| {name} |" in table, name
    assert f"| {MERGED} | {speeds[MERGED]['tok_s']:.1f} | 1.00x |" in table
    assert "the merged single adapter's tokens per CPU second" in capsys.readouterr().out
