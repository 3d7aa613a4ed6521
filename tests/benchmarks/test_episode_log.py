"""benchmarks.episode_log: what a killed run leaves behind is read back without counting anything twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.episode_log import EpisodeLog
from trainers.config import ConfigError

PRINT = {"suite": "chat", "split": "heldout", "policy": "local", "model": "default", "seed": 0, "tasks": 2,
         "pick": "first", "episodes_per_task": 2, "max_context": 0, "temperature": 0.0, "max_new_tokens": 16, "env_kwargs": {}}


def _record(task: str, episode: int) -> dict:
    return {"task_id": task, "episode": episode, "row": {"task_id": task, "episode": episode}}


def test_a_line_cut_short_is_dropped_and_one_cut_at_its_end_is_kept(tmp_path: Path) -> None:
    log = EpisodeLog(tmp_path, PRINT)
    log.append([_record("a", 0), _record("b", 0)])
    whole = log.path.read_text()
    log.path.write_text(whole + json.dumps(_record("a", 1))[:20])  # killed while writing a line
    assert set(EpisodeLog(tmp_path, PRINT).done) == {("a", 0), ("b", 0)}
    assert log.path.read_text() == whole
    log.path.write_text(whole + json.dumps(_record("a", 1)))  # killed just before the newline
    resumed = EpisodeLog(tmp_path, PRINT)
    assert set(resumed.done) == {("a", 0), ("b", 0), ("a", 1)}
    resumed.append([_record("b", 1)])
    lines = log.path.read_text().splitlines()
    assert len(lines) == 5 and [json.loads(line)["episode"] for line in lines[1:]] == [0, 0, 1, 1]


def test_another_runs_folder_is_refused_naming_each_differing_key(tmp_path: Path) -> None:
    EpisodeLog(tmp_path, PRINT).append([_record("a", 0)])
    before = (tmp_path / "episodes.jsonl").read_text()
    other = {**PRINT, "temperature": 0.7, "env_kwargs": {"max_turns": 1}}
    with pytest.raises(ConfigError, match=r"holds episodes of another run \(temperature: 0.0 there, 0.7 now; "
                                          r"env_kwargs: \{\} there, \{'max_turns': 1\} now\)"):
        EpisodeLog(tmp_path, other)
    assert (tmp_path / "episodes.jsonl").read_text() == before


def test_a_log_written_before_pick_and_max_context_resumes_only_as_what_it_meant(tmp_path: Path) -> None:
    older = {k: v for k, v in PRINT.items() if k not in ("pick", "max_context")}  # it ran at the old 2048 cap
    EpisodeLog(tmp_path, older).append([_record("a", 0)])
    assert set(EpisodeLog(tmp_path, {**PRINT, "max_context": 2048}).done) == {("a", 0)}
    with pytest.raises(ConfigError, match=r"max_context: 2048 there, 0 now"):
        EpisodeLog(tmp_path, PRINT)
    with pytest.raises(ConfigError, match=r"pick: 'first' there, 'spread' now"):
        EpisodeLog(tmp_path, {**PRINT, "pick": "spread", "max_context": 2048})
