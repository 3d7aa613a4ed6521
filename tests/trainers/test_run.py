"""Smoke runs of ``python -m trainers.run`` on the chat env with the real default model.

Each method trains two steps and must leave a run folder with metrics for steps 0..2, a
checkpoint whose LoRA B matrices are no longer zero (peft starts B at zero, so any
non-zero B is a real optimizer step), the learning curve and TensorBoard events. A run
killed mid-training resumes from its last checkpoint with no step lost or repeated.

Only replies that end with EOS are trained on, and the default model rarely ends one
within a few dozen tokens (about 1 turn in 10 at 24 tokens). The settings below were
chosen so the first step already has several trainable turns for every method: the
friend persona (its replies run shortest), seed 5 (4 of 12 turns end with EOS), and
partial-credit env rewards added to the lexical judge's score (reward=both), so a GRPO
group's returns differ whatever the judge's wording rules. The tests check that samples
were trained on, so a change that starves training fails here rather than passing vacuously.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from trainers.config import TrainConfig, apply_overrides
from trainers.loop import Trainer
from trainers.run import main
from trainers.rundir import RunDir
from trainers.rollout import Replay, Turn, replay, replay_steps
from trainers.judge import TurnToJudge
from trainers.samples import build_samples, run_reward

ROOT = Path(__file__).resolve().parents[2]

TINY = ["env=chat", "env_kwargs.persona=friend", "env_kwargs.partial_credit=true", "env_kwargs.patience=3",
        "temperature=1.0", "epochs=1", "reward=both", "seed=5",
        "batch_size=2", "group_size=2", "parallel=4", "max_new_tokens=24", "judge.kind=lexical", "lr=1e-3",
        "progress=false"]


def _metrics(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _latest(run: Path) -> str:
    pointer = run / "checkpoints" / "latest"
    return pointer.read_text().strip() if pointer.exists() else ""


def _lora_b(checkpoint: Path) -> dict[str, torch.Tensor]:
    weights = load_file(str(checkpoint / "weights.safetensors"))
    return {k: v for k, v in weights.items() if "lora_B" in k}


# grpo end to end is also test_killed_run_resumes_without_losing_or_repeating_a_step's method
@pytest.mark.parametrize("method", [pytest.param("grpo", marks=pytest.mark.slow), pytest.param("opd", marks=pytest.mark.slow),
                                    "combine"])  # combine runs both terms; the other two are slow
def test_smoke_run_trains_and_writes_the_run_folder(method, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TINY, f"method={method}", "steps=2", "eval_tasks=2", f"out={run}", "progress=true"]) == 0
    printed = capsys.readouterr()
    assert "done: 2 steps" in printed.out
    assert gc.get_freeze_count() == 0  # the run froze its setup's objects for its steps only

    rows = _metrics(run)
    _assert_it_said_what_it_does_and_how_far_it_got(printed.out, printed.err, method, run, rows)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "eval/first/preference_met" in rows[0] and rows[0]["rollout/weight_version"] == 0
    for step, row in enumerate(rows[1:], start=1):
        for key in ("reward/return", "samples/count", "perf/step_s", "eval/first/preference_met",
                    "rollout/turns", "judge/unparsed"):
            assert key in row, f"step {step} lacks {key}"
        assert row["rollout/weight_version"] == step - 1  # version k-1 rolls out step k
        # the real model's generate calls and the env's steps are parts of the rollout's time
        assert 0 < row["perf/rollout_env_s"] < row["perf/rollout_generate_s"] <= row["perf/rollout_s"]
        assert row["perf/rollout_generate_s"] + row["perf/rollout_env_s"] <= row["perf/rollout_s"]
        assert 0 <= row["eval/first/preference_met"] <= 1
        assert row["judge/unparsed"] == 0
        assert row["perf/free_s"] >= 0
        if row["samples/count"] > 0:
            assert 0 < row["perf/push_s"] < row["perf/train_s"]  # the push is part of the update's time
            assert "loss/total" in row and "loss/grad_norm" in row
            assert row["loss/grad_norm"] > 0
    assert sum(r["samples/count"] for r in rows[1:]) > 0, "no trainable samples: the smoke run taught nothing"
    if method == "opd":
        assert sum(r["samples/hinted_turns"] for r in rows[1:]) > 0
    if method == "combine":  # the gate (opd_gate=auto) saw the hinted turns; the teacher met those it passed
        assert sum(r["gate/checked"] for r in rows[1:]) > 0
        assert all(r["samples/hinted_turns"] + r["samples/gate_failed"] == r["gate/checked"] for r in rows[1:])

    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["method"] == method and saved["out"] == str(run) and saved["env_kwargs"] == {"persona": "friend", "partial_credit": True,
                                                                                              "patience": 3}
    assert saved["temperature"] == 1.0
    # opd_gate=auto: the chat env's scripted user replays exactly, so combine checks its teacher
    assert saved["opd_gate"] == ("replay" if method == "combine" else "none")
    assert all(("gate/checked" in r) == (method == "combine") for r in rows[1:])
    assert (saved["device"], saved["dtype"]) == TrainConfig().placement()  # what auto resolved to, not "auto"
    assert _latest(run) == "step_00002"
    state = json.loads((run / "checkpoints" / "step_00002" / "state.json").read_text())
    assert state["step"] == 2 and state["version"] == 2
    lora_b = _lora_b(run / "checkpoints" / "step_00002")
    assert lora_b, "the checkpoint holds no LoRA weights"
    assert any(bool(v.abs().gt(0).any()) for v in lora_b.values()), "LoRA B is still zero: no update happened"

    assert (run / "learning_curve.png").stat().st_size > 0
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tb").iterdir())


def _assert_it_said_what_it_does_and_how_far_it_got(out: str, err: str, method: str, run: Path,
                                                   rows: list[dict[str, float]]) -> None:
    """The opening line (stdout) states the plan; the bars (stderr, not a terminal here: one
    line per redraw, no carriage returns) count each evaluation's and rollout's episodes and
    turns, and the step bar estimates the time left once step 1 ended."""
    plan = out.splitlines()[0]
    assert re.match(rf"training clawgym/Chat-v\d+ with {method} on SmolLM2-135M-Instruct \((cpu|cuda)", plan), plan
    for said in ("2 steps of 2 groups x 2 episodes",
                 "(up to 20 turns each), 4 envs at a time", "evaluation of 2 greedy episodes (up to 1 turn each) "
                 "before step 1 and after every step", f"run dir {run}", "step bar estimates the rest"):
        assert said in plan, f"the opening line lacks {said!r}: {plan}"
    err = err[err.index("eval step 0"):]  # after the model's loading bar (transformers' own)
    assert "\r" not in err
    for step in (0, 1, 2):  # an evaluation's greedy first reply: one turn per episode
        assert re.search(rf"^eval step {step}: 2/2 episodes \[[0-9:]+<00:00\], 2 turns, ", err, re.M)
    for step in (1, 2):
        turns = round(rows[step]["rollout/turns_per_episode"] * 4)
        assert f"rollout step {step}: 0/4 episodes [00:00<?], 0 turns, starting 4 episodes" in err
        assert re.search(rf"^rollout step {step}: 4/4 episodes \[[0-9:]+<00:00\], {turns} turns, ", err, re.M)
    assert re.search(r"on clawgym/Chat-v\d+: +50%.* 1/2 \[[0-9:]+<[0-9:]+, ", err), "no estimate after step 1"


@pytest.mark.slow
def test_a_bfloat16_run_on_the_cpu_trains_float32_adapter_weights(tmp_path):
    """dtype=bfloat16 without a GPU: the bfloat16 path of a GPU run, on CPU kernels (slow here:
    this CPU has no native bfloat16, so generation runs ~20x slower than in float32)."""
    run = tmp_path / "run"
    assert main([*TINY, "method=combine", "steps=1", "eval_tasks=0", "max_new_tokens=12", "env_kwargs.patience=1",
                 "train_cut=true", "device=cpu", "dtype=bfloat16", f"out={run}"]) == 0  # cut replies train too
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["device"], saved["dtype"]) == ("cpu", "bfloat16")
    (row,) = _metrics(run)[1:]
    assert row["samples/count"] > 0 and row["loss/grad_norm"] > 0
    lora_b = _lora_b(run / "checkpoints" / "step_00001")
    assert all(v.dtype == torch.float32 for v in lora_b.values())
    assert any(bool(v.abs().gt(0).any()) for v in lora_b.values()), "LoRA B is still zero: no update happened"


def test_one_update_moves_logprobs_the_way_the_advantages_point(tmp_path):
    """After one combine step the served policy puts more mass where A > 0 and less where A < 0."""
    config = apply_overrides(TrainConfig(), [*TINY, "method=combine", "eval_tasks=0", f"out={tmp_path}"])
    trainer = Trainer(config, RunDir(tmp_path))
    try:
        batch = trainer.collect_and_score(1)
        samples, _ = build_samples(batch.episodes, trainer.config, trainer._teacher)  # opd_gate resolved
        assert samples, "step 1 of this seed should have trainable samples"
        ids = ([s.prompt_ids for s in samples], [s.completion_ids for s in samples])
        before = trainer.policy.score(*ids)
        metrics = trainer.learn(batch)
        after = trainer.policy.score(*ids)
    finally:
        trainer.close()
    assert metrics["samples/count"] == len(samples)
    assert trainer.policy.weight_version == 1
    # the surrogate the loss maximises, to first order: mean_i mean_t A_it * (logpi_new - logpi_old)
    gains = [sum(a * (n - o) for a, n, o in zip(s.advantages, new, old)) / len(s.advantages)
             for s, new, old in zip(samples, after, before)]
    assert sum(gains) / len(gains) > 0


def test_self_judge_run(tmp_path):
    """The real self-judge (base model, adapter off, logprob mode) scoring a combine step."""
    run = tmp_path / "run"
    argv = [*TINY, "method=combine", "judge.kind=self", "judge.mode=logprob", "judge.hints=next_state",
            "steps=1", "eval_tasks=0", "env_kwargs.patience=1", "max_new_tokens=12", f"out={run}"]
    assert main(argv) == 0
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [0, 1]
    row = rows[1]
    assert row["judge/unparsed"] == 0  # logprob mode always yields a label
    assert -1 <= row["judge/score_mean"] <= 1
    assert row["rollout/turns"] == 4  # 2 tasks x 2 rollouts x 1 turn
    assert _latest(run) == "step_00001"


def test_killed_run_resumes_without_losing_or_repeating_a_step(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}
    argv = [sys.executable, "-m", "trainers.run", *TINY, "method=grpo", "steps=3", "save_every=1",
            "eval_tasks=1", "env_kwargs.patience=1", "max_new_tokens=12", f"out={run}"]
    first = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    try:
        while _latest(run) != "step_00001":
            assert first.poll() is None, f"the run ended before its first checkpoint: {first.stderr.read()!r}"
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        first.stderr.close()
    assert first.returncode == -signal.SIGKILL
    before = _metrics(run)
    assert [r["step"] for r in before][:2] == [0, 1]

    # restarting with the same folder resumes: the saved config supplies everything else, and
    # an override (a new lr) wins over the saved config and the checkpoint's optimizer state
    second = subprocess.run([sys.executable, "-m", "trainers.run", f"out={run}", "steps=3", "lr=5e-4"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "done: 3 steps" in second.stdout

    rows = _metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[:2] == before[:2]  # the steps before the kill are kept as they were
    assert [r["rollout/weight_version"] for r in rows] == [0, 0, 1, 2]
    assert _latest(run) == "step_00003"
    state = json.loads((run / "checkpoints" / "step_00003" / "state.json").read_text())
    assert state["step"] == 3 and state["config"]["env_kwargs"] == {"persona": "friend", "partial_credit": True,
                                                             "patience": 1}
    assert not list((run / "checkpoints").glob(".tmp_*"))
    assert yaml.safe_load((run / "config.yaml").read_text())["lr"] == 5e-4
    _weights, optimizer, _state = RunDir(run).load_checkpoint(run / "checkpoints" / "step_00003")
    assert {g["lr"] for g in optimizer["param_groups"]} == {5e-4}


def _containers_of(pid: int) -> list[str]:
    """The clawgym sandbox containers that process ``pid`` made (running or not)."""
    import docker

    client = docker.from_env()
    try:
        found = client.api.containers(all=True, filters={"label": "clawgym.sandbox"})
        return [c["Id"] for c in found
                if (c.get("Labels") or {}).get("clawgym.owner", "").partition(":")[2].split("-")[1:2] == [str(pid)]]
    finally:
        client.close()


@pytest.mark.docker
def test_sigterm_stops_a_run_like_a_normal_exit_removing_its_sandboxes(tmp_path):
    """`timeout`, Slurm and Kubernetes stop a job with SIGTERM, which used to end the process
    on the spot and leave every docker sandbox running. Stopped during step 2's rollout, the
    run removes its containers, checkpoints step 1 (save_every would not have) and says so."""
    from tests.helpers import require_backend

    require_backend("docker")
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}
    argv = [sys.executable, "-m", "trainers.run", "env=terminal", "sandbox=docker", "method=grpo", "steps=3",
            "save_every=100", "eval_tasks=0", "parallel=2", "batch_size=1", "group_size=2",
            "env_kwargs.max_turns=2", "max_new_tokens=12", "seed=3", "progress=false", f"out={run}"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    try:
        while not (run / "metrics.jsonl").exists() or 1 not in [r["step"] for r in _metrics(run)] \
                or not _containers_of(proc.pid):
            assert proc.poll() is None, f"the run ended before step 1: {proc.stderr.read()[-2000:]!r}"
            assert time.monotonic() < deadline, "no step 1 with live sandboxes within 240 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "stopped by SIGTERM during step 2; step 1 is checkpointed" in stderr
    assert _containers_of(proc.pid) == []
    assert _latest(run) == "step_00001" and [r["step"] for r in _metrics(run)] == [0, 1]
    state = json.loads((run / "checkpoints" / "step_00001" / "state.json").read_text())
    assert state["step"] == 1


def test_unset_temperature_is_the_envs_own(tmp_path):
    """OpenClaw-RL: 0.6 for the personal-chat track (it imitates live use), 1.0 for env tracks."""
    tiny = [item for item in TINY if not item.startswith("temperature=")]
    for env, expected in (("chat", 0.6), ("guess", 1.0)):
        argv = [*tiny, f"env={env}", "eval_tasks=0", f"out={tmp_path / env}"]
        if env == "guess":
            argv = [a for a in argv if not a.startswith("env_kwargs.")]
        trainer = Trainer(apply_overrides(TrainConfig(), argv), RunDir(tmp_path / env))
        try:
            assert trainer.config.temperature == expected
        finally:
            trainer.close()
    assert apply_overrides(TrainConfig(temperature=0.3), ["temperature=none"]).temperature is None


def test_fill_groups_rolls_out_fresh_tasks_until_groups_disagree(tmp_path):
    """DAPO's dynamic sampling, real model and chat env, one reply an episode, env reward.
    Greedy, a group's members write the same reply, so no group ever has a signal: every
    extra round is rolled out, counted in the metrics, and none of it joins the batch.
    Sampled (seed 6), round 0's two groups agree within themselves, and a later round's
    groups that disagree are added, numbered after the earlier rounds', until the batch has
    batch_size of them."""
    tiny = [a for a in TINY if not a.startswith(("temperature=", "reward=", "env_kwargs.patience=", "seed="))]
    batches = {}
    for temperature in (0.0, 1.0):
        out = tmp_path / f"t{temperature}"
        config = apply_overrides(TrainConfig(), [*tiny, "seed=6", f"temperature={temperature}", "reward=env", "method=grpo",
                                                 "max_new_tokens=12", "fill_groups=3", "eval_tasks=0", f"out={out}"])
        trainer = Trainer(config, RunDir(out))
        try:
            batches[temperature] = trainer.collect_and_score(1)
        finally:
            trainer.close()
    greedy = batches[0.0]
    assert {k: greedy.metrics[k] for k in ("rollout/fill_rounds", "rollout/fill_episodes", "samples/signal_groups")} \
        == {"rollout/fill_rounds": 3.0, "rollout/fill_episodes": 12.0, "samples/signal_groups": 0.0}
    assert sorted({e.group for e in greedy.episodes}) == [0, 1] and len(greedy.episodes) == 4
    sampled = batches[1.0]
    rounds = sampled.metrics["rollout/fill_rounds"]
    assert 1 <= rounds < 3 and sampled.metrics["samples/signal_groups"] == 2
    assert sampled.metrics["rollout/fill_episodes"] == rounds * 4
    returns = defaultdict(set)
    for e in sampled.episodes:
        returns[e.group].add(e.reward_return)
    added = [g for g in returns if g >= 2]
    assert added and all(g < 2 * (rounds + 1) and len(returns[g]) == 2 for g in added)
    assert len(sampled.episodes) == 4 + 2 * len(added)


def test_opd_gate_replays_each_hinted_turn_with_the_teachers_own_reply(tmp_path):
    """opd_gate=replay with the real model and the chat env (three replies an episode): every
    hinted turn that could be trained gets a reward for a reply the teacher wrote given the
    hint, the env reaching turns 1 and 2 again from the seed and the earlier replies, and the
    reply scored as the run scores a turn (reward=both: the env's reward plus the lexical
    judge's score of the replayed next state); the samples keep the OPD term exactly where
    that reward beat the turn's."""
    config = apply_overrides(TrainConfig(), [*TINY, "method=combine", "opd_gate=replay", "eval_tasks=0",
                                             f"out={tmp_path}"])
    trainer = Trainer(config, RunDir(tmp_path))
    try:
        batch = trainer.collect_and_score(1)
        checked = [(e, t) for e in batch.episodes for t in e.turns if t.teacher_reward is not None]
        assert batch.metrics["gate/checked"] == len(checked) > 0 and batch.metrics["gate/unreplayed"] == 0
        assert {t.index for _e, t in checked} - {0}, "no later turn was replayed"
        assert all(-2 <= t.teacher_reward <= 2 for _e, t in checked)  # env [-1, 1] + judge {-1, 0, 1}
        assert 0 <= batch.metrics["gate/env_disagrees"] <= 1
        assert batch.metrics["perf/gate_s"] > 0 and "perf/judge_s" in batch.metrics
        # the gate's generation and env steps are its own time, not the rollout's
        m = batch.metrics
        assert 0 < m["perf/gate_env_s"] < m["perf/gate_generate_s"] <= m["perf/gate_s"]
        assert m["perf/gate_generate_s"] + m["perf/gate_env_s"] <= m["perf/gate_s"]
        assert m["perf/rollout_generate_s"] + m["perf/rollout_env_s"] <= m["perf/rollout_s"]
        wins = [t for _e, t in checked if t.teacher_reward > t.reward]
        assert batch.metrics["gate/teacher_wins"] == pytest.approx(len(wins) / len(checked))
        # replaying a turn's own reply gives back its own reward: the replay reached the same state
        assert replay(trainer.vec, [Replay(e, t.index, t.completion.message) for e, t in checked]) \
            == [t.env_reward for _e, t in checked]
        # ... and a next state the judge scores as it scored the turn: the gate's units are the run's
        steps = replay_steps(trainer.vec, [Replay(e, t.index, t.completion.message) for e, t in checked])
        verdicts = trainer.judge.judge([TurnToJudge(t.context, t.completion.text, s.next_state, s.next_role,
                                                    s.env_reward) for (_e, t), s in zip(checked, steps)])
        assert [run_reward(trainer.config, s.env_reward, v.score if v.parsed else None)
                for s, v in zip(steps, verdicts)] == [t.reward for _e, t in checked]
        asked: list[Turn] = []

        def teacher(turns):
            asked.extend(turns)
            return trainer._teacher(turns)

        _samples, stats = build_samples(batch.episodes, trainer.config, teacher)
        # opd_alone=true: every checked turn wanted its OPD term; the teacher scores the winners only
        assert sorted(map(id, asked)) == sorted(map(id, wins))
        assert stats["samples/hinted_turns"] == len(wins) and stats["samples/gate_failed"] == len(checked) - len(wins)
    finally:
        trainer.close()


def test_min_update_samples_holds_a_thin_step_on_unchanged_weights_until_enough_gather(tmp_path):
    """A step with fewer samples than min_update_samples trains nothing: its samples wait,
    the next step rolls out on the same weight version (so they are still on-policy), and
    the step that brings the total up trains on the held and the new ones together as one
    update, versions then counting updates rather than steps, through a checkpoint too."""
    # two replies an episode and cut replies trained too: a short step that still has samples
    config = apply_overrides(TrainConfig(), [*TINY, "method=grpo", "min_update_samples=1000000", "eval_tasks=2",
                                             "env_kwargs.patience=2", "train_cut=true", "max_new_tokens=12", f"out={tmp_path}"])
    trainer = Trainer(config, RunDir(tmp_path))
    try:
        baseline = trainer.evaluate()
        assert "perf/eval_reused" not in baseline
        first = trainer.learn(trainer.collect_and_score(1))
        held = first["samples/held"]
        assert held == first["samples/count"] > 0 and len(trainer.held) == held
        assert "loss/total" not in first and trainer.version == 0 and trainer.policy.weight_version == 0
        assert all(not v.abs().gt(0).any() for k, v in trainer._trainable_state().items() if "lora_B" in k)
        # the held step's weights are the baseline's: its evaluation is the baseline's, not decoded again
        trainer.step = 1
        decoded = len(trainer.run.replies())
        assert trainer.evaluate() == {**baseline, "perf/eval_reused": 1.0}
        replies = trainer.run.replies()
        assert [{**r, "step": 0} for r in replies[decoded:]] == replies[:decoded] and decoded == 2
        trainer.config = dataclasses.replace(trainer.config, min_update_samples=int(held) + 1)
        for step in (2, 3, 4):
            batch = trainer.collect_and_score(step)
            assert batch.metrics["rollout/weight_version"] == 0  # the held samples' weights roll out again
            row = trainer.learn(batch)
            if "samples/trained" in row:
                break
            assert row["samples/held"] == held + row["samples/count"] and trainer.version == 0  # none this step
            held = row["samples/held"]
        else:
            pytest.fail("no step brought a sample in three tries")
        assert row["samples/trained"] == held + row["samples/count"] and row["samples/held"] == 0 and not trainer.held
        assert row["samples/dropped_stale"] == 0 and row["samples/staleness_mean"] == 0  # one version throughout
        assert "loss/total" in row and trainer.version == 1 and trainer.policy.weight_version == 1
        assert any(v.abs().gt(0).any() for k, v in trainer._trainable_state().items() if "lora_B" in k)
        assert "perf/eval_reused" not in trainer.evaluate()  # new weights are evaluated afresh
        trainer.step = step
        trainer.checkpoint()
    finally:
        trainer.close()
    resumed = Trainer(apply_overrides(TrainConfig(), [f"out={tmp_path}", *TINY, "method=grpo", "eval_tasks=0"]),
                      RunDir(tmp_path))
    try:
        resumed.resume()
        assert (resumed.step, resumed.version, resumed.policy.weight_version) == (step, 1, 1)
    finally:
        resumed.close()
