"""benchmarks.multiuser end to end on a tiny configuration: real ``trainers.serve`` subprocesses,
personas talking through the ``openai`` client, the servers learning between rounds."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from benchmarks.multiuser import main, parse, spread

PERSONAS = ["student", "teacher"]
TINY = ["personas=student,teacher", "rounds=1", "conversations=2", "eval_tasks=1", "max_tokens=8", "parallel=2",
        "train_after_s=0", "serve.epochs=1"]


@pytest.mark.parametrize("argv, words", [
    (["arms=per_user,solo"], "arms must be a comma list of per_user, shared, alone"),
    (["rounds=-1"], "rounds must be a whole number"),
    (["conversations=0"], "conversations must be a positive integer"),
    (["users=4"], "unknown argument 'users=4'"),
    (["serve.lr"], "serve.lr needs a value"),
])
def test_bad_arguments_are_refused(argv, words) -> None:
    with pytest.raises(SystemExit, match=words):
        parse(argv)


def test_unknown_personas_are_refused() -> None:
    with pytest.raises(SystemExit, match="personas must be all or a comma list of: engineer, friend"):
        main(["personas=student,nobody"])


def test_server_keys_pass_through_and_spread_reads_median_min_max() -> None:
    args, server = parse(["rounds=0", "serve.lr=5e-4", "serve.judge.kind=lexical"])
    assert args["rounds"] == "0" and server == ["lr=5e-4", "judge.kind=lexical"]
    assert spread([0.5]) == "0.50" and spread([0.25, 1.0, 0.5]) == "0.50 [0.25-1.00]"


def _trained_users(run: Path) -> dict[int, str]:
    """Turn id -> the user of its session, for every turn the server trained on."""
    with sqlite3.connect(run / "live.sqlite") as db:
        return dict(db.execute("SELECT t.id, s.user_id FROM turns t JOIN sessions s ON s.id = t.session_id "
                               "WHERE t.trained_version > 0").fetchall())


def test_per_user_and_shared_side_by_side_each_persona_trains_only_its_own_adapter(tmp_path: Path, capsys) -> None:
    assert main([*TINY, "arms=per_user,shared", f"out={tmp_path}"]) == 0
    result = json.loads((tmp_path / "multiuser.json").read_text())
    rounds = result["rounds"]["0"]
    assert set(rounds) == {"per_user", "shared"}
    for arm in rounds:
        assert set(rounds[arm]) == set(PERSONAS)
        for curve in rounds[arm].values():
            assert len(curve) == 2 and all(0 <= r["rate"] <= 1 for r in curve)  # round 0 and round 1
            assert curve[0]["versions"] == [0] and curve[0]["train_met"] is None
        assert set(result["final"][arm]) == {*PERSONAS, "mean"}

    # per_user: each persona answered by its own adapter, advanced by its own turns only
    run = tmp_path / "multiuser-runs" / "s0" / "per_user"
    trained = _trained_users(run)
    for persona in PERSONAS:
        state = json.loads((run / "adapters" / persona / "state.json").read_text())
        assert state["version"] >= 1 and rounds["per_user"][persona][-1]["versions"] == [state["version"]]
        assert state["turn_ids"] and {trained[t] for t in state["turn_ids"]} == {persona}
    assert sorted(p.name for p in (run / "adapters").iterdir()) == PERSONAS
    per_user_updates = sum(json.loads((run / "adapters" / p / "state.json").read_text())["version"] for p in PERSONAS)
    # shared: one adapter, one version sequence for everyone; its turns carry no user's adapter
    shared = tmp_path / "multiuser-runs" / "s0" / "shared"
    shared_versions = {v for curve in rounds["shared"].values() for v in curve[-1]["versions"]}
    assert len(shared_versions) == 1 and shared_versions.pop() >= 1
    assert not (shared / "adapters").exists() or not any((shared / "adapters").iterdir())
    assert per_user_updates >= len(PERSONAS)

    out = capsys.readouterr().out
    assert re.search(r"seed 0 round 1 \(\d+ s\).*\n\s+persona\s+per_user \(v\)\s+shared \(v\)", out)
    for persona in [*PERSONAS, "mean"]:
        assert re.search(rf"^  {persona}\s+[\d.]+ .*[\d.]+", out, re.M), persona
    table = (tmp_path / "multiuser.md").read_text()
    assert "| persona | per_user | shared |" in table
    for persona in PERSONAS:
        assert re.search(rf"\| {persona} \| [\d.]+ \| [\d.]+ \|", table), persona
        assert f"| per_user | {persona} |" in table and f"| shared | {persona} |" in table


@pytest.mark.slow
def test_the_alone_arm_gives_each_persona_its_own_server(tmp_path: Path) -> None:
    assert main([*TINY, "arms=per_user,alone", f"out={tmp_path}"]) == 0
    result = json.loads((tmp_path / "multiuser.json").read_text())
    assert set(result["rounds"]["0"]["alone"]) == set(PERSONAS)
    for persona in PERSONAS:
        run = tmp_path / "multiuser-runs" / "s0" / "alone" / persona
        with sqlite3.connect(run / "live.sqlite") as db:
            systems = {json.loads(m)[0]["content"] for (m,) in db.execute("SELECT messages FROM turns")}
        assert systems == {f"You are a helpful personal assistant. The user is '{persona}'."}  # only this persona
        assert result["rounds"]["0"]["alone"][persona][-1]["versions"][0] >= 1
    assert "| persona | per_user | alone |" in (tmp_path / "multiuser.md").read_text()
