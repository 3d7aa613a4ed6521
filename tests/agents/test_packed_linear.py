"""oneDNN-packed linear layers: the same products as F.linear, and the sampler's copy of
the real model on them (exact ids, log-probs that teacher-forced scoring reproduces, a
pushed adapter that reaches them)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agents.packed_linear import AGREEMENT, PackedLinear, PackedMember, pack_linears, packing_error
from agents.adapters import LoraSettings
from agents.policy import SamplingParams, TransformersPolicy

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")

PROMPTS = [[{"role": "user", "content": "Tell me a long story about a dragon."}],
           [{"role": "user", "content": "What is 2+2? Answer with a number only."}]]


def _relative_gap(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_layer_computes_what_f_linear_computes(bias):
    torch.manual_seed(0)
    linear = nn.Linear(576, 1536, bias=bias)
    packed = PackedLinear(linear)
    for x in (torch.randn(8, 576), torch.randn(2, 5, 576), torch.randn(1, 1, 576), torch.randn(8, 1152)[:, ::2]):
        with torch.no_grad():
            want = linear(x)
            got = packed(x)
        assert got.shape == want.shape
        assert _relative_gap(got, want) < AGREEMENT
        assert not torch.equal(got, torch.zeros_like(got))
    assert packing_error(linear) < AGREEMENT


def test_load_replaces_the_weights_and_refuses_another_shape():
    torch.manual_seed(0)
    linear, other = nn.Linear(64, 32, bias=False), nn.Linear(64, 32, bias=False)
    packed = PackedLinear(linear)
    x = torch.randn(4, 64)
    with torch.no_grad():
        before = packed(x)
        packed.load(other.weight)
        after = packed(x)
        assert _relative_gap(after, other(x)) < AGREEMENT
    assert _relative_gap(after, before) > 0.1
    with pytest.raises(ValueError, match="shape"):
        packed.load(torch.zeros(32, 65))


def test_pack_linears_replaces_float32_cpu_linears_only():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 8)),
                          nn.Linear(8, 8).to(torch.bfloat16), nn.Embedding(10, 16))
    x = torch.randn(3, 16)
    with torch.no_grad():
        want = model[:3](x)
        assert pack_linears(model) == 3
        got = model[:3](x)
    assert [type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__] == \
        ["PackedLinear", "PackedLinear", "PackedLinear", "Linear"]
    assert _relative_gap(got, want) < AGREEMENT
    assert pack_linears(nn.Sequential(nn.ReLU())) == 0


class _Block(nn.Module):
    """Llama's projections, with their names: what pack_linears groups."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(16, 16), nn.Linear(16, 8), nn.Linear(16, 8, bias=False)
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(16, 24), nn.Linear(16, 24), nn.Linear(24, 16)


def test_siblings_on_one_input_share_a_product_and_each_gets_its_own_part():
    torch.manual_seed(0)
    block = _Block()
    plain = {name: (m.weight.detach().clone(), None if m.bias is None else m.bias.detach().clone())
             for name, m in block.named_children()}
    assert pack_linears(block) == 6
    assert isinstance(block.down_proj, PackedLinear)
    assert block.q_proj.group is block.v_proj.group and block.gate_proj.group is block.up_proj.group
    x, y = torch.randn(3, 1, 16), torch.randn(3, 1, 16)

    def want(name, inp):
        return nn.functional.linear(inp, *plain[name])

    with torch.no_grad():
        # any order, and a member called on another input than its siblings, still get their own product
        for calls in ([("v_proj", x), ("q_proj", x), ("k_proj", x)], [("q_proj", x), ("k_proj", y), ("v_proj", x)],
                      [("q_proj", x), ("q_proj", y), ("k_proj", y), ("v_proj", y)]):
            for name, inp in calls:
                assert _relative_gap(getattr(block, name)(inp), want(name, inp)) < AGREEMENT, (calls, name)
        assert _relative_gap(block.up_proj(y), want("up_proj", y)) < AGREEMENT
        # new weights for one member are staged, then the group repacks once with the others kept
        new_k = torch.randn(8, 16)
        block.k_proj.load(new_k)
        assert _relative_gap(block.k_proj(x), nn.functional.linear(x, new_k, plain["k_proj"][1])) < AGREEMENT
        assert _relative_gap(block.q_proj(x), want("q_proj", x)) < AGREEMENT
        assert _relative_gap(block.v_proj(x), want("v_proj", x)) < AGREEMENT
        # every member new at once (a merged adapter on each): the group is rebuilt from them alone
        fresh = {name: torch.randn(getattr(block, name).out_features, 16) for name in ("q_proj", "k_proj", "v_proj")}
        for name, weight in fresh.items():
            getattr(block, name).load(weight)
        for name, weight in fresh.items():
            assert _relative_gap(getattr(block, name)(x), nn.functional.linear(x, weight, plain[name][1])) < AGREEMENT
    with pytest.raises(ValueError, match="shape"):
        block.v_proj.load(torch.zeros(16, 16))


