"""Terminal: real shell tasks in a real sandbox, rewarded by the task's own tests."""

from __future__ import annotations

from typing import Any

from envs.core import ClawEnv, Opening, StopReason, Transition, name_list
from envs.errors import EnvError
from envs.messages import AssistantTurn, Message, ToolCall, tool_schema
from envs.sandbox import BACKENDS, Sandbox, SandboxError, config_from, make_sandbox
from envs.taskfolders import pool_by_id
from envs.terminal import intercode
from envs.terminal.grading import TestResult, run_checks, summary, tail
from envs.terminal.shell import NO_COMMAND, NUL_REFUSED, bash_arguments, fenced_commands, format_result
from envs.terminal.tasks import TASKS_DIR, Task, load_tasks

SUITES = ("clawgym", "intercode", "user", "all")
SPLITS = ("train", "heldout", "all")
DEFAULT_MAX_TURNS = 20
MAX_COMMAND_TIMEOUT_S = 300.0
"""The most an agent may ask for with the ``bash`` tool's ``timeout`` argument."""
GITCONFIG = "/tmp/.gitconfig"
# Lowest-precedence git settings (the agent's own `git config` wins): an identity, so
# `git commit` works, and no hints cluttering the output.
GITCONFIG_TEXT = """[user]
\tname = clawgym
\temail = agent@clawgym.invalid
[init]
\tdefaultBranch = main
[advice]
\tdetachedHead = false
[core]
\tpager = cat
"""
SANDBOX_ENV = (("GIT_CONFIG_GLOBAL", GITCONFIG), ("PAGER", "cat"), ("GIT_PAGER", "cat"))
"""Environment of every terminal command: git finds the settings above and pages nothing."""

SYSTEM_PROMPT = (
    "You are an expert Linux user working in a bash sandbox (Debian, no network). Your "
    "working directory is /workspace. Run commands with the `bash` tool: each call runs in a "
    "fresh shell in /workspace, so files persist between calls but `cd` and variables do not "
    "(chain commands with && instead). When the task is done, call `submit`. If you cannot "
    "call tools, reply with the command in a ```bash code block."
)
TOOLS = [
    tool_schema("bash", "Run a bash command in /workspace and get its exit code, stdout and stderr.", {
        "command": {"type": "string", "description": "the bash command or script to run"},
        "timeout": {"type": "number", "minimum": 1, "maximum": MAX_COMMAND_TIMEOUT_S,
                    "description": "seconds before the command is killed (default: the task's limit, 30)"},
    }, required=["command"]),
    tool_schema("submit", "Finish the task; its tests then run.", {
        "answer": {"type": "string", "description": "the answer, if the task asks a question"},
    }, required=[]),
]


class TaskSetupError(EnvError):
    """A task's files or setup script failed: an infrastructure error, never trained on."""


