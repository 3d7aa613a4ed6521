"""TransformersPolicy on the real default model: exact ids, recorded log-probs, weight pushes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from agents.chat_format import render_prompt
import agents.policy as policy_module
from agents.model_cache import resolve_model_dir
from agents.policy import LoraSettings, SamplingParams, TransformersPolicy, sequence_logprobs
from envs.messages import tool_schema

SHORT = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
LONG = [{"role": "system", "content": "You are a storyteller."},
        {"role": "user", "content": "Tell me a long story about a dragon and a lighthouse keeper."}]


@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    return TransformersPolicy(lora=LoraSettings(rank=8, alpha=16))


@pytest.fixture
def restore(policy: TransformersPolicy) -> Iterator[None]:
    """Put the zero-initialised adapter back after a test that loads other weights."""
    state, version = policy.trainable_state(), policy.weight_version
    yield
    policy.load_trainable_state(state, version)


def _max_gap(completions, scores) -> float:
    return max(abs(a - b) for c, s in zip(completions, scores) for a, b in zip(c.logprobs, s))


def test_prompt_ids_decode_to_the_rendered_prompt(policy):
    tools = [[], [tool_schema("guess", "Guess the number.", {"number": {"type": "integer"}})]]
    out = policy.generate([SHORT, LONG], tools, SamplingParams(max_new_tokens=4))
    assert len(out) == 2
    for completion, messages, schemas in zip(out, [SHORT, LONG], tools):
        # left padding of the batch never leaks into the recorded prompt
        assert policy.tokenizer.decode(completion.prompt_ids) == render_prompt(policy.tokenizer, messages, schemas)
        assert completion.prompt_ids == policy.encode(messages, schemas)
        assert len(completion.logprobs) == len(completion.completion_ids)
        assert all(lp <= 0 for lp in completion.logprobs)


def test_finish_reasons_stop_and_length(policy):
    stop, length = policy.generate([SHORT, LONG], None, SamplingParams(temperature=0.0, max_new_tokens=12))
    eos = policy.tokenizer.eos_token_id
    assert stop.finish_reason == "stop"
    assert stop.completion_ids[-1] == eos and eos not in stop.completion_ids[:-1]
    assert "4" in stop.text and "<|im_end|>" not in stop.text
    assert length.finish_reason == "length"
    assert len(length.completion_ids) == 12 and eos not in length.completion_ids
    assert stop.temperature == 1.0  # greedy log-probs are the untempered model's


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_recorded_logprobs_match_teacher_forced_scores(policy, temperature):
    out = policy.generate([SHORT, LONG], None, SamplingParams(temperature=temperature, max_new_tokens=10))
    scores = policy.score([c.prompt_ids for c in out], [c.completion_ids for c in out],
                          temperature=out[0].temperature)
    assert [len(s) for s in scores] == [len(c.completion_ids) for c in out]
    assert _max_gap(out, scores) < 1e-3


def test_greedy_generation_is_deterministic(policy):
    first = policy.generate([LONG, SHORT], None, SamplingParams(temperature=0.0, max_new_tokens=8))
    again = policy.generate([LONG, SHORT], None, SamplingParams(temperature=0.0, max_new_tokens=8))
    assert [c.completion_ids for c in first] == [c.completion_ids for c in again]
    alone = policy.generate([SHORT], None, SamplingParams(temperature=0.0, max_new_tokens=8))
    assert alone[0].completion_ids == first[1].completion_ids  # batching does not change the answer


def test_weight_version_follows_loaded_state(policy, restore):
    before = policy.weight_version
    policy.load_trainable_state(policy.trainable_state(), version=before + 1)
    assert policy.weight_version == before + 1
    (completion,) = policy.generate([SHORT], None, SamplingParams(max_new_tokens=2))
    assert completion.weight_version == before + 1


def test_nonzero_adapter_reaches_the_serving_copy(policy, restore):
    state = policy.trainable_state()
    assert all(not v.any() for k, v in state.items() if "lora_B" in k)  # peft starts B at zero
    generator = torch.Generator().manual_seed(0)
    perturbed = {k: torch.randn(v.shape, generator=generator) * 0.02 if "lora_B" in k else v
                 for k, v in state.items()}
    policy.load_trainable_state(perturbed, version=7)
    out = policy.generate([SHORT, LONG], None, SamplingParams(temperature=1.0, max_new_tokens=10))
    assert {c.weight_version for c in out} == {7}
    ids = ([c.prompt_ids for c in out], [c.completion_ids for c in out])
    # the merged serve_model samples from the adapter the trainer pushed ...
    assert _max_gap(out, policy.score(*ids, adapter=True)) < 1e-3
    # ... and the base model (adapter off: reference, judge, teacher) is not that model
    assert _max_gap(out, policy.score(*ids, adapter=False)) > 1e-2
    loaded = policy.trainable_state()
    assert all(torch.equal(loaded[k], perturbed[k]) for k in perturbed)


def test_tool_call_text_is_parsed_into_the_message(policy):
    text = 'Let me guess.<tool_call>{"name": "guess", "arguments": {"number": 50}}</tool_call>'
    tokens = policy.tokenizer(text, add_special_tokens=False)["input_ids"] + [policy.tokenizer.eos_token_id]
    completion = policy._completion([1, 2], tokens, [-0.1] * len(tokens), "stop", SamplingParams())
    assert completion.text == text
    assert completion.message["content"] == "Let me guess."
    (call,) = completion.message["tool_calls"]
    assert call["function"] == {"name": "guess", "arguments": '{"number": 50}'}
    assert call["type"] == "function" and call["id"].startswith("call_")


def test_the_seed_chooses_the_new_adapter_and_leaves_torchs_generator_alone() -> None:
    """peft draws LoRA A from torch's global generator; the policy draws it from its own
    seed, so what ran before does not choose it and what runs after draws as it would."""
    def lora_a(policy: TransformersPolicy) -> dict[str, torch.Tensor]:
        return {k: v for k, v in policy.trainable_state().items() if "lora_A" in k}

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        state = torch.get_rng_state()
        first = lora_a(TransformersPolicy("default", seed=3))
        assert torch.equal(torch.get_rng_state(), state)  # nothing drawn from the caller's generator
        torch.rand(1000)
        again = lora_a(TransformersPolicy("default", seed=3))
        other = lora_a(TransformersPolicy("default", seed=4))
    assert first and first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not any(torch.equal(first[k], other[k]) for k in first)


def test_missing_model_dir_says_what_is_needed(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        TransformersPolicy(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="model=default"):
        resolve_model_dir(str(tmp_path))


def test_prompt_beyond_the_context_gets_an_empty_context_completion(policy):
    too_long = [{"role": "user", "content": "word " * (policy.max_context + 10)}]
    out = policy.generate([too_long, SHORT], None, SamplingParams(temperature=0.0, max_new_tokens=8))
    assert out[0].finish_reason == "context"
    assert out[0].completion_ids == [] and out[0].logprobs == [] and out[0].text == ""
    assert out[0].message == {"role": "assistant", "content": ""}
    # a prompt that fits is answered even when a batch-mate does not fit
    assert out[1].finish_reason == "stop" and "4" in out[1].text


def test_next_token_logprobs_with_a_shared_prefix(policy):
    prompts = [policy.encode(SHORT + [{"role": "assistant", "content": "4"}, {"role": "user", "content": q}])
               for q in ("And 3+3?", "Thanks! What is 10 times 10?")]
    shared = sum(1 for a, b in zip(*prompts) if a == b) - 2  # stop short of where they differ
    tokens = policy.tokenizer("1-0", add_special_tokens=False)["input_ids"]
    cached = policy.next_token_logprobs(prompts, tokens, adapter=False, shared_prefix=shared)
    plain = policy.next_token_logprobs(prompts, tokens, adapter=False)
    forced = [[s[0] for s in policy.score([p] * len(tokens), [[t] for t in tokens], adapter=False)] for p in prompts]
    for c, p, f in zip(cached, plain, forced):
        assert c == pytest.approx(p, abs=1e-3) and p == pytest.approx(f, abs=1e-3)


def test_full_weights_without_lora_share_one_model():
    policy = TransformersPolicy(lora=LoraSettings(enabled=False))
    assert policy.serve_model is policy.model
    out = policy.generate([SHORT], None, SamplingParams(temperature=0.0, max_new_tokens=4))
    scores = policy.score([out[0].prompt_ids], [out[0].completion_ids], adapter=False)
    assert _max_gap(out, scores) < 1e-3
    # without an adapter the "base" model is the trained one: cached judge prefixes must follow updates
    prompts = [policy.encode(SHORT), policy.encode(LONG)]
    shared = 3  # "<|im_start|>system\n" opens both prompts
    assert prompts[0][:shared] == prompts[1][:shared]
    tokens = [out[0].completion_ids[0]]
    def label_logprobs(**kwargs: int) -> list[float]:
        return [row[0] for row in policy.next_token_logprobs(prompts, tokens, adapter=False, **kwargs)]

    before = label_logprobs(shared_prefix=shared)
    state = policy.trainable_state()
    name = next(k for k in state if k.endswith("layers.0.self_attn.v_proj.weight"))
    policy.load_trainable_state({**state, name: state[name] * 3.0}, version=1)
    after = label_logprobs(shared_prefix=shared)
    assert after == pytest.approx(label_logprobs(), abs=1e-3)
    assert after != pytest.approx(before, abs=1e-3)


def test_adapter_state_is_what_peft_reads_and_writes(policy, restore):
    """trainable_state and load_trainable_state read the adapter's tensors directly (peft's
    functions walk the whole model's state dict each call): the same keys and values as
    peft's, copies rather than views, and a load that sets what peft's load sets."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    theirs = get_peft_model_state_dict(policy.model)
    ours = policy_module.trainable_state(policy.model, lora=True)
    assert list(ours) == list(theirs) and len(ours) == 420  # 30 layers x 7 projections x (A, B)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert not {v.data_ptr() for v in ours.values()} & {p.data_ptr() for p in policy.model.parameters()}
    generator = torch.Generator().manual_seed(1)
    new = {k: torch.randn(v.shape, generator=generator) for k, v in ours.items()}
    policy_module.load_trainable_state(policy.model, new, lora=True)
    assert all(torch.equal(v, new[k]) for k, v in get_peft_model_state_dict(policy.model).items())
    set_peft_model_state_dict(policy.model, ours)  # peft's own load of the first state ...
    assert all(torch.equal(v, ours[k]) for k, v in policy_module.trainable_state(policy.model, lora=True).items())
    # ... and a state with other keys or shapes goes to peft, which loads it or says why not
    key = next(k for k in new if "lora_A" in k)
    policy_module.load_trainable_state(policy.model, {key: new[key]}, lora=True)
    assert torch.equal(policy_module.trainable_state(policy.model, lora=True)[key], new[key])
    with pytest.raises(RuntimeError, match="size mismatch"):
        policy_module.load_trainable_state(policy.model, {**ours, key: torch.zeros(3, 3)}, lora=True)


