"""Terminal tasks as data: one folder per task, holding a ``task.yaml``; loaded and validated.

A task folder's name is its id (lowercase letters, digits and ``-``). Its ``task.yaml``::

    instruction: |            # what the agent is asked to do (the episode's user message)
      Count the ERROR lines in app.log and write the number to errors.txt.
    category: text            # a short slug; the shipped ones are CATEGORIES
    difficulty: easy          # easy | medium | hard
    split: train              # train | heldout; optional (default: by a hash of the id)
    files:                    # optional: path (relative to /workspace) -> text content
      app.log: |
        ERROR disk full
        INFO ok
    setup: |                  # optional: bash run in /workspace after `files`, before the agent
      chmod 600 app.log
    solution: |               # required: a reference solution (the test suite runs it)
      grep -c ERROR app.log > errors.txt
    tests:                    # required: name -> bash check, run in /workspace; exit 0 passes
      answer_written: test "$(cat errors.txt)" = 1
    limits:                   # optional; each key has the default shown
      max_turns: 20
      command_timeout_s: 30
      setup_timeout_s: 60
      test_timeout_s: 30

Tests run after the episode, in the agent's sandbox, each as its own command. They see the
agent's ``submit`` answer (if any) in ``$ANSWER``; the reference run submits the solution's
standard output as its answer, so a question-style task's solution ends by printing it.
Tests should carry their expected values in themselves rather than read them from files
the agent could have changed.

Every problem is a :class:`TaskError` naming the file and the field, e.g.
``tasks/count-errors/task.yaml: tests.answer_written must be a non-empty bash script``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.taskfolders import HELDOUT_FRACTION, TaskError, hashed_split, read_task_yaml, task_folders

TASKS_DIR = Path(__file__).parent / "data" / "tasks"
"""The shipped task folders (the ``clawgym`` suite)."""

CATEGORIES = ("files", "text", "archives", "git", "scripting", "processes", "debugging",
              "data", "sqlite")
"""The categories the shipped tasks cover; a user's task may name its own."""
DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "heldout")
_SLUG_RE = re.compile(r"^[a-z][a-z0-9-]*$")
_TEST_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_KEYS = {"instruction", "category", "difficulty", "split", "files", "setup", "solution", "tests",
         "limits"}


@dataclass(frozen=True)
class Limits:
    """Per-task budgets; the env's own arguments, when given, take precedence."""

    max_turns: int = 20
    command_timeout_s: float = 30.0
    setup_timeout_s: float = 60.0
    test_timeout_s: float = 30.0


@dataclass(frozen=True)
class Task:
    """One terminal task: how to prepare the sandbox, what to ask, how to check the result."""

    id: str
    instruction: str
    category: str
    difficulty: str
    split: str
    solution: str
    """A reference solution script; its stdout is the answer the reference run submits."""
    tests: tuple[tuple[str, str], ...] = ()
    """(name, bash script) pairs; a test passes when its script exits 0."""
    setup: str = ""
    files: tuple[tuple[str, str], ...] = ()
    """(path relative to /workspace, text) pairs written before ``setup`` runs."""
    limits: Limits = field(default_factory=Limits)
    suite: str = "clawgym"
    gold: str | None = None
    """InterCode tasks: the gold command whose output and file changes the agent must
    reproduce (their tests are computed by ``envs.terminal.intercode``, not scripts)."""
    source: str = ""
    """Where the task came from (a task.yaml path, or the InterCode data file)."""


def _script(value: object, where: str, *, required: bool) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise TaskError(f"{where} must be a non-empty bash script (a string), got {value!r:.60}")
    return value


