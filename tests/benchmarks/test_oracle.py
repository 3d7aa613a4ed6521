"""``benchmarks.run policy=oracle``: each family's ground truth, replayed through a real env,
scores 100% and writes the same files as a model's run; a suite or task without an oracle is
refused with the ones that have one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.run import EvalConfig
from benchmarks.run import main as eval_main
from tests.helpers import require, require_backend
from trainers.config import apply_overrides

FILES = ("results.json", "results.md", "results.png", "transcripts.jsonl", "episodes.jsonl")


def _oracle_run(tmp_path: Path, suite: str, *argv: str) -> dict[str, Any]:
    """Run ``suite`` with the oracle; its results.json, after checking every file is written."""
    out = tmp_path / suite
    assert eval_main([f"suite={suite}", "policy=oracle", "parallel=1", *argv, f"out={out}"]) == 0
    for name in FILES:
        assert (out / name).is_file(), name
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return json.loads((out / "results.json").read_text())


def _assert_all_solved(result: dict[str, Any], tasks: int) -> None:
    s = result["summary"]
    assert (s["label"], s["policy"], s["tasks"], s["scored"], s["errors"]) == ("oracle", "oracle", tasks, tasks, 0)
    assert s["success_rate"] == 1.0 and s["success_ci95"][1] == 1.0, result["tasks"]
    assert all(r["stop_reason"] != "oracle_failed" for r in result["tasks"])


def test_bfcl_and_bfcl_multi_score_100_and_a_second_run_resumes(tmp_path: Path, capsys) -> None:
    result = _oracle_run(tmp_path, "bfcl", "tasks=3")
    _assert_all_solved(result, 3)
    assert result["summary"]["leaderboard"]["headline"] == 1.0
    transcript = json.loads((tmp_path / "bfcl" / "transcripts.jsonl").read_text().splitlines()[0])
    call = transcript["turns"][0]["reply"]["tool_calls"][0]["function"]  # the ground-truth call itself
    assert call["name"] == "calculate_triangle_area" and json.loads(call["arguments"]) == {"base": 10, "height": 5}

    log = tmp_path / "bfcl" / "episodes.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:2]) + "\n")  # a killed run: the header and one episode
    again = _oracle_run(tmp_path, "bfcl", "tasks=3")
    assert (again["summary"]["episodes_played"], again["summary"]["episodes_resumed"]) == (2, 1)
    assert again["tasks"] == result["tasks"]
    assert "model oracle: 100.0% solved (3/3, 95% CI 43.8%-100.0%)" in capsys.readouterr().out

    _assert_all_solved(_oracle_run(tmp_path, "bfcl_multi", "tasks=2"), 2)


@pytest.mark.slow
def test_tau2_with_the_scripted_user_scores_100(tmp_path: Path) -> None:
    result = _oracle_run(tmp_path, "tau2", "tasks=2")
    _assert_all_solved(result, 2)
    assert result["summary"]["leaderboard"]["pass_hat_k"]["all"]["1"] == 1.0


@pytest.mark.bwrap
def test_toolmath_runs_the_reference_program_in_the_sandbox(tmp_path: Path) -> None:
    require_backend("bwrap")
    result = _oracle_run(tmp_path, "toolmath", "tasks=2", "sandbox=bwrap")
    _assert_all_solved(result, 2)
    assert all(r["turns"] == 2 for r in result["tasks"])  # the python call, then the boxed answer


@pytest.mark.bwrap
def test_terminal_reference_solutions_score_100(tmp_path: Path) -> None:
    require_backend("bwrap")
    _assert_all_solved(_oracle_run(tmp_path, "terminal", "tasks=2", "sandbox=bwrap"), 2)


@pytest.mark.slow
@pytest.mark.bwrap
def test_swe_gold_patch_resolves_and_is_the_prediction(tmp_path: Path) -> None:
    require_backend("bwrap")
    import envs.swe as swe

    require(Path(swe.swe_rootfs(), "usr/bin/python3").exists(), "the SWE rootfs is not built")
    result = _oracle_run(tmp_path, "swe", "tasks=1", "sandbox=bwrap")
    _assert_all_solved(result, 1)
    prediction = json.loads((tmp_path / "swe" / "predictions.jsonl").read_text())
    assert prediction["instance_id"] == result["tasks"][0]["task_id"]
    assert prediction["model_name_or_path"] == "oracle" and prediction["model_patch"].startswith("diff --git")


@pytest.mark.browser
def test_miniwob_oracles_score_100_in_chromium(tmp_path: Path) -> None:
    _require_miniwob()
    _assert_all_solved(_oracle_run(tmp_path, "miniwob", "tasks=2"), 2)


def _require_miniwob() -> None:
    from envs.browser import browser_unavailable_reason
    from envs.gui.miniwob import MiniWoBUnavailable, html_dir

    reason = browser_unavailable_reason()
    require(reason is None, str(reason))
    try:
        html_dir()
    except MiniWoBUnavailable as exc:
        require(False, str(exc))


def test_miniwob_tasks_without_an_oracle_are_refused_by_name(tmp_path: Path, capsys) -> None:
    _require_miniwob()
    argv = ["suite=miniwob", "policy=oracle", "env_kwargs.tasks=click-test,click-widget", f"out={tmp_path}"]
    assert eval_main(argv) == 2
    err = capsys.readouterr().err
    assert "1 task of suite=miniwob has no oracle (click-widget)" in err and "click-test, " in err
    assert "drop env_kwargs.tasks=" in err and not (tmp_path / "episodes.jsonl").exists()


@pytest.mark.parametrize(("argv", "said"), [
    (["suite=chat"], "suite=chat has no oracle (a reply is judged against hidden preferences"),
    (["suite=bfcl", "model=runs/x"], "model='runs/x' does not apply to policy=oracle"),
    (["suite=all", "suites=bfcl,chat"], "suites= names chat, which has no oracle; policy=oracle runs on terminal,"),
    (["suite=tau2", "env_kwargs.user=policy"], "env_kwargs.user=policy has the evaluated model play tau2's user"),
])
def test_what_has_no_oracle_is_a_config_error_naming_what_has_one(argv: list[str], said: str, capsys) -> None:
    assert eval_main([*argv, "policy=oracle"]) == 2
    err = capsys.readouterr().err
    assert said in err
    if argv == ["suite=chat"]:
        assert "policy=oracle runs on terminal, intercode, swe, miniwob, bfcl, bfcl_multi, tau2, toolmath" in err


def test_suite_all_runs_the_suites_with_an_oracle_and_names_the_skipped(tmp_path: Path, monkeypatch, capsys) -> None:
    """Every suite here is chat and bfcl (the others need sandboxes and a browser): bfcl runs, chat is skipped."""
    import benchmarks.run
    import benchmarks.suite_all

    out = tmp_path / "all"
    config = apply_overrides(EvalConfig(), ["suite=all", "policy=oracle", "tasks=2", "parallel=1", f"out={out}"])
    suites = {name: benchmarks.run.SUITES[name] for name in ("chat", "bfcl")}
    monkeypatch.setattr(benchmarks.run, "SUITES", suites)
    monkeypatch.setattr(benchmarks.suite_all, "SUITES", suites)
    benchmarks.suite_all.evaluate_all(config)
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["suite"], r["solved"], r["scored"]) for r in summary["suites"]] == [("bfcl", 2, 2)]
    assert list(summary["skipped"]) == ["chat"] and not (out / "chat").exists()
    assert "Skipped: chat (no oracle: a reply is judged" in (out / "summary.md").read_text()
    assert "suite=chat skipped: no oracle" in capsys.readouterr().err


def test_a_perfect_score_plots_although_wilson_rounds_below_one(tmp_path: Path) -> None:
    """Wilson's upper bound of 20/20 comes out as 0.9999999999999999: the error bar above the
    bar must not go negative (matplotlib refuses it), which a 100% oracle run hits."""
    from benchmarks.plots import plot_bars
    from benchmarks.stats import wilson_interval

    assert wilson_interval(20, 20)[1] < 1.0
    plot_bars({"oracle": [("arithmetic", 20, 20), ("none", 0, 6)]}, tmp_path / "p.png", "oracle", "kind")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
