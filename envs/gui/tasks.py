"""Web tasks as data: a folder with a page and a ``task.yaml``, served from loopback.

A task folder's name is its id (lowercase letters, digits and ``-``). Next to its page
(HTML, JS, CSS, images: any files, served as they are) sits a ``task.yaml``::

    instruction: |            # the episode's task, as the agent reads it
      Subscribe ada@example.com to the newsletter.
    page: index.html          # optional: the page the episode opens (default index.html)
    reward: |                 # a JavaScript expression over the page: a number in [-1, 1]
      document.querySelector('#status').textContent === 'Subscribed: ada@example.com' ? 1 : 0
    # or, instead of `reward`, a Python function of the page:
    # reward_python: reward.py   # defines reward(page) -> float; page is Playwright's Page
    done: window.submitted === true   # optional JS expression: true ends the episode
    reference:                # required: actions that solve the task (tool calls)
      - type: {selector: "#email", text: ada@example.com}
      - click: {selector: "#subscribe"}
    difficulty: easy          # easy | medium | hard
    split: train              # train | heldout; optional (default: by a hash of the id)
    max_turns: 10             # optional
    viewport: [800, 600]      # optional: the browser window, CSS pixels
    root: "#app"              # optional: CSS selector of what the snapshot shows (body)

The reward is read when the episode ends: on the step where ``done`` turns true, when the
agent calls ``done()``, or when a budget runs out. A reference action names a tool and its
arguments; ``selector`` (a CSS selector) stands for ``ref`` and is resolved to the element's
ref at that moment, and an argument ending in ``_js`` is a JavaScript expression evaluated
in the page first (``text_js: String(window.a + window.b)`` types a sum the page drew).
The page's ``Math.random`` is seeded per episode, and ``window.__clawgymSeed`` holds the
seed, so a page may draw its own puzzle and stay reproducible.

Every problem is a :class:`TaskError` naming the file and the field.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from envs.taskfolders import TaskError, hashed_split, read_task_yaml, task_folders

TASKS_DIR = Path(__file__).parent / "data" / "tasks"
"""The shipped example task folders (the ``clawgym`` suite)."""

DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "heldout")
DEFAULT_VIEWPORT = (800, 600)
ACTION_TOOLS = ("click", "type", "press", "select", "scroll", "hover", "click_xy", "done")

_KEYS = {"instruction", "page", "reward", "reward_python", "done", "reference", "difficulty",
         "split", "max_turns", "viewport", "root"}


@dataclass(frozen=True)
class ReferenceAction:
    """One step of a task's reference solution: a tool and its arguments, where
    ``selector`` stands for ``ref`` and ``*_js`` arguments are evaluated in the page."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WebTask:
    """One web task: which page to open, what to ask, how the reward is read."""

    id: str
    suite: str
    """``miniwob`` (MiniWoB++ pages), ``clawgym`` (the shipped folders) or ``user``."""
    mount: str
    """The loopback server's prefix the task's files are served under."""
    page: str
    """The page's path under ``mount``."""
    instruction: str = ""
    """The task as the agent reads it ("" for MiniWoB: the page draws its utterance)."""
    reward: str | None = None
    """A JavaScript expression giving the reward (folder tasks)."""
    reward_python: Path | None = None
    """A file defining ``reward(page) -> float`` (folder tasks, instead of ``reward``)."""
    done: str | None = None
    """A JavaScript expression; true ends the episode (folder tasks)."""
    reference: tuple[ReferenceAction, ...] = ()
    difficulty: str = "easy"
    split: str = "train"
    """``train`` or ``heldout`` (folder tasks); ``all`` for MiniWoB, whose seeds are split."""
    max_turns: int | None = None
    viewport: tuple[int, int] = DEFAULT_VIEWPORT
    root: str | None = None
    """CSS selector of what the snapshot shows (None: the body)."""
    clip: tuple[int, int, int, int] | None = None
    """The screenshot's region (x, y, width, height); None: the whole viewport."""
    source: str = ""


