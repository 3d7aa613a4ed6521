"""The GPU path: a two-step run of each method, the live server, bfloat16 log-prob agreement.

Marked ``gpu`` and skipped where torch sees no CUDA device: ``make test`` leaves them out,
``make test-all`` runs them (and they skip on a CPU machine). On a GPU run
``pytest -m gpu tests/trainers/test_gpu.py -s``: it prints step times and log-prob gaps.
The live-server test needs the server's packages and the ``openai`` client, which a bare
GPU image may lack (``scripts/gpu_serve_wheels.sh`` gathers them as wheels to carry there);
without them it skips and says which is missing.
Last run: an H200, 2026-11-27, 9 passed (the results pages, docs/results/, have the figures).
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
import torch
import yaml

from agents.device import resolve_dtype
from agents.adapters import LoraSettings
from agents.policy import SamplingParams, TransformersPolicy
from tests.helpers import assert_logprobs_match_scoring
from tests.trainers.test_run import TINY, _lora_b, _metrics
from trainers.config import apply_overrides
from trainers.live.config import ServeConfig
from trainers.run import main
from trainers.serve import serve_in_thread

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; torch sees none")]

PROMPTS = [[{"role": "user", "content": "What is 2+2? Answer with a number only."}],
           [{"role": "user", "content": "Give me three tips for writing clear emails."}],
           [{"role": "system", "content": "You are a storyteller."},
            {"role": "user", "content": "Tell me a long story about a dragon and a lighthouse keeper."}]]


@pytest.mark.parametrize("method, extra", [("grpo", []), ("opd", []), ("combine", []),
                                           ("combine", ["mode=async", "kl_beta=0.01"])],
                         ids=["grpo", "opd", "combine", "combine-async-kl"])
def test_a_two_step_run_of_each_method_on_cuda(method, extra, tmp_path, capsys, record_property):
    """``python -m trainers.run device=cuda`` unchanged. The async run trains on samples one
    version stale (truncated importance weights) with the KL reference on: every tensor of
    the update's side paths must be on the GPU too."""
    run = tmp_path / "run"
    # train_cut: GPU sampling differs from the CPU's, so TINY's seed may end no reply in time
    assert main([*TINY, f"method={method}", "steps=2", "eval_tasks=2", "train_cut=true", "device=cuda",
                 *extra, f"out={run}"]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["device"], saved["dtype"]) == ("cuda:0", resolve_dtype("auto", "cuda:0"))
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert sum(r["samples/count"] for r in rows[1:]) > 0, "no trainable samples: the run taught nothing"
    assert all(r["loss/grad_norm"] > 0 for r in rows[1:] if r["samples/count"] > 0)
    lora_b = _lora_b(run / "checkpoints" / "step_00002")
    assert all(v.dtype == torch.float32 for v in lora_b.values())  # adapter weights stay float32
    assert any(bool(v.abs().gt(0).any()) for v in lora_b.values()), "LoRA B is still zero: no update happened"
    step_s = [r["perf/step_s"] for r in rows[1:]]
    record_property("step_s", step_s)
    with capsys.disabled():
        print(f"\n{method} {' '.join(extra)} on {torch.cuda.get_device_name(0)} ({saved['dtype']}): "
              f"step times {', '.join(f'{s:.1f}' for s in step_s)} s")


def test_the_live_server_answers_and_swaps_its_adapter_on_cuda(tmp_path):
    config = apply_overrides(ServeConfig(), ["device=cuda", "max_new_tokens=16", "batch_size=2", "epochs=1",
                                             "train_after_s=0", "judge.kind=lexical", "session_idle_s=600"])
    for needed in ("uvicorn", "fastapi"):
        pytest.importorskip(needed, reason=f"the live server needs {needed}: scripts/gpu_serve_wheels.sh")
    openai = pytest.importorskip("openai", reason="the test's client is openai's: scripts/gpu_serve_wheels.sh")

    with serve_in_thread(config, tmp_path / "run") as (url, service):
        policy = service.policy
        assert str(next(policy.model.parameters()).device) == "cuda:0"
        assert str(next(policy.serve_model.parameters()).device) == "cuda:0"
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
        first = client.chat.completions.create(model="clawgym", messages=PROMPTS[0])
        assert first.choices[0].message.content and first.system_fingerprint == "clawgym-v0"
        for i in range(6):  # ask, then correct: the correction's hint and -1 make the first turn train
            messages: list[dict[str, Any]] = [PROMPTS[i % 2][-1]]
            reply = client.chat.completions.create(model="clawgym", messages=messages)
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": "No, that's wrong. Answer in capital letters, please."}]
            client.chat.completions.create(model="clawgym", messages=messages, max_tokens=1,
                                           extra_headers={"X-Session-Done": "true"})
        deadline = time.monotonic() + 180
        while policy.weight_version < 1:
            assert time.monotonic() < deadline, f"no adapter swap in 180 s; learner: {service.learner.stats}"
            time.sleep(0.2)
        after = client.chat.completions.create(model="clawgym", messages=PROMPTS[0])
        assert after.system_fingerprint == f"clawgym-v{policy.weight_version}"
        with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as response:
            assert "clawgym_weight_version" in response.read().decode()
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (saved["device"], saved["dtype"]) == ("cuda:0", resolve_dtype("auto", "cuda:0"))
    assert (tmp_path / "run" / "checkpoints" / "latest").exists()


# Tolerances for |generation log-prob - teacher-forced log-prob| per token, with a non-zero
# adapter (so the merged serve copy is what is checked). Measured on an H100 over ~145
# tokens: bfloat16 mean 0.042 / max 0.33 at T=1 and 0.025 / 0.093 greedy (CPU kernels gave
# 0.037-0.045 / 0.17-0.37, tests/agents/test_device.py); float32 4e-6 / 3e-5. The bounds
# leave about twice that room; an adapter left out of the served copy moves the log-probs
# by 0.12-0.25 nats a token on average (the "adapter off" figure printed), above both means.


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_generation_logprobs_match_teacher_forced_scoring_on_cuda(dtype, temperature, capsys):
    policy = TransformersPolicy(lora=LoraSettings(rank=8, alpha=16), device="cuda", dtype=dtype)
    state = policy.trainable_state()
    generator = torch.Generator().manual_seed(0)
    policy.load_trainable_state({k: (torch.randn(v.shape, generator=generator) * 0.05).to(v.device)
                                 if "lora_B" in k else v for k, v in state.items()}, version=1)
    out = policy.generate(PROMPTS * 2, None, SamplingParams(temperature=temperature, max_new_tokens=32))
    assert_logprobs_match_scoring(policy, out, dtype, f"{dtype} T={temperature}", capsys)
