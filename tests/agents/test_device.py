"""``device=`` and ``dtype=`` (agents/device.py), and the policy in bfloat16 on the CPU.

The resolution tests pretend a GPU is or is not there (torch.cuda monkeypatched), so they
say the same on every machine. The bfloat16 tests load the real default model on the CPU:
the code path a GPU takes in bfloat16, with CPU kernels (slow ones: this CPU has no native
bfloat16, so generation is kept to a few tokens).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest
import torch

from agents.device import resolve_device, resolve_dtype
from agents.adapters import LoraSettings
from agents.policy import SamplingParams, TransformersPolicy

SHORT = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
MID = [{"role": "user", "content": "Give me three tips for writing clear emails."}]


def _gpus(monkeypatch: pytest.MonkeyPatch, count: int, bf16: bool = True) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16)


def test_auto_is_the_cpu_in_float32_without_a_gpu(monkeypatch):
    _gpus(monkeypatch, 0)
    assert resolve_device("auto") == "cpu"
    assert resolve_dtype("auto", "cpu") == "float32"


def test_auto_is_the_first_gpu_in_bfloat16_when_there_is_one(monkeypatch):
    _gpus(monkeypatch, 2)
    assert resolve_device("auto") == "cuda:0"
    assert resolve_device("cuda") == "cuda:0"
    assert resolve_device("cuda:1") == "cuda:1"
    assert resolve_dtype("auto", "cuda:0") == "bfloat16"
    assert resolve_dtype("auto", "cpu") == "float32"  # device=cpu on a GPU machine stays float32
    assert resolve_dtype("float32", "cuda:0") == "float32"  # an explicit value stands
    _gpus(monkeypatch, 1, bf16=False)  # a GPU older than Ampere
    assert resolve_dtype("auto", "cuda:0") == "float32"


def test_a_gpu_asked_for_where_there_is_none_says_what_to_pass(monkeypatch):
    _gpus(monkeypatch, 0)
    for device in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match="torch sees none.*pass device=cpu"):
            resolve_device(device)
    _gpus(monkeypatch, 1)
    with pytest.raises(ValueError, match=r"has 1 CUDA device\(s\), cuda:0..cuda:0; pass one of those"):
        resolve_device("cuda:3")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "CUDA", "mps", ""])
def test_an_unknown_device_lists_the_choices(device):
    with pytest.raises(ValueError, match="choose one of: auto, cpu, cuda, cuda:N"):
        resolve_device(device)


def test_an_unknown_dtype_lists_the_choices():
    with pytest.raises(ValueError, match="choose one of: auto, float32, bfloat16"):
        resolve_dtype("float16", "cpu")


# ---- the policy in bfloat16 -----------------------------------------------------------------
@pytest.fixture(scope="module")
def bf16_policy() -> TransformersPolicy:
    return TransformersPolicy(lora=LoraSettings(rank=8, alpha=16), dtype="bfloat16")


@pytest.fixture
def perturbed(bf16_policy: TransformersPolicy) -> Iterator[TransformersPolicy]:
    """A non-zero adapter, clearly larger in effect than bfloat16's rounding; then zero again."""
    state, version = bf16_policy.trainable_state(), bf16_policy.weight_version
    generator = torch.Generator().manual_seed(0)
    bf16_policy.load_trainable_state({k: torch.randn(v.shape, generator=generator) * 0.05 if "lora_B" in k else v
                                      for k, v in state.items()}, version=1)
    yield bf16_policy
    bf16_policy.load_trainable_state(state, version)


def test_a_bfloat16_base_keeps_float32_adapter_weights(bf16_policy):
    assert bf16_policy.dtype == "bfloat16" and bf16_policy.device == "cpu"
    params = dict(bf16_policy.model.named_parameters())
    adapter = {k: v for k, v in params.items() if "lora_" in k}
    assert adapter and all(v.dtype == torch.float32 and v.requires_grad for v in adapter.values())
    assert all(v.dtype == torch.bfloat16 for k, v in params.items() if "lora_" not in k)
    assert all(v.dtype == torch.bfloat16 for v in bf16_policy.serve_model.parameters())


def test_the_bfloat16_serve_copy_is_the_float32_merge_rounded_once(perturbed):
    from peft.tuners.lora import LoraLayer

    serve = dict(perturbed.serve_model.named_modules())
    layers = [(n, m) for n, m in perturbed.model.named_modules() if isinstance(m, LoraLayer)]
    assert layers
    for name, module in layers:
        a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
        merged = module.get_base_layer().weight.float() + module.scaling["default"] * (b @ a)
        assert torch.equal(serve[name.removeprefix("base_model.model.")].weight, merged.to(torch.bfloat16)), name


def test_bfloat16_generation_logprobs_agree_with_teacher_forced_scoring(perturbed):
    """Measured here (CPU, bfloat16, this model, T=1): mean |gap| 0.037 nats, max 0.17 over
    78 tokens with this adapter; 0.045 / 0.37 over 102 tokens with a smaller one. The same
    rounding separates bfloat16 from float32 scoring (mean 0.04), so the gap is bfloat16's,
    not the merge's. The bound is about twice the measured mean; the adapter's own effect
    (mean 0.18 here) must stand above the gap, so a serve copy that missed it would fail."""
    out = perturbed.generate([SHORT, MID], None, SamplingParams(temperature=1.0, max_new_tokens=12))
    ids = ([c.prompt_ids for c in out], [c.completion_ids for c in out])
    on = _gaps(out, perturbed.score(*ids))
    off = _gaps(out, perturbed.score(*ids, adapter=False))
    assert statistics.mean(on) < 0.1 and max(on) < 1.0, (statistics.mean(on), max(on))
    assert statistics.mean(off) > 2 * statistics.mean(on), (statistics.mean(off), statistics.mean(on))


def _gaps(completions, scores) -> list[float]:
    return [abs(a - b) for c, s in zip(completions, scores) for a, b in zip(c.logprobs, s)]
