"""agents/lora_linear.py: the one-addmm LoRA layer against peft's own, on the default model."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch

from agents.lora_linear import FusedLoraLinear, fuse_lora
from agents.adapters import LoraSettings
from agents.policy import TransformersPolicy


def _peft_model(alpha: int = 32, dropout: float = 0.0):
    policy = TransformersPolicy(lora=LoraSettings(alpha=alpha, dropout=dropout), seed=0)
    model = policy.model
    generator = torch.Generator().manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_A" in name:  # peft draws A from the global generator: fix it, whatever ran before
            bound = param.shape[1] ** -0.5
            param.data.copy_((torch.rand(param.shape, generator=generator) * 2 - 1) * bound)
        if "lora_B" in name:  # peft starts B at zero: give the adapter a visible effect
            param.data.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return model


def _unfused(model):
    plain = copy.deepcopy(model)
    for module in plain.modules():
        if isinstance(module, FusedLoraLinear):
            module.__class__ = FusedLoraLinear.__mro__[1]
    return plain


@pytest.mark.parametrize("alpha", [32, 24])  # scaling 2 (exact) and 1.5
def test_outputs_and_adapter_gradients_equal_pefts(alpha: int) -> None:
    fused = _peft_model(alpha)
    assert sum(isinstance(m, FusedLoraLinear) for m in fused.modules()) == 210  # 7 per block x 30
    plain = _unfused(fused)
    assert not any(isinstance(m, FusedLoraLinear) for m in plain.modules())
    ids = torch.randint(100, 40000, (3, 24), generator=torch.Generator().manual_seed(1))
    fused.train()
    plain.train()
    logits = [m(input_ids=ids).logits for m in (fused, plain)]
    gap = float((logits[0] - logits[1]).detach().abs().max())
    assert gap < 1e-3, gap  # scaling 1.5: one rounding per layer, carried through 30 blocks (logits ~20)
    for out in logits:
        out.float().logsumexp(-1).mean().backward()
    grads = [{n: p.grad for n, p in m.named_parameters() if p.requires_grad} for m in (fused, plain)]
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == 420
    # float32 rounding at scaling 1.5, through 30 blocks: over five adapter draws up to 1.4e-4 of a
    # tensor's own gradient norm and 2.7e-5 of the whole; a wrong scaling or layout is ~1e-1
    worst = max(float((grads[0][n] - grads[1][n]).norm() / grads[1][n].norm()) for n in grads[0])
    whole = (sum(float((grads[0][n] - grads[1][n]).norm()) ** 2 for n in grads[0])
             / sum(float(grads[1][n].norm()) ** 2 for n in grads[0])) ** 0.5
    assert worst < 1e-3 and whole < 1e-4, (worst, whole)
    with fused.disable_adapter(), torch.no_grad():  # off: the base model, as with peft
        base = fused(input_ids=ids).logits
    assert float((base - logits[0].detach()).abs().max()) > 1.0


def test_anything_but_plain_lora_takes_pefts_path() -> None:
    model = _peft_model(dropout=0.1)
    layer = next(m for m in model.modules() if isinstance(m, FusedLoraLinear))
    x = torch.randn(2, 5, layer.in_features, generator=torch.Generator().manual_seed(2))
    assert layer._plain_adapter(x, (), {}) is None  # dropout
    for module in model.modules():
        if isinstance(module, FusedLoraLinear):
            module.lora_dropout["default"] = torch.nn.Identity()
    assert layer._plain_adapter(x, (), {}) == "default"
    assert layer._plain_adapter(x.bfloat16(), (), {}) is None
    assert layer._plain_adapter(x, (), {"adapter_names": ["default"] * 2}) is None
    with torch.no_grad():
        fused = layer(x)
        layer.merge()
        assert layer._plain_adapter(x, (), {}) is None
        merged = layer(x)  # peft's path: the base layer on W + s B A
        layer.unmerge()
    # W + s B A rounds once in float32: outputs of magnitude ~10 agree to ~1e-5
    assert torch.allclose(merged, fused, rtol=1e-4, atol=1e-4), float((merged - fused).abs().max())
    with model.disable_adapter():
        assert layer._plain_adapter(x, (), {}) is None
        assert torch.equal(layer(x), layer.base_layer(x))


def test_a_fused_layer_pickles_and_the_adapter_saves_as_pefts(tmp_path) -> None:
    model = _peft_model()
    layer = next(m for m in model.modules() if isinstance(m, FusedLoraLinear))
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    x = torch.randn(2, layer.in_features)
    assert type(again) is FusedLoraLinear and torch.equal(again(x), layer(x))
    assert type(pickle.loads(pickle.dumps(layer))) is FusedLoraLinear
    model.save_pretrained(str(tmp_path / "fused"))
    _unfused(model).save_pretrained(str(tmp_path / "plain"))
    from safetensors.torch import load_file

    saved = [load_file(str(tmp_path / d / "adapter_model.safetensors")) for d in ("fused", "plain")]
    assert saved[0].keys() == saved[1].keys() and all(torch.equal(saved[0][k], saved[1][k]) for k in saved[0])
    assert fuse_lora(model) == 210  # idempotent: already fused layers stay as they are
