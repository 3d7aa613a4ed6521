"""The fast decoder's GPU path: a static KV cache and a compiled forward (CUDA graphs).

Marked ``gpu`` and skipped where torch sees no CUDA device (``make test`` leaves them out).
On a GPU: ``pytest -m gpu tests/agents/test_decode_gpu.py -s`` prints the log-prob gaps;
``python -m benchmarks.perf_decode`` measures the step time. Ran on an H100 on 2026-11-24: 6 passed in
282 s, most of it compiling (45-85 s for each new policy's first graph); on an H200 on 2026-11-27 with the
loop running ahead of the host: 6 passed. The same cache, masks, filler rows and running ahead run eagerly
on the CPU in tests/agents/test_decode.py.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from agents.adapters import LoraSettings
from agents.policy import SamplingParams, TransformersPolicy
from tests.helpers import LOGPROB_TOLERANCE, assert_logprobs_match_scoring

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; torch sees none")]

PROMPTS = [[{"role": "user", "content": "What is 2+2? Answer with a number only."}],
           [{"role": "user", "content": "Give me three tips for writing clear emails."}],
           [{"role": "system", "content": "You are a storyteller."},
            {"role": "user", "content": "Tell me a long story about a dragon and a lighthouse keeper."}]]


def _policy(dtype: str, **kwargs: Any) -> TransformersPolicy:
    policy = TransformersPolicy(lora=LoraSettings(rank=8, alpha=16), device="cuda", dtype=dtype, **kwargs)
    state = policy.trainable_state()
    generator = torch.Generator().manual_seed(0)
    policy.load_trainable_state({k: (torch.randn(v.shape, generator=generator) * 0.05).to(v.device)
                                 if "lora_B" in k else v for k, v in state.items()}, version=1)
    return policy


def _gaps(completions: list[Any], scores: list[list[float]]) -> list[float]:
    return [abs(a - b) for c, s in zip(completions, scores) for a, b in zip(c.logprobs, s)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_graphed_decoding_records_exact_logprobs(dtype, temperature, capsys):
    policy = _policy(dtype)
    assert policy._static is not None, "CUDA graphs are on by default on a GPU"
    sampling = SamplingParams(temperature=temperature, max_new_tokens=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = policy.generate(PROMPTS * 2, None, sampling)
    failed = [str(w.message) for w in caught if "compiled decode step failed" in str(w.message)]
    assert policy._static.compile and not failed, f"the compiled step fell back to eager: {failed}"
    assert_logprobs_match_scoring(policy, out, dtype, f"graphed {dtype} T={temperature}", capsys)
    # 6 rows fill an 8-row bucket; 5 rows later reuse that cache (and its graph)
    policy.generate(PROMPTS[:2] * 2 + PROMPTS[:1], None, sampling)
    assert [key[1] for key in policy._static._caches] == [8]


def test_graphed_decoding_follows_the_seed_stop_and_stream_contract():
    policy = _policy("bfloat16")
    prompts = [policy.encode(m) for m in PROMPTS]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=24)
    policy.reseed(5)
    first = policy.generate_ids(prompts, sampling)
    policy.reseed(5)
    streamed: dict[int, list[int]] = {row: [] for row in range(len(prompts))}
    again = policy.generate_ids(prompts, sampling, on_token=lambda row, tok: streamed[row].append(tok),
                                stop=lambda row: row == 2 and len(streamed[2]) >= 4)
    assert again[2].finish_reason == "cancelled" and again[2].completion_ids == first[2].completion_ids[:4]
    for row in (0, 1):
        assert again[row].completion_ids == first[row].completion_ids  # same seed, same samples
    for row, completion in enumerate(again):
        assert streamed[row] == completion.completion_ids


def test_weight_pushes_reach_the_graphs():
    """The graphs read serve_model's parameters in place: a new adapter changes what they sample."""
    policy = _policy("float32")
    prompts = [policy.encode(m) for m in PROMPTS]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    before = policy.generate_ids(prompts, greedy)
    state = policy.trainable_state()
    policy.load_trainable_state({k: v * 4 if "lora_B" in k else v for k, v in state.items()}, version=2)
    after = policy.generate_ids(prompts, greedy)
    assert [c.weight_version for c in after] == [2] * 3
    ids = ([c.prompt_ids for c in after], [c.completion_ids for c in after])
    assert max(_gaps(after, policy.score(*ids))) < LOGPROB_TOLERANCE["float32"]["max"]
    assert [c.logprobs for c in after] != [c.logprobs for c in before]
