"""The update on the real default model: gradient accumulation over micro-batches is the same
optimizer step as one pass, for the clipped RL loss and for SFT's likelihood; the KL term
measures against the reference it is given."""

from __future__ import annotations

import gc
import os
import re
import weakref

import pytest
import torch

from agents.adapters import LoraSettings
from agents.policy import TransformersPolicy
from agents.scoring import sequence_logprobs
from envs.browser import rss_bytes
from trainers.config import ConfigError, JudgeConfig, TrainConfig
from trainers.samples import Sample
import trainers.update as update_module
from trainers.update import (SettledHeap, base_reference, checkpointed, frozen_heap, frozen_weights, load_optimizer_state, micro_passes,
                             release_freed_memory, row_passes, train_step, trainable_copy)


@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    return TransformersPolicy("default", seed=0)


def _samples(policy: TransformersPolicy) -> list[Sample]:
    """Five replies of different lengths (one empty, which the loss does not count), two of
    them from an older policy so the importance correction is on. A short system message
    stands in for the template's default one: 21-26 prompt tokens instead of 34-38, so
    these tests' passes run as many rows of real chat turns in ~25-30% less time."""
    rows = [("What is 2 + 2?", "It is 4.", 1.0, 3), ("Name a colour.", "Blue, I think.", -0.5, 3),
            ("Say hi.", "", 0.7, 3), ("Count to three.", "One, two, three.", 0.3, 2),
            ("Spell cat.", "C-A-T", -1.0, 2)]
    samples = []
    for prompt, reply, advantage, version in rows:
        prompt_ids = policy.encode([{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}])
        reply_ids = policy.tokenizer(reply, add_special_tokens=False)["input_ids"]
        old = [lp - 0.05 for lp in policy.score([prompt_ids], [reply_ids])[0]] if reply_ids else []
        samples.append(Sample(prompt_ids, reply_ids, old, [advantage] * len(reply_ids), version, 1.0))
    return samples


def test_memory_savers_make_the_same_update_as_one_pass(policy: TransformersPolicy) -> None:
    """One pass, then passes of two samples, of 60 tokens (two rows), and of two samples
    with every layer checkpointed: the same update (a pass's own checkpointing rule is the
    next test's)."""
    variants = [{"microbatch_size": 0, "checkpoint_tokens": 0}, {"microbatch_size": 2}, {"microbatch_tokens": 60},
                {"gradient_checkpointing": True, "microbatch_size": 2}]
    samples = _samples(policy)
    after, stats, passes = [], [], []
    for variant in variants:
        config = TrainConfig(**{"minibatch_size": 0, "epochs": 1, "kl_beta": 0.05, "lr": 1e-3, **variant})
        model, _adam = trainable_copy(policy, config)
        # plain SGD: the step is the gradient itself (Adam would magnify float noise in tiny gradients)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        hook = model.register_forward_pre_hook(lambda *_: passes.append(len(after)))
        stats.append(train_step(model, optimizer, samples, config, version=3, pad_id=policy.tokenizer.pad_token_id))
        hook.remove()
        after.append({k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad})
    # three forwards a pass (the stale samples' rescoring, the KL reference, the loss's): the
    # first variant is one pass, the memory savers split the batch into more
    assert passes.count(0) == 3 and all(passes.count(n) > 3 for n in range(1, len(variants)))
    moved = max(float((after[0][k] - v.detach()).abs().max()) for k, v in policy.model.named_parameters() if k in after[0])
    assert moved > 1e-4  # the step changed the adapter, so agreement below means something
    for other in after[1:]:
        for key, value in after[0].items():
            torch.testing.assert_close(other[key], value, atol=1e-6, rtol=1e-4)
    for other in stats[1:]:
        assert other["loss/total"] == pytest.approx(stats[0]["loss/total"], rel=1e-4, abs=1e-6)
        assert other["loss/grad_norm"] == pytest.approx(stats[0]["loss/grad_norm"], rel=1e-4)


