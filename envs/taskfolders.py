"""Tasks as folders, shared by every family whose tasks are data (terminal, web).

A folder of task folders: each sub-folder's name is a task id (lowercase letters, digits
and ``-``) and holds a ``task.yaml`` whose fields the family defines. This module owns what
the families have in common: finding the folders, reading a ``task.yaml`` (safe YAML that
refuses duplicate keys and unknown fields), the hashed train/heldout split, and pooling
tasks from several sources by id. Every problem is a :class:`TaskError` naming the file.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, TypeVar

import yaml

HELDOUT_FRACTION = 0.2
"""Share of tasks without an explicit ``split`` that the id hash puts in ``heldout``."""

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class TaskError(ValueError):
    """A task folder that cannot be used; the message names the file and the field."""


def hashed_split(task_id: str) -> str:
    """``heldout`` for about HELDOUT_FRACTION of ids, ``train`` for the rest; stable forever."""
    bucket = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big") % 1000
    return "heldout" if bucket < HELDOUT_FRACTION * 1000 else "train"


def task_folders(folder: str | Path) -> tuple[Path, tuple[tuple[str, int], ...]]:
    """A folder of task folders (each with a task.yaml): its resolved path and a stamp of
    ``(name, task.yaml mtime)`` pairs, the cache key of loaders that parse them."""
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise TaskError(f"tasks_dir {str(folder)!r} is not a folder; pass a folder holding one "
                        "sub-folder per task, each with a task.yaml")
    stamp = []
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith((".", "_")):
            yaml_file = child / "task.yaml"
            stamp.append((child.name, yaml_file.stat().st_mtime_ns if yaml_file.exists() else 0))
    if not stamp:
        raise TaskError(f"tasks_dir {str(folder)!r} holds no task folders; add <task-id>/task.yaml")
    return root, tuple(stamp)


def read_task_yaml(folder: Path, keys: set[str]) -> tuple[dict[str, Any], str]:
    """``folder/task.yaml`` as a mapping whose keys are all in ``keys``, and the short name
    (``parent/task-id/task.yaml``) that the family's own field errors should start with."""
    path = folder / "task.yaml"
    shown = f"{folder.parent.name}/{folder.name}/task.yaml"
    if not _ID_RE.match(folder.name):
        raise TaskError(f"{shown}: the folder name is the task id and must be lowercase letters, "
                        f"digits and '-', got {folder.name!r}")
    if not path.is_file():
        raise TaskError(f"{shown}: missing; every task folder needs a task.yaml")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except yaml.YAMLError as exc:
        raise TaskError(f"{shown}: is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TaskError(f"{shown}: must hold a mapping at the top level, got {type(data).__name__}")
    extra = sorted(set(data) - keys, key=str)
    if extra:
        raise TaskError(f"{shown}: {extra[0]} is not a known field; known: {', '.join(sorted(keys))}")
    return data, shown


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML (libyaml's when built) that refuses duplicate keys: a second ``tests.x``
    must not silently replace the first."""


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    keys = [loader.construct_object(k, deep=True) for k, _ in node.value]
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", node.start_mark)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


class _Sourced(Protocol):
    id: str
    source: str


T = TypeVar("T", bound=_Sourced)


def pool_by_id(found: Iterable[T]) -> dict[str, T]:
    """Tasks from several sources keyed by id; two tasks with one id are a TaskError naming both."""
    pool: dict[str, T] = {}
    for task in found:
        if task.id in pool:
            raise TaskError(f"task id {task.id!r} is used by both {pool[task.id].source} and "
                            f"{task.source}; rename one of the folders")
        pool[task.id] = task
    return pool


class _Checked(Protocol):
    ok: bool
    problems: list[str]


class _TaskEnv(Protocol):
    def task_ids(self) -> list[str]: ...
    def close(self) -> None: ...


E = TypeVar("E", bound=_TaskEnv)
C = TypeVar("C", bound=_Checked)


def report_fairness(env: E, check_task: Callable[[E, str], C], scores: Callable[[C], str]) -> int:
    """The ``check`` command of a family with task folders: each of ``env``'s tasks checked
    (``check_task(env, id)``), a line per task (``scores(result)``, then ok or what is unfair),
    a total; ``env`` is closed. The exit code: 1 if any task is unfair, else 0."""
    unfair = 0
    try:
        for task_id in env.task_ids():
            result = check_task(env, task_id)
            status = "ok" if result.ok else "UNFAIR: " + "; ".join(result.problems)
            print(f"{task_id}: {scores(result)}: {status}", flush=True)
            unfair += not result.ok
    finally:
        env.close()
    print(f"{len(env.task_ids()) - unfair}/{len(env.task_ids())} tasks fair")
    return 1 if unfair else 0
