"""Teacher-forced scoring on the real default model: a group's shared prompt run once and an
episode's turns read in one row give the log-probs and gradients of one pass per row."""

from __future__ import annotations

import torch

import agents.scoring as scoring
from agents.policy import SamplingParams

SHORT = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
LONG = [{"role": "system", "content": "You are a storyteller."},
        {"role": "user", "content": "Tell me a long story about a dragon and a lighthouse keeper."}]


def _logprobs_and_grads(model, prompts, completions, pad_id, share: bool, monkeypatch):
    with monkeypatch.context() as patch:
        if not share:
            patch.setattr(scoring, "_shared_prompt_logits", lambda *args: None)
        model.zero_grad()
        logp_BT, mask_BT = scoring.sequence_logprobs(model, prompts, completions, 1.0, pad_id)
        logp_BT.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return logp_BT.detach(), mask_BT, grads


def test_a_groups_prompt_runs_once_in_scoring_with_the_same_logprobs_and_gradients(policy, restore, monkeypatch):
    """Rows that share a prompt (a GRPO group) are scored from one prompt pass whose cache
    rows are copied: the log-probs and the adapter's gradients are those of one pass per row."""
    generator = torch.Generator().manual_seed(1)
    policy.load_trainable_state({k: torch.randn(v.shape, generator=generator) * 0.02 if "lora_B" in k else v
                                 for k, v in policy.trainable_state().items()}, version=1)
    short, long = policy.encode(SHORT), policy.encode(LONG)
    out = policy.generate_ids([long, long, long, short, short], SamplingParams(temperature=1.0, max_new_tokens=12))
    prompts = [c.prompt_ids for c in out]
    completions = [c.completion_ids for c in out[:3]] + [out[3].completion_ids[:1], out[4].completion_ids]  # a 1-token reply
    pad = policy.tokenizer.pad_token_id
    assert scoring._shared_prompt_logits(policy.model, prompts[:2] + prompts[3:4], completions[:3], pad) is not None
    assert scoring._shared_prompt_logits(policy.model, [long, short], completions[:2], pad) is None  # nothing shared
    policy.model.train()
    try:
        shared = _logprobs_and_grads(policy.model, prompts, completions, pad, True, monkeypatch)
        alone = _logprobs_and_grads(policy.model, prompts, completions, pad, False, monkeypatch)
    finally:
        policy.model.eval()
    assert torch.equal(shared[1], alone[1])
    assert (shared[0] - alone[0]).abs().max() < 1e-4
    assert (shared[0] * shared[1]).abs().sum() > 1.0  # real log-probs, not zeros
    assert shared[2].keys() == alone[2].keys() and any("lora_A" in k for k in shared[2])
    for name, grad in alone[2].items():
        assert (shared[2][name] - grad).norm() <= 1e-3 * grad.norm() + 1e-8, name
    # and what the sampler recorded is what the shared pass scores
    assert max(abs(a - b) for c, row in zip(out[:3], shared[0].tolist()) for a, b in zip(c.logprobs, row)) < 1e-3


def test_prefix_hosts_reads_each_row_inside_the_longest_row_it_begins() -> None:
    prompts = [[1, 2], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6, 7, 8], [1, 2], [9], [1, 2, 3, 4, 5]]
    replies = [[3, 4], [6], [9], [3, 4], [1, 2], [7]]
    # 0 = [1,2,3,4] begins 1 = [1..6], which begins 2 = [1..9]; 3 repeats 0; 4 = [9,1,2] stands
    # alone; 5 = [1..5,7] shares 1's prompt but branches off it, so only 0 and 3 could go either way
    hosts = scoring.prefix_hosts(prompts, replies)
    assert hosts[1] == hosts[2] == 2 and hosts[4] == 4 and hosts[5] == 5
    assert hosts[0] == hosts[3] in (2, 5)
    assert scoring.prefix_hosts([[1], [1]], [[2], [3]]) == [0, 1]  # a shared prompt alone merges nothing
    assert scoring.prefix_hosts([[5]], [[]]) == [0]


def test_an_episodes_turns_are_scored_in_one_row_with_the_same_logprobs_and_gradients(policy, restore, monkeypatch):
    """A later turn's prompt repeats the earlier turn's prompt and reply, so the earlier turn is
    read inside the later one's pass (and a reply sampled twice is scored once): the log-probs
    and the adapter's gradients are those of one pass per row, and the model sees two rows for five."""
    generator = torch.Generator().manual_seed(2)
    policy.load_trainable_state({k: torch.randn(v.shape, generator=generator) * 0.02 if "lora_B" in k else v
                                 for k, v in policy.trainable_state().items()}, version=1)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10)
    first = policy.generate_ids([policy.encode(LONG)], sampling)[0]
    turn_2 = first.prompt_ids + first.completion_ids + policy.encode([{"role": "user", "content": "Go on."}])
    second = policy.generate_ids([turn_2], sampling)[0]
    alone = policy.generate_ids([policy.encode(SHORT)], sampling)[0]
    prompts = [first.prompt_ids, second.prompt_ids, first.prompt_ids, alone.prompt_ids, second.prompt_ids]
    completions = [first.completion_ids, second.completion_ids, first.completion_ids, alone.completion_ids,
                   second.completion_ids[:3]]
    assert scoring.prefix_hosts(prompts, completions) == [1, 1, 1, 3, 1]
    pad = policy.tokenizer.pad_token_id
    rows_seen: list[int] = []
    hook = policy.model.register_forward_pre_hook(lambda _m, _a, kw: rows_seen.append(kw["input_ids"].shape[0]),
                                                  with_kwargs=True)
    policy.model.train()
    try:
        merged = _logprobs_and_grads(policy.model, prompts, completions, pad, True, monkeypatch)
        hook.remove()
        one_by_one = [_logprobs_and_grads(policy.model, [p], [c], pad, True, monkeypatch) for p, c in zip(prompts, completions)]
    finally:
        hook.remove()
        policy.model.eval()
    assert rows_seen == [2]
    for i, (logp, mask, _grads) in enumerate(one_by_one):
        width = len(completions[i])
        assert torch.equal(merged[1][i, :width], mask[0]) and not merged[1][i, width:].any()
        assert (merged[0][i, :width] - logp[0]).abs().max() < 1e-4
        assert not merged[0][i, width:].any()
    summed = {n: sum(g[2][n] for g in one_by_one) for n in merged[2]}
    assert summed.keys() == merged[2].keys() and summed
    for name, grad in summed.items():
        assert (merged[2][name] - grad).norm() <= 1e-3 * grad.norm() + 1e-8, name
