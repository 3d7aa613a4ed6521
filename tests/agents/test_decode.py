"""The fast decoder (agents/decode.py) on the real default model, against transformers'
``generate`` on the same policy: the same greedy tokens, log-probs that teacher-forced
scoring reproduces, seeded samples, rows that end apart, and the same stop/stream contract."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from agents.decode import GrowingBatch, StaticCaches, decode, distinct_rows, left_padded, pick_tokens
from agents.adapters import LoraSettings
from agents.policy import SamplingParams, TransformersPolicy

SHORT = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
LONG = [{"role": "system", "content": "You are a storyteller."},
        {"role": "user", "content": "Tell me a long story about a dragon and a lighthouse keeper."}]
MEDIUM = [{"role": "user", "content": "Name three colors."}]
TERSE = [{"role": "system", "content": "You are a careful assistant. You answer arithmetic questions with the number "
                                       "only, nothing else, and you never explain your reasoning."},
         {"role": "user", "content": "What is 2+2?"}]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)
# |fast log-prob - teacher-forced log-prob| in float32 on the CPU: measured max 2.4e-5 over
# 48 tokens (T=0.7), 1.1e-5 greedy, the sampler on oneDNN-packed weights (2.1e-5 and 6.8e-6 on
# F.linear). The bound leaves 4x room; a wrong temperature or an
# off-by-one position moves log-probs by more than 1e-2.
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    return TransformersPolicy(lora=LoraSettings(rank=8, alpha=16))


@contextmanager
def decoder(policy: TransformersPolicy, name: str) -> Iterator[TransformersPolicy]:
    before = policy.decoder
    policy.decoder = name
    try:
        yield policy
    finally:
        policy.decoder = before


def _sample(policy: TransformersPolicy, name: str, prompts: list[list[int]], sampling: SamplingParams,
            seed: int = 0, **kwargs):
    with decoder(policy, name):
        policy.reseed(seed)
        return policy.generate_ids(prompts, sampling, **kwargs)


def _max_gap(completions, scores) -> float:
    return max(abs(a - b) for c, s in zip(completions, scores) for a, b in zip(c.logprobs, s))


def test_the_policy_decodes_fast_by_default(policy):
    assert policy.decoder == "fast"
    with pytest.raises(ValueError, match="choose one of: fast, generate"):
        TransformersPolicy(decoder="vllm")
    with pytest.raises(ValueError, match="cuda_graphs=True needs a GPU"):
        TransformersPolicy(cuda_graphs=True)


def test_greedy_tokens_are_generates_for_mixed_lengths_and_each_prompt_alone(policy):
    prompts = [policy.encode(m) for m in (LONG, SHORT, MEDIUM, TERSE)]
    assert len({len(p) for p in prompts}) == 4  # left padding differs per row
    fast = _sample(policy, "fast", prompts, GREEDY)
    slow = _sample(policy, "generate", prompts, GREEDY)
    assert [c.completion_ids for c in fast] == [c.completion_ids for c in slow]
    assert [c.finish_reason for c in fast] == [c.finish_reason for c in slow]
    # SHORT and TERSE end early (their rows leave the batch) while LONG runs to the limit;
    # TERSE is the longest prompt, so the others' left padding is trimmed when it leaves
    assert [fast[i].finish_reason for i in (0, 1, 3)] == ["length", "stop", "stop"]
    assert max(len(p) for p in prompts) == len(prompts[3])
    assert len(fast[3].completion_ids) < len(fast[0].completion_ids) == GREEDY.max_new_tokens
    assert _max_gap(fast, [c.logprobs for c in slow]) < LOGPROB_TOLERANCE
    for prompt, batched in zip(prompts, fast):
        (alone,) = _sample(policy, "fast", [prompt], GREEDY)
        assert alone.completion_ids == batched.completion_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_recorded_logprobs_match_teacher_forced_scores(policy, temperature):
    prompts = [policy.encode(m) for m in (SHORT, LONG, MEDIUM)]
    out = _sample(policy, "fast", prompts, SamplingParams(temperature=temperature, max_new_tokens=16))
    scores = policy.score([c.prompt_ids for c in out], [c.completion_ids for c in out],
                          temperature=out[0].temperature)
    assert [len(s) for s in scores] == [len(c.logprobs) for c in out]
    assert _max_gap(out, scores) < LOGPROB_TOLERANCE
    assert all(lp <= 0 for c in out for lp in c.logprobs)


def test_the_same_seed_gives_the_same_samples(policy):
    prompts = [policy.encode(m) for m in (SHORT, LONG)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10)
    first = _sample(policy, "fast", prompts, sampling, seed=3)
    again = _sample(policy, "fast", prompts, sampling, seed=3)
    other = _sample(policy, "fast", prompts, sampling, seed=4)
    assert [c.completion_ids for c in first] == [c.completion_ids for c in again]
    assert [c.logprobs for c in first] == [c.logprobs for c in again]
    assert [c.completion_ids for c in first] != [c.completion_ids for c in other]


def test_samples_follow_the_softmax_over_a_whole_vocabulary():
    """The inverse-CDF draw has generate's distribution: on a 5-token row each token's
    share is its softmax probability, and on a row the size of the model's vocabulary
    the last entry (after 49k others in the cumulative sum) still gets its own share."""
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    draws = 40_000
    tokens_B, logp_B = pick_tokens(probs.log().expand(draws, -1), temperature=1.0, top_p=1.0)
    shares = torch.bincount(tokens_B, minlength=5).double() / draws
    assert (shares - probs).abs().max() < 4 * (0.25 / draws) ** 0.5  # 4 standard errors at most
    assert torch.allclose(logp_B, probs.log()[tokens_B], atol=1e-6)
    vocab = torch.zeros(49152)
    vocab[-1] = math.log(0.1 * 49151 / 0.9)  # the last token holds 10% of the mass
    tokens_B = torch.cat([pick_tokens(vocab.expand(1000, -1), temperature=1.0, top_p=1.0)[0] for _ in range(4)])
    assert abs(float((tokens_B == 49151).double().mean()) - 0.1) < 4 * (0.09 / 4000) ** 0.5
    assert len(set(tokens_B.tolist())) > 3000  # the rest spread over the other 49k (~3,470 distinct expected)


def test_top_p_filters_what_is_sampled_not_the_recorded_logprob():
    logits_BV = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 200)
    torch.manual_seed(0)
    tokens_B, logp_B = pick_tokens(logits_BV, temperature=1.0, top_p=0.7)
    # softmax: 0.64, 0.24, 0.09, 0.03 -> the nucleus of mass >= 0.7 is {0, 1}
    assert set(tokens_B.tolist()) == {0, 1}
    full = torch.log_softmax(logits_BV[0], dim=-1)
    assert torch.allclose(logp_B, full[tokens_B])
    greedy_B, greedy_logp_B = pick_tokens(logits_BV[:1] * 3, temperature=0.0, top_p=0.7)
    assert greedy_B.tolist() == [0] and torch.allclose(greedy_logp_B, torch.log_softmax(logits_BV[0] * 3, -1)[:1])


def test_no_room_is_context_and_a_short_room_is_length(policy):
    prompt = policy.encode(SHORT)
    saved = policy.max_context
    policy.max_context = len(prompt) + 3
    try:
        fits, too_long = _sample(policy, "fast", [prompt, prompt + prompt], GREEDY)
    finally:
        policy.max_context = saved
    assert (too_long.finish_reason, too_long.completion_ids, too_long.logprobs) == ("context", [], [])
    assert fits.finish_reason == "length" and len(fits.completion_ids) == 3


@pytest.mark.parametrize("stop_after", [1, 3])
def test_stop_and_streaming_follow_the_generate_contract(policy, stop_after):
    """Row 0 is stopped once ``stop_after`` of its tokens were streamed; every row's stream
    is exactly its recorded tokens, end token included; both decoders agree."""
    prompts = [policy.encode(m) for m in (LONG, SHORT, MEDIUM)]

    def run(name: str):
        streamed: dict[int, list[int]] = {0: [], 1: [], 2: []}
        asked: list[int] = []

        def stop(row: int) -> bool:
            asked.append(row)
            return row == 0 and len(streamed[0]) >= stop_after

        out = _sample(policy, name, prompts, GREEDY, on_token=lambda row, tok: streamed[row].append(tok), stop=stop)
        return out, streamed, asked

    fast, fast_streamed, asked = run("fast")
    slow, slow_streamed, _ = run("generate")
    assert fast[0].finish_reason == "cancelled" and len(fast[0].completion_ids) == stop_after
    assert fast[1].finish_reason == "stop" and fast[1].completion_ids[-1] == policy.tokenizer.eos_token_id
    for row, completion in enumerate(fast):
        assert fast_streamed[row] == completion.completion_ids
        assert len(completion.logprobs) == len(completion.completion_ids)
    assert [(c.completion_ids, c.finish_reason) for c in fast] == [(c.completion_ids, c.finish_reason) for c in slow]
    assert fast_streamed == slow_streamed
    assert 0 in asked and asked.count(0) == stop_after + 1  # asked after each step until it said yes


def test_a_batch_whose_rows_all_stop_ends_at_once(policy):
    prompts = [policy.encode(LONG), policy.encode(MEDIUM)]
    out = _sample(policy, "fast", prompts, SamplingParams(temperature=0.0, max_new_tokens=400), stop=lambda row: True)
    assert [(c.completion_ids, c.finish_reason) for c in out] == [([], "cancelled")] * 2


@pytest.fixture
def perturbed(policy: TransformersPolicy) -> Iterator[TransformersPolicy]:
    """A non-zero adapter, so the base model (adapter off) differs from the served one."""
    state, version = policy.trainable_state(), policy.weight_version
    generator = torch.Generator().manual_seed(0)
    policy.load_trainable_state({k: torch.randn(v.shape, generator=generator) * 0.02 if "lora_B" in k else v
                                 for k, v in state.items()}, version=version + 1)
    yield policy
    policy.load_trainable_state(state, version)


def test_adapter_off_samples_the_base_model(perturbed):
    prompts = [perturbed.encode(m) for m in (SHORT, LONG)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10)
    out = _sample(perturbed, "fast", prompts, sampling, adapter=False)
    ids = ([c.prompt_ids for c in out], [c.completion_ids for c in out])
    assert _max_gap(out, perturbed.score(*ids, adapter=False)) < LOGPROB_TOLERANCE
    assert _max_gap(out, perturbed.score(*ids, adapter=True)) > 1e-2
    served = _sample(perturbed, "fast", prompts, sampling)  # adapter on: the merged serve_model
    ids = ([c.prompt_ids for c in served], [c.completion_ids for c in served])
    assert _max_gap(served, perturbed.score(*ids, adapter=True)) < LOGPROB_TOLERANCE


def test_a_group_of_identical_prompts_is_prefilled_once(policy):
    """A GRPO group's members share their prompt: the prompt runs through the model once per
    distinct prompt and its cache rows are copied. The samples are those of prefilling every
    row (same seed, same tokens), and teacher-forced scoring still reproduces the log-probs."""
    prompts = [policy.encode(m) for m in (LONG, SHORT, LONG, SHORT, LONG)]
    model, eos = policy.serve_model, policy.tokenizer.eos_token_id
    ids_BL, attn_BL = left_padded(prompts, policy.tokenizer.pad_token_id, policy.device)
    shared = distinct_rows(prompts)
    assert shared == ([0, 1], [0, 1, 0, 1, 0])
    assert distinct_rows(prompts[:2]) == ([0, 1], [0, 1])
    widths: list[tuple[int, ...]] = []
    hook = model.register_forward_pre_hook(lambda _, args, kw: widths.append(kw["input_ids"].shape), with_kwargs=True)
    try:
        runs = {}
        for share in (True, False):
            widths.clear()
            torch.manual_seed(3)
            with torch.no_grad():
                runs[share] = decode(GrowingBatch(model, ids_BL, attn_BL, shared if share else None), rows=5, max_new=16,
                                     eos_id=eos, temperature=0.8)
            assert widths[0] == (2 if share else 5, ids_BL.shape[1])  # the prefill's rows
    finally:
        hook.remove()
    assert [r.tokens for r in runs[True]] == [r.tokens for r in runs[False]]
    assert len({tuple(r.tokens) for r in runs[True]}) > 2  # members of a group still sample apart
    scores = policy.score(prompts, [r.tokens for r in runs[True]], adapter=True, temperature=0.8)
    assert max(abs(a - b) for r, s in zip(runs[True], scores) for a, b in zip(r.logprobs, s)) < LOGPROB_TOLERANCE


def test_reserved_room_decodes_what_concatenation_does(policy):
    """The growing cache writes into room reserved up front instead of concatenating a new
    cache every step. Rows that end (dropping their cache rows and the shared left padding)
    and a reservation too small (it grows) give the same tokens and log-probs as
    transformers' own layer."""
    prompts = [policy.encode(m) for m in (TERSE, LONG, SHORT, MEDIUM)]
    model, eos = policy.serve_model, policy.tokenizer.eos_token_id
    ids_BL, attn_BL = left_padded(prompts, policy.tokenizer.pad_token_id, policy.device)
    with torch.no_grad():
        plain = decode(GrowingBatch(model, ids_BL, attn_BL), rows=4, max_new=24, eos_id=eos, temperature=0.0)
        assert len({len(r.tokens) for r in plain}) > 1  # rows end apart: the select and trim paths run
        for room in (24, 3):
            batch = GrowingBatch(model, ids_BL, attn_BL, room=room)
            reserved = decode(batch, rows=4, max_new=24, eos_id=eos, temperature=0.0)
            assert [(r.tokens, r.finish_reason) for r in reserved] == [(r.tokens, r.finish_reason) for r in plain]
            assert max(abs(a - b) for x, y in zip(reserved, plain) for a, b in zip(x.logprobs, y.logprobs)) < 1e-5
            assert type(batch.cache.layers[0]).__name__ == "ReservedLayer"


