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
port with a fresh run dir and stops it at the end. The persona's client and the server's
start and stop are :mod:`benchmarks.multiuser`'s, where seven personas talk to one server at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.multiuser import PersonaClient, rate, start_server, stop_server, wait_for_training


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
        demo = PersonaClient(url, args.persona, args.max_tokens, api_key=args.api_key)
        eval_tasks = demo.eval_tasks[: args.eval_tasks]
        train_tasks = demo.train_tasks
        started = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            for round_ in range(args.rounds + 1):
                greedy = list(pool.map(lambda t: demo.evaluate(t, 0.0), eval_tasks))
                sampled = list(pool.map(lambda t: demo.evaluate(t, None), eval_tasks))
                versions = sorted({r[1] for r in greedy + sampled})
                print(f"round {round_}: held-out first replies meeting every preference: "
                      f"{rate(sampled):.2f} sampled, {rate(greedy):.2f} greedy "
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
                wait_for_training(url, timeout_s=300.0)
    finally:
        if process is not None:
            stop_server(process)
    return 0


if __name__ == "__main__":
    sys.exit(main())
