"""TRL's GRPOTrainer on clawgym's ``guess`` env with the default model (SmolLM2-135M-Instruct).

    make trl                                        # trl==1.16.0 into .venv (the trl extra)
    .venv/bin/python examples/interop/trl_guess.py  # 2 steps on CPU: minutes each on 2 busy cores
    .venv/bin/python examples/interop/trl_guess.py --steps 20 --high 4

Each step samples 2 tasks x 4 episodes of up to 3 turns; the env's return (1 when the
secret is guessed) is TRL's reward, logged as ``rewards/env_return/mean``. The prompt is
rendered the way clawgym's own trainer renders it (``agents.chat_format.render_prompt``:
SmolLM2's template takes no tools, so they are described in the system prompt), and the
model's ``<tool_call>`` text is parsed by the env itself.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16: we pin it
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as trainers.run: idle torch threads sleep, not spin

from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

import envs
from agents.chat_format import render_prompt
from agents.model_cache import resolve_model_dir
from envs.interop.trl import EnvRollout, env_return, task_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps")
    parser.add_argument("--high", type=int, default=3, help="the secret is in 1..high")
    parser.add_argument("--out", default="runs/trl_guess", help="TRL's output_dir")
    args = parser.parse_args()

    env_kwargs = {"low": 1, "high": args.high, "max_turns": 3}
    model_dir = resolve_model_dir("default")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    rollout = EnvRollout(lambda: envs.make("guess", **env_kwargs), render=render_prompt)
    config = GRPOConfig(
        output_dir=args.out, max_steps=args.steps, seed=0, learning_rate=1e-4,
        per_device_train_batch_size=8, num_generations=4,  # 2 tasks x 4 episodes per step
        max_completion_length=160,  # the whole episode: every turn and the env's answers
        temperature=1.0, beta=0.0, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, bf16=False, activation_checkpointing=False, log_completions=False)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=env_return, args=config,
                          train_dataset=task_dataset(envs.make("guess", **env_kwargs)), rollout_func=rollout,
                          peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
    try:
        trainer.train()
    finally:
        rollout.close()
    for row in trainer.state.log_history:
        if "rewards/env_return/mean" in row:
            print(f"step {row['step']}: env return {row['rewards/env_return/mean']:.3f}, "
                  f"loss {row['loss']:.4f}")


if __name__ == "__main__":
    main()
