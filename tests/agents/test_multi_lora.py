"""agents/multi_lora.py: a batch whose rows carry different adapters, against peft's own
mixed-batch inference (``adapter_names=``) and against each row decoded alone, on the default model."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch

from agents.adapters import LoraSettings
from agents.decode import StaticCaches
from agents.multi_lora import AdapterBank, decode_mixed, lora_targets
from agents.packed_linear import pack_linears
from agents.policy import TransformersPolicy

USERS = ("u1", "u2", "u3", "u4")
LOGIT_TOLERANCE = 1e-3
"""Largest |bank - peft| on a logit (logits reach ~20): float32 sums in another order through
30 blocks came to 1.3e-4 here; a wrong slot or scaling moves logits by whole units."""


@dataclass
class Setup:
    policy: TransformersPolicy
    peft: torch.nn.Module  # the policy's peft model, with USERS as extra adapters
    bank: AdapterBank  # a copy of the base with USERS in slots 1..4
    states: dict[str, dict[str, torch.Tensor]]


def random_adapters(peft_model: torch.nn.Module, users: tuple[str, ...], seed: int) -> dict[str, dict[str, torch.Tensor]]:
    """Adds ``users`` as adapters of ``peft_model`` with random A and B (peft starts B at zero,
    which would make every adapter the base): returns each one's state dict, peft's keys."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    generator = torch.Generator().manual_seed(seed)
    states = {}
    for user in users:
        peft_model.add_adapter(user, peft_model.peft_config["default"])
        shapes = get_peft_model_state_dict(peft_model, adapter_name=user)
        state = {k: torch.randn(v.shape, generator=generator) * 0.05
                 for k, v in shapes.items()}
        set_peft_model_state_dict(peft_model, state, adapter_name=user)
        states[user] = state
    return states


@pytest.fixture(scope="module")
def setup() -> Setup:
    lora = LoraSettings(rank=8, alpha=16)
    policy = TransformersPolicy(lora=lora)
    states = random_adapters(policy.model, USERS, seed=0)
    bank = AdapterBank(copy.deepcopy(policy.serve_model), lora_targets(policy.model), lora, capacity=len(USERS))
    for slot, user in enumerate(USERS, start=1):
        bank.load(slot, states[user])
    return Setup(policy, policy.model, bank, states)


def _batch(setup: Setup) -> tuple[torch.Tensor, torch.Tensor]:
    """Six left-padded prompts of different lengths (a padded row must match peft's too)."""
    generator = torch.Generator().manual_seed(1)
    lengths = [9, 14, 6, 14, 11, 3]
    ids_BL = torch.full((len(lengths), max(lengths)), setup.policy.tokenizer.pad_token_id)
    attn_BL = torch.zeros_like(ids_BL)
    for row, n in enumerate(lengths):
        ids_BL[row, -n:] = torch.randint(100, 40000, (n,), generator=generator)
        attn_BL[row, -n:] = 1
    return ids_BL, attn_BL


NAMES = ["u1", "__base__", "u2", "u3", "u4", "u1"]
SLOTS = [1, 0, 2, 3, 4, 1]


def _bank_logits(bank: AdapterBank, ids_BL: torch.Tensor, attn_BL: torch.Tensor, slots: list[int] | None,
                 static: bool = False) -> torch.Tensor:
    bank.rows.use(slots, static=static)
    try:
        with torch.no_grad():
            return bank.model(input_ids=ids_BL, attention_mask=attn_BL).logits
    finally:
        bank.rows.use(None)


@pytest.mark.parametrize("static", [False, True], ids=["grouped", "gathered"])
def test_mixed_batch_logits_equal_pefts_adapter_names(setup: Setup, static: bool) -> None:
    ids_BL, attn_BL = _batch(setup)
    with torch.no_grad():
        want_BLV = setup.peft(input_ids=ids_BL, attention_mask=attn_BL, adapter_names=NAMES).logits
    got_BLV = _bank_logits(setup.bank, ids_BL, attn_BL, SLOTS, static)
    seen_BL = attn_BL.bool()
    gap = float((got_BLV - want_BLV)[seen_BL].abs().max())
    assert gap < LOGIT_TOLERANCE, gap
    base_BLV = _bank_logits(setup.bank, ids_BL, attn_BL, None)
    for row, slot in enumerate(SLOTS):  # every adapter is visible: a mixed-up slot would show
        moved = float((got_BLV[row] - base_BLV[row])[seen_BL[row]].abs().max())
        assert (moved > 0.1) == (slot != 0), (row, moved)