def _text(value: object, where: str, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise TaskError(f"{where} must be a non-empty string, got {value!r:.60}")
    return value.strip()


def _reference(value: object, where: str) -> tuple[ReferenceAction, ...]:
    if not isinstance(value, list) or not value:
        raise TaskError(f"{where} must be a non-empty list of actions such as "
                        "`- click: {selector: \"#submit\"}`")
    actions = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            item = {item: {}}
        if not isinstance(item, dict) or len(item) != 1:
            raise TaskError(f"{where}[{i}] must be one `tool: {{arguments}}` mapping, got {item!r:.60}")
        (tool, arguments), = item.items()
        if tool not in ACTION_TOOLS:
            raise TaskError(f"{where}[{i}]: unknown tool {tool!r}; tools: {', '.join(ACTION_TOOLS)}")
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
            raise TaskError(f"{where}[{i}].{tool} must map argument names to values, got {arguments!r:.60}")
        actions.append(ReferenceAction(tool, dict(arguments)))
    return tuple(actions)


def _viewport(value: object, where: str) -> tuple[int, int]:
    if value is None:
        return DEFAULT_VIEWPORT
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 4000 for v in value)):
        raise TaskError(f"{where} must be [width, height] in CSS pixels (100..4000), got {value!r:.60}")
    return (value[0], value[1])


def parse_task(folder: Path, suite: str = "user", mount: str = "user") -> WebTask:
    """``folder/task.yaml`` -> :class:`WebTask`, or :class:`TaskError` naming the field."""
    data, shown = read_task_yaml(folder, _KEYS)
    page = _text(data.get("page", "index.html"), f"{shown}: page", required=True)
    assert page is not None
    if page.startswith("/") or ".." in Path(page).parts or not (folder / page).is_file():
        raise TaskError(f"{shown}: page {page!r} must be a file inside the task folder")
    reward = _text(data.get("reward"), f"{shown}: reward", required=False)
    reward_file = _text(data.get("reward_python"), f"{shown}: reward_python", required=False)
    if (reward is None) == (reward_file is None):
        raise TaskError(f"{shown}: give exactly one of reward (a JavaScript expression) and "
                        "reward_python (a file defining reward(page))")
    reward_python = None
    if reward_file is not None:
        reward_python = folder / reward_file
        if ".." in Path(reward_file).parts or not reward_python.is_file():
            raise TaskError(f"{shown}: reward_python {reward_file!r} must be a file inside the task folder")
    difficulty = data.get("difficulty", "easy")
    if difficulty not in DIFFICULTIES:
        raise TaskError(f"{shown}: difficulty {difficulty!r} must be one of {', '.join(DIFFICULTIES)}")
    split = data.get("split", hashed_split(folder.name))
    if split not in SPLITS:
        raise TaskError(f"{shown}: split {split!r} must be one of {', '.join(SPLITS)}")
    max_turns = data.get("max_turns")
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int)
                                  or max_turns < 1):
        raise TaskError(f"{shown}: max_turns must be a positive integer, got {max_turns!r}")
    return WebTask(
        id=folder.name, suite=suite, mount=mount, page=f"{folder.name}/{page}",
        instruction=_text(data.get("instruction"), f"{shown}: instruction", required=True) or "",
        reward=reward, reward_python=reward_python,
        done=_text(data.get("done"), f"{shown}: done", required=False),
        reference=_reference(data.get("reference"), f"{shown}: reference"),
        difficulty=difficulty, split=split, max_turns=max_turns,
        viewport=_viewport(data.get("viewport"), f"{shown}: viewport"),
        root=_text(data.get("root"), f"{shown}: root", required=False),
        source=str(folder / "task.yaml"))


@functools.lru_cache(maxsize=16)
def _load_dir(folder: str, suite: str, mount: str, _stamp: tuple[tuple[str, int], ...]) -> tuple[WebTask, ...]:
    return tuple(parse_task(Path(folder) / name, suite, mount) for name, _ in _stamp)


def load_tasks(folder: str | Path = TASKS_DIR, suite: str | None = None) -> tuple[WebTask, ...]:
    """Every task folder under ``folder``, sorted by id; cached until a task.yaml changes.
    ``suite`` labels them (``clawgym`` for the shipped folder, ``user`` otherwise)."""
    root, stamp = task_folders(folder)
    if suite is None:
        suite = "clawgym" if root == TASKS_DIR.resolve() else "user"
    return _load_dir(str(root), suite, suite, stamp)


@functools.lru_cache(maxsize=64)
def python_reward(path: Path) -> Callable[[Any], float]:
    """The ``reward(page)`` function defined in ``path`` (a task's ``reward_python``)."""
    spec = importlib.util.spec_from_file_location(f"clawgym_task_reward_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise TaskError(f"reward_python {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, "reward", None)
    if not callable(function):
        raise TaskError(f"{path} must define a function reward(page) -> float")
    return function
