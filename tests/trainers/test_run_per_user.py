"""``python -m trainers.run adapters=per_user`` (trainers/per_user.py): an adapter per user on
the chat env with every persona, with the real default model, real adapter files and the
trainer's own resume path; the env contract's user id; what per_user refuses.

The tiny run's settings make every reply trainable (``train_cut=true``: 8-token replies are
cut, and the default model rarely ends one that short) and give GRPO groups returns that
differ (partial-credit env rewards plus the lexical judge, ``reward=both``). Seed SEED draws
tasks whose users overlap as the test needs (one user trained in both steps, one trained in
step 1 and idle in step 2); the test checks that they do, so another seed fails loudly
rather than passing vacuously.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import envs
from envs.chat.env import PersonalChatEnv
from envs.checker import EnvCheckError, check_env
from trainers.config import ConfigError, TrainConfig, apply_overrides
from trainers.run import main

SEED = 0
TINY = ["env=chat", "env_kwargs.persona=all", "env_kwargs.partial_credit=true", "adapters=per_user", "method=grpo",
        "reward=both", "judge.kind=lexical", "temperature=1.0", "epochs=1", "batch_size=3", "group_size=4",
        "parallel=12", "max_new_tokens=8", "train_cut=true", "eval_tasks=2", "eval_every=100", f"seed={SEED}",
        "progress=false"]


def _rows(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _users_with(row: dict[str, float], what: str) -> set[str]:
    """The users a metrics row reports ``what`` (e.g. samples/count) for, with a non-zero value."""
    return {key.split("/")[1] for key, value in row.items()
            if key.startswith("user/") and key.endswith(f"/{what}") and value > 0}


def _version(folder: Path) -> int:
    return int(json.loads((folder / "state.json").read_text())["version"])


def test_each_user_trains_only_their_own_adapter_and_a_resumed_run_continues_every_user(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main([*TINY, "steps=1", f"out={run}"]) == 0
    step1 = run / "checkpoints" / "step_00001"
    rows = _rows(run)
    trained1 = _users_with(rows[1], "samples/count")
    assert trained1, "no user had a trainable sample in step 1: the run taught nothing"
    assert trained1 <= _users_with(rows[1], "rollout/episodes")
    assert {p.name for p in (step1 / "users").iterdir()} == trained1  # only trained users have an adapter
    fresh = load_file(str(step1 / "weights.safetensors"))  # the policy's own adapter: never trained
    assert all(not v.any() for k, v in fresh.items() if "lora_B" in k)
    for user in trained1:
        folder = step1 / "users" / user
        adapter = load_file(str(folder / "adapter_model.safetensors"))
        assert adapter.keys() == fresh.keys()
        assert any(not torch.equal(adapter[k], fresh[k]) for k in fresh), f"{user}'s adapter is still the fresh one"
        assert _version(folder) == 1 and (folder / "optimizer.pt").exists()
        config = json.loads((folder / "adapter_config.json").read_text())  # peft's, as PeftModel loads it
        assert config["r"] == TrainConfig().lora.rank and config["peft_type"] == "LORA"
        assert rows[1][f"user/{user}/version"] == 1
    saved = {u: (step1 / "users" / u / "adapter_model.safetensors").read_bytes() for u in trained1}

    assert main([*TINY, "steps=2", f"out={run}"]) == 0  # resumes after step 1
    rows = _rows(run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    trained2 = _users_with(rows[2], "samples/count")
    step2 = run / "checkpoints" / "step_00002" / "users"
    assert {p.name for p in step2.iterdir()} == trained1 | trained2
    again, idle = trained1 & trained2, trained1 - trained2
    assert again and idle, f"seed {SEED} no longer trains one user twice ({again}) and leaves one idle ({idle})"
    for user in again:  # continued from its step-1 adapter, at its own version (no sample was stale)
        assert _version(step2 / user) == 2 == rows[2][f"user/{user}/version"]
    assert rows[2]["samples/staleness_mean"] == 0 and rows[2]["samples/dropped_stale"] == 0
    for user in idle:  # no sample in step 2: not touched, bytes and all
        assert (step2 / user / "adapter_model.safetensors").read_bytes() == saved[user]
        assert _version(step2 / user) == 1
    for user in trained2 - trained1:
        assert _version(step2 / user) == 1
    assert {p.name for p in (run / "adapters").iterdir()} == trained1 | trained2

    # per-user metrics beside the overall ones: rollout and reward per step, evaluation per user
    for row in rows[1:]:
        assert "reward/return" in row and "rollout/weight_version" in row
        for user in _users_with(row, "rollout/episodes"):
            assert f"user/{user}/reward/return" in row and f"user/{user}/rollout/first/preference_met" in row
    assert rows[2]["rollout/weight_version"] == 1  # one step updated before step 2 rolled out
    for row in (rows[0], rows[2]):  # evaluated before the first step and after the last
        evaluated = _users_with(row, "eval/episodes")
        assert sum(row[f"user/{u}/eval/episodes"] for u in evaluated) == 2
        assert all(0 <= row[f"user/{u}/eval/first/preference_met"] <= 1 for u in evaluated)
        assert "eval/first/preference_met" in row


@pytest.mark.slow
def test_a_resumed_per_user_run_samples_and_trains_what_an_uninterrupted_one_does(tmp_path: Path) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert main([*TINY, "steps=2", f"out={whole}"]) == 0
    assert main([*TINY, "steps=1", f"out={resumed}"]) == 0
    assert main([*TINY, "steps=2", f"out={resumed}"]) == 0
    rows = {run: {k: v for k, v in _rows(run)[2].items() if k.startswith(("user/", "reward/", "samples/"))}
            for run in (whole, resumed)}
    assert rows[whole] == rows[resumed] and rows[whole]["samples/count"] > 0
    users = sorted(p.name for p in (whole / "adapters").iterdir())
    assert users == sorted(p.name for p in (resumed / "adapters").iterdir())
    for user in users:
        a = load_file(str(whole / "adapters" / user / "adapter_model.safetensors"))
        b = load_file(str(resumed / "adapters" / user / "adapter_model.safetensors"))
        # up to float rounding: the stopped run evaluated after its last step, so the users sit in
        # other slots of the bank and the rollout's log-probs are summed in another order
        # (measured: 3e-6 against a step of 1e-3)
        assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-5) for k in a), f"{user}'s adapter differs after the resume"


def test_an_env_whose_episodes_name_no_user_is_refused_before_any_model_loads(tmp_path: Path, capsys,
                                                                               monkeypatch) -> None:
    def no_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the env was checked")

    monkeypatch.setattr("trainers.loop.TransformersPolicy", no_model)
    assert main(["env=guess", "adapters=per_user", "method=grpo", "reward=env", "judge.kind=env",
                 f"out={tmp_path / 'run'}", "progress=false"]) == 2
    said = capsys.readouterr().err
    assert "env=guess's episodes name no user" in said and "info has no 'user_id'" in said
    assert "adapters=shared" in said
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("override, said", [
    ("lora.enabled=false", "keep lora.enabled=true"),
    ("engine=vllm engine.url=http://127.0.0.1:9/v1", "drop engine= and compute="),
    ("world_size=2", "without torchrun"),
    ("method=sft", "method=sft has no users"),
    ("data=sessions.jsonl", "Drop one of them"),
    ("init=runs/sft", "Drop init="),
])
def test_per_user_refuses_what_it_cannot_do(override: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        apply_overrides(TrainConfig(), ["adapters=per_user", *override.split()])
    apply_overrides(TrainConfig(), ["adapters=shared", *override.split()])  # refused for per_user only


def test_per_user_refuses_tinker_and_an_unknown_mode() -> None:
    with pytest.raises(ConfigError, match="compute="):
        apply_overrides(TrainConfig(), ["adapters=per_user", "compute=tinker"])
    with pytest.raises(ConfigError, match="choose one of: shared, per_user"):
        apply_overrides(TrainConfig(), ["adapters=each"])
    assert TrainConfig().adapters == "shared"


def test_resuming_a_run_dir_with_the_other_adapters_mode_is_refused(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("step_00001")
    (run / "config.yaml").write_text("env: chat\nadapters: shared\n")
    assert main(["adapters=per_user", f"out={run}"]) == 2
    assert f"run dir {run} trains adapters=shared" in capsys.readouterr().err


def test_the_chat_env_names_each_episodes_persona_as_its_user() -> None:
    env = envs.make("chat", persona="all")
    try:
        tasks = env.unwrapped.task_ids()
        personas = {task.split("/")[0] for task in tasks}
        assert len(personas) == 7
        for task in tasks[:: max(1, len(tasks) // 10)]:
            _, info = env.reset(seed=0, options={"task_id": task})
            assert info["user_id"] == task.split("/")[0]
        _, info = env.reset(seed=3)  # a drawn task names its persona too
        assert info["user_id"] == info["task_id"].split("/")[0]
    finally:
        env.close()
    one = envs.make("chat", persona="teacher")
    try:
        assert one.reset(seed=0)[1]["user_id"] == "teacher"
    finally:
        one.close()
    assert "user_id" in envs.RESERVED_INFO_KEYS


class _NumberedUser(PersonalChatEnv):
    """Names its user with a number, which the contract refuses."""

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Any:
        opening = super()._open(task_id, options)
        opening.info["user_id"] = 7
        return opening


def test_the_checker_refuses_a_user_id_that_is_not_a_non_empty_string() -> None:
    with pytest.raises(EnvCheckError, match="user_id"):
        check_env(_NumberedUser())