def test_the_static_cache_path_decodes_what_the_growing_cache_does(policy):
    """The GPU path's cache, masks (its own, after one check against transformers'),
    positions and filler rows, run eagerly on the CPU:
    3 prompts fill an 8-row bucket, and a second call reuses (and resets) the same cache.
    The third call repeats prompts (a group): each distinct prompt is prefilled once and
    written into every slot that holds it, and the rows decode as the growing cache does."""
    model, eos = policy.serve_model, policy.tokenizer.eos_token_id
    static = StaticCaches(compile=False)
    for messages in [(LONG, SHORT, MEDIUM)] * 2 + [(SHORT, LONG, SHORT, LONG)]:
        prompts = [policy.encode(m) for m in messages]
        ids_BL, attn_BL = left_padded(prompts, policy.tokenizer.pad_token_id, policy.device)
        with torch.no_grad():
            growing = decode(GrowingBatch(model, ids_BL, attn_BL), rows=len(prompts), max_new=10,
                             eos_id=eos, temperature=0.0)
            batch = static.batch(model, ids_BL, attn_BL, 10, distinct_rows(prompts))
            fixed = decode(batch, rows=len(prompts), max_new=10, eos_id=eos, temperature=0.0)
        assert batch.own_mask  # the step's mask equalled transformers' on the first step, then was built alone
        assert [(r.tokens, r.finish_reason) for r in fixed] == [(r.tokens, r.finish_reason) for r in growing]
        assert max(abs(a - b) for f, g in zip(fixed, growing) for a, b in zip(f.logprobs, g.logprobs)) < 1e-4
    assert [key[1:] for key in static._caches] == [(8, 256)]  # one bucket: 8 rows, 256 positions


