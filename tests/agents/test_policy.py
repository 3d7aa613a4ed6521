"""TransformersPolicy on the real default model: exact ids, recorded log-probs, weight pushes."""

from __future__ import annotations

import pytest
import torch

from agents.adapters import LoraSettings
from agents.chat_format import render_prompt
from agents.model_cache import resolve_model_dir
from agents.policy import SamplingParams, TransformersPolicy
from envs.messages import tool_schema

SHORT = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
LONG = [{"role": "system", "content": "You are a storyteller."},
        {"role": "user", "content": "Tell me a long story about a dragon and a lighthouse keeper."}]


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