def test_only_passes_longer_than_checkpoint_tokens_recompute_and_the_update_is_the_same(
        policy: TransformersPolicy) -> None:
    """One pass a sample (microbatch_size=1): a pass whose tokens exceed checkpoint_tokens
    runs each layer's MLP twice (the forward, then again in the backward), a shorter one
    once; gradient_checkpointing=true checkpoints both; the three updates agree."""
    samples = [s for s in _samples(policy) if s.completion_ids][:2]
    short, long = sorted(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    assert short < long
    variants = [({"checkpoint_tokens": 0}, 2), ({"checkpoint_tokens": short}, 3),
                ({"gradient_checkpointing": True, "checkpoint_tokens": 0}, 4)]
    after = []
    for variant, expected_calls in variants:
        config = TrainConfig(**{"minibatch_size": 0, "microbatch_size": 1, "epochs": 1, "kl_beta": 0.0,
                                "lr": 1e-3, **variant})
        model, _adam = trainable_copy(policy, config)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        mlp = next(m for name, m in model.named_modules() if name.endswith("layers.0.mlp"))
        calls, forward = [], mlp.forward

        def counted(*args, **kwargs):  # forward hooks do not fire on the recompute; the forward itself runs
            calls.append(1)
            return forward(*args, **kwargs)
        mlp.forward = counted
        train_step(model, optimizer, samples, config, version=3, pad_id=policy.tokenizer.pad_token_id)
        assert len(calls) == expected_calls, variant
        after.append({k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad})
    for other in after[1:]:
        for key, value in after[0].items():
            torch.testing.assert_close(other[key], value, atol=1e-6, rtol=1e-4)


def test_a_released_heap_goes_back_to_the_system_without_a_collection(policy: TransformersPolicy) -> None:
    """What the live learner does after each update: glibc keeps an update's freed
    activations (each under its mmap threshold) until malloc_trim hands them back."""
    if update_module._MALLOC_TRIM is None:
        pytest.skip("no glibc malloc_trim here")

    def resident_mib() -> float:
        return rss_bytes([os.getpid()]) / 2**20

    generator = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(100, 40_000, (100,), generator=generator).tolist(), reply,
                      [-3.0] * 64, [0.5 - i % 2] * 64, 0, 1.0)
               for i, reply in enumerate(torch.randint(100, 40_000, (2, 64), generator=generator).tolist())]
    config = TrainConfig(minibatch_size=0, epochs=1, kl_beta=0.0, checkpoint_tokens=0)
    model, optimizer = trainable_copy(policy, config)
    release_freed_memory()
    train_step(model, optimizer, samples, config, version=0, pad_id=policy.tokenizer.pad_token_id)
    held = resident_mib()
    collections: list[str] = []
    gc.callbacks.append(record := lambda phase, _info: collections.append(phase))
    try:
        release_freed_memory(collect=False)
    finally:
        gc.callbacks.remove(record)
    assert not collections
    assert resident_mib() < held - 100, (held, resident_mib())  # measured: 1996 -> 1437 MiB


def test_checkpointed_counts_padded_tokens() -> None:
    config = TrainConfig(checkpoint_tokens=100)
    assert not checkpointed([50, 50], config)       # 2 x 50 = 100: not more than the limit
    assert checkpointed([20, 51], config)           # padded: 2 x 51 = 102
    assert checkpointed([101], config)
    assert not checkpointed([10**6], TrainConfig(checkpoint_tokens=0))
    assert checkpointed([1], TrainConfig(gradient_checkpointing=True))
    with pytest.raises(ConfigError, match="checkpoint_tokens must be >= 0"):
        TrainConfig(checkpoint_tokens=-1)


@pytest.mark.parametrize("lengths, size, tokens, passes", [
    ([5, 5, 5], 0, 0, [[0, 1, 2]]),                       # no limit: one pass
    ([5, 5, 5], 2, 0, [[0, 1], [2]]),                     # two samples a pass
    ([10, 10, 10, 10], 0, 20, [[0, 1], [2, 3]]),          # 2 rows x 10 = 20 fits, a third would be 30
    ([10, 30, 10], 0, 40, [[0], [1], [2]]),               # 2 x 30 = 60 > 40: the long one alone
    ([50, 4, 4, 4], 0, 16, [[0], [1, 2, 3]]),             # longer than the budget: its own pass; 3 x 4 = 12
    ([4, 4, 4, 4, 4], 2, 100, [[0, 1], [2, 3], [4]]),     # both limits: size binds
    ([4, 8, 2], 0, 16, [[0, 1], [2]]),                    # padded: 2 x 8 = 16 fits, 3 x 8 = 24 does not
])
def test_micro_passes_respect_both_limits(lengths, size, tokens, passes) -> None:
    assert micro_passes(lengths, size, tokens) == passes


