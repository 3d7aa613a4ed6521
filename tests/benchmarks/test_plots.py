"""benchmarks.plots: the bars a results.png draws."""

from __future__ import annotations

from pathlib import Path

from benchmarks.plots import plot_bars, success_groups


def test_bars_group_by_category_else_by_task_and_leave_errors_out(tmp_path: Path) -> None:
    rows = [{"task_id": "a", "category": "simple", "success": 1.0},
            {"task_id": "b", "category": "simple", "success": 0.0},
            {"task_id": "c", "category": "multiple", "success": 0.5},
            {"task_id": "d", "category": "multiple", "success": None}]  # an env error: no bar height
    assert success_groups(rows) == ("category", [("simple", 1.0, 2), ("multiple", 0.5, 1)])
    no_category = [{**r, "category": ""} for r in rows] + [{"task_id": "a", "category": "", "success": 1.0}]
    assert success_groups(no_category) == ("task", [("a", 2.0, 2), ("b", 0.0, 1), ("c", 0.5, 1), ("d", 0.0, 0)])
    plot_bars({"m1": [("simple", 1.0, 2)], "m2": [("simple", 0.0, 2), ("other", 1.0, 1)]}, tmp_path / "x.png", "t", "c")
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
