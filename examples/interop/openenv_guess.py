"""clawgym's ``guess`` env as an OpenEnv server, played from both sides of the wire.

    pip install -e '.[openenv]'
    python examples/interop/openenv_guess.py            # starts the server itself
    python examples/interop/openenv_guess.py --url http://127.0.0.1:8000   # or uses yours:
    python -m envs.interop.openenv serve env=guess port=8000

First OpenEnv's side: ``ClawEnvClient`` (an openenv-core ``EnvClient``, what OpenEnv's own
env packages ship) resets a session and binary-searches the secret with ``guess`` tool
calls. Then clawgym's side: the same server as a clawgym env
(``envs.make("envs.interop.openenv:OpenEnv-v0", url=...)``, which is what
``python -m trainers.run env=envs.interop.openenv:OpenEnv-v0 env_kwargs.url=...`` trains on)
plays an episode the same way. The last line sums both up.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import envs
from envs.interop.openenv import client_class


def guess(number: int) -> dict[str, Any]:
    """An assistant message calling the ``guess`` tool."""
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{number}", "type": "function",
        "function": {"name": "guess", "arguments": json.dumps({"number": number})}}]}


def binary_search(step: Callable[[dict[str, Any]], tuple[str, float, bool]], low: int = 1,
                  high: int = 100) -> tuple[int, float]:
    """Guess until ``step`` says done: ``(turns, return)``."""
    turns, total = 0, 0.0
    while True:
        middle = (low + high) // 2
        answer, reward, done = step(guess(middle))
        turns, total = turns + 1, total + reward
        print(f"  guess {middle:3d} -> {answer}")
        if done:
            return turns, total
        low, high = (middle + 1, high) if answer == "higher" else (low, middle - 1)


@contextmanager
def served_guess(url: str) -> Iterator[str]:
    """``url``, or a server started here with the CLI on a free port (stopped after)."""
    if url:
        yield url
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "envs.interop.openenv", "serve", "env=guess",
                               f"port={port}", "max_sessions=4"])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the OpenEnv server did not start (exit code {server.poll()})")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="", help="an OpenEnv server serving guess (default: start one)")
    parser.add_argument("--task", default="guess-73", help="the task the OpenEnv client asks for")
    args = parser.parse_args()
    with served_guess(args.url) as url:
        print(f"OpenEnv's client ({url}), task {args.task}:")
        with client_class()(base_url=url).sync() as client:
            client.reset(task_id=args.task)

            def openenv_step(message: dict[str, Any]) -> tuple[str, float, bool]:
                result = client.step(message)
                return result.observation.messages[0]["content"], float(result.reward or 0.0), result.done

            openenv_turns, openenv_return = binary_search(openenv_step)

        env = envs.make("envs.interop.openenv:OpenEnv-v0", url=url)
        _, info = env.reset(seed=7)
        print(f"clawgym's env over the same server, task {info['task_id']}:")

        def clawgym_step(message: dict[str, Any]) -> tuple[str, float, bool]:
            obs, reward, terminated, truncated, _ = env.step(message)
            return obs[0]["content"], reward, terminated or truncated

        clawgym_turns, clawgym_return = binary_search(clawgym_step)
        env.close()
    print(f"openenv client: {openenv_turns} turns, return {openenv_return:g}; "
          f"clawgym env: {clawgym_turns} turns, return {clawgym_return:g}")


if __name__ == "__main__":
    main()
