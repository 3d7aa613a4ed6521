"""``python -m envs.gui list|check|oracle``: see the web tasks, prove new ones fair, and
measure the MiniWoB oracles against MiniWoB's own reward.

    python -m envs.gui list [--suite all]            # id, suite, split, difficulty; exclusions
    python -m envs.gui check my_tasks/ [--task ID]   # reference and idle runs per task folder
    python -m envs.gui oracle [--episodes 5]         # oracle success per MiniWoB task

``check`` loads every folder under the given dir (a load error names the field), runs each
task's reference actions (must succeed) and an idle agent (must not) in a real Chromium,
and exits 1 if any task is unfair. ``oracle`` exits 1 if any episode's env reward differs
from MiniWoB's ``WOB_RAW_REWARD_GLOBAL``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from envs.gui import miniwob
from envs.gui.env import SUITES, BrowserEnv
from envs.gui.tasks import TaskError
from envs.taskfolders import report_fairness


def _list(args: argparse.Namespace) -> int:
    env = BrowserEnv(suite=args.suite, tasks="all", split="all", tasks_dir=args.tasks_dir)
    tasks = [env.task(i) for i in env.task_ids()]
    print(f"{'id':34} {'suite':8} {'split':8} {'difficulty':10} default")  # MiniWoB's split: 'all' (seeds)
    for t in tasks:
        default = "yes" if t.suite != "miniwob" or t.id in miniwob.DEFAULT_SUBSET else ""
        print(f"{t.id:34} {t.suite:8} {t.split:8} {t.difficulty:10} {default}")
    if args.suite in ("miniwob", "all"):
        print(f"\nexcluded MiniWoB tasks ({len(miniwob.EXCLUDED)}):")
        for name, why in sorted(miniwob.EXCLUDED.items()):
            print(f"  {name}: {why}")
    suites = Counter(t.suite for t in tasks)
    default = BrowserEnv(suite=args.suite, tasks_dir=args.tasks_dir).task_ids()
    print(f"\n{len(tasks)} tasks ({', '.join(f'{n} {s}' for s, n in sorted(suites.items()))}); "
          f"the default selection has {len(default)}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from envs.gui.verify import check_task

    try:
        env = BrowserEnv(suite="user", tasks=args.task or "all", split="all", tasks_dir=args.tasks_dir)
    except (TaskError, ValueError) as exc:
        print(f"invalid task: {exc}", file=sys.stderr)
        return 1
    return report_fairness(env, check_task,
                           lambda r: f"reference {r.reference_reward:g}, idle {r.idle_reward:g}")


def _oracle(args: argparse.Namespace) -> int:
    from envs.gui.oracles import ORACLES, run_oracle

    names = args.task or list(ORACLES)
    env = BrowserEnv(tasks=names)
    rows, mismatched = [], 0
    try:
        for name in names:
            results = [run_oracle(env, name, seed) for seed in range(args.seed, args.seed + args.episodes)]
            bad = [r for r in results if not r.matches]
            mismatched += len(bad)
            rows.append((name, sum(r.success for r in results) / len(results),
                         sum(r.reward for r in results) / len(results), len(results) - len(bad), len(results)))
            print(f"{name:24} success {rows[-1][1]:.2f}  mean reward {rows[-1][2]:+.2f}  "
                  f"matches MiniWoB {rows[-1][3]}/{rows[-1][4]}", flush=True)
            for r in bad:
                print(f"  seed {r.seed}: env reward {r.reward:g}, MiniWoB {r.miniwob_reward:g} {r.error}")
    finally:
        env.close()
    total = sum(r[4] for r in rows)
    print(f"{len(rows)} tasks, {total} episodes, success {sum(r[1] * r[4] for r in rows) / total:.2f}, "
          f"{total - mismatched}/{total} rewards equal to MiniWoB's")
    return 1 if mismatched else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.gui", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="list the tasks and the excluded MiniWoB tasks")
    listing.add_argument("--suite", choices=SUITES, default="miniwob")
    listing.add_argument("--tasks-dir", default=None, help="a folder of extra task folders")
    check = sub.add_parser("check", help="prove task folders fair in a real Chromium")
    check.add_argument("tasks_dir", help="a folder holding one folder per task")
    check.add_argument("--task", action="append", help="only this task id (repeatable)")
    oracle = sub.add_parser("oracle", help="run the scripted MiniWoB oracles")
    oracle.add_argument("--task", action="append", help="only this task (repeatable)")
    oracle.add_argument("--episodes", type=int, default=5, help="seeded episodes per task")
    oracle.add_argument("--seed", type=int, default=0, help="first seed")
    args = parser.parse_args(argv)
    return {"list": _list, "check": _check, "oracle": _oracle}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