@pytest.fixture(scope="module")
def policies() -> tuple[TransformersPolicy, TransformersPolicy]:
    packed, plain = TransformersPolicy(lora=LoraSettings(rank=8, alpha=16)), TransformersPolicy(lora=LoraSettings(rank=8, alpha=16))
    plain.pack_weights = False
    return packed, plain


def _sample(policy: TransformersPolicy, sampling: SamplingParams):
    policy.reseed(0)
    return policy.generate_ids([policy.encode(m) for m in PROMPTS], sampling)


def _max_gap(completions, scores) -> float:
    return max(abs(a - b) for c, s in zip(completions, scores) for a, b in zip(c.logprobs, s))


def test_the_sampler_copy_is_packed_on_first_use_and_samples_as_the_plain_one(policies):
    packed, plain = policies
    assert packed.packed_layers == 0  # nothing packed before the first generation
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    fast, slow = _sample(packed, greedy), _sample(plain, greedy)
    layers = sum(1 for m in packed.serve_model.modules() if isinstance(m, nn.Linear))
    assert packed.packed_layers == 211 and layers == 0  # 30 layers x 7 projections + the head
    # q/k/v and gate/up of each block are one product: 121 products a step instead of 211
    members = [m for m in packed.serve_model.modules() if isinstance(m, PackedMember)]
    assert len(members) == 150 and len({id(m.group) for m in members}) == 60
    assert plain.packed_layers == 0 and sum(isinstance(m, PackedLinear) for m in plain.serve_model.modules()) == 0
    # the embeddings are the base's own, not a copy (no merge changes them)
    assert packed.serve_model.get_input_embeddings().weight is packed.model.get_input_embeddings().weight
    # the trained model is never packed: backward needs its plain weights
    assert not any(isinstance(m, PackedLinear) for m in packed.model.modules())
    assert [c.completion_ids for c in fast] == [c.completion_ids for c in slow]
    assert _max_gap(fast, [c.logprobs for c in slow]) < 1e-3


def test_a_pushed_adapter_reaches_the_packed_copy(policies):
    packed, _ = policies
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
    _sample(packed, sampling)  # packs, if no test before did
    assert packed.packed_layers > 0
    state = packed.trainable_state()
    generator = torch.Generator().manual_seed(0)
    perturbed = {k: torch.randn(v.shape, generator=generator) * 0.02 if "lora_B" in k else v
                 for k, v in state.items()}
    packed.load_trainable_state(perturbed, version=3)
    try:
        out = _sample(packed, sampling)
        ids = ([c.prompt_ids for c in out], [c.completion_ids for c in out])
        assert {c.weight_version for c in out} == {3}
        assert _max_gap(out, packed.score(*ids, adapter=True)) < 1e-3
        assert _max_gap(out, packed.score(*ids, adapter=False)) > 1e-2
    finally:
        packed.load_trainable_state(state, version=0)
