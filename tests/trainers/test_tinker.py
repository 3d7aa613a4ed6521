"""compute=tinker: the Datum and loss arithmetic by hand, what the config refuses, and two
training steps of the chat demo through a real self-hosted Tinker API server.

The server is skyrl-tx 0.3.0 (its JAX engine on the CPU, the default model, 4 LoRA slots of
rank <= 8), started by ``scripts/tinker_server.sh serve`` on a free port for the module and
stopped after it. Tests that need it are marked ``tinker`` (opt-in; `make tinker` builds
.venv-tinker and the served model) and skip, saying why, when it is missing; under
``CI=true`` they fail instead, but only when ``-m`` selected the marker. A first run spends
most of its ~10 minutes in JAX compiling (15-65 s per shape); the persistent cache in
.venv-tinker/jax-cache spares later runs most of it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.trainers.test_run import TINY
from trainers.config import TrainConfig, apply_overrides
from trainers.samples import Sample
from trainers.tinker.settings import TinkerSettings, tinker_problem

ROOT = Path(__file__).resolve().parents[2]
SERVER_PYTHON = ROOT / ".venv-tinker" / "bin" / "python"
SCRIPT = ROOT / "scripts" / "tinker_server.sh"
START_TIMEOUT_S = 600


# ---- by hand: no server ------------------------------------------------------------------
def test_a_sample_becomes_a_datum_shifted_by_one_with_scaled_advantages():
    pytest.importorskip("tinker", reason="the Tinker SDK is absent: pip install tinker==0.16.1 (make tinker)")
    from trainers.tinker.trainer import to_datum

    sample = Sample(prompt_ids=[1, 2, 3], completion_ids=[4, 5], old_logprobs=[-0.5, -1.0], advantages=[2.0, -1.0],
                    weight_version=0, temperature=1.0)
    datum = to_datum(sample, batch_samples=2)
    inputs = datum.loss_fn_inputs
    # the model reads 1 2 3 4 and predicts 2 3 4 5; positions 0-1 predict prompt tokens (no
    # loss), 2-3 the completion: advantages / (2 tokens x 2 samples) = 2/4, -1/4
    assert datum.model_input.to_ints() == [1, 2, 3, 4]
    assert inputs["target_tokens"].tolist() == [2, 3, 4, 5]
    assert inputs["logprobs"].tolist() == [0.0, 0.0, -0.5, -1.0]
    assert inputs["advantages"].tolist() == [0.0, 0.0, 0.5, -0.25]


def test_loss_stats_read_the_learners_logprobs_and_clawgyms_clip():
    pytest.importorskip("tinker", reason="the Tinker SDK is absent: pip install tinker==0.16.1 (make tinker)")
    from tinker import types

    from trainers.tinker.trainer import loss_stats

    config = apply_overrides(TrainConfig(), ["eps_low=0.2", "eps_high=0.28"])
    samples = [Sample([1, 2], [3, 4], [-1.0, -2.0], [1.0, -1.0], 0, 1.0),
               Sample([1, 2], [5], [-1.0], [1.0], 0, 1.0)]
    # learner log-probs per position (the prompt's first is cut by the shift): ratios
    # e^0.5 = 1.65 (A > 0: above 1.28, clipped), e^-0.5 = 0.61 (A < 0: below 0.8, clipped), e^0 = 1
    outputs = [{"logprobs": types.TensorData.from_numpy(np.array([-9.0, -0.5, -2.5], dtype=np.float32)),
                "elementwise_loss": types.TensorData.from_numpy(np.array([0.0, -0.3, 0.1], dtype=np.float32))},
               {"logprobs": types.TensorData.from_numpy(np.array([-9.0, -1.0], dtype=np.float32)),
                "elementwise_loss": types.TensorData.from_numpy(np.array([0.0, -0.5], dtype=np.float32))}]
    stats = loss_stats(samples, outputs, "ppo", config)
    assert stats["loss/policy"] == pytest.approx(-0.3 + 0.1 - 0.5)  # the completion positions' losses, summed
    assert stats["loss/ratio_mean"] == pytest.approx((np.exp(0.5) + np.exp(-0.5) + 1.0) / 3, rel=1e-6)
    assert stats["loss/adv_mean"] == pytest.approx(1 / 3)
    assert stats["loss/clip_frac"] == pytest.approx(2 / 3)
    assert "loss/clip_frac" not in loss_stats(samples, outputs, "importance_sampling", config)


@pytest.mark.parametrize(("overrides", "says"), [
    (["method=sft"], "method=sft trains locally"),
    (["lora.enabled=false", "opd_teacher=policy"], "keep lora.enabled=true"),
    (["kl_beta=0.1"], "no KL term"),
    (["mode=async"], "drop mode=async"),
    (["judge.kind=self"], "judge.kind=self reads the local base model"),
    (["lora.targets=q_proj"], "drop lora.targets="),
])
def test_what_tinker_cannot_do_is_refused_with_what_to_pass(overrides, says):
    assert tinker_problem(apply_overrides(TrainConfig(), ["method=combine"])) is None
    assert says in tinker_problem(apply_overrides(TrainConfig(), overrides))


def test_a_bad_tinker_key_says_what_is_allowed():
    with pytest.raises(ValueError, match="choose one of: importance_sampling, ppo"):
        TinkerSettings(loss="grpo")


def test_a_missing_key_says_what_to_set(monkeypatch, tmp_path):
    pytest.importorskip("tinker", reason="the Tinker SDK is absent: pip install tinker==0.16.1 (make tinker)")
    from trainers.rundir import RunDir
    from trainers.tinker.trainer import TinkerTrainer

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.setenv("TINKER_BASE_URL", "http://user:secret@127.0.0.1:9")
    with pytest.raises(RuntimeError, match="set TINKER_BASE_URL to a running service") as caught:
        TinkerTrainer(apply_overrides(TrainConfig(), ["method=combine", f"out={tmp_path}"]), RunDir(tmp_path))
    assert "http://127.0.0.1:9" in str(caught.value) and "secret" not in str(caught.value)


def test_the_split_report_gives_each_steps_parts_and_their_medians(tmp_path):
    from trainers.tinker.__main__ import split

    parts = ("sample", "score", "forward_backward", "optim_step", "save_weights", "step")
    rows = [{"step": 0}] + [{"step": k, **{f"perf/{p}_s": float(k * (i + 1)) for i, p in enumerate(parts)}}
                            for k in (1, 2, 4)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = split(tmp_path).splitlines()
    assert [line.split()[0] for line in lines] == ["step", "1", "2", "4", "med."]
    assert [float(v) for v in lines[-1].split()[1:]] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]  # step 2's: the median


# ---- against the real server -------------------------------------------------------------
def _missing() -> str | None:
    if not SERVER_PYTHON.exists():
        return f"{SERVER_PYTHON} is absent: run `make tinker` to build skyrl-tx's venv and the served model"
    if not (SERVER_PYTHON.parent.parent / "launcher" / "uv").exists():
        return "the server's engine launcher is absent: rerun `make tinker`"
    if importlib.util.find_spec("tinker") is None:
        return "the Tinker SDK is absent from .venv: run `make tinker` (pip install tinker==0.16.1)"
    return None


def _require(config: pytest.Config, reason: str | None) -> None:
    """Skip with ``reason``; under CI=true fail instead when ``-m`` selected ``tinker``."""
    if reason is None:
        return
    if os.environ.get("CI") == "true" and "tinker" in (config.getoption("-m") or ""):
        pytest.fail(f"CI=true with -m tinker requires the Tinker server: {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=5) as answer:
            return json.loads(answer.read()).get("status") == "ok"
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A real skyrl-tx server on a free port, with TINKER_BASE_URL and a fresh TINKER_API_KEY
    set for the module; yields the key. Stopped (its process group) after the module."""
    _require(request.config, _missing())
    state = tmp_path_factory.mktemp("tinker-state")
    url = f"http://127.0.0.1:{_free_port()}"
    log = (state / "server.log").open("w")
    proc = subprocess.Popen(["bash", str(SCRIPT), "serve", url.rsplit(":", 1)[1]], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "TINKER_STATE_DIR": str(state)})
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (state / "server.log").read_text()[-3000:]
                pytest.fail(f"the Tinker server did not come up (exit {proc.poll()}); its log ends:\n{tail}")
            time.sleep(1)
        key = f"tml-clawgym-{secrets.token_hex(12)}"
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TINKER_BASE_URL", url)
            env.setenv("TINKER_API_KEY", key)
            yield key
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the API server stops its engine, a child in its group
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.mark.tinker
@pytest.mark.timeout(3600)
def test_two_steps_of_the_chat_demo_train_through_a_real_tinker_server(server, tmp_path):
    """Step 1 in one trainer, step 2 in a second that resumes the first's checkpoint (the
    service's saved state and sampler): the sampled policy must have changed, the time split
    be logged, and the run dir hold no key."""
    from agents.policy import SamplingParams
    from trainers.rundir import RunDir
    from trainers.tinker.trainer import TinkerTrainer

    key, run = server, tmp_path / "run"
    # combine with every hinted turn's OPD term (no replay gate) and the bounded teacher: the
    # teacher's log-probs come from both samplers, the policy's and the base model's
    argv = [*TINY, "lora.rank=8", "method=combine", "opd_gate=none", "opd_teacher=bounded", "eval_tasks=0",
            f"out={run}"]
    first = TinkerTrainer(apply_overrides(TrainConfig(), [*argv, "steps=1"]), RunDir(run))
    try:
        prompt = first.policy.encode([{"role": "user", "content": "Hi! What should I cook tonight?"}])
        (reply,) = first.policy.generate_ids([prompt], SamplingParams(1.0, max_new_tokens=16))
        fixed = ([reply.prompt_ids], [reply.completion_ids])
        before, base = first.policy.score(*fixed), first.policy.score(*fixed, adapter=False)
        first.train()
    finally:
        first.close()
    step_one = (run / "metrics.jsonl").read_text().splitlines()[1]
    second = TinkerTrainer(apply_overrides(TrainConfig(), [*argv, "steps=2"]), RunDir(run))
    try:
        second.train()
        after = second.policy.score(*fixed)
        version = second.policy.weight_version
    finally:
        second.close()

    assert reply.completion_ids and len(reply.logprobs) == len(reply.completion_ids)
    assert np.allclose(reply.logprobs, before[0], atol=1e-3)  # the sampler's log-probs are compute_logprobs'
    assert np.allclose(before, base, atol=1e-4)  # version 0 is the base model: LoRA B starts at zero
    assert version == 2
    assert np.max(np.abs(np.subtract(after, before))) > 1e-3, "the sampled policy did not change"

    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert lines[1] == step_one, "the second trainer ran step 1 again instead of resuming after it"
    rows = [json.loads(line) for line in lines]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert [r["rollout/weight_version"] for r in rows[1:]] == [0, 1]  # version k-1 rolls out step k
    assert sum(r["samples/count"] for r in rows[1:]) > 0, "no trainable samples: the run taught nothing"
    assert sum(r["perf/teacher_s"] > 0 for r in rows[1:]) >= 1, "no OPD teacher read a hinted turn"
    for row in rows[1:]:
        for part in ("sample", "score", "forward_backward", "optim_step", "save_weights"):
            assert f"perf/{part}_s" in row, f"step {row['step']} lacks perf/{part}_s"
        if row["samples/count"]:
            assert row["perf/forward_backward_s"] > 0 and row["perf/save_weights_s"] > 0
            assert abs(row["loss/ratio_mean"] - 1.0) < 0.05  # on-policy: the learner reads what was sampled
    for step in (1, 2):
        state = json.loads((run / "checkpoints" / f"step_{step:05d}" / "state.json").read_text())
        assert state["step"] == step and state["tinker_state"].startswith("tinker://")
        assert state["tinker_sampler"].startswith("tinker://")

    leaked = [str(f) for f in run.rglob("*") if f.is_file() and key.encode() in f.read_bytes()]
    assert not leaked, f"the API key was written to {leaked}"
