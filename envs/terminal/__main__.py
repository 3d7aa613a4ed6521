"""``python -m envs.terminal list|check``: see the terminal tasks, prove new ones fair.

    python -m envs.terminal list [--suite all]            # id, suite, split, category, difficulty
    python -m envs.terminal check my_tasks/ [--sandbox bwrap] [--task ID ...]

``check`` loads every folder under the given tasks dir (a load error names the field),
then runs each task's reference solution (must pass every test), an idle run (must fail
at least one) and a run that deletes everything (must pass none) in a real sandbox, and
exits 1 if any task is unfair.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from envs.terminal.env import SUITES, TerminalEnv
from envs.taskfolders import report_fairness
from envs.terminal.tasks import TaskError
from envs.terminal.verify import check_task


def _list(args: argparse.Namespace) -> int:
    env = TerminalEnv(suite=args.suite, split="all", tasks_dir=args.tasks_dir)
    tasks = [env.task(i) for i in env.task_ids()]
    print(f"{'id':34} {'suite':9} {'split':7} {'category':10} difficulty")
    for t in tasks:
        print(f"{t.id:34} {t.suite:9} {t.split:7} {t.category:10} {t.difficulty}")
    by_split = Counter(t.split for t in tasks)
    print(f"{len(tasks)} tasks ({by_split['train']} train, {by_split['heldout']} heldout)")
    return 0


def _check(args: argparse.Namespace) -> int:
    try:
        env = TerminalEnv(suite="user", split="all", tasks_dir=args.tasks_dir, sandbox=args.sandbox,
                          task_ids=args.task or None)
    except TaskError as exc:
        print(f"invalid task: {exc}", file=sys.stderr)
        return 1
    return report_fairness(env, check_task, lambda r: f"reference {r.reference_reward:.2f}, "
                           f"idle {r.idle_reward:.2f}, vandal {r.vandal_reward:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.terminal", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="list the tasks")
    listing.add_argument("--suite", choices=SUITES, default="clawgym")
    listing.add_argument("--tasks-dir", default=None, help="a folder of extra task folders")
    check = sub.add_parser("check", help="prove task folders fair in a real sandbox")
    check.add_argument("tasks_dir", help="a folder holding one folder per task")
    check.add_argument("--sandbox", choices=("auto", "docker", "bwrap"), default="auto")
    check.add_argument("--task", action="append", help="only this task id (repeatable)")
    args = parser.parse_args(argv)
    return _list(args) if args.command == "list" else _check(args)


if __name__ == "__main__":
    sys.exit(main())