def test_small_batches_share_one_row_bucket_and_decode_as_they_would_alone(policy):
    """Each (rows, length) bucket is a compile of its own on a GPU, so at 256 positions
    batches of 1 to 8 rows share the 8-row bucket; above it rows go up in powers of two,
    never past ``max_rows`` (or the batch itself, when larger). Longer buckets pad to
    fewer rows (2048 slots in all: 4 rows at 512, 1 from 2048 on). A row padded into the
    bucket decodes what it does on the growing cache."""
    model, eos = policy.serve_model, policy.tokenizer.eos_token_id
    static = StaticCaches(compile=False, max_rows=32)
    prompt = policy.encode(SHORT)
    for n in (1, 2, 5, 8, 9, 17, 40):
        ids_BL, attn_BL = left_padded([prompt] * n, policy.tokenizer.pad_token_id, policy.device)
        assert static.batch(model, ids_BL, attn_BL, 10).ids_BL.shape[0] == {9: 16, 17: 32, 40: 40}.get(n, 8)
    assert sorted(key[1:] for key in static._caches) == [(8, 256), (16, 256), (32, 256), (40, 256)]
    assert StaticCaches(compile=False, max_rows=4).batch(model, ids_BL[:3], attn_BL[:3], 10).ids_BL.shape[0] == 4
    one, attn = ids_BL[:1], attn_BL[:1]
    for max_new, rows, length in ((300, 4, 512), (900, 2, 1024), (1900, 1, 2048), (2100, 1, 4096)):
        batch = static.batch(model, one, attn, max_new)
        assert (batch.ids_BL.shape[0], batch.cache.get_max_length()) == (rows, length)
    ids_BL, attn_BL = left_padded([prompt], policy.tokenizer.pad_token_id, policy.device)
    with torch.no_grad():
        alone = decode(GrowingBatch(model, ids_BL, attn_BL), rows=1, max_new=8, eos_id=eos, temperature=0.0)
        padded = decode(static.batch(model, ids_BL, attn_BL, 8, distinct_rows([prompt])), rows=1, max_new=8,
                        eos_id=eos, temperature=0.0)
    assert [(r.tokens, r.finish_reason) for r in padded] == [(r.tokens, r.finish_reason) for r in alone]
    assert max(abs(a - b) for a, b in zip(padded[0].logprobs, alone[0].logprobs)) < 1e-4


