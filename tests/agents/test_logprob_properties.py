"""Property-based tests of the update's scoring (``agents.scoring.sequence_logprobs``).

The update never runs one plain pass per row: rows sharing a prompt run it once, and a row
whose prompt + reply begins another row (an episode's earlier turn, a reply sampled twice) is
read inside that row's pass, with the LM head kept only where a reply token is predicted.
Every such saving must give each row exactly the log-probs and gradients of its own pass.
Hypothesis builds batches the way rollouts make them (episodes whose next prompt repeats the
last prompt and reply, groups of replies to one prompt, repeated replies, empty replies; and
groups alone, where running a prompt once pays) over
a vocabulary of 12 tokens, so chance repeats and prefixes are common and the pad id is also a
real token, and checks them on a small LlamaForCausalLM in float64 (random weights, the
same modeling code the default model runs; the log-softmax is float32 on every path, as in
training), where a misplaced position shows far above rounding. The real model's hand cases are in test_scoring.py. Raise
``CLAWGYM_PROPERTY_EXAMPLES`` to search harder.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agents.scoring import prefix_hosts, sequence_logprobs
from tests.agents.test_openai_protocol import _settings

VOCAB = 12
PAD = 0  # a real token too: padding must never be read as one


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         pad_token_id=PAD, tie_word_embeddings=True)
    with torch.random.fork_rng():  # seeded here, and the tests after this file draw as they would without it
        torch.manual_seed(0)
        built = LlamaForCausalLM(config).to(torch.float64).eval()
    # random weights give near-uniform log-probs; larger ones make a misread position show
    with torch.no_grad():
        built.get_input_embeddings().weight.mul_(20)
    return built


def _own_passes(model: torch.nn.Module, prompts: list[list[int]], replies: list[list[int]],
                temperature: float) -> list[torch.Tensor]:
    """Each row's log-probs from a pass of its own: what every path must equal."""
    scale = temperature if temperature > 0 else 1.0
    out = []
    for p, c in zip(prompts, replies):
        ids = torch.tensor([p + c])
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float() / scale, dim=-1)  # float32, as the update
        out.append(logp[len(p) - 1 : len(p) - 1 + len(c)].gather(-1, torch.tensor(c, dtype=torch.long)[:, None])
                   .squeeze(-1) if c else logp.new_zeros(0))
    return out


tokens = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, replies): episodes whose turn k+1 prompt is turn k's prompt + reply + a user
    message, replies sampled again for a prompt (a group) or repeated word for word, shuffled."""
    rows: list[tuple[list[int], list[int]]] = []
    for _ in range(draw(st.integers(1, 3))):
        prompt = draw(tokens)
        for _turn in range(draw(st.integers(1, 3))):
            reply = draw(st.lists(st.integers(0, VOCAB - 1), max_size=5))
            rows.append((prompt, reply))
            for _ in range(draw(st.integers(0, 2))):  # a group's other members
                rows.append((prompt, draw(st.lists(st.integers(0, VOCAB - 1), max_size=5))))
            if draw(st.booleans()):
                rows.append((prompt, list(reply)))  # the same reply sampled twice
            prompt = prompt + reply + draw(tokens)
    order = draw(st.permutations(range(len(rows))))
    return [rows[i][0] for i in order], [rows[i][1] for i in order]


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, replies): GRPO groups, a few replies to each prompt, none empty (the batches
    where running a prompt once pays)."""
    rows = [(prompt, draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6)))
            for prompt in draw(st.lists(tokens, min_size=1, max_size=3))
            for _ in range(draw(st.integers(2, 4)))]
    order = draw(st.permutations(range(len(rows))))
    return [rows[i][0] for i in order], [rows[i][1] for i in order]


@given(batch=batches())
@_settings(60)
def test_prefix_hosts_point_each_row_into_a_row_it_begins(batch: tuple[list[list[int]], list[list[int]]]) -> None:
    prompts, replies = batch
    seqs = [p + c for p, c in zip(prompts, replies)]
    hosts = prefix_hosts(prompts, replies)
    roots = set(hosts)
    for i, h in enumerate(hosts):
        assert seqs[h][: len(seqs[i])] == seqs[i]  # the host's pass holds the row's tokens, in place
        assert hosts[h] == h  # and is read by itself
    for a in roots:  # no pass could have been folded into another
        assert not any(b != a and seqs[b][: len(seqs[a])] == seqs[a] for b in roots)


@given(batch=st.one_of(batches(), groups()), temperature=st.sampled_from([0.0, 0.6, 1.0]), seed=st.integers(0, 2**16))
@_settings(40)
def test_every_path_gives_each_row_its_own_passs_logprobs_and_gradients(
        model: torch.nn.Module, batch: tuple[list[list[int]], list[list[int]]], temperature: float, seed: int) -> None:
    prompts, replies = batch
    weights = [random.Random(seed + i).uniform(-1, 1) for i in range(len(prompts))]
    params = list(model.parameters())

    model.zero_grad(set_to_none=True)
    logp_BT, mask_BT = sequence_logprobs(model, prompts, replies, temperature, PAD)
    got = [logp_BT[i, : len(c)] for i, c in enumerate(replies)]
    assert mask_BT.shape == logp_BT.shape and mask_BT.sum() == sum(map(len, replies))
    assert float(logp_BT.detach()[mask_BT == 0].abs().sum()) == 0.0  # padding carries nothing
    objective = sum(w * g.sum() for w, g in zip(weights, got))
    grads = (torch.autograd.grad(objective, params, allow_unused=True) if objective.requires_grad
             else [None] * len(params))

    expected = _own_passes(model, prompts, replies, temperature)
    reference = sum(w * e.sum() for w, e in zip(weights, expected))
    reference_grads = (torch.autograd.grad(reference, params, allow_unused=True) if reference.requires_grad
                       else [None] * len(params))
    for i, (g, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6, msg=lambda m, i=i: f"row {i}: {m}")
    # the gradients by norm: float32's log-softmax leaves ~1e-7 of noise in tiny elements
    zero = torch.zeros((), dtype=torch.float64)
    diff = sum(float(((g if g is not None else zero) - (e if e is not None else zero)).pow(2).sum())
               for g, e in zip(grads, reference_grads)) ** 0.5
    norm = sum(float(e.pow(2).sum()) for e in reference_grads if e is not None) ** 0.5
    assert diff <= 1e-5 * norm + 1e-9, (diff, norm)


def test_an_empty_prompt_or_a_missing_completion_is_a_clear_error(model: torch.nn.Module) -> None:
    with pytest.raises(ValueError, match="row 1 has an empty prompt"):
        sequence_logprobs(model, [[3], []], [[1, 2], [4]], 1.0, PAD)
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        sequence_logprobs(model, [[3], [5]], [[1, 2]], 1.0, PAD)