def test_save_adapter_writes_what_peft_loads_back(policy, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    policy.save_adapter(tmp_path / "v0")
    assert (tmp_path / "v0" / "adapter_config.json").exists()
    base = AutoModelForCausalLM.from_pretrained(policy.model_dir)
    loaded = PeftModel.from_pretrained(base, str(tmp_path / "v0"))
    ours = policy.trainable_state()
    theirs = {k: v for k, v in loaded.state_dict().items() if "lora_" in k}
    assert len(theirs) == len(ours) > 0
    with pytest.raises(ValueError, match="needs a LoRA adapter"):
        TransformersPolicy(lora=LoraSettings(enabled=False)).save_adapter(tmp_path / "full")


def test_max_context_0_is_the_models_own_limit_and_a_larger_one_is_capped_there() -> None:
    own = TransformersPolicy(lora=LoraSettings(enabled=False), max_context=0)
    assert own.max_context == 8192  # SmolLM2-135M's max_position_embeddings
    assert TransformersPolicy(lora=LoraSettings(enabled=False), max_context=10**6).max_context == 8192
    assert TransformersPolicy(lora=LoraSettings(enabled=False), max_context=512).max_context == 512


def _logprobs_and_grads(model, prompts, completions, pad_id, share: bool, monkeypatch):
    with monkeypatch.context() as patch:
        if not share:
            patch.setattr(policy_module, "_shared_prompt_logits", lambda *args: None)
        model.zero_grad()
        logp_BT, mask_BT = sequence_logprobs(model, prompts, completions, 1.0, pad_id)
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
    assert policy_module._shared_prompt_logits(policy.model, prompts[:2] + prompts[3:4], completions[:3], pad) is not None
    assert policy_module._shared_prompt_logits(policy.model, [long, short], completions[:2], pad) is None  # nothing shared
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
    hosts = policy_module.prefix_hosts(prompts, replies)
    assert hosts[1] == hosts[2] == 2 and hosts[4] == 4 and hosts[5] == 5
    assert hosts[0] == hosts[3] in (2, 5)
    assert policy_module.prefix_hosts([[1], [1]], [[2], [3]]) == [0, 1]  # a shared prompt alone merges nothing
    assert policy_module.prefix_hosts([[5]], [[]]) == [0]


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
    assert policy_module.prefix_hosts(prompts, completions) == [1, 1, 1, 3, 1]
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