@pytest.mark.parametrize("lengths, rows, tokens, passes", [
    ([10, 20, 30], [2, 2, 2], 30, [[0, 1, 2]]),           # one row of 30: an episode's turns fit where three rows would not
    ([10, 20, 30], None, 30, [[0], [1], [2]]),            # the same lengths as rows of their own
    ([10, 20, 30, 5], [2, 2, 2, 3], 40, [[0, 1, 2], [3]]),  # a second row makes 2 x 30 = 60
    ([10, 30, 5, 5], [1, 1, 2, 3], 30, [[0, 1], [2, 3]]),  # a row runs as long as its longest sample in the pass
])
def test_micro_passes_count_a_row_once_whatever_it_holds(lengths, rows, tokens, passes) -> None:
    assert micro_passes(lengths, 0, tokens, rows) == passes


def test_row_passes_put_an_episodes_turns_together_and_count_samples_toward_size() -> None:
    turn_1 = ([1, 2], [3])
    turn_2 = ([1, 2, 3, 4], [5, 6])  # its prompt repeats turn 1's prompt and reply
    other = ([7, 8], [9])
    prompts, replies = [turn_2[0], other[0], turn_1[0]], [turn_2[1], other[1], turn_1[1]]
    assert row_passes(prompts, replies) == [([2, 0, 1], [6, 3])]  # turn 1 beside turn 2: two rows
    assert row_passes(prompts, replies, tokens=6) == [([2, 0], [6]), ([1], [3])]
    assert row_passes(prompts, replies, size=1) == [([2], [3]), ([0], [6]), ([1], [3])]