def test_a_failed_compile_decodes_eagerly_with_a_warning(policy):
    """The guard around the GPU path's compiled step, exercised on the CPU: the step that
    raised runs again eagerly on the same cache, and compiling stops for good."""
    prompts = [policy.encode(m) for m in (SHORT, MEDIUM)]
    model, eos = policy.serve_model, policy.tokenizer.eos_token_id
    ids_BL, attn_BL = left_padded(prompts, policy.tokenizer.pad_token_id, policy.device)
    static = StaticCaches(compile=True)

    def broken(**inputs):
        raise RuntimeError("inductor found no compiler")

    static.forward = lambda model: broken if static.compile else model.__call__
    with torch.no_grad():
        growing = decode(GrowingBatch(model, ids_BL, attn_BL), rows=2, max_new=6, eos_id=eos, temperature=0.0)
        with pytest.warns(UserWarning, match="decoding eagerly from now on"):
            fixed = decode(static.batch(model, ids_BL, attn_BL, 6), rows=2, max_new=6, eos_id=eos, temperature=0.0)
    assert not static.compile
    assert [r.tokens for r in fixed] == [r.tokens for r in growing]


def test_running_ahead_queues_each_step_before_reading_tokens_and_decodes_the_same(policy):
    """The static cache's loop queues step t+1 before step t's tokens are read (streamed,
    stop-checked): run eagerly on the CPU, against the same batch decoding in step, it
    samples the same tokens and log-probs (same seed), streams and stops rows alike, and
    runs at most the one step more that a batch ending early costs."""
    prompts = [policy.encode(m) for m in (LONG, SHORT, MEDIUM)]
    model, eos = policy.serve_model, policy.tokenizer.eos_token_id
    ids_BL, attn_BL = left_padded(prompts, policy.tokenizer.pad_token_id, policy.device)
    static = StaticCaches(compile=False)

    def run(ahead: bool, max_new: int, stop_after: int):
        batch = static.batch(model, ids_BL, attn_BL, max_new, distinct_rows(prompts))
        batch.runs_ahead = ahead
        steps, streamed = [], {0: [], 1: [], 2: []}
        step = batch.step
        batch.step = lambda tokens_B, keep: steps.append(keep) or step(tokens_B, keep)

        def on_token(row: int, token: int) -> None:
            streamed[row].append((token, len(steps)))  # the steps queued when this token is streamed

        torch.manual_seed(7)
        with torch.no_grad():
            out = decode(batch, rows=3, max_new=max_new, eos_id=eos, temperature=0.8, on_token=on_token,
                         stop=lambda row: row == 0 and len(streamed[0]) >= stop_after)
        return out, streamed, len(steps)

    reasons = set()
    for max_new, stop_after in ((24, 5), (6, 99)):
        (ahead, ahead_streamed, ahead_steps), (even, even_streamed, even_steps) = (
            run(True, max_new, stop_after), run(False, max_new, stop_after))
        assert [(r.tokens, r.logprobs, r.finish_reason) for r in ahead] == \
            [(r.tokens, r.logprobs, r.finish_reason) for r in even]
        assert {row: [t for t, _ in s] for row, s in ahead_streamed.items()} == \
            {row: [t for t, _ in s] for row, s in even_streamed.items()}
        # the k-th token of a row is streamed once k steps were queued, not k - 1
        assert all(queued == k + 1 for s in ahead_streamed.values() for k, (_, queued) in enumerate(s)
                   if k < max_new - 1)
        assert all(queued == k for s in even_streamed.values() for k, (_, queued) in enumerate(s))
        longest = max(len(r.tokens) for r in even)
        assert even_steps == longest - 1 and ahead_steps == min(longest, max_new - 1)
        reasons |= {r.finish_reason for r in ahead}
    assert reasons == {"cancelled", "stop", "length"}  # row 0 stopped; a row's end token; the cut
