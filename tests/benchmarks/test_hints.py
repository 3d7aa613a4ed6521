"""benchmarks.hints: the hint a failed reply gets, the counts, and one real run on the
default model (a few short replies) whose told replies are re-sampled to prove they came
from the hinted prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest

import envs
from agents.adapters import LoraSettings
from agents.policy import SamplingParams, TransformersPolicy
from benchmarks import hints
from trainers.judge_parsing import append_hint


@pytest.fixture()
def env():
    made = envs.make(hints.ENV_ID, persona="all", split="heldout")
    yield made
    made.close()


def test_help_prints_what_it_measures(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        hints.parse(["--help"])
    assert done.value.code == 0 and "fixed when told" in capsys.readouterr().out


def test_arguments_are_checked() -> None:
    args = hints.parse(["samples=2", "hint=all", "temperature=0"])
    assert (args["samples"], args["hint"], args["temperature"], args["tasks"]) == (2, "all", 0.0, 56)
    for bad, says in [("hint=some", "hint must be one of"), ("samples=0", "samples must be a positive"),
                      ("temperature=hot", "temperature must be a number"), ("persona", "unknown argument"),
                      ("steps=3", "unknown argument")]:
        with pytest.raises(SystemExit, match=says):
            hints.parse([bad])


def test_a_reply_is_judged_by_the_env_and_answered_with_its_correction(env) -> None:
    met, next_state = hints.played(env, "grandparent/cook-04", "Boil the water, add the pasta.", seed=0)
    assert met["sign_off"] is False and met["no_markdown"] is True
    unmet_first = next(p for p in env.unwrapped.checks("grandparent/cook-04") if not met[p.kind])
    assert next_state in unmet_first.corrections
    signed, _ = hints.played(env, "grandparent/cook-04", "Boil the water, add the pasta.\n\n— Ava", seed=0)
    assert signed["sign_off"] is True


def test_first_names_the_users_correction_and_all_names_every_unmet_kind(env) -> None:
    task = "traveler/cook-04"
    met = {"on_topic": True, "metric_units": False, "bullet_points": False, "max_words": True}
    hint, named = hints.hint_for(env, task, met, "the user's words", "first", np.random.default_rng(0))
    assert (hint, named) == ("the user's words", ["metric_units"])
    hint, named = hints.hint_for(env, task, met, "the user's words", "all", np.random.default_rng(0))
    assert named == ["metric_units", "bullet_points"]
    checks = {p.kind: p for p in env.unwrapped.checks(task)}
    said = [c for kind in named for c in checks[kind].corrections if c in hint]
    assert len(said) == 2 and hint == " ".join(said)


def test_counts_per_persona_and_kind() -> None:
    records = [
        {"persona": "a", "met": {"x": True, "y": False}, "cut": True,
         "told": {"names": ["y"], "met": {"x": True, "y": True}, "cut": False}},
        {"persona": "a", "met": {"x": False, "y": False}, "cut": False,
         "told": {"names": ["x", "y"], "met": {"x": False, "y": True}, "cut": True}},
        {"persona": "a", "met": {"x": True, "y": True}, "cut": False, "told": None},
        {"persona": "b", "met": {"z": False}, "cut": True, "told": {"names": ["z"], "met": {"z": False}, "cut": True}},
    ]
    out = hints.summarize(records)
    assert out["personas"]["a"] == {"replies": 3, "met": 1, "cut": 1, "told": 2, "told_met": 1, "told_cut": 1}
    assert out["personas"]["b"] == {"replies": 1, "met": 0, "cut": 1, "told": 1, "told_met": 0, "told_cut": 1}
    assert out["kinds"]["a/x"] == {"replies": 3, "met": 2, "named": 1, "fixed": 0}
    assert out["kinds"]["a/y"] == {"replies": 3, "met": 1, "named": 2, "fixed": 2}
    assert out["kinds"]["b/z"] == {"replies": 1, "met": 0, "named": 1, "fixed": 0}
    table = hints.tables(out)
    assert "| a | 3 | 1/3 (0.33) | 1/2 (0.50) | 1/3 (0.33) | 1/2 (0.50) |" in table
    assert "| a/y | 1/3 (0.33) | 2/2 (1.00) |" in table


def test_a_real_run_tells_each_failed_reply_and_samples_from_the_hinted_prompt(env, tmp_path) -> None:
    policy = TransformersPolicy(lora=LoraSettings(), seed=0)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    tasks = ["grandparent/cook-04", "friend/cook-04"]  # sign_off / call_me: never met in 12 tokens
    records = hints.measure(policy, env, tasks, 1, greedy, "first", seed=0)
    assert [r["task"] for r in records] == tasks
    for record in records:
        assert record["cut"] and not all(record["met"].values())
        told = record["told"]
        opening, _ = env.reset(seed=0, options={"task_id": record["task"]})
        assert told["hint"] in next(p for p in env.unwrapped.checks(record["task"])
                                    if p.kind == told["names"][0]).corrections
        again = policy.generate_ids([policy.encode(append_hint(opening, told["hint"]))], greedy)[0]
        assert again.text == told["reply"] != record["reply"]
        assert told["met"] == hints.played(env, record["task"], again.text, seed=0)[0]
    assert hints.main(["tasks=2", "samples=1", "max_new_tokens=4", "temperature=0", f"out={tmp_path}"]) == 0
    saved = json.loads((tmp_path / "hints.json").read_text())
    assert len(saved["records"]) == 2 and saved["summary"]["personas"]
    assert "| persona | replies |" in (tmp_path / "hints.md").read_text()


def test_a_persona_of_ones_own_is_measured_from_its_folder(tmp_path, capsys) -> None:
    folder = tmp_path / "personas"
    folder.mkdir()
    (folder / "chef.yaml").write_text(
        "name: chef\ndescription: A cook who wants every reply to end by naming a dish.\n"
        "preferences:\n  - kind: sign_off\n    params: {name: Chef}\n")
    out = tmp_path / "out"
    assert hints.main(["persona=chef", f"personas_dir={folder}", "tasks=1", "samples=1", "max_new_tokens=4",
                       "temperature=0", f"out={out}"]) == 0
    saved = json.loads((out / "hints.json").read_text())
    assert [r["persona"] for r in saved["records"]] == ["chef"]
    assert set(saved["records"][0]["met"]) == {"on_topic", "sign_off"}
    assert "| chef/sign_off |" in capsys.readouterr().out