def test_an_episodes_turns_train_in_one_row_with_the_update_of_one_row_each(policy: TransformersPolicy) -> None:
    """Two turns of one conversation (the second's prompt repeats the first's prompt and
    reply) and an unrelated sample: one pass reads the first turn inside the second's row,
    and the update equals the one made a sample a pass (microbatch_size=1), where nothing merges."""
    first = policy.encode([{"role": "user", "content": "Name a colour."}])
    reply_1 = policy.encode_reply({"role": "assistant", "content": "Blue."})
    second = policy.encode([{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
                            {"role": "user", "content": "Another one?"}])
    assert second[: len(first) + len(reply_1)] == first + reply_1
    reply_2 = policy.encode_reply({"role": "assistant", "content": "Green, then."})
    alone = policy.encode([{"role": "user", "content": "Spell cat."}])
    reply_3 = policy.encode_reply({"role": "assistant", "content": "C-A-T"})
    samples = [Sample(p, r, [lp - 0.05 for lp in policy.score([p], [r])[0]], [a] * len(r), 3, 1.0)
               for p, r, a in ((first, reply_1, 1.0), (second, reply_2, -0.5), (alone, reply_3, 0.4))]
    moves, rows_seen = [], []
    for micro in (0, 1):
        config = TrainConfig(minibatch_size=0, microbatch_size=micro, epochs=1, kl_beta=0.0, checkpoint_tokens=0)
        model, _adam = trainable_copy(policy, config)
        trainable = {k: v for k, v in model.named_parameters() if v.requires_grad}
        before = {k: v.detach().clone() for k, v in trainable.items()}
        optimizer = torch.optim.SGD(list(trainable.values()), lr=1.0)
        hook = model.register_forward_pre_hook(lambda _m, _a, kw: rows_seen.append((micro, kw["input_ids"].shape[0])),
                                               with_kwargs=True)
        train_step(model, optimizer, samples, config, version=3, pad_id=policy.tokenizer.pad_token_id)
        hook.remove()
        moves.append({k: v.detach() - before[k] for k, v in trainable.items()})
    assert rows_seen == [(0, 2), (1, 1), (1, 1), (1, 1)]
    # the same update up to float32 summation order, which differs with the rows' shapes and
    # with the CPU's kernels: measured 1.1e-4 of the whole move and up to 4.8e-4 of a tensor's
    # own (one CPU passed 1e-6 elementwise, another not); the same model in float64 agrees to
    # 1e-7 (its log-softmax stays float32). A turn scored at the wrong positions is off by ~1.
    merged, alone = moves
    assert any(m.abs().max() > 0 for m in alone.values())
    whole = torch.cat([m.flatten() for m in alone.values()])
    assert torch.cat([(merged[k] - m).flatten() for k, m in alone.items()]).norm() <= 1e-3 * whole.norm()
    for key, move in alone.items():
        assert (merged[key] - move).norm() <= 1e-2 * move.norm() + 1e-9, key


def test_a_negative_microbatch_size_is_refused() -> None:
    for key in ("microbatch_size", "microbatch_tokens"):
        with pytest.raises(ConfigError, match="microbatch_tokens must be >= 0"):
            TrainConfig(**{key: -1})


def test_the_kl_is_measured_against_the_reference_it_is_given(policy: TransformersPolicy) -> None:
    samples = [s for s in _samples(policy) if s.completion_ids]
    pad = policy.tokenizer.pad_token_id
    config = TrainConfig(minibatch_size=0, epochs=1, kl_beta=0.1, lr=5e-3)
    model, optimizer = trainable_copy(policy, config)
    start = frozen_weights(model)
    assert start and all(not t.requires_grad for t in start.values())
    first = train_step(model, optimizer, samples, config, version=3, pad_id=pad, reference=start)
    assert first["loss/kl"] == pytest.approx(0.0, abs=1e-7)  # the weights are still the reference's
    train_step(model, optimizer, samples, config, version=3, pad_id=pad, reference=start)
    prompts, replies = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
    with torch.no_grad():
        trained = sequence_logprobs(model, prompts, replies, 1.0, pad)[0]
    base = policy.score(prompts, replies)  # the policy's own weights never moved: they are the start's
    mask = trained != 0
    assert float((trained - torch.tensor([r + [0.0] * (trained.shape[1] - len(r)) for r in base]))[mask]
                 .abs().max()) > 1e-3  # training moved the log-probs, so the KLs below differ
    for name, tensor in frozen_weights(model).items():
        assert not torch.equal(tensor, start[name])  # the reference was swapped back out, not kept
    against_start = train_step(model, optimizer, samples, config, version=3, pad_id=pad, reference=start)
    against_now = train_step(model, optimizer, samples, config, version=3, pad_id=pad,
                             reference=frozen_weights(model))
    against_base = train_step(model, optimizer, samples, config, version=3, pad_id=pad)  # adapter off
    assert against_start["loss/kl"] > 1e-5 and against_base["loss/kl"] > 1e-5
    assert against_now["loss/kl"] == pytest.approx(0.0, abs=1e-7)


def test_full_weights_keep_their_starting_weights_as_the_base_reference(policy: TransformersPolicy) -> None:
    assert base_reference(policy.model, TrainConfig(kl_beta=0.1)) is None  # LoRA: the adapter turns off
    assert base_reference(policy.model, TrainConfig(kl_beta=0.0, lora=LoraSettings(enabled=False))) is None
    class Plain(torch.nn.Module):  # no adapter to turn off
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(2))
    frozen = base_reference(Plain(), TrainConfig(kl_beta=0.1, lora=LoraSettings(enabled=False)))
    assert frozen is not None and torch.equal(frozen["weight"], torch.ones(2))