def _choice(value: object, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise TaskError(f"{where} {value!r} must be one of {', '.join(allowed)}")
    return str(value)


def _limits(value: object, where: str) -> Limits:
    if value is None:
        return Limits()
    if not isinstance(value, dict):
        raise TaskError(f"{where} must be a mapping of limit -> number, got {value!r:.60}")
    known = Limits.__dataclass_fields__
    extra = sorted(set(value) - set(known))
    if extra:
        raise TaskError(f"{where}.{extra[0]} is not a known limit; known: {', '.join(known)}")
    kwargs: dict[str, Any] = {}
    for name, number in value.items():
        whole = name == "max_turns"
        if isinstance(number, bool) or not isinstance(number, int if whole else (int, float)) \
                or number <= 0:
            kind = "a positive integer" if whole else "a positive number of seconds"
            raise TaskError(f"{where}.{name} must be {kind}, got {number!r}")
        kwargs[name] = number if whole else float(number)
    return Limits(**kwargs)


def _files(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise TaskError(f"{where} must be a mapping of relative path -> text, got {value!r:.60}")
    out = []
    for path, text in value.items():
        if not isinstance(path, str) or not path or path.startswith("/") \
                or ".." in Path(path).parts:
            raise TaskError(f"{where}: {path!r} must be a relative path inside /workspace "
                            "(no leading '/', no '..')")
        if not isinstance(text, str):
            raise TaskError(f"{where}.{path} must be text (a string), got {type(text).__name__}")
        out.append((path, text))
    return tuple(out)


def _tests(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not value:
        raise TaskError(f"{where} must be a non-empty mapping of test name -> bash check "
                        f"(exit 0 passes), got {value!r:.60}")
    out = []
    for name, script in value.items():
        if not isinstance(name, str) or not _TEST_NAME_RE.match(name):
            raise TaskError(f"{where}: test name {name!r} must be letters, digits, '_', '.' or '-'")
        out.append((name, _script(script, f"{where}.{name}", required=True)))
    return tuple(out)


def parse_task(folder: Path, suite: str = "user") -> Task:
    """``folder/task.yaml`` -> :class:`Task`, or :class:`TaskError` naming the field."""
    data, shown = read_task_yaml(folder, _KEYS)
    instruction = data.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskError(f"{shown}: instruction must be a non-empty string (the agent's task)")
    category = data.get("category")
    if not isinstance(category, str) or not _SLUG_RE.match(category):
        raise TaskError(f"{shown}: category must be a lowercase slug such as "
                        f"{', '.join(CATEGORIES[:3])}; got {category!r}")
    split = data.get("split")
    return Task(
        id=folder.name,
        instruction=instruction.strip(),
        category=category,
        difficulty=_choice(data.get("difficulty"), DIFFICULTIES, f"{shown}: difficulty"),
        split=hashed_split(folder.name) if split is None else _choice(split, SPLITS, f"{shown}: split"),
        solution=_script(data.get("solution"), f"{shown}: solution", required=True),
        tests=_tests(data.get("tests"), f"{shown}: tests"),
        setup=_script(data.get("setup"), f"{shown}: setup", required=False),
        files=_files(data.get("files"), f"{shown}: files"),
        limits=_limits(data.get("limits"), f"{shown}: limits"),
        suite=suite,
        source=str(folder / "task.yaml"),
    )


@functools.lru_cache(maxsize=16)
def _load_dir(folder: str, suite: str, _stamp: tuple[tuple[str, int], ...]) -> tuple[Task, ...]:
    return tuple(parse_task(Path(folder) / name, suite) for name, _ in _stamp)


def load_tasks(folder: str | Path = TASKS_DIR, suite: str | None = None) -> tuple[Task, ...]:
    """Every task folder under ``folder``, sorted by id. Cached until a task.yaml changes.

    ``suite`` labels the tasks: ``clawgym`` for the shipped folder, ``user`` otherwise.
    """
    root, stamp = task_folders(folder)
    if suite is None:
        suite = "clawgym" if root == TASKS_DIR.resolve() else "user"
    return _load_dir(str(root), suite, stamp)


__all__ = ["CATEGORIES", "DIFFICULTIES", "HELDOUT_FRACTION", "SPLITS", "TASKS_DIR", "Limits", "Task",
           "TaskError", "hashed_split", "load_tasks", "parse_task", "task_folders"]
