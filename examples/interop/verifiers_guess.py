"""clawgym's ``guess`` env as a verifiers environment, played against any OpenAI-compatible
endpoint from Python (``vf-eval clawgym-verifiers ...`` is the same from the shell).

    make verifiers                                  # .venv-verifiers: verifiers 0.4.0 + clawgym's envs
    make serve ARGS="learn=false"                   # or any endpoint: the default model on :30000
    .venv-verifiers/bin/python examples/interop/verifiers_guess.py
    .venv-verifiers/bin/python examples/interop/verifiers_guess.py --env chat --episodes 4

``load_environment`` builds what ``vf-eval`` builds: the taskset of the env's own tasks,
the env whose ``run`` steps the clawgym env as the model's user, and the one seat
(``player``) whose harness calls the model with the env's tools. ``serving()`` brings up
verifiers' interception server (it records every model call); each ``run_episode`` plays
one task and returns verifiers' ``Episode``, whose trace carries the env's return as the
reward ``env_return``.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import verifiers.v1 as vf

from envs.interop.verifiers import load_environment


async def play(args: argparse.Namespace) -> None:
    env = load_environment(args.env, env_kwargs=json.loads(args.env_kwargs))
    ctx = vf.ModelContext(model=args.model,
                          client=vf.EvalClientConfig(base_url=args.base_url, api_key_var=args.api_key_var),
                          sampling=vf.SamplingConfig(max_tokens=args.max_tokens))
    tasks = list(env.taskset.take(args.episodes))
    async with env.serving():
        episodes = await asyncio.gather(*(env.run_episode(task, ctx) for task in tasks))
    for episode in episodes:
        trace = episode.traces[0]
        print(f"{trace.info.get('task_id')}: reward {trace.reward:+.1f} (steps {trace.info.get('step_rewards')}), "
              f"{trace.info.get('stop_reason')}, {len(trace.nodes)} messages"
              + ("" if episode.ok else f", failed: {[e.message for e in episode.errors + trace.errors]}"))
    print(f"mean reward {sum(e.traces[0].reward for e in episodes) / len(episodes):.2f} over {len(episodes)} episodes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="guess", help="a clawgym env (python -m envs list)")
    parser.add_argument("--env-kwargs", default='{"high": 3, "max_turns": 3}', help="its arguments, as JSON")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    parser.add_argument("--model", default="clawgym", help="the model name the endpoint serves")
    parser.add_argument("--api-key-var", default="OPENAI_API_KEY", help="the variable holding its key, if any")
    parser.add_argument("--max-tokens", type=int, default=64)
    asyncio.run(play(parser.parse_args()))


if __name__ == "__main__":
    main()
