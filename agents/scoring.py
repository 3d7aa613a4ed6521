"""Teacher-forced scoring: the log-probs a causal LM gives each completion token after its prompt.

    logp_BT, mask_BT = sequence_logprobs(model, prompt_ids, completion_ids, temperature, pad_id)

This is the trainer's forward pass (gradients flow when it runs with grad enabled) and what
:meth:`agents.policy.TransformersPolicy.score` reads for the judge, the OPD teacher and the
reference. It saves work two ways, whichever pads fewer tokens: a GRPO group's shared prompt
runs once (:func:`_shared_prompt_logits`), and an episode's earlier turn is read inside the
row of a later one that begins with it (:func:`prefix_hosts`, :func:`_one_pass_logprobs`).
"""

from __future__ import annotations

from typing import Any

import torch

from agents.decode import distinct_rows, left_padded, position_ids


def sequence_logprobs(model: Any, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                      temperature: float = 1.0, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced log-probs of each completion token given its prompt.

    Returns ``logp_BT`` and ``mask_BT`` over completion positions (right-padded). Gradients
    flow when called with grad enabled: the trainer's forward pass is this function.
    Two ways save work, whichever pads fewer tokens: rows with the same prompt (a GRPO
    group's members) run it once (:func:`_shared_prompt_logits`); a row whose prompt and
    completion begin another row (an episode's earlier turn, a repeated reply) is read inside
    that row's pass (:func:`prefix_hosts`, :func:`_one_pass_logprobs`). An empty prompt, or
    a count of prompts other than of completions, is a ValueError.
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions: each prompt needs one")
    empty = [i for i, p in enumerate(prompt_ids) if not p]
    if empty:  # no position would predict the completion's first token
        raise ValueError(f"row {empty[0]} has an empty prompt: a completion is scored given at least one token "
                         "(the chat template's, or the tokenizer's BOS)")
    scale = temperature if temperature > 0 else 1.0
    hosts = prefix_hosts(prompt_ids, completion_ids)
    if _sharing_pays(prompt_ids, completion_ids, hosts):
        logits_BTV = _shared_prompt_logits(model, prompt_ids, completion_ids, pad_id)
        if logits_BTV is not None:
            targets_BT, mask_BT = _padded_targets(completion_ids, logits_BTV.shape[1], logits_BTV.device)
            # one log_softmax over the whole batch: a row-by-row slice would make backward build (and
            # zero) a full-size gradient of the logits per row, a fifth of a CPU update's time
            logp_BT = torch.log_softmax(logits_BTV / scale, dim=-1).gather(-1, targets_BT[..., None]).squeeze(-1)
            return logp_BT.masked_fill(mask_BT == 0, 0.0), mask_BT
    return _one_pass_logprobs(model, prompt_ids, completion_ids, hosts, scale, pad_id)


def prefix_hosts(prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[int]:
    """For each row, the row whose pass reads it: a row whose prompt + completion is where
    another row begins (an episode's earlier turn, whose reply the next turn's prompt
    repeats token for token; a reply sampled twice) is read inside the longest such row,
    since causal attention gives its positions the same context there. Sorted, a sequence
    comes just before the sequences it begins, so one pass from the end resolves chains."""
    seqs = [p + c for p, c in zip(prompt_ids, completion_ids)]
    order = sorted(range(len(seqs)), key=seqs.__getitem__)
    hosts = list(range(len(seqs)))
    for row, after in zip(reversed(order[:-1]), reversed(order[1:])):
        if seqs[after][: len(seqs[row])] == seqs[row]:
            hosts[row] = hosts[after]
    return hosts


def _sharing_pays(prompt_ids: list[list[int]], completion_ids: list[list[int]], hosts: list[int]) -> bool:
    """Whether one pass per distinct prompt plus the replies pads fewer tokens than one pass
    over each host row (the two ways of :func:`sequence_logprobs`)."""
    distinct = len(distinct_rows(prompt_ids)[0])
    if distinct == len(prompt_ids):
        return False
    shared = distinct * max(map(len, prompt_ids)) + len(prompt_ids) * max(map(len, completion_ids))
    rows = set(hosts)
    return shared < len(rows) * max(len(prompt_ids[h]) + len(completion_ids[h]) for h in rows)


def _padded_targets(completion_ids: list[list[int]], width: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The completions right-padded to ``width`` (``targets_BT``) and where they are real (``mask_BT``)."""
    targets_BT = torch.zeros(len(completion_ids), width, dtype=torch.long)
    mask_BT = torch.zeros(len(completion_ids), width)
    for i, c in enumerate(completion_ids):
        targets_BT[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        mask_BT[i, : len(c)] = 1
    return targets_BT.to(device), mask_BT.to(device)


def _shared_prompt_logits(model: Any, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                          pad_id: int) -> torch.Tensor | None:
    """The logits predicting each completion token, ``[rows, longest reply, vocab]`` float32,
    with each distinct prompt run once and its KV cache rows copied to the rows that share it
    (gradients flow back through the copies into the one prompt pass). None where that saves
    nothing (every prompt distinct, or an empty reply) or cannot run: activation checkpointing
    drops the cache.
    """
    first, copy_rows = distinct_rows(prompt_ids)
    if len(first) == len(prompt_ids) or not all(completion_ids) or _checkpointing(model):
        return None
    device = next(model.parameters()).device
    ids_UP, attn_UP = left_padded([prompt_ids[i] for i in first], pad_id, device)
    pos_UP = position_ids(attn_UP)
    prompt = model(input_ids=ids_UP, attention_mask=attn_UP, position_ids=pos_UP, use_cache=True, logits_to_keep=1)
    copy_B = torch.tensor(copy_rows, device=device)
    # token 0 is predicted at the prompt's last position, token k at the reply's position k-1
    first_B1V = prompt.logits[copy_B, -1:].float()
    fed = max(len(c) for c in completion_ids) - 1  # every reply token but the last is fed
    if fed == 0:
        return first_B1V
    cache = prompt.past_key_values
    cache.batch_select_indices(copy_B)  # indexing: each member's rows stay in the prompt pass's graph
    # the replies, right-padded after their prompts: a pad sits after every real token of its
    # row, so the causal mask keeps it out of what they see
    ids_BF = torch.full((len(completion_ids), fed), pad_id, dtype=torch.long)
    for i, c in enumerate(completion_ids):
        ids_BF[i, : len(c) - 1] = torch.tensor(c[:-1], dtype=torch.long)
    ids_BF = ids_BF.to(device)
    attn_BL = torch.cat([attn_UP[copy_B], torch.ones_like(ids_BF)], dim=1)
    pos_BF = (pos_UP[copy_B, -1:] + 1) + torch.arange(fed, device=device)
    replies = model(input_ids=ids_BF, attention_mask=attn_BL, position_ids=pos_BF, past_key_values=cache,
                    use_cache=True)
    return torch.cat([first_B1V, replies.logits.float()], dim=1)


def _checkpointing(model: Any) -> bool:
    """Whether transformers will run the next pass without a cache: in training mode with any
    module's checkpointing flag on (trainers.update.set_checkpointing turns them per pass),
    whether or not gradients are being taken (the reference and stale-sample passes are not)."""
    return model.training and any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def _one_pass_logprobs(model: Any, prompt_ids: list[list[int]], completion_ids: list[list[int]], hosts: list[int],
                       scale: float, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp_BT, mask_BT)`` from one pass over prompt + reply of each host row (``hosts``:
    :func:`prefix_hosts`), the LM head and its log-softmax run only at the positions that
    predict a completion token: the vocabulary projection over every prompt position, or
    over the padding of shorter replies, was most of a training step's memory and time."""
    device = next(model.parameters()).device
    rows = sorted(set(hosts))
    slot = {h: n for n, h in enumerate(rows)}
    width = max(len(prompt_ids[h]) + len(completion_ids[h]) for h in rows)
    ids_HL = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn_HL = torch.zeros_like(ids_HL)
    for n, h in enumerate(rows):
        seq = prompt_ids[h] + completion_ids[h]
        ids_HL[n, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attn_HL[n, : len(seq)] = 1
    # the logits at position j predict token j+1: completion token k of row i is read at
    # len(p_i) - 1 + k of its host's row
    keep_HL = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        keep_HL[slot[hosts[i]], len(p) - 1 : len(p) - 1 + len(c)] = True
    kept = int(keep_HL.sum())
    flat_HL = keep_HL.flatten().cumsum(0).view_as(keep_HL) - 1  # where each kept position lands among the N kept
    targets_N = ids_HL.roll(-1, dims=1)[keep_HL].to(device)
    ids_HL, attn_HL, keep_on = ids_HL.to(device), attn_HL.to(device), keep_HL.to(device)
    logits_NV = model(input_ids=ids_HL, attention_mask=attn_HL, logits_to_keep=keep_on,
                      use_cache=False).logits  # no KV cache: nothing decodes after a scoring pass
    if logits_NV.dim() != 2 or logits_NV.shape[0] != kept:  # a model that ignores a boolean logits_to_keep
        logits_NV = logits_NV[keep_on]
    logp_N = torch.log_softmax(logits_NV.float() / scale, dim=-1).gather(-1, targets_N[:, None]).squeeze(-1)
    t_max = max(map(len, completion_ids)) or 1
    index_BT = torch.full((len(hosts), t_max), kept, dtype=torch.long)  # padding reads the 0 appended below
    mask_BT = torch.zeros(len(hosts), t_max)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        index_BT[i, : len(c)] = flat_HL[slot[hosts[i]], len(p) - 1 : len(p) - 1 + len(c)]
        mask_BT[i, : len(c)] = 1
    logp_BT = torch.cat([logp_N, logp_N.new_zeros(1)])[index_BT.to(device)]
    return logp_BT, mask_BT.to(device)
