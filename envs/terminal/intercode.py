"""The InterCode bash tasks as a second terminal suite, graded against their gold commands.

InterCode (Yang et al., 2023, "InterCode: Standardizing and Benchmarking Interactive Coding
with Execution Feedback"; MIT licence) ships its bash tasks in the ``intercode-bench``
wheel: ``bash_queries.json`` (a natural-language query and a gold command each) and
``setup_fs.sh``, which builds the ``/testbed`` tree the queries talk about. Nothing is
copied into clawgym: both files are read from the installed wheel
(``pip install --no-deps intercode-bench==0.1.22``; none of its dependencies are needed).

How the tasks are adapted to clawgym's sandboxes, honestly:

- The sandbox's root is read-only, so the testbed lives at ``/workspace/testbed``; the same
  substitution (``/testbed`` -> ``/workspace/testbed``) is applied to the setup script, the
  query and the gold command. Relative ``testbed/`` paths work as-is (commands start in
  ``/workspace``, InterCode's started in ``/``).
- InterCode scores 0.33 each for the file-system diff, the changed files' hashes and the
  TF-IDF similarity of the last output to the gold's. Here the gold command runs once in a
  fresh sandbox of the same image and the comparison is exact, as tests:
  ``same_output`` (when the gold prints something): the agent's ``submit`` answer, or else
  the stdout of its last command, equals the gold's stdout, compared as a sorted list of
  whitespace-collapsed lines with ``/workspace/`` and ``./`` path prefixes removed;
  ``same_files`` (when the gold changes files): every path under ``/workspace`` that either
  changed ends in the same state (type, mode, content hash) as after the gold.
- Tasks whose gold cannot be reproduced or checked are left out, each for the reason in
  :data:`EXCLUDED` (a broken gold, a tool the image lacks, output holding timestamps, a
  query that never names the file the gold writes, or a no-op that doing nothing passes).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import re
from dataclasses import dataclass
from pathlib import Path

from envs.sandbox import Sandbox, SandboxError
from envs.terminal.grading import TestResult, tail
from envs.terminal.tasks import Limits, Task, TaskError, hashed_split

DISTRIBUTION = "intercode-bench"
VERSION = "0.1.22"
QUERIES_FILE = "intercode/assets/datasets/bash_queries.json"
SETUP_FILE = "intercode/assets/docker/setup_fs.sh"
TESTBED = "/workspace/testbed"

EXCLUDED: dict[int, tuple[str, str]] = {
    # index: (start of the query, to catch a changed data file; why it is left out)
    1: ("Find all text files in the testbed", "the gold fails (find: missing argument to -exec) "
        "and leaves an empty file"),
    3: ("Sort the lines of textfile1.txt", "the query does not name the file the gold writes"),
    4: ("Search for all files containing the word 'error'", "no file contains 'error', so the "
        "gold's xargs runs du on the working directory instead"),
    5: ("Find all symbolic links in testbed/", "the testbed has no symbolic links: doing nothing "
        "matches the gold"),
    6: ("Get the total size of all files", "the query does not name the file the gold writes"),
    7: ("Find all PNG files", "the testbed has no PNG files and the image has no ImageMagick: "
        "doing nothing matches the gold"),
    8: ("List all files in the directory /testbed/dir1", "the gold's output holds modification "
        "times, which differ between any two runs"),
    12: ("Rename all files with extension .txt", "the gold needs `rename`, which the image lacks"),
    13: ("Find all files modified in the last 2 hours", "the archive stores modification times, "
         "so no two runs write the same bytes"),
    18: ("Find all symbolic links under the directory", "the testbed has no symbolic links: "
         "doing nothing matches the gold"),
    23: ("Display the contents of textfile3.txt and textfile4.txt", "the gold prints only "
         "textfile4.txt, not what the query asks"),
}

INSTRUCTION_NOTE = (
    "\n\nThe testbed directory is {testbed}. If the task asks for output, the output of your "
    "last command (or the answer you pass to `submit`) is compared with a reference command's; "
    "files you create, change or delete under /workspace are compared with the reference's "
    "changes, so keep scratch files in /tmp."
)

# Prints {path: "type mode md5"} for everything under /workspace; run inside the sandbox.
_SNAPSHOT = r"""python3 -I -S - <<'PY'
import hashlib, json, os, stat
out = {}
for root, dirs, files in os.walk("/workspace"):
    dirs.sort()
    for name in dirs + sorted(files):
        path = os.path.join(root, name)
        st = os.lstat(path)
        rel = os.path.relpath(path, "/workspace")
        if stat.S_ISLNK(st.st_mode):
            out[rel] = "l -> " + os.readlink(path)
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = "d %o" % stat.S_IMODE(st.st_mode)
        else:
            try:
                with open(path, "rb") as f:
                    digest = hashlib.md5(f.read()).hexdigest()
            except OSError as exc:
                digest = "unreadable"
            out[rel] = "f %o %s" % (stat.S_IMODE(st.st_mode), digest)
