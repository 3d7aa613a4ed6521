"""Data-parallel training (trainers/distributed.py) with real ranks: ``torchrun`` starts two
processes of ``trainers.run`` (or of tests/trainers/dist_helper.py) in one gloo process
group on this CPU. The pure parts (the minibatch plan, the metrics' merge, the digest) get
hand-computed cases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from trainers.config import TrainConfig, apply_overrides
from trainers.distributed import (DistributedError, interleave, merge_metrics, minibatch_shares, refuse_unsupported,
                                  weights_digest)
from trainers.run import main

ROOT = Path(__file__).resolve().parents[2]

TINY = ["env=chat", "env_kwargs.persona=friend", "env_kwargs.partial_credit=true", "env_kwargs.patience=1",
        "temperature=1.0", "epochs=1", "reward=both", "seed=5", "batch_size=2", "group_size=2", "parallel=2",
        "max_new_tokens=12", "train_cut=true", "judge.kind=lexical", "method=grpo", "progress=false"]
"""tests/trainers/test_run.py's smoke settings, cut to one turn of 12 tokens (cut replies train
too, so a step has samples); batch_size=2: one group per rank."""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}


def _torchrun(*args: str) -> list[str]:
    # --standalone: a rendezvous on a free local port, so runs side by side do not collide
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]


def _metrics(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _digests(output: str) -> list[str]:
    return [line.rsplit("blake2b ", 1)[1].strip() for line in output.splitlines() if "trainable weights blake2b" in line]


# ---- the pure parts ---------------------------------------------------------------------
def test_interleave_takes_each_ranks_next_item_in_turn():
    assert interleave([["a", "b", "c"], ["d"]]) == ["a", "d", "b", "c"]
    assert interleave([[1, 2], [3, 4], []]) == [1, 3, 2, 4]
    assert interleave([]) == []


def test_minibatch_shares_cut_the_interleaved_union_into_the_same_minibatches_on_every_rank():
    # counts 5 and 4 interleave as r0:0 r1:0 r0:1 r1:1 r0:2 r1:2 r0:3 r1:3 r0:4; cut every 4
    assert minibatch_shares([5, 4], 0, 4) == [[0, 1], [2, 3], [4]]
    assert minibatch_shares([5, 4], 1, 4) == [[0, 1], [2, 3], []]  # rank 1 holds none of the last
    assert minibatch_shares([3], 0, 2) == [[0, 1], [2]]  # one process: consecutive slices, as before
    assert minibatch_shares([3], 0, 0) == [[0, 1, 2]]  # 0: one minibatch
    assert minibatch_shares([0, 2], 0, 0) == [[]] and minibatch_shares([0, 2], 1, 0) == [[0, 1]]


def test_merged_metrics_sum_counts_take_the_slowest_time_rank_0s_globals_and_weigh_means_by_episodes():
    rank0 = {"samples/count": 3.0, "rollout/episodes": 4.0, "reward/return": 1.0, "perf/step_s": 2.0,
             "loss/total": 0.5, "eval/env_return": 0.25}
    rank1 = {"samples/count": 1.0, "rollout/episodes": 2.0, "reward/return": -0.5, "perf/step_s": 3.0,
             "loss/total": 0.5, "adv/rl_abs": 0.75}
    merged = merge_metrics([rank0, rank1])
    assert merged == {"samples/count": 4.0, "rollout/episodes": 6.0,
                      "reward/return": (4 * 1.0 + 2 * -0.5) / 6,  # 0.5
                      "perf/step_s": 3.0, "loss/total": 0.5, "eval/env_return": 0.25,
                      "adv/rl_abs": 0.75}  # reported by rank 1 alone: its own
    assert merge_metrics([{"judge/score_mean": 1.0}, {"judge/score_mean": 0.0}]) == {"judge/score_mean": 0.5}


def test_the_weights_digest_changes_with_one_bit_or_a_name():
    state = {"a": torch.tensor([1.0, 2.0]), "b": torch.zeros(2, 3)}
    assert weights_digest(state) == weights_digest({k: v.clone() for k, v in reversed(state.items())})
    nudged = {**state, "a": torch.nextafter(state["a"], torch.tensor(3.0))}
    assert weights_digest(nudged) != weights_digest(state)
    assert weights_digest({"c": state["a"], "b": state["b"]}) != weights_digest(state)


@pytest.mark.parametrize("overrides, words", [
    (["method=sft"], "without torchrun"), (["data=x.jsonl"], "without torchrun"),
    (["batch_size=1"], "batch_size >= 2")])
def test_what_data_parallel_runs_do_not_build_is_refused(overrides, words):
    config = apply_overrides(TrainConfig(), overrides)
    refuse_unsupported(config, 1)  # one process takes them all
    with pytest.raises(DistributedError, match=words):
        refuse_unsupported(config, 2)


def test_world_size_is_recorded_not_set(tmp_path, capsys):
    assert main([*TINY, "world_size=2", f"out={tmp_path / 'run'}"]) == 2
    assert "world_size=2 was passed but 1 rank(s) were launched" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# ---- real ranks -------------------------------------------------------------------------
def test_a_world_size_without_its_ranks_is_refused(tmp_path):
    """WORLD_SIZE=2 set by hand, no torchrun: no other rank can ever answer."""
    env = {**_env(), "WORLD_SIZE": "2"}
    for key in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-m", "trainers.run", *TINY, f"out={tmp_path / 'run'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "WORLD_SIZE=2 but RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT are unset" in done.stderr
    assert "torchrun --nproc-per-node 2 -m trainers.run" in done.stderr
    assert not (tmp_path / "run").exists()


def test_ranks_that_torch_distributed_does_not_join_are_refused():
    """accelerate's GPU backend on this GPU-less host leaves each torchrun rank a world of one
    (each would train alone): refused, with how to launch."""
    done = subprocess.run(_torchrun("-m", "tests.trainers.dist_helper", "gpu_backend"), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert done.stdout.count("the launcher started 2 ranks but torch.distributed sees 1") == 2, done.stdout[-2000:]


def test_two_ranks_train_one_step_to_identical_weights_and_rank_0_alone_writes_the_run(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(_torchrun("-m", "trainers.run", *TINY, "steps=1", "eval_tasks=1", f"out={run}",
                                    "progress=true"), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trainers.run (rank 1 of 2): done, 1 steps" in done.stdout and "done: 1 steps" in done.stdout
    # rank 0 alone states the plan and shows progress: its share of the rollout, the evaluation
    (plan,) = [line for line in done.stdout.splitlines() if line.startswith("training ")]
    assert "1 step of 2 groups x 2 episodes" in plan and "on each of 2 ranks" in plan
    for started in ("eval step 0: 0/1 episodes [00:00<?], 0 turns\n",
                    "rollout step 1 (rank 0's groups): 0/2 episodes [00:00<?], 0 turns\n"):
        assert done.stderr.count(started) == 1, done.stderr[-3000:]
    # both ranks report the digest of their trained weights; rank 0's checkpoint has the same bytes
    checkpoint = load_file(str(run / "checkpoints" / "step_00001" / "weights.safetensors"))
    assert _digests(done.stdout) == [weights_digest(checkpoint)] * 2
    assert any(bool(v.abs().gt(0).any()) for k, v in checkpoint.items() if "lora_B" in k), "no update happened"

    assert yaml.safe_load((run / "config.yaml").read_text())["world_size"] == 2
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [0, 1]  # written once, by rank 0
    step = rows[1]
    # two groups of two, one group a rank: the ranks' counts add up to the whole step's
    assert step["rollout/episodes"] == 4 and step["rollout/turns"] == 4
    assert step["samples/count"] > 0 and step["loss/grad_norm"] > 0
    assert [r["step"] for r in map(json.loads, (run / "eval_replies.jsonl").read_text().splitlines())] == [0, 1]
    assert len(list((run / "tb").iterdir())) == 1
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_00001"]


@pytest.mark.slow
def test_a_distributed_update_is_the_single_process_update_on_the_same_samples(tmp_path):
    """Nine fixed samples, split between two ranks, through one distributed train_step (two
    epochs of minibatches of four, a pass per sample, KL, stale samples, evidence-sized
    steps, SGD): both ranks end bit-identical, and equal to train_step on all nine in one
    process. Tolerance atol 1e-6, rtol 1e-4 (test_update's for micro-passes): the gradient
    is summed in another order (two ranks' partial sums), in float32, and the second
    epoch's forward passes run on weights that differ by that much."""
    from agents.policy import TransformersPolicy
    from tests.trainers.dist_helper import fixed_samples, sgd_step

    done = subprocess.run(_torchrun("-m", "tests.trainers.dist_helper", "update", str(tmp_path)), cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in (0, 1)]
    assert ranks[0].keys() == ranks[1].keys()
    assert all(torch.equal(ranks[0][k], ranks[1][k]) for k in ranks[0])

    policy = TransformersPolicy("default", seed=0)
    alone, stats = sgd_step(policy, fixed_samples(policy))
    start = {k: v.detach() for k, v in policy.model.named_parameters() if k in alone}
    assert max(float((alone[k] - start[k]).abs().max()) for k in alone) > 1e-4  # the step moved the adapter
    for key, value in alone.items():
        torch.testing.assert_close(ranks[0][key], value, atol=1e-6, rtol=1e-4)
    distributed = json.loads((tmp_path / "rank0.json").read_text())
    for key in ("loss/total", "loss/kl", "loss/grad_norm", "loss/step_fraction"):
        assert distributed[key] == pytest.approx(stats[key], rel=1e-4, abs=1e-6), key
    # the policy term sums advantage-signed terms that nearly cancel: compared in absolute terms
    assert distributed["loss/policy"] == pytest.approx(stats["loss/policy"], abs=1e-5)


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_with_a_message_naming_it(tmp_path):
    """SIGKILL to rank 1 after step 1: torchrun stops rank 0 (which keeps step 1's
    checkpoint) and the run ends non-zero, naming rank 1 and the signal, instead of hanging."""
    import psutil

    run = tmp_path / "run"
    launcher = subprocess.Popen(_torchrun("-m", "trainers.run", *TINY, "steps=4", "eval_tasks=1", f"out={run}"),
                                cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (run / "metrics.jsonl").exists() or 1 not in [r["step"] for r in _metrics(run)]:
            assert launcher.poll() is None, f"the run ended before step 1: {launcher.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, "no step 1 within 300 s"
            time.sleep(0.1)
        (rank1,) = [p for p in psutil.Process(launcher.pid).children(recursive=True)
                    if p.environ().get("RANK") == "1" and "trainers.run" in " ".join(p.cmdline())]
        rank1.send_signal(signal.SIGKILL)
        output, _ = launcher.communicate(timeout=180)  # generous: a hang would be the timeout of 1800 s
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode != 0
    assert "rank      : 1 (local_rank: 1)" in output and "SIGKILL" in output, output[-3000:]
    assert (run / "checkpoints" / "latest").read_text().strip() >= "step_00001"


@pytest.mark.slow
def test_a_two_rank_run_resumes_in_one_process_and_starts_another_two_rank_run(tmp_path):
    """Rank 0 reads the checkpoint (to resume, or another run's for init=) and the others
    take it from rank 0, so neither depends on the world size it was written at."""
    run = tmp_path / "run"
    first = subprocess.run(_torchrun("-m", "trainers.run", *TINY, "steps=1", "eval_tasks=0", f"out={run}"),
                           cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    (digest, _same) = _digests(first.stdout)
    second = subprocess.run([sys.executable, "-m", "trainers.run", f"out={run}", "steps=2"], cwd=ROOT, env=_env(),
                            capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "done: 2 steps" in second.stdout
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 2] and [r["rollout/weight_version"] for r in rows] == [0, 0, 1]
    assert rows[2]["rollout/episodes"] == 4  # one process now rolls out both groups
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["world_size"] == 1 and saved["batch_size"] == 2  # the rest from the 2-rank run's config
    state = json.loads((run / "checkpoints" / "step_00002" / "state.json").read_text())
    assert state["step"] == 2 and state["version"] == 2
    step1 = load_file(str(run / "checkpoints" / "step_00001" / "weights.safetensors"))
    assert weights_digest(step1) == digest

    # init= is read by rank 0 alone; had rank 1 kept its fresh adapter, the digests compared
    # before the checkpoint would differ and the run would fail
    other = tmp_path / "other"
    third = subprocess.run(_torchrun("-m", "trainers.run", *TINY, "steps=1", "eval_tasks=0", f"init={run}",
                                     f"out={other}"), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert len(set(_digests(third.stdout))) == 1