@pytest.mark.parametrize("overrides, words", [
    ({"kl_beta": -0.1}, "kl_beta must be >= 0"),
    ({"method": "opd", "lora": LoraSettings(enabled=False)},
     "no adapter to turn off; keep LoRA, or pass opd_teacher=policy"),
    ({"method": "combine", "opd_teacher": "bounded", "lora": LoraSettings(enabled=False)},
     "combine with opd_teacher=bounded reads the hint with the base model"),
    ({"judge": JudgeConfig(kind="self"), "lora": LoraSettings(enabled=False)}, "pass judge.kind=model"),
    ({"kl_ref": "init"}, "kl_ref=init measures the KL against the init= run's weights"),
    ({"kl_ref": "sft"}, "kl_ref"),
])
def test_bad_reference_settings_are_refused(overrides: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        TrainConfig(**overrides)


def test_full_weights_keep_what_needs_no_base_model() -> None:
    full = LoraSettings(enabled=False)
    assert TrainConfig(method="combine", lora=full).teacher() == "policy"  # auto: fine without an adapter
    assert TrainConfig(method="opd", opd_teacher="policy", lora=full).teacher() == "policy"


def test_auto_measures_the_kl_against_init_when_a_run_starts_from_one() -> None:
    assert TrainConfig().kl_reference() == "base"
    assert TrainConfig(init="runs/x").kl_reference() == "init"
    assert TrainConfig(init="runs/x", kl_ref="base").kl_reference() == "base"


def test_the_training_copy_shares_the_frozen_base_and_owns_its_adapter(policy: TransformersPolicy) -> None:
    model, _ = trainable_copy(policy, TrainConfig())
    pairs = list(zip(policy.model.named_parameters(), model.named_parameters()))
    assert all(a == b for (a, _), (b, _) in pairs)
    frozen = [(p, q) for (_, p), (_, q) in pairs if not p.requires_grad]
    trained = [(p, q) for (_, p), (_, q) in pairs if p.requires_grad]
    assert frozen and trained
    assert all(p is q for p, q in frozen)  # one tensor for both: a copy would be the model's size again
    assert all(p.data_ptr() != q.data_ptr() and not q.grad_fn for p, q in trained)
    with torch.no_grad():
        trained[0][1].add_(1.0)  # an update of the copy's adapter leaves the policy's alone
    assert not torch.equal(trained[0][0], trained[0][1])


def test_a_checkpointing_model_scores_a_groups_prompt_without_grad_too(policy: TransformersPolicy) -> None:
    """The reference and stale-sample passes run under no_grad on a model in training mode;
    with checkpointing on transformers drops the KV cache there as well, so a group's shared
    prompt must then be scored in one pass per row, with the same log-probs as in eval mode."""
    config = TrainConfig(gradient_checkpointing=True)
    model, _adam = trainable_copy(policy, config)
    prompt = policy.encode([{"role": "user", "content": "Name a colour."}])
    replies = [policy.tokenizer(r, add_special_tokens=False)["input_ids"] for r in ("Blue.", "Red, I think.")]
    pad = policy.tokenizer.pad_token_id
    with torch.no_grad():
        want, _ = sequence_logprobs(model, [prompt, prompt], replies, 1.0, pad)  # eval mode: the shared path
        model.train()
        got, mask = sequence_logprobs(model, [prompt, prompt], replies, 1.0, pad)
        model.eval()
    assert mask.sum() == sum(len(r) for r in replies)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_step_fraction_counts_weighted_samples_over_a_full_minibatch() -> None:
    from trainers.update import step_fraction

    assert step_fraction([1.0], 8) == 0.125  # one sample of eight
    assert step_fraction([1.0, 1.0, 0.25, 0.25], 8) == pytest.approx(2.5 / 8)  # two OPD-alone at 0.25
    assert step_fraction([1.0] * 10, 8) == 1.0  # never more than a full step
    assert step_fraction([], 4) == 0.0
    with pytest.raises(ValueError, match="at least one sample"):
        step_fraction([1.0], 0)
    with pytest.raises(ValueError, match=">= 0"):
        step_fraction([1.0, -0.5], 4)


def test_an_adam_step_ignores_an_advantages_scale_and_step_scale_evidence_does_not(policy: TransformersPolicy) -> None:
    """Why ``step_scale`` exists: Adam divides the gradient by its own running size, so a
    sample's advantages scaled by 0.25 move the weights as far as at 1 (opd_alone=share and
    w_opd change nothing in a step of OPD-alone samples); under ``evidence`` one sample of a
    minibatch of eight, at weight 0.25, moves them 0.25 / 8 as far as a full step."""
    prompt = policy.encode([{"role": "user", "content": "How do I freeze cooked pasta?"}])
    reply = policy.tokenizer(" Cool it, bag it and freeze it for two months.", add_special_tokens=False)["input_ids"]
    old = policy.score([prompt], [reply])[0]
    advantages = [0.3 * ((-1) ** i) - 0.05 for i in range(len(reply))]

    def update(scale: float, weight: float, step_scale: str) -> torch.Tensor:
        config = TrainConfig(method="combine", epochs=1, minibatch_size=8, step_scale=step_scale)
        model, optimizer = trainable_copy(policy, config)
        start = {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}
        sample = Sample(prompt, reply, old, [a * scale for a in advantages], 0, 1.0, weight)
        stats = train_step(model, optimizer, [sample], config, version=0, pad_id=policy.tokenizer.pad_token_id)
        assert stats.get("loss/step_fraction", 1.0) == pytest.approx(weight / 8 if step_scale == "evidence" else 1.0)
        return torch.cat([(v.detach() - start[k]).flatten() for k, v in model.named_parameters() if v.requires_grad])

    full = update(1.0, 1.0, "full")
    assert float(full.norm()) > 1e-3
    quarter = update(0.25, 0.25, "full")
    assert float(quarter.norm() / full.norm()) == pytest.approx(1.0, abs=0.02)  # the scale is lost
    evidence = update(0.25, 0.25, "evidence")
    # Adam's first step is linear in lr (decay included), so the update shrinks by exactly
    # that, up to float32 rounding of weights ~0.03 (4e-9) on moves of ~6e-5
    assert float(evidence.norm() / quarter.norm()) == pytest.approx(0.25 / 8, rel=1e-3)
    torch.testing.assert_close(evidence, quarter * (0.25 / 8), rtol=1e-3, atol=1e-8)


def test_a_resumed_optimizer_keeps_its_moments_and_takes_the_new_runs_lr(policy: TransformersPolicy) -> None:
    """``python -m trainers.run out=<run> lr=1e-4``: the run's config.yaml says 1e-4, so the
    resumed AdamW must step at 1e-4 (with step_scale=evidence, from a base_lr of 1e-4),
    keeping Adam's moments and step counts from the checkpoint."""
    prompt = policy.encode([{"role": "user", "content": "How do I freeze cooked pasta?"}])
    reply = policy.tokenizer(" Cool it and bag it.", add_special_tokens=False)["input_ids"]
    sample = Sample(prompt, reply, policy.score([prompt], [reply])[0], [0.5] * len(reply), 0, 1.0)
    first = TrainConfig(method="grpo", epochs=1, lr=1e-3, step_scale="evidence")
    model, optimizer = trainable_copy(policy, first)
    train_step(model, optimizer, [sample], first, version=0, pad_id=policy.tokenizer.pad_token_id)
    saved = optimizer.state_dict()
    assert saved["param_groups"][0]["base_lr"] == 1e-3

    resumed = TrainConfig(method="grpo", epochs=1, lr=1e-4, step_scale="evidence", adam_beta2=0.98, weight_decay=0.0)
    _model, again = trainable_copy(policy, resumed)
    load_optimizer_state(again, saved, resumed)
    (group,) = again.param_groups
    assert (group["lr"], group["base_lr"], group["betas"], group["weight_decay"]) == (1e-4, 1e-4, (0.9, 0.98), 0.0)
    for before, after in zip(saved["state"].values(), again.state_dict()["state"].values()):
        assert int(after["step"]) == int(before["step"]) == 1
        torch.testing.assert_close(after["exp_avg"], before["exp_avg"])
        torch.testing.assert_close(after["exp_avg_sq"], before["exp_avg_sq"])


def test_frozen_heap_leaves_what_exists_out_of_collections_until_the_block_ends() -> None:
    """Each trainer step's collection walks only what the run made: a cycle made and
    dropped inside the block is collected there, one that existed at its start waits for
    its end, and the heap is unfrozen however the block ends (nested blocks: the outermost)."""
    class Node:
        me: object

    old = Node()
    old.me = old
    old_ref = weakref.ref(old)
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        new = Node()
        new.me = new
        new_ref = weakref.ref(new)
        del old, new
        gc.collect()
        assert new_ref() is None and old_ref() is not None
        with frozen_heap():
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert old_ref() is None
    with pytest.raises(KeyError):
        with frozen_heap():
            raise KeyError("a step failed")
    assert gc.get_freeze_count() == 0


def test_a_settled_heap_freezes_after_the_first_step_and_after_a_compile_only() -> None:
    """What the first step leaves (the optimizer's state) and what a step that compiled
    leaves (dynamo's graphs and guards) lives as long as the run: frozen, later collections
    skip it. What survives another step stays in the collection, so a cycle it later forms
    is freed at once."""
    class Node:
        me: object

    with frozen_heap():
        heap = SettledHeap()
        kept = [[] for _ in range(1000)]  # the first step's survivors (lists: tracked objects)
        start = gc.get_freeze_count()
        assert heap.settle() and gc.get_freeze_count() >= start + 1000
        plain = Node()
        plain.me = plain
        plain_ref = weakref.ref(plain)
        frozen = gc.get_freeze_count()
        assert not heap.settle() and gc.get_freeze_count() == frozen  # a step that compiled nothing
        del plain
        gc.collect()
        assert plain_ref() is None
        step = torch.compile(lambda x: x * 2 + 1, backend="eager")  # dynamo traces a graph: a compiling step
        assert step(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
        assert heap.settle() and gc.get_freeze_count() > frozen
        assert not heap.settle()
    assert gc.get_freeze_count() == 0 and len(kept) == 1000
