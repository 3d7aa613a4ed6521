"""The adapter's state on the real default model: what peft reads and writes, read in place."""

from __future__ import annotations

import pytest
import torch

from agents.adapters import load_trainable_state, trainable_state


def test_adapter_state_is_what_peft_reads_and_writes(policy, restore):
    """trainable_state and load_trainable_state read the adapter's tensors directly (peft's
    functions walk the whole model's state dict each call): the same keys and values as
    peft's, copies rather than views, and a load that sets what peft's load sets."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    theirs = get_peft_model_state_dict(policy.model)
    ours = trainable_state(policy.model, lora=True)
    assert list(ours) == list(theirs) and len(ours) == 420  # 30 layers x 7 projections x (A, B)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert not {v.data_ptr() for v in ours.values()} & {p.data_ptr() for p in policy.model.parameters()}
    generator = torch.Generator().manual_seed(1)
    new = {k: torch.randn(v.shape, generator=generator) for k, v in ours.items()}
    load_trainable_state(policy.model, new, lora=True)
    assert all(torch.equal(v, new[k]) for k, v in get_peft_model_state_dict(policy.model).items())
    set_peft_model_state_dict(policy.model, ours)  # peft's own load of the first state ...
    assert all(torch.equal(v, ours[k]) for k, v in trainable_state(policy.model, lora=True).items())
    # ... and a state with other keys or shapes goes to peft, which loads it or says why not
    key = next(k for k in new if "lora_A" in k)
    load_trainable_state(policy.model, {key: new[key]}, lora=True)
    assert torch.equal(trainable_state(policy.model, lora=True)[key], new[key])
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_trainable_state(policy.model, {**ours, key: torch.zeros(3, 3)}, lora=True)