def test_a_row_without_adapter_is_the_base_model(setup: Setup) -> None:
    ids_BL, attn_BL = _batch(setup)
    mixed_BLV = _bank_logits(setup.bank, ids_BL, attn_BL, [-1, 0, 2, 3, 0, 1])
    base_BLV = _bank_logits(setup.bank, ids_BL, attn_BL, None)
    for row in (0, 1, 4):  # exactly the base: the adapter term is never added to them
        assert torch.equal(mixed_BLV[row], base_BLV[row]), row
    with torch.no_grad(), setup.peft.disable_adapter():
        peft_base_BLV = setup.peft(input_ids=ids_BL, attention_mask=attn_BL).logits
    assert float((base_BLV - peft_base_BLV)[attn_BL.bool()].abs().max()) < LOGIT_TOLERANCE


def test_a_packed_base_gives_the_same_logits(setup: Setup) -> None:
    """The benchmark's CPU layout: oneDNN-packed linears (agents/packed_linear.py) under the bank."""
    lora = setup.bank.lora
    model = copy.deepcopy(setup.policy.serve_model)
    if not pack_linears(model):
        pytest.skip("oneDNN packing is not available in this torch build")
    packed = AdapterBank(model, lora_targets(setup.peft), lora, capacity=len(USERS))
    for slot, user in enumerate(USERS, start=1):
        packed.load(slot, setup.states[user])
    ids_BL, attn_BL = _batch(setup)
    with torch.no_grad():
        want_BLV = setup.peft(input_ids=ids_BL, attention_mask=attn_BL, adapter_names=NAMES).logits
    got_BLV = _bank_logits(packed, ids_BL, attn_BL, SLOTS)
    assert float((got_BLV - want_BLV)[attn_BL.bool()].abs().max()) < LOGIT_TOLERANCE


def _prompts(setup: Setup) -> list[list[int]]:
    texts = ["Write a poem about the sea.", "List three prime numbers.", "Write a poem about the sea.",
             "What is the capital of France?", "Explain rain to a child.", "List three prime numbers.",
             "Write a poem about the sea."]
    return [setup.policy.encode([{"role": "user", "content": t}]) for t in texts]


def test_greedy_mixed_decode_gives_each_row_its_own_tokens(setup: Setup) -> None:
    """Rows 0 and 2 (and 1 and 5) share a prompt under different adapters: they must not share
    a prefill (rows 0 and 6 do). The base row's end token comes early, so the growing batch
    drops it mid-decode and the rows after it move up."""
    bank, prompts = setup.bank, _prompts(setup)
    slots = [1, 2, 3, 0, 4, 1, 1]
    tok = setup.policy.tokenizer
    run = dict(pad_id=tok.pad_token_id, eos_id=tok.eos_token_id, max_new=10)
    want = [decode_mixed(bank, [p], [s], **run)[0].tokens for p, s in zip(prompts, slots)]
    assert want[3][-1] == tok.eos_token_id and len(want[3]) < 10 and max(len(t) for t in want) == 10
    assert want[0] != want[2] and want[1] != want[5], "rows sharing a prompt must differ by their adapter"
    assert want[0] == want[6]
    mixed = decode_mixed(bank, prompts, slots, **run)
    assert [r.tokens for r in mixed] == want
    static = decode_mixed(bank, prompts, slots, static=StaticCaches(compile=False), **run)
    assert [r.tokens for r in static] == want


@pytest.mark.parametrize("slots", [[1, 1, 2, 2, 4, 4], [1] * 6], ids=["sorted-groups", "one-adapter"])
def test_rows_sorted_by_slot_read_the_bank_in_place_on_a_packed_base(setup: Setup, slots: list[int]) -> None:
    """Rows already in slot order skip moving rows and write the term into the base's output,
    here a slice of a packed group's product (agents/packed_linear.py)."""
    model = copy.deepcopy(setup.policy.serve_model)
    if not pack_linears(model):
        pytest.skip("oneDNN packing is not available in this torch build")
    packed = AdapterBank(model, lora_targets(setup.peft), setup.bank.lora, capacity=len(USERS))
    for slot, user in enumerate(USERS, start=1):
        packed.load(slot, setup.states[user])
    ids_BL, attn_BL = _batch(setup)
    names = [USERS[s - 1] for s in slots]
    with torch.no_grad():
        want_BLV = setup.peft(input_ids=ids_BL, attention_mask=attn_BL, adapter_names=names).logits
    got_BLV = _bank_logits(packed, ids_BL, attn_BL, slots)
    assert packed.rows.groups is None  # reset after the pass
    assert float((got_BLV - want_BLV)[attn_BL.bool()].abs().max()) < LOGIT_TOLERANCE