class TerminalEnv(ClawEnv):
    """Solve a shell task in a fresh sandbox; the task's tests decide the reward.

    ## Description
    Each episode picks a task (a folder with a ``task.yaml``: see ``envs.terminal.tasks``),
    prepares a fresh sandbox with the task's files and setup script, and asks the agent to
    do something a terminal user does: fix permissions, wrangle a CSV, repair a broken
    script, query a SQLite database, untangle a git history. The agent runs commands with
    the ``bash`` tool and calls ``submit`` when done; the task's tests then run in the same
    sandbox. Suites: ``clawgym`` (the shipped tasks, ``envs/terminal/data/tasks``),
    ``intercode`` (InterCode's bash tasks from the ``intercode-bench`` wheel, graded
    against their gold commands: ``envs.terminal.intercode``), ``user`` (the folders under
    ``tasks_dir``, which join every suite) and ``all``.

    ## Observation
    Reset: a system message (the sandbox's rules) and the task's instruction. Step: one
    ``tool`` message per tool call; for a fenced ``bash`` code block, or a turn with no command,
    a ``user`` message. A command's result reads ``exit code N``, then stdout, then
    ``stderr:`` and stderr, cut in the middle past ``max_output_chars``; it is also
    ``info["next_state"]``.

    ## Action
    An assistant message calling ``bash`` (``command``, optional ``timeout`` in seconds up
    to 300) and/or ``submit`` (optional ``answer``), or text with a fenced ``bash`` code block
    (run as one command). Every command is a fresh ``bash -c`` in ``/workspace``: files
    persist for the episode, processes, ``cd`` and variables do not. A command or answer
    holding a NUL byte is refused before it reaches the sandbox (an ``Error:`` observation,
    ``invalid_action`` 1), as are bad ``bash``/``submit`` arguments.

    ## Reward
    0 on every step but the last. On the last (``submit``, or a budget running out) the
    reward is the fraction of the task's tests that pass. ``info["metrics"]`` then holds
    ``tests_passed`` (that fraction), ``solved`` (1 if all pass), ``tests_total`` and
    ``test/<name>`` (1/0 per test), and ``info["tests"]`` lists ``{name, passed, output}``.
    Every step reports ``commands`` (commands run). A trainer may add a judge's per-step
    score (``reward=both``).

    ## Episode End
    Terminated (``submitted``) by a ``submit`` call. Truncated (``max_turns``,
    ``time_limit``) when a budget runs out; the tests still run and give the reward.
    Truncated (``error``, with ``info["error"]``) when the sandbox fails. A task whose
    files or setup fail makes ``reset`` raise :class:`TaskSetupError` (an ``EnvError``); a
    vector env reports it as ``info["error"]`` with ``stop_reason == "error"``, and
    trainers skip it.

    ## Arguments
    ``suite``: ``clawgym`` (default), ``intercode``, ``user`` or ``all``.
    ``split``: ``train`` (default), ``heldout`` or ``all``; ``task_ids()`` lists the split.
    ``sandbox``: ``auto`` (default: docker if a daemon answers, else bwrap), ``docker``, ``bwrap``.
    ``max_turns``: turns per episode (default: the task's ``limits.max_turns``, 20).
    ``command_timeout_s``: default per-command timeout (default: the task's, 30 s).
    ``max_output_chars``: characters of a command's output the agent sees (default 2000).
    ``tasks_dir``: a folder of extra task folders (suite ``user``).
    ``task_ids``, ``categories``: lists (or comma-separated strings) narrowing the pool;
    ``task_ids`` overrides ``split``.
    ``sandbox_config``: ``envs.sandbox.SandboxConfig`` fields (``memory_mb``, ``disk_mb``, ...).
    And the :class:`ClawEnv` arguments (``time_limit_s``, ``invalid_action_reward``).
    ``options={"task_id": ...}`` picks any task of the selected suites, whatever its split.

    ## Version History
    v0: initial version.
    """

    tools = TOOLS
    headline_metric = None  # the reward (fraction of tests passed) comes on the last step

    def __init__(self, suite: str = "clawgym", split: str = "train", sandbox: str = "auto",
                 max_turns: int | None = None, command_timeout_s: float | None = None,
                 max_output_chars: int = 2000, tasks_dir: str | None = None,
                 task_ids: list[str] | str | None = None, categories: list[str] | str | None = None,
                 sandbox_config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 (or None for the task's own), got {max_turns}")
        super().__init__(max_turns=max_turns or DEFAULT_MAX_TURNS, **kwargs)
        if suite not in SUITES:
            raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if sandbox not in BACKENDS:
            raise ValueError(f"sandbox must be one of {', '.join(BACKENDS)}, got {sandbox!r}")
        if command_timeout_s is not None and not 0 < command_timeout_s <= MAX_COMMAND_TIMEOUT_S:
            raise ValueError(f"command_timeout_s must be in (0, {MAX_COMMAND_TIMEOUT_S:g}], "
                             f"got {command_timeout_s}")
        if max_output_chars < 100:
            raise ValueError(f"max_output_chars must be >= 100, got {max_output_chars}")
        self.suite, self.split, self.sandbox_backend = suite, split, sandbox
        self.fixed_max_turns = max_turns
        self.command_timeout_s = command_timeout_s
        self.max_output_chars = max_output_chars
        self.sandbox_config = config_from(sandbox_config, env=SANDBOX_ENV)
        self._tasks = _task_pool(suite, tasks_dir, name_list(categories, "categories"))
        self._ids = _select(self._tasks, split, name_list(task_ids))
        self._sandbox: Sandbox | None = None
        self._task: Task | None = None
        self._timeout = 30.0
        self._last_stdout = ""
        self._gold: dict[str, intercode.GoldRun] = {}

    # ---- tasks ------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._ids)

    def task(self, task_id: str) -> Task:
        """The :class:`Task` behind ``task_id`` (any task of the selected suites)."""
        try:
            return self._tasks[task_id]
        except KeyError:
            raise KeyError(f"unknown task_id {task_id!r} in suite={self.suite!r}; "
                           f"env.task_ids() lists the {self.split} split") from None

    @property
    def last_stdout(self) -> str:
        """The stdout of the episode's latest command (InterCode's answer when none is submitted)."""
        return self._last_stdout

    # ---- episode ----------------------------------------------------------------------
    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        if task_id is None:
            task_id = self._ids[int(self.np_random.integers(len(self._ids)))]
        if task_id not in self._tasks:
            raise ValueError(f"unknown task_id {task_id!r} in suite={self.suite!r}; "
                             f"env.task_ids() lists the {self.split} split")
        task = self._tasks[task_id]
        sandbox = self._fresh_sandbox()
        if task.gold is not None and task.id not in self._gold:
            self._prepare(sandbox, task)
            self._gold[task.id] = intercode.run_gold(sandbox, task)
            sandbox.reset()
        self._prepare(sandbox, task)
        self._task = task
        self.max_turns = self.fixed_max_turns or task.limits.max_turns
        self._timeout = self.command_timeout_s or task.limits.command_timeout_s
        self._last_stdout = ""
        messages: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT},
                                   {"role": "user", "content": task.instruction}]
        return Opening(messages, task.id, info={"suite": task.suite, "category": task.category,
                                                "difficulty": task.difficulty, "split": task.split})

    def _fresh_sandbox(self) -> Sandbox:
        if self._sandbox is not None:
            try:
                self._sandbox.reset()
                return self._sandbox
            except SandboxError:  # gone bad: start over with a new one
                self._close_sandbox()
        self._sandbox = make_sandbox(self.sandbox_backend, self.sandbox_config)
        return self._sandbox

    def _prepare(self, sandbox: Sandbox, task: Task) -> None:
        try:
            sandbox.put_file(GITCONFIG, GITCONFIG_TEXT)
            for path, text in task.files:
                sandbox.put_file(path, text)
        except (OSError, ValueError) as exc:
            raise TaskSetupError(f"task {task.id}: could not write its files: {exc}; "
                                 f"fix `files` in {task.source}") from exc
        if task.setup.strip():
            result = sandbox.exec(task.setup, timeout=task.limits.setup_timeout_s)
            if not result.ok:
                how = "timed out" if result.timed_out else f"exited with code {result.exit_code}"
                raise TaskSetupError(f"task {task.id}: setup {how}: "
                                     f"{tail(result.stderr or result.stdout, 300)!r}; "
                                     f"fix `setup` in {task.source}")

    def _act(self, turn: AssistantTurn) -> Transition:
        if turn.tool_calls:
            return self._tool_calls(turn.tool_calls)
        command = fenced_commands(turn.content)
        if command is None:
            return Transition([{"role": "user", "content": NO_COMMAND}], metrics={"commands": 0.0})
        if "\0" in command:
            return Transition([{"role": "user", "content": NUL_REFUSED.format(what="the command")}],
                              metrics={"commands": 0.0, "invalid_action": 1.0})
        return Transition([{"role": "user", "content": self._run(command, self._timeout)}],
                          metrics={"commands": 1.0})

    def _tool_calls(self, calls: tuple[ToolCall, ...]) -> Transition:
        replies: list[Message] = []
        metrics = {"commands": 0.0}
        reward, stop, info = 0.0, None, {}
        for call in calls:
            if stop is not None:
                text = "Not run: `submit` already ended the episode."
            elif call.name == "bash":
                command, timeout, problem = bash_arguments(call.arguments, self._timeout,
                                                            MAX_COMMAND_TIMEOUT_S)
                if problem:
                    text, metrics["invalid_action"] = problem, 1.0
                else:
                    text = self._run(command, timeout)
                    metrics["commands"] += 1
            else:
                answer = call.arguments.get("answer")
                if answer is not None and not isinstance(answer, str):
                    text, metrics["invalid_action"] = "Error: `answer` must be a string.", 1.0
                elif answer is not None and "\0" in answer:  # the tests get it through a shell
                    text, metrics["invalid_action"] = NUL_REFUSED.format(what="`answer`"), 1.0
                else:
                    reward, grade_metrics, info, text = self._grade(answer)
                    metrics.update(grade_metrics)
                    stop = StopReason.SUBMITTED
            replies.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return Transition(replies, reward=reward, stop=stop, metrics=metrics, info=info)

    def _run(self, command: str, timeout: float) -> str:
        assert self._sandbox is not None
        result = self._sandbox.exec(command, timeout=timeout)
        self._last_stdout = result.stdout
        return format_result(result, timeout, self.max_output_chars)

    def _grade(self, answer: str | None) -> tuple[float, dict[str, float], dict[str, Any], str]:
        """Run the task's tests: (reward, metrics, info, the agent-facing summary)."""
        assert self._task is not None and self._sandbox is not None
        task = self._task
        if task.gold is not None:
            results = intercode.grade(self._sandbox, self._gold[task.id],
                                      self._last_stdout if answer is None else answer)
        else:
            results = run_checks(self._sandbox, task, answer or "")
        if not results:
            raise TaskSetupError(f"task {task.id} has no tests to run; give it at least one")
        fraction = sum(r.passed for r in results) / len(results)
        metrics = {"tests_passed": fraction, "solved": float(fraction == 1.0),
                   "tests_total": float(len(results)),
                   **{f"test/{r.name}": float(r.passed) for r in results}}
        info = {"tests": [_as_dict(r) for r in results]}
        return fraction, metrics, info, summary(results)

    def _on_truncate(self, reason: StopReason, transition: Transition) -> Transition:
        return self._graded_on_truncate(reason, transition, lambda: self._grade(None), "the tests could not run")

    # ---- resources --------------------------------------------------------------------
    def _release(self) -> None:
        self._task = None

    def _shutdown(self) -> None:  # the sandbox is wiped and reused between episodes
        self._close_sandbox()

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    def __getstate__(self) -> dict[str, Any]:
        # A live sandbox (locks, a container) does not travel; the copy makes its own.
        state = self.__dict__.copy()
        state["_sandbox"] = None
        return state


