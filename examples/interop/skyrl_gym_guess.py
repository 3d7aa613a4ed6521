"""clawgym's ``guess`` env made through SkyRL-gym and played by the default model, the way
SkyRL's generator plays a ``BaseTextEnv``.

    pip install -e '.[skyrl-gym]'                          # skyrl-gym==0.4.0 into .venv
    .venv/bin/python examples/interop/skyrl_gym_guess.py   # 2 episodes of 2 turns: 2.4 CPU-minutes here
    .venv/bin/python examples/interop/skyrl_gym_guess.py --episodes 8 --high 4

Each episode is what ``SkyRLGymGenerator.agent_loop`` does with one dataset row:
``skyrl_gym.make(env_class, env_config=..., extras=...)``, ``init`` for the first chat
history, then model text in, ``step``, observations appended, until ``done``. A SkyRL
training run needs only the registration (importing ``envs.interop.skyrl_gym`` in its
entrypoint) and rows whose ``env_class`` is ``clawgym``, with ``env`` (and ``task_id``) in
the row; the model here is a stand-in for SkyRL's inference engine.
"""

from __future__ import annotations

import argparse

import skyrl_gym
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import envs.interop.skyrl_gym  # noqa: F401  (registers "clawgym" with skyrl_gym)
from agents.model_cache import resolve_model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--high", type=int, default=3, help="the secret is in 1..high")
    parser.add_argument("--max-turns", type=int, default=2, help="SkyRL's generator.max_turns")
    args = parser.parse_args()

    model_dir = resolve_model_dir("default")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(0)
    env_config = {"env": "guess", "env_kwargs": {"low": 1, "high": args.high}}  # skyrl_gym.clawgym in SkyRL's config
    returns = []
    for episode in range(args.episodes):
        row = {"task_id": f"guess-{episode % args.high + 1}", "max_turns": args.max_turns}  # a dataset row's extras
        env = skyrl_gym.make("clawgym", env_config=env_config, extras=row)
        chat, _ = env.init([])
        done, rewards = False, []
        while not done:
            ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)
            out = model.generate(**ids, max_new_tokens=48, do_sample=True, temperature=1.0,
                                 pad_token_id=tokenizer.eos_token_id)
            text = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
            step = env.step(text)
            chat += [{"role": "assistant", "content": text}, *step["observations"]]
            rewards.append(step["reward"])
            done = step["done"]
        print(f"{row['task_id']}: rewards {rewards}, {step['metadata']['stop_reason']}, {env.get_metrics()}")
        returns.append(sum(rewards))
        env.close()
    print(f"mean return {sum(returns) / len(returns):.2f} over {len(returns)} episodes")


if __name__ == "__main__":
    main()
