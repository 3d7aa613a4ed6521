"""``python -m envs.toolcall oracle|check|list``: replay the ground truth, prove a suite fair, list its tasks.

    python -m envs.toolcall oracle bfcl                   # every BFCL single-turn question
    python -m envs.toolcall oracle bfcl_multi
    python -m envs.toolcall oracle tau2 --split all       # scripted user
    python -m envs.toolcall oracle toolmath --sandbox bwrap
    python -m envs.toolcall check tau2 --split all        # the oracle and an idle agent
    python -m envs.toolcall list tau2 --split heldout

``oracle`` prints the suite's summary table for the oracle and the ids it failed (where
the data defines no reachable answer), and exits 0. ``check`` plays every task with the
oracle (must solve it) and with an idle agent that calls nothing and declines (must fail
it, except where declining is the answer: BFCL's irrelevance questions, tau2's refusals),
prints a table per category and each unfair task with what is wrong, and exits 1 if any
task is unfair.
"""

from __future__ import annotations

import argparse
import sys
import time

from envs.toolcall.benchmark import BENCHMARK_SUITES, check_markdown, check_rows, markdown, oracle_rows, summarize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.toolcall", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("oracle", "check", "list"):
        command = sub.add_parser(name)
        command.add_argument("suite", choices=sorted(BENCHMARK_SUITES))
        command.add_argument("--split", default=None, help="train, heldout or all (default: the suite's)")
        command.add_argument("--tasks", type=int, default=0, help="only the first N tasks")
        command.add_argument("--task", action="append", help="only this task id (repeatable)")
        command.add_argument("--sandbox", default=None, help="toolmath: auto, docker or bwrap")
    args = parser.parse_args(argv)
    kwargs = {"sandbox": args.sandbox} if args.sandbox else {}
    if args.task:
        kwargs["task_ids"] = args.task
    if args.command == "list":
        import envs

        spec = BENCHMARK_SUITES[args.suite]
        env = envs.make(spec.env, split=args.split or spec.split, **kwargs).unwrapped
        for task_id in env.task_ids()[: args.tasks or None]:
            task = env.task(task_id)
            print(f"{task_id:40} {task.category:28} {task.split}")
        return 0
    started = time.perf_counter()
    if args.command == "check":
        checked = check_rows(args.suite, args.split, args.tasks, **kwargs)
        print(check_markdown(checked))
        unfair = [r for r in checked if r["problem"]]
        for row in unfair:
            print(f"UNFAIR {row['task_id']}: {row['problem']}")
        print(f"{len(checked) - len(unfair)}/{len(checked)} tasks of {args.suite} fair in "
              f"{time.perf_counter() - started:.0f} s")
        return 1 if unfair else 0
    rows = oracle_rows(args.suite, args.split, args.tasks, **kwargs)
    summary = summarize(args.suite, rows)
    print(markdown(summary))
    failed = [r["task_id"] for r in rows if not r["success"]]
    print(f"oracle on {args.suite}: {len(rows) - len(failed)}/{len(rows)} solved in "
          f"{time.perf_counter() - started:.0f} s; failed: {', '.join(failed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