def _as_dict(result: TestResult) -> dict[str, Any]:
    return {"name": result.name, "passed": result.passed, "output": result.output}






def _task_pool(suite: str, tasks_dir: str | None, categories: tuple[str, ...]) -> dict[str, Task]:
    found: list[Task] = []
    if suite in ("clawgym", "all"):
        found += load_tasks(TASKS_DIR)
    if suite in ("intercode", "all"):
        found += intercode.load_intercode_tasks()
    if tasks_dir is not None:
        found += load_tasks(tasks_dir, suite="user")
    elif suite == "user":
        raise ValueError("suite='user' needs tasks_dir=<a folder of task folders>")
    pool = pool_by_id(found)
    if categories:
        known = sorted({t.category for t in pool.values()})
        missing = [c for c in categories if c not in known]
        if missing:
            raise ValueError(f"categories {missing} match no task of suite={suite!r}; known: {known}")
        pool = {i: t for i, t in pool.items() if t.category in categories}
    return pool


def _select(pool: dict[str, Task], split: str, task_ids: tuple[str, ...]) -> list[str]:
    if task_ids:
        missing = [i for i in task_ids if i not in pool]
        if missing:
            raise ValueError(f"task_ids {missing[:5]} are not tasks of the selected suite and "
                             f"categories; `python -m envs.terminal list` shows them")
        return list(task_ids)
    ids = sorted(i for i, t in pool.items() if split == "all" or t.split == split)
    if not ids:
        raise ValueError(f"no task is in split={split!r} of the selected suite and categories; "
                         "use split='all' or widen the selection")
    return ids
