"""tinker-cookbook's RL loop (``tinker_cookbook.rl.train``) on clawgym's ``guess`` env over the Tinker API.

    make tinker-cookbook                      # tinker-cookbook 0.4.1 into .venv; the skyrl-tx server's venv
    scripts/tinker_server.sh serve 8000 &     # a self-hosted Tinker API server (or use a hosted service)
    TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=tml-local \\
        .venv/bin/python examples/interop/tinker_cookbook_guess.py --steps 2

Each step the cookbook samples ``--batch-size`` tasks x ``--group-size`` episodes of up to
3 turns through the service's sampler, centres each group's returns (GRPO), and takes one
``forward_backward`` + ``optim_step`` with its ``importance_sampling`` loss. The env's reward
(1 when the secret is guessed) is the only reward. Prompts are rendered with the cookbook's
``qwen3_instruct`` renderer, which matches SmolLM2's ChatML template; pass ``--model`` and
``--renderer`` for another base model (e.g. ``meta-llama/Llama-3.2-1B`` and ``llama3`` on a
hosted service). The tools are declared as clawgym's own trainer declares them to SmolLM2
(``agents.chat_format.describe_tools``: a worked example call), so the opening prompt is the
one clawgym's trainer renders; ``--tool-prompt renderer`` uses the renderer's Qwen block.
Metrics land in ``--out``/metrics.jsonl; the lines printed at the end sum them up. Only a
group whose returns differ teaches: SmolLM2-135M sampled at temperature 1 rarely calls a tool
at all, so expect ``groups with mixed returns 0.00`` from it on ``guess``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import tinker
from tinker_cookbook.rl import train

from agents.chat_format import describe_tools
from envs.interop.tinker_cookbook import SMOLLM2_RENDERER, CookbookDatasetBuilder


def served_model() -> str:
    """The one base model the service offers (a self-hosted server serves one)."""
    models = [m.model_name for m in tinker.ServiceClient().get_server_capabilities().supported_models]
    if len(models) != 1:
        sys.exit(f"the Tinker service offers {len(models)} base models ({', '.join(models[:5])}); pick one with --model")
    return str(models[0])


def config_for(args: argparse.Namespace, model: str) -> train.Config:
    """A tiny cookbook config: no evaluation, no periodic checkpoints, rank-8 LoRA (the most a
    default self-hosted skyrl-tx server allows)."""
    dataset = CookbookDatasetBuilder(
        env="guess", model_name=model, renderer_name=args.renderer, batch_size=args.batch_size,
        group_size=args.group_size, n_batches=args.steps, seed=args.seed,
        env_kwargs_json=json.dumps({"low": 1, "high": args.high, "max_turns": 3}),
        describe_tools=describe_tools if args.tool_prompt == "clawgym" else None)
    return train.Config(
        learning_rate=args.lr, dataset_builder=dataset, model_name=model, max_tokens=args.max_tokens,
        log_path=args.out, lora_rank=args.lora_rank, renderer_name=args.renderer, eval_every=0, save_every=0,
        loss_fn="importance_sampling", num_groups_to_log=0, ttl_seconds=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1, help="training iterations (one batch each)")
    parser.add_argument("--batch-size", type=int, default=2, help="tasks (groups) per step")
    parser.add_argument("--group-size", type=int, default=4, help="episodes per task")
    parser.add_argument("--high", type=int, default=3, help="the secret is in 1..high")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens sampled per turn")
    parser.add_argument("--lr", type=float, default=1e-4, help="Adam's learning rate")
    parser.add_argument("--lora-rank", type=int, default=8, help="the adapter's rank")
    parser.add_argument("--seed", type=int, default=0, help="the first task's reset seed")
    parser.add_argument("--model", default="", help="base model (default: the one the service serves)")
    parser.add_argument("--renderer", default=SMOLLM2_RENDERER, help="the cookbook renderer for --model")
    parser.add_argument("--tool-prompt", choices=["clawgym", "renderer"], default="clawgym",
                        help="declare the tools as clawgym's trainer does (a worked example call) or with the "
                             "renderer's own block")
    parser.add_argument("--out", default="runs/tinker_cookbook_guess", help="the cookbook's log_path")
    args = parser.parse_args()
    if not os.environ.get("TINKER_BASE_URL") or not os.environ.get("TINKER_API_KEY", "").startswith("tml-"):
        sys.exit("set TINKER_BASE_URL to a Tinker API service (scripts/tinker_server.sh serve PORT starts one) "
                 "and TINKER_API_KEY to a key starting tml- (a self-hosted server checks none)")
    if Path(args.out, "checkpoints.jsonl").exists():
        print(f"{args.out} holds a finished or interrupted run: the cookbook resumes it", file=sys.stderr)

    asyncio.run(train.main(config_for(args, args.model or served_model())))
    rows = [json.loads(line) for line in Path(args.out, "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        print(f"step {row['progress/batch']}: {row['env/all/total_episodes']} episodes, env return "
              f"{row['env/all/reward/total']:.3f}, {row['env/all/turns_per_episode']:.1f} turns of "
              f"{row['env/all/ac_tokens_per_turn']:.0f} tokens, groups with mixed returns "
              f"{row['env/all/by_group/frac_mixed']:.2f} (only those teach)")


if __name__ == "__main__":
    main()