print(json.dumps(out))
PY"""
_GONE = "absent"
_PATH_PREFIX = re.compile(r"(?<![\w./-])(?:/workspace/|\./)")


class InterCodeUnavailable(TaskError):
    """The intercode-bench wheel is not installed; the message says how to install it."""


def _data_file(relative: str) -> Path:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise InterCodeUnavailable(
            f"suite='intercode' needs the {DISTRIBUTION} wheel, which is not installed: "
            f"pip install --no-deps {DISTRIBUTION}=={VERSION}") from None
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise InterCodeUnavailable(f"{DISTRIBUTION} {dist.version} has no {relative}; "
                                   f"install version {VERSION}: pip install --no-deps {DISTRIBUTION}=={VERSION}")
    return path


def _on_testbed(text: str) -> str:
    return text.replace("/testbed", TESTBED)


def _difficulty(gold: str) -> str:
    """InterCode gives none; a single command is easy, a pipeline or -exec is medium."""
    return "medium" if ("|" in gold or "-exec" in gold or ">" in gold) else "easy"


@functools.lru_cache(maxsize=1)
def load_intercode_tasks() -> tuple[Task, ...]:
    """The usable InterCode bash tasks, ids ``intercode-bash-<index>`` (index in the data file)."""
    queries_path = _data_file(QUERIES_FILE)
    setup = _on_testbed(_data_file(SETUP_FILE).read_text())
    items = json.loads(queries_path.read_text())
    tasks = []
    for index, item in enumerate(items):
        query, gold = item["query"], item["gold"]
        gold = ";".join(gold) if isinstance(gold, list) else gold
        if index in EXCLUDED:
            start, _why = EXCLUDED[index]
            if not query.startswith(start):
                raise TaskError(f"{queries_path}: task {index} is not the one clawgym excludes "
                                f"({start!r}...); install {DISTRIBUTION}=={VERSION}")
            continue
        task_id = f"intercode-bash-{index:03d}"
        gold = _on_testbed(gold)
        tasks.append(Task(
            id=task_id,
            instruction=_on_testbed(query) + INSTRUCTION_NOTE.format(testbed=TESTBED),
            category="intercode",
            difficulty=_difficulty(gold),
            split=hashed_split(task_id),
            solution=gold,
            setup=setup,
            limits=Limits(max_turns=10),
            suite="intercode",
            gold=gold,
            source=f"{queries_path}#{index}",
        ))
    return tuple(tasks)


@dataclass(frozen=True)
class GoldRun:
    """What the gold command did in a freshly set-up sandbox."""

    stdout: str
    before: dict[str, str]
    """Every path under /workspace after setup -> ``"type mode md5"``."""
    after: dict[str, str]

    @property
    def changed(self) -> set[str]:
        return _changed(self.before, self.after)


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p, _GONE) != after.get(p, _GONE)}


def snapshot(sandbox: Sandbox) -> dict[str, str]:
    """Every path under /workspace -> its type, mode and content hash."""
    result = sandbox.exec(_SNAPSHOT, timeout=60)
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        raise SandboxError(f"could not read the sandbox's file tree (exit code {result.exit_code}): "
                           f"{tail(result.stderr, 200)}") from None


def run_gold(sandbox: Sandbox, task: Task) -> GoldRun:
    """Run ``task.gold`` in ``sandbox``, which must have just been set up."""
    assert task.gold is not None
    before = snapshot(sandbox)
    result = sandbox.exec(task.gold, timeout=task.limits.command_timeout_s)
    return GoldRun(stdout=result.stdout, before=before, after=snapshot(sandbox))


def normalized_output(text: str) -> list[str]:
    """Lines, whitespace collapsed, ``/workspace/`` and ``./`` prefixes dropped, sorted."""
    lines = (" ".join(_PATH_PREFIX.sub("", line).split()) for line in text.splitlines())
    return sorted(line for line in lines if line)


def grade(sandbox: Sandbox, gold: GoldRun, answer: str) -> list[TestResult]:
    """Compare the agent's answer and file tree with the gold's (see the module docstring)."""
    results = []
    if gold.stdout.strip():
        expected, got = normalized_output(gold.stdout), normalized_output(answer)
        why = "" if expected == got else (f"expected {len(expected)} line(s) starting "
                                          f"{expected[:2]!r}, got {len(got)} starting {got[:2]!r}")
        results.append(TestResult("same_output", expected == got, tail(why)))
    if gold.changed:
        after = snapshot(sandbox)
        touched = gold.changed | _changed(gold.before, after)
        wrong = sorted(p for p in touched if after.get(p, _GONE) != gold.after.get(p, _GONE))
        why = f"{len(wrong)} path(s) differ from the reference: {', '.join(wrong[:5])}" if wrong else ""
        results.append(TestResult("same_files", not wrong, why))
    return results
