"""benchmarks.peers: the arguments, and the mapping that makes TRL's run do clawgym's work.

Nothing here builds ``.venv-peers``; the test that reads it is ``slow`` and skips without
it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from types import SimpleNamespace

import pytest

from benchmarks import peers
from benchmarks.peers import (PeerSettings, clawgym_config, markdown, parse_args, read_clawgym, step_tasks, summarize,
                              throughput, trl_grpo_kwargs, trl_lora_kwargs, trl_rows)
from trainers.config import ConfigError
from trainers.distributed import Ranks
from trainers.loop import Trainer


def test_the_peer_comes_first_then_keys() -> None:
    peer, settings = parse_args(["trl", "steps=5", "batch=3", "group=2", "max_new_tokens=32", "device=cpu"])
    assert peer == "trl"
    assert (settings.steps, settings.batch, settings.group, settings.max_new_tokens, settings.device) == (5, 3, 2, 32,
                                                                                                        "cpu")
    assert settings.repeats == PeerSettings().repeats


@pytest.mark.parametrize(("argv", "words"), [
    ([], "name the peer first"),
    (["vllm"], "name the peer first"),
    (["trl", "step=3"], "did you mean 'steps'"),
    (["trl", "group=1"], "group must be >= 2"),
    (["trl", "repeats=0"], "repeats must be >= 1"),
    (["trl", "batch=8", "group=8"], "exceeds 32"),
    (["trl", "omp_wait=spin"], "passive, active, default"),
    (["trl", "dtype=float16"], "float32 or bfloat16"),
])
def test_bad_arguments_say_what_is_wrong(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_args(argv)


def test_both_sides_run_with_the_same_threads_and_wait_policy(monkeypatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the caller's own setting is never what a side gets
    passive, active, default = (peers.run_env(2, w) for w in ("passive", "active", "default"))
    assert passive["OMP_WAIT_POLICY"] == "PASSIVE" and active["OMP_WAIT_POLICY"] == "ACTIVE"
    assert "OMP_WAIT_POLICY" not in default
    for env in (passive, active, default):
        assert env["OMP_NUM_THREADS"] == env["PEERS_THREADS"] == "2"
        assert str(peers.ROOT) in env["PYTHONPATH"].split(os.pathsep)


def test_main_refuses_bad_arguments_before_building_anything(capsys, monkeypatch) -> None:
    monkeypatch.setattr(peers, "ensure_venv", lambda *a: pytest.fail("built the venv for a bad argument"))
    assert peers.main(["trl", "stepz=3"]) == 2
    assert "unknown config key 'stepz'" in capsys.readouterr().err


def test_clawgym_side_does_one_batch_one_update_and_no_eval() -> None:
    config = clawgym_config(PeerSettings(steps=4, batch=3, group=4, max_new_tokens=40, device="cpu"))
    assert (config.method, config.reward, config.env) == ("grpo", "env", "chat")
    assert (config.steps, config.batch_size, config.group_size, config.max_new_tokens) == (4, 3, 4, 40)
    assert config.parallel == 12  # every completion of a step in one generation batch, as TRL does
    assert (config.epochs, config.minibatch_size) == (1, 0)  # one optimizer step per batch
    assert config.eval_tasks == 0 and config.save_every == 4
    assert config.train_cut is True and config.temperature == 0.6
    assert config.env_kwargs == {"persona": "student", "partial_credit": True}


def test_trl_config_equals_clawgym_settings() -> None:
    config = clawgym_config(PeerSettings(steps=4, batch=3, group=4, max_new_tokens=40, device="cpu"))
    grpo = trl_grpo_kwargs(config, "/tmp/x")
    assert grpo["per_device_train_batch_size"] == 12 and grpo["num_generations"] == 4
    assert grpo["gradient_accumulation_steps"] == 1 and grpo["steps_per_generation"] == 1
    assert grpo["num_iterations"] == 1 and grpo["max_steps"] == 4
    assert grpo["max_completion_length"] == 40 and grpo["temperature"] == 0.6
    assert (grpo["top_p"], grpo["top_k"]) == (1.0, 0)
    assert (grpo["learning_rate"], grpo["weight_decay"], grpo["adam_beta1"], grpo["adam_beta2"]) == \
        (config.lr, config.weight_decay, config.adam_beta1, config.adam_beta2)
    assert (grpo["max_grad_norm"], grpo["epsilon"], grpo["epsilon_high"], grpo["beta"]) == (1.0, 0.2, 0.28, 0.0)
    assert grpo["lr_scheduler_type"] == "constant"  # clawgym has no schedule
    assert grpo["loss_type"] == "grpo" and grpo["scale_rewards"] == "group"  # per-sample mean; std-normalised groups
    assert grpo["mask_truncated_completions"] is False  # train_cut=true
    assert grpo["shuffle_dataset"] is False  # TRL takes the rows in clawgym's step order
    assert grpo["bf16"] is False and grpo["gradient_checkpointing"] is False and grpo["use_cpu"] is True
    assert grpo["save_strategy"] == "no"
    assert config.dtype == "float32"


def test_bfloat16_runs_each_sides_own_bfloat16_mode() -> None:
    """dtype=bfloat16: clawgym loads its base model in bfloat16, TRL autocasts (bf16=True),
    and the TRL worker loads its model in the precision the config says."""
    config = clawgym_config(PeerSettings(dtype="bfloat16", device="cpu"))
    assert config.dtype == "bfloat16" and config.placement() == ("cpu", "bfloat16")
    grpo = trl_grpo_kwargs(config, "/tmp/x")
    assert grpo["bf16"] is True and grpo["fp16"] is False
    assert trl_grpo_kwargs(clawgym_config(PeerSettings(device="cpu")), "/tmp/x")["bf16"] is False


def test_lora_settings_are_clawgyms() -> None:
    config = clawgym_config(PeerSettings(device="cpu"))
    assert trl_lora_kwargs(config) == {"r": 16, "lora_alpha": 32, "target_modules": "all-linear",
                                       "lora_dropout": 0.0, "task_type": "CAUSAL_LM"}
    config = dataclasses.replace(config, lora=dataclasses.replace(config.lora, targets="q_proj, v_proj"))
    assert trl_lora_kwargs(config)["target_modules"] == ["q_proj", "v_proj"]


def test_tasks_per_step_are_the_ones_the_trainer_draws() -> None:
    config = clawgym_config(PeerSettings(steps=3, batch=3, group=2, device="cpu"))
    pool = [f"student/t{i}" for i in range(10)]
    ours = step_tasks(config, pool)
    trainer = SimpleNamespace(config=config, train_tasks=pool, ranks=Ranks())  # one process
    for step, tasks in enumerate(ours, start=1):
        jobs = Trainer._jobs(trainer, step)  # type: ignore[arg-type]
        assert [jobs[g * 2].task_id for g in range(3)] == tasks
        assert all(j.task_id == tasks[j.group] for j in jobs)
    assert len({tuple(t) for t in ours}) > 1  # steps draw different tasks


@pytest.mark.slow  # loads the tokenizer: transformers' import alone is seconds
def test_trl_rows_hold_clawgyms_rendered_prompts_in_step_order() -> None:
    config = clawgym_config(PeerSettings(steps=2, batch=2, group=2, device="cpu"))
    rows = trl_rows(config)
    assert [r["task_id"] for r in rows] == [t for step in step_tasks(config, _chat_tasks()) for t in step]
    for row in rows:
        assert row["prompt"].rstrip().endswith("assistant")  # ends where the reply begins
        assert "You are a helpful personal assistant." in row["prompt"]
        assert json.loads(row["prompt_ids"])  # what TRL must tokenize the text to (checked in its run)


def _chat_tasks() -> list[str]:
    import envs

    env = envs.make("chat", persona="student", partial_credit=True).unwrapped
    return env.task_ids()


def test_clawgym_steps_are_read_from_the_run_folder_with_their_split(tmp_path) -> None:
    """Step rows only (not the baseline evaluation), each with the parts of its time; a run
    from before push_s and free_s were logged reads them as 0."""
    rows = [{"step": 0, "eval/env_return": 0.5}]
    for step, push in ((1, 0.3), (2, None)):
        row = {"step": step, "perf/step_s": 2.0 * step, "perf/rollout_s": 1.0 * step, "perf/train_s": 0.5 * step,
               "perf/rollout_generate_s": 0.9, "perf/rollout_env_s": 0.01, "perf/free_s": 0.02,
               "rollout/turns": 8.0, "rollout/completion_tokens": 10.0, "reward/env_return": 0.25,
               "rollout/cut_completions": 1.0, "samples/count": 6.0}
        if push is not None:
            row["perf/push_s"] = push
        rows.append(row)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = read_clawgym(tmp_path)
    assert run["step_s"] == [2.0, 4.0] and run["rollout_s"] == [1.0, 2.0] and run["train_s"] == [0.5, 1.0]
    assert run["push_s"] == [0.3, 0.0] and run["free_s"] == [0.02, 0.02] and run["generate_s"] == [0.9, 0.9]
    assert run["completions"] == [8.0, 8.0] and run["tokens"] == [80.0, 80.0] and run["trained_samples"] == [6.0, 6.0]


def test_throughput_and_medians() -> None:
    run = {"step_s": [2.0, 3.0, 5.0], "completions": [8, 8, 8], "tokens": [100, 200, 300]}
    assert throughput(run, 900.0)["completions_per_s"] == pytest.approx(24 / 10)
    assert throughput(run, 900.0)["tokens_per_s"] == pytest.approx(600 / 10)
    assert throughput(run, 900.0)["later_completions_per_s"] == pytest.approx(16 / 8)  # step 1 (warm-up) left out
    keys = ("completions_per_s", "tokens_per_s", "peak_rss_mib", "seconds", "process_cpu_s", "later_completions_per_s")
    runs = {"clawgym": [dict(zip(keys, (2.0, 100.0, 1000.0, 12.0, 30.0, 8.0))),
                        dict(zip(keys, (4.0, 300.0, 1200.0, 6.0, 50.0, 12.0)))],
            "trl": [dict(zip(keys, (1.0, 50.0, 800.0, 24.0, 80.0, 2.0))),
                    dict(zip(keys, (2.0, 50.0, 1400.0, 12.0, 80.0, 2.0)))]}
    summary = summarize(runs)
    # medians: clawgym 3.0 / 200 / 1100 / 9 / 40; trl 1.5 / 50 / 1100 / 18 / 80
    assert summary["ratio"] == pytest.approx({"completions_per_s": 2.0, "tokens_per_s": 4.0, "peak_rss_mib": 1.0,
                                              "seconds": 0.5, "process_cpu_s": 0.5, "gpu_peak_mib": 0.0,
                                              "later_completions_per_s": 5.0})
    meta = {"command": "python -m benchmarks.peers trl", "date": "2026-01-01 00:00 UTC", "machine": "cpu box",
            "device": "cpu", "threads": 2, "settings": vars(PeerSettings(device="cpu"))}
    table = markdown(summary, meta)
    assert "| clawgym / TRL | 2.00 | 5.00 | 4.00 | 1.00 | 0.50 | 0.50 |" in table and "2026-01-01" in table
    assert "GPU" not in table  # a CPU run has no GPU column
    for side, peak in (("clawgym", 3000.0), ("trl", 6000.0)):
        for run in runs[side]:
            run["gpu_peak_mib"] = peak
    table = markdown(summarize(runs), {**meta, "device": "cuda"})
    assert "peak GPU MiB |" in table and "| clawgym / TRL | 2.00 | 5.00 | 4.00 | 1.00 | 0.50 | 0.50 | 0.50 |" in table


@pytest.mark.slow
def test_the_trl_config_builds_in_the_peers_venv() -> None:
    python = peers.VENV / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-peers: python -m benchmarks.peers trl builds it")
    grpo = trl_grpo_kwargs(clawgym_config(PeerSettings(device="cpu")), "/tmp/peers-config-check")
    code = ("import json, sys; from trl import GRPOConfig; c = GRPOConfig(**json.loads(sys.argv[1])); "
            "print(json.dumps([c.generation_batch_size, c.num_generations, c.loss_type]))")
    done = subprocess.run([str(python), "-c", code, json.dumps(grpo)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [8, 4, "grpo"]  # 2 prompts x 4 per generation batch
