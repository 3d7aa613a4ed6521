"""The trainer's config: key=value overrides, validation messages, and the CLI's front door."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.adapters import LoraSettings
from trainers.config import ConfigError, JudgeConfig, TrainConfig, apply_overrides, from_dict, to_dict
from trainers.run import main, resolve_config
from trainers.tinker.settings import TinkerSettings

ROOT = Path(__file__).resolve().parents[2]


def test_overrides_set_top_level_values_with_their_types():
    config = apply_overrides(TrainConfig(), ["method=grpo", "parallel=3", "lr=2.5e-4", "normalize_std=false",
                                             "progress=0", "env=guess", "temperature=0.7"])
    assert config.method == "grpo"
    assert config.parallel == 3 and isinstance(config.parallel, int)
    assert config.lr == pytest.approx(2.5e-4) and isinstance(config.lr, float)
    assert config.normalize_std is False
    assert config.progress is False
    assert config.env == "guess"
    assert config.temperature == pytest.approx(0.7)


@pytest.mark.parametrize("raw, expected", [("true", True), ("True", True), ("1", True), ("yes", True),
                                           ("false", False), ("0", False), ("no", False)])
def test_bool_spellings(raw, expected):
    assert apply_overrides(TrainConfig(), [f"normalize_std={raw}"]).normalize_std is expected


def test_overrides_do_not_mutate_the_input():
    config = TrainConfig()
    changed = apply_overrides(config, ["parallel=3", "lora.rank=8", "env_kwargs.persona=teacher"])
    assert changed != config
    assert config == TrainConfig()


def test_nested_sections():
    config = apply_overrides(TrainConfig(), ["lora.rank=8", "lora.alpha=16", "lora.enabled=false",
                                             "judge.kind=lexical", "judge.votes=5", "judge.temperature=0.3"])
    assert config.lora == LoraSettings(enabled=False, rank=8, alpha=16)
    assert config.judge.kind == "lexical"
    assert config.judge.votes == 5
    assert config.judge.temperature == pytest.approx(0.3)
    assert config.judge.mode == "logprob"  # untouched keys keep their defaults


def test_env_kwargs_values_are_parsed_loosely():
    config = apply_overrides(TrainConfig(), ["env_kwargs.persona=teacher", "env_kwargs.max_turns=2",
                                             "env_kwargs.partial_credit=true", "env_kwargs.tags=[1, 2]"])
    assert config.env_kwargs == {"persona": "teacher", "max_turns": 2, "partial_credit": True, "tags": [1, 2]}
    again = apply_overrides(config, ["env_kwargs.split=all"])
    assert again.env_kwargs == {**config.env_kwargs, "split": "all"}


def test_ray_actor_options_take_sub_keys_and_only_with_the_ray_backend():
    config = apply_overrides(TrainConfig(), ["backend=ray", "ray_address=10.0.0.1:6379",
                                             "ray_actor_options.num_cpus=1",
                                             "ray_actor_options.scheduling_strategy=SPREAD"])
    assert config.ray_actor_options == {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
    assert config.ray_address == "10.0.0.1:6379"
    for item in ("ray_address=10.0.0.1:6379", "ray_actor_options.num_cpus=1"):
        with pytest.raises(ConfigError, match="pass backend=ray"):
            apply_overrides(TrainConfig(), [item])
    with pytest.raises(ConfigError, match="section"):
        apply_overrides(TrainConfig(), ["backend=ray", "ray_actor_options=1"])


def test_unknown_key_names_it_and_suggests_the_close_match():
    with pytest.raises(ConfigError) as info:
        apply_overrides(TrainConfig(), ["lrr=1e-3"])
    message = str(info.value)
    assert "'lrr'" in message
    assert "did you mean 'lr'" in message


def test_unknown_nested_key_is_named_with_its_section():
    with pytest.raises(ConfigError) as info:
        apply_overrides(TrainConfig(), ["lora.rnk=8"])
    assert "'lora.rnk'" in str(info.value)
    assert "'lora.rank'" in str(info.value)


def test_bad_choice_lists_allowed_values():
    with pytest.raises(ConfigError) as info:
        apply_overrides(TrainConfig(), ["method=ppo"])
    message = str(info.value)
    assert "method='ppo'" in message
    for allowed in ("grpo", "opd", "combine"):
        assert allowed in message
    with pytest.raises(ConfigError, match="judge.kind='oracle'.*self, model, endpoint, lexical, env"):
        apply_overrides(TrainConfig(), ["judge.kind=oracle"])


@pytest.mark.parametrize("item, words", [("parallel=abc", "parallel='abc' is not a valid int"),
                                         ("lr=fast", "lr='fast' is not a valid float"),
                                         ("normalize_std=maybe", "normalize_std='maybe' is not a valid bool"),
                                         ("lora.rank=x", "lora.rank='x' is not a valid int")])
def test_bad_type_names_key_and_type(item, words):
    with pytest.raises(ConfigError, match=words):
        apply_overrides(TrainConfig(), [item])


@pytest.mark.parametrize("item", ["lora=8", "judge=self", "env_kwargs=teacher"])
def test_section_without_sub_key(item):
    head = item.split("=")[0]
    with pytest.raises(ConfigError, match=f"{head} is a section; set its keys like {head}.<key>=<value>"):
        apply_overrides(TrainConfig(), [item])


def test_plain_key_with_sub_key_and_missing_equals_sign():
    with pytest.raises(ConfigError, match="lr has no sub-keys"):
        apply_overrides(TrainConfig(), ["lr.value=1"])
    with pytest.raises(ConfigError, match="must look like key=value"):
        apply_overrides(TrainConfig(), ["parallel"])


def test_grpo_needs_a_group():
    with pytest.raises(ConfigError, match="group_size >= 2"):
        apply_overrides(TrainConfig(), ["method=grpo", "group_size=1"])
    # the other methods train on groups of one (live turns)
    assert apply_overrides(TrainConfig(), ["method=opd", "group_size=1"]).group_size == 1


def test_opd_gate_needs_an_opd_term_and_an_env_to_replay_in():
    with pytest.raises(ConfigError, match="opd_gate='judge' is not allowed; choose one of: auto, none, replay"):
        apply_overrides(TrainConfig(), ["opd_gate=judge"])
    for method in ("grpo", "sft"):
        with pytest.raises(ConfigError, match=f"method={method} has no OPD term"):
            apply_overrides(TrainConfig(), [f"method={method}", "opd_gate=replay"])
    with pytest.raises(ConfigError, match="no env can replay"):
        apply_overrides(TrainConfig(), ["opd_gate=replay", "data=sessions.jsonl"])
    assert apply_overrides(TrainConfig(), ["method=opd", "opd_gate=replay"]).opd_gate == "replay"


def test_opd_gate_auto_is_the_envs_gate_for_combine_only():
    """auto (the default) takes the env's own opd_gate for combine; opd alone (the gate
    starves it), data= (nothing to replay in) and the other methods resolve to none, and an
    explicit choice is kept whatever the env says."""
    assert TrainConfig().opd_gate == "auto" and TrainConfig().method == "combine"
    assert TrainConfig().gate("replay") == "replay"
    assert TrainConfig().gate("none") == "none"
    for method in ("grpo", "opd", "sft"):
        assert apply_overrides(TrainConfig(), [f"method={method}"]).gate("replay") == "none"
    assert apply_overrides(TrainConfig(), ["data=sessions.jsonl"]).gate("replay") == "none"
    assert apply_overrides(TrainConfig(), ["opd_gate=none"]).gate("replay") == "none"
    assert apply_overrides(TrainConfig(), ["opd_gate=replay"]).gate("none") == "replay"


def test_fill_groups_is_for_group_advantages_only():
    with pytest.raises(ConfigError, match="fill_groups must be >= 0"):
        apply_overrides(TrainConfig(), ["fill_groups=-1"])
    for method in ("opd", "sft"):
        with pytest.raises(ConfigError, match=f"method={method} has none"):
            apply_overrides(TrainConfig(), [f"method={method}", "fill_groups=2"])
    assert apply_overrides(TrainConfig(), ["method=combine", "fill_groups=2"]).fill_groups == 2


def test_min_update_samples_is_for_rolled_out_samples_only():
    with pytest.raises(ConfigError, match="min_update_samples must be >= 0"):
        apply_overrides(TrainConfig(), ["min_update_samples=-1"])
    with pytest.raises(ConfigError, match="data= trains on recorded sessions"):
        apply_overrides(TrainConfig(), ["data=sessions.jsonl", "min_update_samples=8"])
    with pytest.raises(ConfigError, match="method=sft trains on demonstrations"):
        apply_overrides(TrainConfig(), ["method=sft", "min_update_samples=8"])
    for method in ("grpo", "opd", "combine"):
        assert apply_overrides(TrainConfig(), [f"method={method}", "min_update_samples=8"]).min_update_samples == 8


def test_endpoint_judge_needs_an_endpoint():
    with pytest.raises(ConfigError, match="judge.endpoint"):
        apply_overrides(TrainConfig(), ["judge.kind=endpoint"])
    config = apply_overrides(TrainConfig(), ["judge.kind=endpoint", "judge.endpoint=http://127.0.0.1:1/v1"])
    assert config.judge.endpoint == "http://127.0.0.1:1/v1"
    with pytest.raises(ConfigError, match="judge.model"):
        JudgeConfig(kind="model")


@pytest.mark.parametrize("item, words", [("steps=0", "steps must be >= 1"), ("lr=0", "lr must be > 0"),
                                         ("eps_low=1.5", "eps_low must be in"),
                                         ("judge.votes=0", "judge.votes must be >= 1")])
def test_out_of_range_values(item, words):
    with pytest.raises(ConfigError, match=words):
        apply_overrides(TrainConfig(), [item])


def test_saved_config_round_trips():
    config = apply_overrides(TrainConfig(), ["lora.rank=8", "judge.kind=lexical", "env_kwargs.persona=teacher"])
    assert from_dict(to_dict(config)) == config


def test_cli_rejects_a_bad_key_with_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "trainers.run", "bogus=1", f"out={tmp_path / 'run'}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "unknown config key 'bogus'" in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "run").exists()  # nothing is created for a config that never ran


def test_cli_help_lists_every_key(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("lora", "judge", "tinker"):
            continue
        assert f"  {f.name}=" in text or f"  {f.name}.<name>=" in text
    for section, cls in (("lora", LoraSettings), ("judge", JudgeConfig), ("tinker", TinkerSettings)):
        for f in dataclasses.fields(cls):
            assert f"  {section}.{f.name}=" in text
    assert f"  lora.rank={LoraSettings().rank}" in text  # with its default


def test_cli_reports_a_bad_value_in_process(capsys):
    assert main(["method=ppo"]) == 2
    assert "method='ppo' is not allowed" in capsys.readouterr().err


# ---- --help: every key with its meaning ------------------------------------------------------
@pytest.mark.parametrize("cls", ["trainers.config.TrainConfig", "trainers.live.config.ServeConfig",
                                 "benchmarks.run.EvalConfig"])
def test_help_gives_every_key_a_meaning_in_plain_text(cls):
    import importlib

    from trainers.config import config_help

    module, name = cls.rsplit(".", 1)
    config_cls = getattr(importlib.import_module(module), name)
    text = config_help(config_cls, "The ``tool`` does :class:`things`.")
    assert "``" not in text and ":class:" not in text
    assert text.startswith("The tool does things.")
    keys = text.split("Keys (key=default, then what it means):\n", 1)[1].splitlines()
    rows = [line.split(None, 1) for line in keys if line.startswith("  ") and not line.startswith("   ")]
    assert rows
    for row in rows:  # a key on its own line has its meaning on the next one, indented
        assert len(row) == 2 or keys[keys.index("  " + row[0]) + 1].startswith(" " * 10), f"{row[0]} has no meaning"


def test_help_meanings_come_from_the_field_docstrings(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "  lr=0.001" in text and "AdamW learning rate." in text
    assert "  device=auto" in text and "  dtype=auto" in text  # declared defaults, not this machine's
    assert "  temperature=none" in text and "  normalize_std=true" in text  # as a user would type them


# ---- device= and dtype= -----------------------------------------------------------------------
def _gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)


def test_auto_device_and_dtype_resolve_for_the_machine(monkeypatch):
    from benchmarks.run import EvalConfig
    from trainers.config import resolve_placement
    from trainers.live.config import ServeConfig

    _gpus(monkeypatch, 0)
    for config in (TrainConfig(), ServeConfig()):
        assert (config.device, config.dtype) == ("auto", "auto")  # kept: an override re-decides
        assert config.placement() == ("cpu", "float32")
    assert resolve_placement(EvalConfig().device, EvalConfig().dtype) == ("cpu", "float32")
    assert TrainConfig(dtype="bfloat16").placement() == ("cpu", "bfloat16")
    _gpus(monkeypatch, 1)
    assert TrainConfig().placement() == ("cuda:0", "bfloat16")
    assert ServeConfig(device="cuda").placement() == ("cuda:0", "bfloat16")
    assert apply_overrides(TrainConfig(), ["device=cpu"]).placement() == ("cpu", "float32")


def test_a_gpu_asked_for_on_a_machine_without_one_is_refused_with_the_fix(monkeypatch, capsys):
    _gpus(monkeypatch, 0)
    with pytest.raises(ConfigError, match="device=cuda asks for a GPU but torch sees none.*pass device=cpu"):
        apply_overrides(TrainConfig(), ["device=cuda"])
    assert main(["device=cuda:1"]) == 2
    assert "trainers.run: device=cuda:1 asks for a GPU" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="dtype='float16' is not allowed; choose one of: auto, float32, bfloat16"):
        apply_overrides(TrainConfig(), ["dtype=float16"])
    with pytest.raises(ConfigError, match="device='tpu' is not a device"):
        apply_overrides(TrainConfig(), ["device=tpu"])


def test_full_fine_tuning_stays_float32(monkeypatch):
    _gpus(monkeypatch, 1)
    assert apply_overrides(TrainConfig(), ["lora.enabled=false"]).placement() == ("cuda:0", "float32")
    with pytest.raises(ConfigError, match="dtype=bfloat16 with lora.enabled=false.*pass dtype=float32"):
        apply_overrides(TrainConfig(), ["lora.enabled=false", "dtype=bfloat16"])


def test_a_gpu_run_resumes_on_a_machine_without_one_when_told_device_cpu(monkeypatch, tmp_path):
    import yaml

    _gpus(monkeypatch, 0)
    out = tmp_path / "run"
    out.mkdir()
    saved = {**to_dict(TrainConfig()), "device": "cuda:0", "dtype": "bfloat16", "out": str(out)}
    (out / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(ConfigError, match="pass device=cpu"):
        resolve_config([f"out={out}"])
    config, _ = resolve_config([f"out={out}", "device=cpu", "dtype=auto"])
    assert config.placement() == ("cpu", "float32")
