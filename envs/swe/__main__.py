"""``python -m envs.swe list|check``: see SWE instances, prove a file of them fair.

    python -m envs.swe list [FILE]                       # id, split, repo/project, tests
    python -m envs.swe check FILE [--backend bwrap] [--instance ID ...] [--vandal NAME ...] [--json]
    python -m envs.swe bench [FILE] [--backend bwrap] [--resets 50] [--grades 5]

``check`` validates every record (each problem names its line and field), builds each
valid instance's repository, then runs scripted agents through the env
(``envs.swe.verify``): the gold patch applied with the editor must resolve it, an empty
patch must not (and must leave every FAIL_TO_PASS test failing), and no vandal may
(deleting the tests, hooks that forge the report: ``--vandal`` picks some; each is one
more grading per instance). It names what is wrong with an instance that is not fair and
exits 1 if any is, or if the ``swe`` rootfs holds a copy of one of the projects (a ``diff``
against it would show the fix).

``bench`` measures what training pays per episode on one backend: reset (a cached
workspace copied into a wiped sandbox; the first build of each instance is not counted)
and grading (the gold patch's diff taken and graded in a fresh copy), as p50/p95.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import TextIO

from envs.errors import EnvError
from envs.swe.env import DEFAULT_INSTANCES, SWEEnv
from envs.swe.instances import Instance, InstanceError, load_instances, parse_instance, read_records
from envs.swe.log_keys import CutTestIdWarning
from envs.swe.verify import VANDALS, as_json, check_instance, rootfs_copies, summary_line


def _list(args: argparse.Namespace) -> int:
    path = args.file or DEFAULT_INSTANCES
    try:
        instances = load_instances(path)
    except InstanceError as exc:
        print(f"invalid instances:\n{exc}", file=sys.stderr)
        return 1
    print(f"{'instance_id':44} {'split':7} {'source':28} {'F2P':>4} {'P2P':>5}")
    for inst in instances:
        source = inst.project or inst.repo
        print(f"{inst.instance_id:44} {inst.split:7} {source[-28:]:28} "
              f"{len(inst.fail_to_pass):>4} {len(inst.pass_to_pass):>5}")
    splits = Counter(i.split for i in instances)
    print(f"{len(instances)} instances ({splits['train']} train, {splits['heldout']} heldout)")
    return 0


def _valid_records(path: Path) -> tuple[list[Instance], list[str]]:
    """The records that validate, and one problem line per invalid record."""
    base_dir = str(path.resolve().parent)
    good, bad = [], []
    for where, record in read_records(path):
        try:
            good.append(parse_instance(record, where, base_dir=base_dir))
        except InstanceError as exc:
            bad.append(str(exc))
    return good, bad


def _check(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        good, bad = _valid_records(path)
    except InstanceError as exc:
        print(f"invalid instances:\n{exc}", file=sys.stderr)
        return 1
    for problem in bad:
        print(f"INVALID {problem}")
    copies = _rootfs_copies(good)
    for copy in copies:
        print(f"UNFAIR rootfs: {copy} is a copy of a project under test; purge it in scripts/build_rootfs.sh")
    wanted = set(args.instance or [])
    chosen = [i for i in good if not wanted or i.instance_id in wanted]
    if wanted - {i.instance_id for i in chosen}:
        print(f"unknown or invalid --instance ids: {sorted(wanted - {i.instance_id for i in chosen})}",
              file=sys.stderr)
        return 1
    unfair = 0
    with tempfile.TemporaryDirectory(prefix="clawgym-swe-check-") as scratch:
        # The env reads a file; hand it the valid records, their local repos made absolute.
        valid = Path(scratch) / "instances.jsonl"
        with valid.open("w") as f:
            for inst in chosen:
                record = dict(inst.record)
                local = inst.local_repo()
                if inst.project is None and local is not None:
                    record["repo"] = str(local)
                f.write(json.dumps(record) + "\n")
        if not chosen:
            print(f"0/{len(bad)} instances fair")
            return 1
        with warnings.catch_warnings():  # said once already, naming the user's file
            warnings.simplefilter("ignore", CutTestIdWarning)
            env = SWEEnv(instances=str(valid), split="all", sandbox=args.backend,
                         test_timeout_s=args.test_timeout)
        try:
            for inst in chosen:
                start = time.monotonic()
                try:
                    result = check_instance(env, inst.instance_id, tuple(args.vandal or VANDALS))
                except EnvError as exc:  # the sandbox itself failed
                    print(f"{inst.instance_id}: ERROR {exc}")
                    unfair += 1
                    continue
                line = as_json(result) if args.json else summary_line(result)
                print(f"{line}" + ("" if args.json else f" ({time.monotonic() - start:.1f} s)"))
                unfair += not result.ok
        finally:
            env.close()
    total = len(chosen) + len(bad)
    print(f"{len(chosen) - unfair}/{total} instances fair")
    return 1 if unfair or bad or copies else 0


def _rootfs_copies(instances: list[Instance]) -> list[str]:
    """Copies, in the swe rootfs (when built), of the shipped projects these instances use."""
    from envs.swe import swe_rootfs
    from envs.swe.projects import load_projects

    used = {i.project for i in instances if i.project}
    if not used or not Path(swe_rootfs()).is_dir():
        return []
    return rootfs_copies(swe_rootfs(), [p for name, p in load_projects().items() if name in used])


def _bench(args: argparse.Namespace) -> int:
    from envs.swe.grading import grade, model_patch
    from envs.swe.verify import apply_with_tools

    env = SWEEnv(instances=args.file, split="all", sandbox=args.backend)
    ids = env.task_ids()
    resets, grades = [], []
    try:
        for task_id in ids[: max(args.grades, 1)]:
            env.reset(options={"task_id": task_id})  # builds (or finds) the cached workspace
        for n in range(args.resets):
            start = time.monotonic()
            env.reset(options={"task_id": ids[n % min(len(ids), max(args.grades, 1))]})
            resets.append(time.monotonic() - start)
        for task_id in ids[: args.grades]:
            env.reset(options={"task_id": task_id})
            apply_with_tools(env, env.instance(task_id).patch)
            sandbox, prepared = env._sandbox, env._prepared  # noqa: SLF001 (timing the pieces)
            assert sandbox is not None and prepared is not None
            start = time.monotonic()
            verdict = grade(sandbox, env.instance(task_id), prepared, model_patch(sandbox, prepared))
            grades.append(time.monotonic() - start)
            print(f"{task_id}: graded in {grades[-1]:.2f} s, resolved={verdict.resolved}")
    finally:
        env.close()
    backend = args.backend
    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    print(f"backend={backend}: reset p50 {pct(resets, .5) * 1000:.0f} ms, p95 {pct(resets, .95) * 1000:.0f} ms "
          f"({len(resets)} resets); grading p50 {pct(grades, .5):.2f} s, p95 {pct(grades, .95):.2f} s "
          f"({len(grades)} instances)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.swe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="list the instances of a file (default: the shipped set)")
    listing.add_argument("file", nargs="?", default=None)
    check = sub.add_parser("check", help="prove a file of instances fair in a real sandbox")
    check.add_argument("file", help="a JSONL (or JSON list) of instances")
    check.add_argument("--backend", choices=("auto", "docker", "bwrap"), default="auto")
    check.add_argument("--instance", action="append", help="only this instance id (repeatable)")
    check.add_argument("--vandal", action="append", choices=sorted(VANDALS),
                       help="only this vandal (repeatable; default: all)")
    check.add_argument("--test-timeout", type=float, default=300.0, help="seconds per test run")
    check.add_argument("--json", action="store_true", help="one JSON object per instance")
    bench = sub.add_parser("bench", help="time reset and grading on one backend")
    bench.add_argument("file", nargs="?", default=str(DEFAULT_INSTANCES))
    bench.add_argument("--backend", choices=("auto", "docker", "bwrap"), default="auto")
    bench.add_argument("--resets", type=int, default=50, help="resets to time")
    bench.add_argument("--grades", type=int, default=5, help="instances to grade with their gold patch")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():  # restores showwarning on the way out
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, CutTestIdWarning):  # about the user's file, not this code
                print(f"WARNING {message}", file=sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return {"list": _list, "check": _check, "bench": _bench}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
