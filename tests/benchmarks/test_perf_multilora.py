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


def test_users_on_disk_serves_the_same_adapter_with_others_on_disk_and_removes_them(tmp_path) -> None:
    from benchmarks.perf_multilora import users_on_disk

    result = users_on_disk(others=3, repeats=2, rank=2, new_tokens=4, root=tmp_path)
    phases = result["phases"]
    assert list(phases) == ["before", "many", "after"]
    assert [p["users_on_disk"] for p in phases.values()] == [1, 4, 1]  # the probe, then 3 copies beside it
    for phase in phases.values():
        assert len(phase["latencies_s"]) == 2 and phase["median_s"] > 0 and phase["cold_s"] > 0
    # one adapter, greedy: every phase answers alike, with the probe's version 1 (not the base's 0)
    assert len({tuple(r) for r in result["replies"].values()}) == 1 and result["replies"]["many"][1] == "clawgym-v1"
    assert result["disk_bytes"] > 4 * 2 * 576 * 2 * 4  # four users' adapters at least
    baseline = sorted(phases["before"]["latencies_s"] + phases["after"]["latencies_s"])
    assert result["baseline_s"] == pytest.approx((baseline[1] + baseline[2]) / 2)
    assert result["ratio"] == pytest.approx(phases["many"]["median_s"] / result["baseline_s"])
    assert list(tmp_path.iterdir()) == []  # the run dir and the copies are gone


def test_on_disk_must_be_a_count() -> None:
    with pytest.raises(SystemExit, match="on_disk must be a whole number"):
        main(["on_disk=many"])
