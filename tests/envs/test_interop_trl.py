"""envs.interop.trl: TRL's GRPOTrainer trains on a clawgym env through its rollout_func.

The GRPOTrainer step (marker ``trl``, opt-in: ``make test-trl``) runs TRL 1.16.0 on ``guess``
with the default model; the rest (the prompt marker, the refused template, the tokens between
turns) needs only transformers and runs in the default suite.
"""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
from itertools import groupby

import pytest

import envs
from agents.chat_format import render_prompt
from agents.model_cache import resolve_model_dir
from envs.interop.trl import TASK_KEY, EnvRollout, _task_of, native_render
from tests.helpers import require


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_dir("default"))


def test_a_prompt_that_names_no_task_is_refused_with_the_way_to_build_one():
    with pytest.raises(ValueError, match="task_dataset"):
        _task_of([{"role": "user", "content": "Guess."}])
    assert _task_of([{"role": "system", "content": "", TASK_KEY: '{"task_id": "guess-7", "seed": 3}'}]) \
        == ("guess-7", 3)


def test_a_template_that_ignores_tools_is_refused_rather_than_hiding_them(tokenizer):
    env = envs.make("guess")
    opening, info = env.reset(seed=0)
    with pytest.raises(ValueError, match="render_prompt"):
        native_render(tokenizer, opening, info["tools"])
    assert native_render(tokenizer, opening, None).endswith("<|im_start|>assistant\n")  # no tools: fine


def test_between_turns_are_the_envs_messages_and_the_next_assistant_header(tokenizer):
    """After the model's own <|im_end|>, SmolLM2's template writes a newline, the tool turn and
    the next assistant header; those tokens (and only those) are appended."""
    env = envs.make("guess", low=1, high=3)
    opening, info = env.reset(options={"task_id": "guess-3"})
    reply = '<tool_call>{"name": "guess", "arguments": {"number": 1}}</tool_call>'
    answer, *_ = env.step(reply)
    assert answer[0]["content"] == "higher"
    rollout = EnvRollout(lambda: env, render=render_prompt)
    before = [*opening, {"role": "assistant", "content": reply}]
    suffix = rollout._between_turns(tokenizer, before, answer, info["tools"], tokenizer.eos_token_id)
    assert tokenizer.decode(suffix) == "\n<|im_start|>tool\nhigher<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.trl
@pytest.mark.timeout(1800)
def test_one_grpo_step_on_guess_trains_on_the_envs_returns(tmp_path, tokenizer):
    """One real GRPOTrainer step: the reward TRL logs is the mean of the env's returns, each
    return is what a fresh env gives the episode's turns replayed, the prompt ids are the ones
    clawgym's own policy encodes, the LoRA weights moved, and the solving call got likelier.

    SmolLM2-135M-Instruct never calls ``guess`` unprompted (0 of 16 samples at temperature 1.0
    and 0.5), so every group would tie and GRPO would have nothing to learn from. A few steps of
    teacher forcing on the call first bring its probability to about 0.3: a group of 8 then
    holds solved and unsolved episodes."""
    require(importlib.util.find_spec("trl") is not None, "trl is not installed: make trl")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from envs.interop.trl import env_return, task_dataset

    env_kwargs = {"low": 1, "high": 1, "max_turns": 2}
    env = envs.make("guess", **env_kwargs)
    opening, info = env.reset(options={"task_id": "guess-1"})
    prompt_ids = tokenizer(render_prompt(tokenizer, opening, info["tools"]), add_special_tokens=False)["input_ids"]
    call = tokenizer('<tool_call>{"name": "guess", "arguments": {"number": 1}}</tool_call>',
                     add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_dir("default"))
    taught = _teach(model, prompt_ids, call, until=0.25)
    assert 0.25 <= taught < 0.95

    rollout = EnvRollout(lambda: envs.make("guess", **env_kwargs), render=render_prompt)
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=1, seed=0, learning_rate=1e-3,
                        per_device_train_batch_size=8, num_generations=8, max_completion_length=48,
                        temperature=1.0, beta=0.0, logging_steps=1, save_strategy="no", report_to="none",
                        use_cpu=True, bf16=False, activation_checkpointing=False, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=env_return, args=config,
                          train_dataset=task_dataset(envs.make("guess", **env_kwargs)), rollout_func=rollout,
                          peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
    try:
        trainer.train()
    finally:
        rollout.close()

    episodes = rollout.episodes
    assert len(episodes) == 8 and {e.task_id for e in episodes} == {"guess-1"}
    logged = trainer.state.log_history[0]
    assert logged["rewards/env_return/mean"] == pytest.approx(statistics.fmean(e.env_return for e in episodes))
    for e in episodes:
        assert e.prompt_ids == prompt_ids  # the tokens clawgym's TransformersPolicy.encode gives
        assert len(e.completion_ids) == len(e.env_mask) <= 48
        turns = _model_turns(e.completion_ids, e.env_mask)
        assert len(turns) == e.turns
        env.reset(options={"task_id": "guess-1"})
        replayed = sum(env.step(tokenizer.decode(t, skip_special_tokens=True).strip())[1] for t in turns)
        assert replayed == e.env_return

    returns = [e.env_return for e in episodes]
    assert min(returns) < max(returns), f"the group agreed ({returns}): no advantage, nothing to learn from"
    moved = [k for k, v in trainer.model.named_parameters() if v.requires_grad and not torch.equal(v, before[k])]
    assert moved, "no trainable weight changed after a step with a non-zero advantage"
    with torch.no_grad():
        assert _logprob(trainer.model, prompt_ids, call) > math.log(taught)


def _logprob(model, prompt_ids: list[int], completion_ids: list[int]):
    """log p(completion | prompt) under ``model``, a scalar tensor."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids], device=model.device)
    logp_TV = model(ids).logits[0, len(prompt_ids) - 1:-1].float().log_softmax(-1)
    return logp_TV.gather(1, ids[0, len(prompt_ids):, None]).sum()


def _teach(model, prompt_ids: list[int], completion_ids: list[int], until: float, lr: float = 1e-5) -> float:
    """Teacher-force ``completion_ids`` (Adam on every weight) until its probability reaches
    ``until`` (4 steps from about 2e-5 for the guess call); return that probability."""
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(30):
        logp = _logprob(model, prompt_ids, completion_ids)
        if logp.exp() >= until:
            break
        (-logp).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.zero_grad(set_to_none=True)
    return float(logp.detach().exp())


def _model_turns(completion_ids: list[int], env_mask: list[int]) -> list[list[int]]:
    """The runs of model tokens (mask 1) between the env's messages (mask 0)."""
    turns, at = [], 0
    for mine, run in groupby(env_mask):
        width = len(list(run))
        if mine:
            turns.append(completion_ids[at:at + width])
        at += width
    return turns
