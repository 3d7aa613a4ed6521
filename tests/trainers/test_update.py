"""The update on the real default model: gradient accumulation over micro-batches is the same
optimizer step as one pass, for the clipped RL loss and for SFT's likelihood."""

from __future__ import annotations

import copy

import pytest
import torch

from agents.policy import TransformersPolicy
from trainers.config import ConfigError, TrainConfig
from trainers.samples import Sample
from trainers.update import train_step, trainable_copy


@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    return TransformersPolicy("default", seed=0)


def _samples(policy: TransformersPolicy) -> list[Sample]:
    """Five replies of different lengths (one empty, which the loss does not count), two of
    them from an older policy so the importance correction is on."""
    rows = [("What is 2 + 2?", "It is 4.", 1.0, 3), ("Name a colour.", "Blue, I think.", -0.5, 3),
            ("Say hi.", "", 0.7, 3), ("Count to three.", "One, two, three.", 0.3, 2),
            ("Spell cat.", "C-A-T", -1.0, 2)]
    samples = []
    for prompt, reply, advantage, version in rows:
        prompt_ids = policy.encode([{"role": "user", "content": prompt}])
        reply_ids = policy.tokenizer(reply, add_special_tokens=False)["input_ids"]
        old = [lp - 0.05 for lp in policy.score([prompt_ids], [reply_ids])[0]] if reply_ids else []
        samples.append(Sample(prompt_ids, reply_ids, old, [advantage] * len(reply_ids), version, 1.0))
    return samples


def test_microbatches_make_the_same_update_as_one_pass(policy: TransformersPolicy) -> None:
    samples = _samples(policy)
    after, stats = [], []
    for micro in (0, 1, 2):
        config = TrainConfig(minibatch_size=0, epochs=1, microbatch_size=micro, kl_beta=0.05, lr=1e-3)
        model, _adam = trainable_copy(policy, config)
        # plain SGD: the step is the gradient itself (Adam would magnify float noise in tiny gradients)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        stats.append(train_step(model, optimizer, samples, config, version=3, pad_id=policy.tokenizer.pad_token_id))
        after.append({k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad})
    moved = max(float((after[0][k] - v.detach()).abs().max()) for k, v in policy.model.named_parameters() if k in after[0])
    assert moved > 1e-4  # the step changed the adapter, so agreement below means something
    for other in after[1:]:
        for key, value in after[0].items():
            torch.testing.assert_close(other[key], value, atol=1e-6, rtol=1e-4)
    for other in stats[1:]:
        assert other["loss/total"] == pytest.approx(stats[0]["loss/total"], rel=1e-4, abs=1e-6)
        assert other["loss/grad_norm"] == pytest.approx(stats[0]["loss/grad_norm"], rel=1e-4)


def test_a_negative_microbatch_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="microbatch_size must be >= 0"):
        TrainConfig(microbatch_size=-1)
