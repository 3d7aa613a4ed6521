"""benchmarks.compare: runs side by side, the difference to the first with Newcombe's interval,
checked on hand-computed counts and on two real runs of the default model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.compare import main as compare_main
from benchmarks.run import main as eval_main

PNG = b"\x89PNG\r\n\x1a\n"


def _results(folder: Path, label: str, outcomes: dict[str, tuple[int, int]]) -> Path:
    """A results.json as benchmarks.run writes it: ``outcomes`` maps a category to (solved, episodes)."""
    rows: list[dict[str, Any]] = []
    for category, (solved, episodes) in outcomes.items():
        rows += [{"task_id": f"{category}-{n}", "category": category, "success": float(n < solved),
                  "return": float(n < solved), "turns": 1} for n in range(episodes)]
    rows.append({"task_id": "broken", "category": "x", "success": None, "return": 0.0, "turns": 0})  # an env error
    solved = sum(s for s, _ in outcomes.values())
    scored = sum(n for _, n in outcomes.values())
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "summary": {"suite": "bfcl", "split": "all", "label": label, "solved": solved, "scored": scored},
        "tasks": rows}))
    return folder


def test_the_table_gives_newcombe_intervals_for_each_suite_and_shared_category(tmp_path: Path, capsys) -> None:
    # category x: 56/70 (first) vs 48/80; y: 9/10 vs 3/10 (Newcombe's own examples, worked in test_stats):
    #   x: 48/80 - 56/70 = -0.2, interval -(0.2 + 0.133875) to -(0.2 - 0.147571) = -33.4% to -5.2%
    #   y: 3/10 - 9/10 = -0.6, interval -80.9% to -17.1%
    # the suite: 65/80 vs 51/90 (the env error counts in neither)
    first = _results(tmp_path / "a", "big", {"x": (56, 70), "y": (9, 10)})
    second = _results(tmp_path / "b", "small", {"x": (48, 80), "y": (3, 10)})
    assert compare_main([str(first), str(second), "--out", str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    assert "| big | 81.2% (65/80) |" in printed and "| small | 56.7% (51/90) |" in printed
    x = printed[printed.index("#### bfcl: x"):]
    assert "| big | 80.0% (56/70) | 69.2% to 87.7% | (first) |" in x
    assert "| small | 60.0% (48/80) | 49.0% to 70.0% | -20.0% | -33.4% to -5.2% |" in x
    y = printed[printed.index("#### bfcl: y"):]
    assert "| small | 30.0% (3/10) | 10.8% to 60.3% | -60.0% | -80.9% to -17.1% |" in y
    assert (tmp_path / "cmp" / "compare.md").read_text() in printed
    assert (tmp_path / "cmp" / "compare.png").read_bytes()[:8] == PNG


def test_two_real_runs_compare_and_a_folder_without_results_is_named(tmp_path: Path, capsys) -> None:
    runs = []
    for tokens in (16, 4):
        runs.append(tmp_path / f"chat-{tokens}")
        assert eval_main(["suite=chat", "tasks=2", f"max_new_tokens={tokens}", f"out={runs[-1]}"]) == 0
        assert (runs[-1] / "results.png").read_bytes()[:8] == PNG
    capsys.readouterr()
    assert compare_main([*map(str, runs), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "#### chat (heldout)" in printed
    assert "| default (chat-16) |" in printed and "| default (chat-4) |" in printed  # same label: the folder
    assert "vs default (chat-16)" in printed and (tmp_path / "compare.png").read_bytes()[:8] == PNG

    assert compare_main([str(runs[0]), str(tmp_path / "nothing")]) == 2
    assert "has no results.json" in capsys.readouterr().err
