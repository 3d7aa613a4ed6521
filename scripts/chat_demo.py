"""Watch a live server learn a user's preferences: ``python -m scripts.chat_demo``.

A simulated persona from the chat env (``clawgym/Chat-v0``) talks to a clawgym server
through the ``openai`` client, exactly as any app would: it asks, reads the reply,
and answers the way people do ("Too long. Two sentences, please." / "Perfect, thanks.").
That answer is the reply's next state; the server scores it, trains in the background
and swaps the new adapter in. Each round prints the rate at which the first reply to a
*held-out* request meets all of the persona's hidden preferences, sampled at the
server's default temperature (what a user gets) and greedy, with the weight version that
answered; evaluation requests are side turns, so they are never trained on.

Without ``--url`` the demo starts its own server (``python -m trainers.serve``) on a free
port with a fresh run dir and stops it at the end.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(run_dir: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = (run_dir.parent / f"{run_dir.name}.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "trainers.serve", f"port={port}", f"out={run_dir}", *extra],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"chat_demo: the server exited with {process.returncode}; see {log.name}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("chat_demo: the server did not start within 300 s")


class Demo:
    def __init__(self, url: str, api_key: str, persona: str, max_tokens: int) -> None:
        import openai

        import envs
        from envs.chat.env import PersonalChatEnv

        envs.register_builtin()
        self.client = openai.OpenAI(base_url=url, api_key=api_key or "none", max_retries=0, timeout=600)
        self.persona = persona
        self.max_tokens = max_tokens
        self.train_env = PersonalChatEnv(persona=persona, split="train")
        self.eval_env = PersonalChatEnv(persona=persona, split="heldout")

    def converse(self, task_id: str, seed: int) -> tuple[float, int]:
        """One training conversation: request, reply, the user's reaction (the next state)."""
        from envs.chat.env import PersonalChatEnv

        env = PersonalChatEnv(persona=self.persona, split="train")
        messages, _ = env.reset(seed=seed, options={"task_id": task_id})
        reply = self.client.chat.completions.create(model="clawgym", messages=messages, max_tokens=self.max_tokens)
        content = reply.choices[0].message.content or ""
        reaction, _, _, _, info = env.step(content)
        # The reaction is the next request of the session; the user then leaves, so its
        # own answer is cut to one token and never trained on.
        follow_up = [*messages, {"role": "assistant", "content": content}, *reaction]
        self.client.chat.completions.create(model="clawgym", messages=follow_up, max_tokens=1,
                                            extra_headers={"X-Session-Done": "true"})
        return info["metrics"]["preference_met"], _version(reply)

    def evaluate(self, task_id: str, temperature: float | None) -> tuple[float, int]:
        """One held-out first reply; ``temperature`` None: the server's default, as a user gets."""
        from envs.chat.env import PersonalChatEnv

        env = PersonalChatEnv(persona=self.persona, split="heldout")  # one per call: threads share nothing
        messages, _ = env.reset(seed=0, options={"task_id": task_id})
        reply = self.client.chat.completions.create(
            model="clawgym", messages=messages, max_tokens=self.max_tokens,
            **({} if temperature is None else {"temperature": temperature}),
            extra_headers={"X-Turn-Type": "side", "X-Session-Done": "true"})
        met = env.preferences_met(reply.choices[0].message.content or "")
        return float(all(met.values())), _version(reply)


def _rate(results: list[tuple[float, int]]) -> float:
    return sum(r[0] for r in results) / len(results)


def _version(reply: Any) -> int:
    fingerprint = getattr(reply, "system_fingerprint", "") or ""
    return int(fingerprint.rsplit("-v", 1)[-1]) if "-v" in fingerprint else -1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server's base URL (default: start one)")
    parser.add_argument("--api-key", default=os.environ.get("CLAWGYM_API_KEY", ""))
    parser.add_argument("--persona", default="student")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--conversations", type=int, default=16, help="training conversations per round")
    parser.add_argument("--eval-tasks", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--parallel", type=int, default=16, help="conversations in flight at once")
    parser.add_argument("--run-dir", type=Path, help="run dir for the server started here")
    parser.add_argument("server_overrides", nargs="*",
                        help="trainers.serve key=value for the server started here, e.g. batch_size=8")
    args = parser.parse_args(argv)

    process = None
    url = args.url
    if url is None:
        run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="clawgym-demo-")) / "serve"
        print(f"starting a server (run dir {run_dir}) ...", flush=True)
        process, url = start_server(run_dir, args.server_overrides)
    try:
        demo = Demo(url, args.api_key, args.persona, args.max_tokens)
        eval_tasks = demo.eval_env.task_ids()[: args.eval_tasks]
        train_tasks = demo.train_env.task_ids()
        started = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            for round_ in range(args.rounds + 1):
                greedy = list(pool.map(lambda t: demo.evaluate(t, 0.0), eval_tasks))
                sampled = list(pool.map(lambda t: demo.evaluate(t, None), eval_tasks))
                versions = sorted({r[1] for r in greedy + sampled})
                print(f"round {round_}: held-out first replies meeting every preference: "
                      f"{_rate(sampled):.2f} sampled, {_rate(greedy):.2f} greedy "
                      f"(weight version {','.join(map(str, versions))}, {time.perf_counter() - started:.0f} s)",
                      flush=True)
                if round_ == args.rounds:
                    break
                picks = [train_tasks[(round_ * args.conversations + i) % len(train_tasks)]
                         for i in range(args.conversations)]
                met = list(pool.map(lambda ts: demo.converse(*ts),
                                    [(t, round_ * 1000 + i) for i, t in enumerate(picks)]))
                print(f"         training conversations: {sum(m for m, _ in met) / len(met):.2f} met "
                      f"({len(met)} conversations)", flush=True)
                _wait_for_training(demo.client, round_)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
    return 0


def _wait_for_training(client: Any, round_: int, timeout_s: float = 300.0) -> None:
    """Let the server finish scoring and training what this round produced (a real user
    would just keep talking; the demo waits so each round's evaluation sees it)."""
    import urllib.request

    base = str(client.base_url).rstrip("/").removesuffix("/v1")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/health", timeout=10) as response:
            import json

            health = json.load(response)
        if health.get("idle", True):
            return
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
