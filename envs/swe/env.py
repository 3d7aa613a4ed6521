"""SWE: fix a real bug in a real Python repository; graded like SWE-bench."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.core import ClawEnv, Opening, StopReason, Transition, name_list
from envs.messages import AssistantTurn, Message, ToolCall, tool_schema
from envs.sandbox import BACKENDS, Sandbox, SandboxConfig, SandboxError, config_from, make_sandbox
from envs.swe import editor
from envs.swe import sandbox_defaults as swe_sandbox_defaults
from envs.swe.grading import REWARD_MODES, Grade, GradingError, PatchTooLarge, grade, model_patch
from envs.swe.instances import Instance, load_instances, select
from envs.swe.repos import (
    SANDBOX_ENV,
    TESTBED_PATH,
    PreparedRepo,
    RepoCache,
    RepoError,
    checkout,
    find_image,
    image_names,
    needs_image,
    testbed_sandbox,
)
from envs.terminal.shell import NO_COMMAND, NUL_REFUSED, bash_arguments, fenced_commands, format_result

DEFAULT_INSTANCES = Path(__file__).parent / "data" / "instances.jsonl.xz"
"""The shipped instances (``python -m envs.swe.generate`` writes them)."""
SPLITS = ("train", "heldout", "all")
DEFAULT_MAX_TURNS = 30
DEFAULT_COMMAND_TIMEOUT_S = 180.0
MAX_COMMAND_TIMEOUT_S = 600.0

SYSTEM_PROMPT = (
    "You are an expert software engineer fixing an issue in a Python repository. The repository "
    "is checked out at /workspace (a git repository at the commit the issue was filed against) "
    "in a sandbox with no network. Use the tools: `bash` runs a command (each call is a fresh "
    "shell in /workspace, so files persist but `cd` and variables do not); `str_replace_editor` "
    "views and edits files; `submit` ends the episode, and the repository's tests then grade "
    "your changes (`git diff` of /workspace, new files included, applied to a fresh copy). "
    "Fix the source, not the tests: only changes to the project's source are graded. Changes "
    "to tests (test folders, test_*.py), conftest.py, test-runner configuration (pytest.ini, "
    "tox.ini, setup.cfg, pyproject.toml), *.pth, sitecustomize, package metadata, bytecode "
    "and new top-level files or folders are left out, and a diff over 16 MiB is not graded. "
    "If you cannot call tools, reply with a command in a ```bash block."
)
USER_PROMPT = (
    "<issue>\n{problem}\n</issue>\n\nThe repository is at /workspace. Change the non-test files "
    "so that the issue is resolved, check your fix, then call `submit`."
)

TOOLS = [
    tool_schema("bash", "Run a bash command in /workspace and get its exit code, stdout and stderr.", {
        "command": {"type": "string", "description": "the bash command or script to run"},
        "timeout": {"type": "number", "minimum": 1, "maximum": MAX_COMMAND_TIMEOUT_S,
                    "description": "seconds before the command is killed (default 180)"},
    }, required=["command"]),
    editor.TOOL,
    tool_schema("submit", "Finish: your changes to /workspace are graded by the repository's tests.",
                {}, required=[]),
]


class SWEEnv(ClawEnv):
    """Resolve a GitHub-style issue in a Python repository; SWE-bench's grading decides.

    ## Description
    Each episode is one instance in SWE-bench's schema (``envs.swe.instances``): the
    sandbox's ``/workspace`` holds the repository at ``base_commit`` (built once and cached
    with its ``install``, copied in per reset: ``envs.swe.repos``), and the agent is given
    the ``problem_statement``. It explores and edits with ``bash`` and ``str_replace_editor``
    and calls ``submit``. Grading (``envs.swe.grading``) takes the diff of ``/workspace``
    against the base commit, applies it and the ``test_patch`` to a fresh copy in the wiped
    sandbox, runs the test files and grades FAIL_TO_PASS and PASS_TO_PASS with swebench's
    own parser and report. Only the diff's changes to the project's source are graded
    (``envs.swe.patches``, which the system prompt summarizes): its changes to tests (the
    test_patch's files, ``test``/``tests``/``testing`` folders, ``test_*.py``,
    ``*_test.py``), ``conftest.py``, ``pytest.ini``/``tox.ini``/``setup.cfg``/
    ``pyproject.toml``, ``*.pth``, ``sitecustomize``/``usercustomize``, ``*.dist-info``/
    ``*.egg-info``, bytecode, new top-level files or folders (at the root or a
    ``PYTHONPATH`` folder of ``test_cmd``) and new files the base's ignore rules ignore are
    dropped and named in the verdict; the test_patch is applied to the pristine copy
    before the rest. The kept source still runs inside the test process, as on SWE-bench, so
    source that patches pytest when imported could report failures as passed: each pytest
    run also holds two canary tests the grader writes after the patch is applied
    (``envs.swe.canary``: a file and test names drawn at random per grading, importing what
    the graded tests import, run last; one must fail, one must pass), and a run that reports
    them wrong is unresolved and counted ``forged``. Its limit: source that recognizes the
    canary (an untracked file, the last collected, its code) can spare it and forge the
    rest; random names and messages only keep it from being known in advance. Records run
    by their own ``eval_script`` or a non-pytest ``test_cmd`` get no canary. The shipped
    instances are real PyPI projects with AST-mutated bugs (``python -m envs.swe.generate``);
    ``instances=`` takes SWE-bench, SWE-Gym or SWE-smith style JSONL whose ``repo`` is a
    local git repository, or, on docker, whose SWE-bench image is in the local daemon.

    ## Observation
    Reset: a system message (the sandbox's rules and tools) and the issue. Step: one
    ``tool`` message per tool call (a fenced ``bash`` code block, or a turn with no command,
    gets a ``user`` message). ``bash`` results read ``exit code N``, stdout, ``stderr:``
    and stderr, cut in the middle past ``max_output_chars``; editor results follow
    Anthropic's ``str_replace_editor`` (``cat -n`` views, edit snippets, ``Error: ...``).
    Each result is also ``info["next_state"]``. After ``submit``, the verdict
    (``Resolved: FAIL_TO_PASS 2/2 pass, ...`` or ``Not resolved: <why> ...``).

    ## Action
    An assistant message calling ``bash`` (``command``, optional ``timeout`` up to 600 s),
    ``str_replace_editor`` (``command`` view/create/str_replace/insert/undo_edit, ``path``
    and the command's arguments: ``envs.swe.editor``) and/or ``submit``; or text with a
    fenced ``bash`` code block. Calls after ``submit`` in the same turn are not run. Bad
    arguments are refused as observations (``invalid_action`` 1).

    ## Reward
    0 on every step but the last. On the last (``submit`` or a budget running out):
    ``reward_mode="resolved"`` (default) gives 1 if every FAIL_TO_PASS and PASS_TO_PASS test
    passes, else 0; ``"fraction"`` gives the passing share of FAIL_TO_PASS (PASS_TO_PASS
    is not counted; 0 when the patch does not apply). ``info["metrics"]`` then holds
    ``resolved``, ``f2p_passed`` and ``p2p_passed`` (passing shares), ``patch_applied`` and
    ``patch_lines`` (graded lines added plus removed) and ``forged`` (1: the canary tests
    were reported wrong, so no result of the run counts); ``info["grade"]`` the report (with
    ``dropped``, the files not graded, at most 20 named, and ``not_found``, the failed tests
    the log does not name, each with why) and ``info["model_patch"]`` the
    graded diff (for ``predictions.jsonl``); a diff over 16 MiB is not read: the model patch
    is then empty and ``info["model_patch_omitted"]`` says how large it was. Every step
    reports ``commands`` and ``edits``.

    ## Episode End
    Terminated (``submitted``) by ``submit``. Truncated (``max_turns``, ``time_limit``) when
    a budget runs out; the work is graded all the same. Truncated (``error``, with
    ``info["error"]``) only for faults of the machine or the instance: the sandbox fails,
    the test_patch does not apply to the pristine copy, or the tests run past
    ``test_timeout_s`` (or leave no results) with nothing graded. What the agent's patch
    causes (a hang, a broken test tree, a diff that does not apply) is unresolved, reward 0. An instance whose repository
    cannot be built (missing source, unknown commit, failing ``install``) makes ``reset``
    raise :class:`~envs.swe.repos.RepoError` (an ``EnvError``); a vector env reports it as
    ``info["error"]`` and trainers skip it.

    ## Arguments
    ``instances``: a JSONL/JSON file of instances (default: the shipped
    ``envs/swe/data/instances.jsonl.xz``).
    ``split``: ``train`` (default), ``heldout`` or ``all``; ``task_ids()`` lists the split.
    ``task_ids``: a list (or comma-separated string) of instance ids; overrides ``split``.
    ``sandbox``: ``auto`` (default: docker if a daemon answers, else bwrap), ``docker``, ``bwrap``.
    ``reward_mode``: ``resolved`` (default) or ``fraction``.
    ``max_turns``: 30. ``command_timeout_s``: default ``bash`` timeout, 180 s.
    ``test_timeout_s``: the grading test run's limit, 300 s. ``install_timeout_s``: 900 s.
    ``max_output_chars``: characters of a result the agent sees (default 10000).
    ``cache_dir``: where prepared workspaces are kept (default ``$CLAWGYM_CACHE/swe/workspaces``).
    ``sandbox_config``: ``envs.sandbox.SandboxConfig`` fields (``memory_mb``, ``cpus``, ...).
    And the :class:`ClawEnv` arguments (``time_limit_s``, ``invalid_action_reward``).
    ``options={"task_id": ...}`` picks any instance of the file, whatever its split.

    ## Version History
    v1: only the source part of the diff is graded, on a fresh copy after the
    ``test_patch`` (in v0 a ``conftest.py`` hook resolved any instance); a hang or a broken
    test tree the patch causes is unresolved, not an env error; each pytest run carries the
    grader's canary tests, and a run that reports them wrong (source forging pytest's
    reports) is unresolved, metric ``forged``; at most ``max_tool_calls`` calls of a message
    run.
    v0: initial version.
    """

    tools = TOOLS
    headline_metric = None  # the reward (resolved, or the F2P fraction) comes on the last step

    def __init__(self, instances: str | None = None, split: str = "train", sandbox: str = "auto",
                 reward_mode: str = "resolved", task_ids: list[str] | str | None = None,
                 max_turns: int = DEFAULT_MAX_TURNS,
                 command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
                 test_timeout_s: float = 300.0, install_timeout_s: float = 900.0,
                 max_output_chars: int = 10000, cache_dir: str | None = None,
                 sandbox_config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(max_turns=max_turns, **kwargs)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if sandbox not in BACKENDS:
            raise ValueError(f"sandbox must be one of {', '.join(BACKENDS)}, got {sandbox!r}")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {', '.join(REWARD_MODES)}, got {reward_mode!r}")
        for name, value, top in (("command_timeout_s", command_timeout_s, MAX_COMMAND_TIMEOUT_S),
                                 ("test_timeout_s", test_timeout_s, 24 * 3600.0),
                                 ("install_timeout_s", install_timeout_s, 24 * 3600.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= top:
                raise ValueError(f"{name} must be a number of seconds in (0, {top:g}], got {value!r}")
        if max_output_chars < 100:
            raise ValueError(f"max_output_chars must be >= 100, got {max_output_chars}")
        self.split, self.sandbox_backend, self.reward_mode = split, sandbox, reward_mode
        self.command_timeout_s = float(command_timeout_s)
        self.test_timeout_s = float(test_timeout_s)
        self.max_output_chars = max_output_chars
        self.sandbox_config = self.sandbox_config_for({"sandbox_config": sandbox_config})
        self.instances_path = str(_instances_path(instances))
        self._instances = {i.instance_id: i for i in load_instances(self.instances_path)}
        self._ids = select(self._instances.values(), split, name_list(task_ids))
        self._cache = RepoCache(cache_dir, install_timeout_s=float(install_timeout_s))
        self._editor = editor.Editor(max_chars=max_output_chars)
        self._sandbox: Sandbox | None = None
        self._sandbox_image: str | None = None
        self._instance: Instance | None = None
        self._prepared: PreparedRepo | None = None

    # ---- instances --------------------------------------------------------------------
    @classmethod
    def sandbox_config_for(cls, kwargs: dict[str, Any]) -> SandboxConfig:
        """The sandbox an env made with ``kwargs`` runs in, read without making one: a Ray
        cluster reserves its cpus and memory for the env's actor (``envs.ray_members``)."""
        return config_from(kwargs.get("sandbox_config"), env=SANDBOX_ENV, **swe_sandbox_defaults())

    def task_ids(self) -> list[str]:
        return list(self._ids)

    def instance(self, task_id: str) -> Instance:
        """The :class:`Instance` behind ``task_id`` (any instance of the file)."""
        try:
            return self._instances[task_id]
        except KeyError:
            raise KeyError(f"unknown instance {task_id!r} in {self.instances_path}; "
                           "env.task_ids() lists the split") from None

    # ---- episode ----------------------------------------------------------------------
    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        if task_id is None:
            task_id = self._ids[int(self.np_random.integers(len(self._ids)))]
        if not isinstance(task_id, str) or task_id not in self._instances:
            raise ValueError(f"options['task_id'] must name an instance of {self.instances_path} "
                             f"(env.task_ids() lists the split), got {task_id!r:.80}")
        instance = self._instances[task_id]
        image = self._image_for(instance)
        sandbox = self._fresh_sandbox(image)
        prepared = self._cache.prepare(instance, sandbox, image)
        checkout(sandbox, prepared)
        self._instance, self._prepared = instance, prepared
        self._editor.clear()
        messages: list[Message] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_PROMPT.format(problem=instance.problem_statement.strip())}]
        return Opening(messages, instance.instance_id,
                       info={"split": instance.split, "repo": instance.repo,
                             "project": instance.project, "base_commit": instance.base_commit})

    def _image_for(self, instance: Instance) -> str | None:
        if not needs_image(instance):
            return None
        image = find_image(instance) if self.sandbox_backend != "bwrap" else None
        if image is None:
            names = " or ".join(image_names(instance)[-2:])
            raise RepoError(
                f"instance {instance.instance_id}: repo {instance.repo!r} is not a local git repository"
                + (f" and no SWE-bench image ({names}) is in the local Docker daemon"
                   if self.sandbox_backend != "bwrap" else
                   " (and SWE-bench images need sandbox='docker')")
                + f"; clone it and set `repo` to its path (or a file:// URL) in {instance.source}")
        return image

    def _fresh_sandbox(self, image: str | None) -> Sandbox:
        if self._sandbox is not None and self._sandbox_image == image:
            try:
                self._sandbox.reset()
                return self._sandbox
            except SandboxError:  # gone bad: start over with a new one
                pass
        self._close_sandbox()
        if image is None:
            self._sandbox = make_sandbox(self.sandbox_backend, self.sandbox_config)
        else:
            fields = {f: getattr(self.sandbox_config, f) for f in SandboxConfig.__dataclass_fields__}
            env = tuple((k, v) for k, v in self.sandbox_config.env if k != "PATH") + (("PATH", TESTBED_PATH),)
            self._sandbox = testbed_sandbox(SandboxConfig(**{**fields, "image": image, "env": env}))
        self._sandbox_image = image
        return self._sandbox

    def _act(self, turn: AssistantTurn) -> Transition:
        if turn.tool_calls:
            return self._tool_calls(turn.tool_calls)
        command = fenced_commands(turn.content)
        metrics = {"commands": 0.0, "edits": 0.0}
        if command is None:
            return Transition([{"role": "user", "content": NO_COMMAND}], metrics=metrics)
        if "\0" in command:
            return Transition([{"role": "user", "content": NUL_REFUSED.format(what="the command")}],
                              metrics={**metrics, "invalid_action": 1.0})
        text = self._bash(command, self.command_timeout_s)
        return Transition([{"role": "user", "content": text}], metrics={**metrics, "commands": 1.0})

    def _tool_calls(self, calls: tuple[ToolCall, ...]) -> Transition:
        replies: list[Message] = []
        metrics = {"commands": 0.0, "edits": 0.0}
        reward, stop, info = 0.0, None, {}
        for call in calls:
            if stop is not None:
                text = "Not run: `submit` already ended the episode."
            elif call.name == "bash":
                command, timeout, problem = bash_arguments(call.arguments, self.command_timeout_s,
                                                            MAX_COMMAND_TIMEOUT_S)
                if problem:
                    text, metrics["invalid_action"] = problem, 1.0
                else:
                    text = self._bash(command, timeout)
                    metrics["commands"] += 1
            elif call.name == "str_replace_editor":
                assert self._sandbox is not None
                problem = editor.argument_problem(call.arguments)
                if problem:
                    text, metrics["invalid_action"] = problem, 1.0
                else:
                    text, changed = self._editor.run(self._sandbox, call.arguments)
                    metrics["edits"] += changed
            else:
                reward, grade_metrics, info, text = self._grade()
                metrics.update(grade_metrics)
                stop = StopReason.SUBMITTED
            replies.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return Transition(replies, reward=reward, stop=stop, metrics=metrics, info=info)

    def _bash(self, command: str, timeout: float) -> str:
        assert self._sandbox is not None
        return format_result(self._sandbox.exec(command, timeout=timeout), timeout, self.max_output_chars)

    def _grade(self) -> tuple[float, dict[str, float], dict[str, Any], str]:
        """Take the agent's diff and grade it: (reward, metrics, info, the verdict)."""
        assert self._sandbox is not None and self._instance is not None and self._prepared is not None
        try:
            patch = model_patch(self._sandbox, self._prepared)
        except GradingError as exc:  # too large, or a tree made unreadable: its loss, not ours
            verdict = Grade(False, "RESOLVED_NO", False, 0, f2p_failed=list(self._instance.fail_to_pass),
                            p2p_failed=list(self._instance.pass_to_pass), reason=str(exc))
            info: dict[str, Any] = {"grade": verdict.as_dict(), "model_patch": ""}
            if isinstance(exc, PatchTooLarge):
                info["model_patch_omitted"] = f"the diff is {exc.size:,} bytes, over the 16 MiB limit"
            return 0.0, verdict.metrics(), info, verdict.summary()
        verdict = grade(self._sandbox, self._instance, self._prepared, patch,
                        test_timeout_s=self.test_timeout_s)
        info = {"grade": verdict.as_dict(), "model_patch": verdict.patch}
        return verdict.reward(self.reward_mode), verdict.metrics(), info, verdict.summary()

    def _on_truncate(self, reason: StopReason, transition: Transition) -> Transition:
        return self._graded_on_truncate(reason, transition, self._grade, "grading could not run",
                                        graded="; your changes were graded")

    # ---- resources --------------------------------------------------------------------
    def _release(self) -> None:
        self._instance, self._prepared = None, None
        self._editor.clear()

    def _shutdown(self) -> None:  # the sandbox is wiped and reused between episodes
        self._close_sandbox()

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox, self._sandbox_image = self._sandbox, None, None
        if sandbox is not None:
            sandbox.close()

    def __getstate__(self) -> dict[str, Any]:
        # A live sandbox (locks, a container) does not travel; the copy makes its own.
        state = self.__dict__.copy()
        state["_sandbox"], state["_sandbox_image"] = None, None
        return state


def _instances_path(instances: str | None) -> Path:
    if instances is not None:
        return Path(instances)
    if not DEFAULT_INSTANCES.exists():
        raise ValueError(f"no instances: the shipped set {DEFAULT_INSTANCES} is not built yet "
                         "(python -m envs.swe.generate); pass instances=<file.jsonl>")
    return DEFAULT_INSTANCES






__all__ = ["DEFAULT_INSTANCES", "SYSTEM_PROMPT", "SWEEnv", "TOOLS"]
