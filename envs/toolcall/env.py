"""ToolCall: function calling against OpenAI tool schemas, on BFCL, tau2-bench and toolmath."""

from __future__ import annotations

import hashlib
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from envs.core import DEFAULT_MAX_TOOL_CALLS, ClawEnv, Opening, StopReason, Transition, name_list
from envs.errors import EnvError
from envs.messages import AssistantTurn, InvalidAction, Message, ToolCall, parse_text_action
from envs.toolcall.limits import MAX_OUTPUT_CHARS, arguments_problem, clip
from envs.toolcall.schema import call_problem

SUITES = {
    "bfcl": "envs.toolcall.bfcl:BFCLSuite",
    "bfcl_multi": "envs.toolcall.bfcl_multi:BFCLMultiTurnSuite",
    "tau2": "envs.toolcall.tau2:Tau2Suite",
    "toolmath": "envs.toolcall.toolmath:ToolMathSuite",
}
"""Suite name -> ``module:Class``, imported when an env of that suite is made."""
SPLITS = ("train", "heldout", "all")
HELDOUT_FRACTION = 0.2


def hashed_split(task_id: str) -> str:
    """``heldout`` for about :data:`HELDOUT_FRACTION` of ids, ``train`` for the rest; stable
    forever (the rule ``envs.terminal`` uses), for suites whose data has no split of its own."""
    bucket = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big") % 1000
    return "heldout" if bucket < HELDOUT_FRACTION * 1000 else "train"


@dataclass(frozen=True)
class TaskInfo:
    """What a benchmark table shows for one task."""

    id: str
    category: str
    split: str
    difficulty: str = ""


@dataclass(frozen=True)
class CallRecord:
    """One tool call of a turn: its ``problem`` (a schema error: the call was not run) or
    its ``result`` (what the tool answered, errors included)."""

    call: ToolCall
    problem: str | None
    result: str | None

    @property
    def ran(self) -> bool:
        return self.problem is None


@dataclass
class Outcome:
    """What an episode says after a turn: more messages (the user's next words), and the
    end of the episode with its reward when it ends."""

    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    stop: StopReason | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    """The tools offered from now on, when they change (BFCL's miss-func turns)."""
    next_state: str | None = None


class Episode(Protocol):
    """One task being played. Made by :meth:`Suite.open`; the env drives it.

    Two attributes are optional: ``runs_tools`` (default True: calls are refused beyond
    :mod:`envs.toolcall.limits`' bounds before they reach :meth:`call`; False where calls
    are only recorded) and ``max_output_chars`` (default
    :data:`~envs.toolcall.limits.MAX_OUTPUT_CHARS`: longer tool messages are cut)."""

    task: TaskInfo
    tools: list[dict[str, Any]]
    opening: list[Message]
    max_turns: int

    def call(self, call: ToolCall) -> str:
        """Run one schema-valid call; the text the tool answers. An exception becomes an
        ``Error: ...`` tool message (the env's fault only if it is an ``EnvError``)."""
        ...

    def after_calls(self, records: list[CallRecord]) -> Outcome: ...

    def after_text(self, content: str) -> Outcome:
        """The agent sent a message without tool calls: its turn is over."""
        ...

    def after_invalid(self, message: Message | None) -> Outcome | None:
        """The action was malformed (``message`` is it as parsed, when it was a message);
        None lets the episode go on with the env's feedback."""
        ...

    def on_budget_end(self) -> Outcome:
        """The turn budget or time ran out; the reward for what was done."""
        ...

    def close(self) -> None: ...


class Suite(Protocol):
    """A source of tool-calling tasks: BFCL, tau2-bench, toolmath or a user's own."""

    def task_ids(self) -> list[str]: ...

    def task(self, task_id: str) -> TaskInfo: ...

    def open(self, task_id: str, rng: np.random.Generator) -> Episode: ...

    def close(self) -> None:
        """Free what the suite keeps across episodes (a sandbox)."""
        ...


class ToolCallEnv(ClawEnv):
    """Call functions described by OpenAI tool schemas; the suite checks what was called.

    ## Description
    Each episode is one task of a suite. The task's functions are OpenAI function schemas
    in ``info["tools"]``. Every tool call is first checked against its schema
    (:mod:`envs.toolcall.schema`): an unknown function, a missing required argument, an
    argument the function does not take, a value of the wrong type or outside its enum is
    answered with a ``tool`` message saying exactly that, and the call is not run. Valid
    calls run where the suite has executable tools (BFCL multi-turn's file system, trading,
    travel... backends and tau2's airline and retail databases, in a child process with a
    time limit per call; toolmath's sandboxed ``python``), after a check that they cannot
    cost much (:mod:`envs.toolcall.limits`), and come back as ``tool`` messages, cut in
    the middle past the suite's ``max_output_chars``; a tool that raises answers
    ``Error: ...``. A message without tool calls ends the agent's turn. Suites:

    - ``bfcl``: BFCL v4 single-turn questions (:mod:`envs.toolcall.bfcl`), one turn each,
      scored by BFCL's AST matcher.
    - ``bfcl_multi``: BFCL v4 multi-turn conversations on executable backends
      (:mod:`envs.toolcall.bfcl_multi`), scored on final state and responses.
    - ``tau2``: tau2-bench airline and retail customer service with a simulated user
      (:mod:`envs.toolcall.tau2`), scored by tau2's database and communication checks.
    - ``toolmath``: generated arithmetic and word problems with a ``python`` tool
      (:mod:`envs.toolcall.toolmath`), scored on the final answer.

    ## Observation
    Reset: the task's opening messages (system and/or user; tau2 adds the agent's greeting
    and the user's first words). Step: one ``tool`` message per call, in order, then any
    ``user`` message the suite adds (the next BFCL turn, the tau2 user's reply).
    ``info["next_state"]`` is their text. When the tools change (BFCL miss-func turns),
    that step's ``info["tools"]`` holds the new list and the user message shows the new
    functions' docs.

    ## Action
    An assistant message with ``tool_calls`` and/or text (``<tool_call>`` JSON in text
    is parsed as elsewhere in clawgym).

    ## Reward
    The suite's verdict on the episode's last step (1 pass, 0 fail; see each suite), 0
    before. ``info["metrics"]`` always has ``invalid_action`` (1 when any call broke its
    schema or the action was malformed), ``calls`` and ``call_errors`` (calls whose tool
    answered an error); the last step has ``solved`` and the suite's own metrics.

    ## Episode End
    Terminated when the suite says the task is over (BFCL: the answer turn, or the last
    user turn; tau2: the user leaves; toolmath: the final answer). Truncated
    (``max_turns``, default per suite) when the budget runs out; the reward is then the
    suite's (0 for every suite here). Truncated (``error``) when infrastructure fails.

    ## Arguments
    ``suite``: ``bfcl`` (default), ``bfcl_multi``, ``tau2`` or ``toolmath``.
    ``split``: ``train`` (default), ``heldout`` or ``all``; ``task_ids()`` lists it.
    ``task_ids``: a list (or comma-separated string) of ids to play instead of a split.
    ``max_turns``: assistant turns per episode (default: the suite's per task).
    Every other keyword goes to the suite, which documents its own: ``categories``
    (bfcl, bfcl_multi); ``call_timeout_s`` and ``max_output_chars`` (bfcl_multi, tau2);
    ``domain``, ``user``, ``user_endpoint``, ``user_model``, ``max_errors``,
    ``communicate`` ... (tau2); ``sandbox``, ``train_size``, ``heldout_size``,
    ``timeout_s``, ``max_output_chars`` (toolmath). An argument the suite does not take is refused, naming the
    ones it does. And the :class:`ClawEnv` arguments (``time_limit_s``,
    ``invalid_action_reward``, ``render_mode``, ``max_tool_calls``).

    ## Version History
    v1 (``ToolCall``, ``BFCLMultiTurn``, ``Tau2``; ``BFCL`` and ``ToolMath`` stay v0, whose
    rewards did not change): an argument name a function does not declare is refused
    even when it declares none; the tools that run in-process upstream (BFCL's backends,
    tau2's domains) run in a child process per env with a per-call time limit (a stopped
    call ends the episode, ``time_limit``), bounded arguments and clipped results; BFCL
    calls are keyword method calls, so string values reach the backend as sent; tau2's
    COMMUNICATE check counts whole tokens in a reply that lists no candidates
    (``communicate="upstream"`` for tau2's own rule); at most ``max_tool_calls`` calls of a
    message run.
    v0: initial version.
    """

    tools: list[dict[str, Any]] = []
    eval_max_turns = None

    def __init__(self, suite: str = "bfcl", split: str = "train",
                 task_ids: list[str] | str | None = None, max_turns: int | None = None,
                 time_limit_s: float | None = None, invalid_action_reward: float = 0.0,
                 render_mode: str | None = None, max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
                 **suite_options: Any) -> None:
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 (or None for the suite's own), got {max_turns}")
        super().__init__(max_turns=max_turns or 20, time_limit_s=time_limit_s,
                         invalid_action_reward=invalid_action_reward, render_mode=render_mode,
                         max_tool_calls=max_tool_calls)
        if suite not in SUITES:
            raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        module, _, name = SUITES[suite].partition(":")
        self.suite_name, self.split = suite, split
        suite_class = getattr(importlib.import_module(module), name)
        accepted = [p for p in inspect.signature(suite_class).parameters if p != "split"]
        unknown = sorted(set(suite_options) - set(accepted))
        if unknown:
            raise ValueError(f"suite={suite!r} takes no argument {unknown[0]!r}; its arguments: "
                             f"{', '.join(accepted) or 'none'} (and split, task_ids, max_turns)")
        self.suite: Suite = suite_class(split=split, **suite_options)
        self.fixed_max_turns = max_turns
        self._ids = _select(self.suite, split, name_list(task_ids))
        self.tools = []
        self._schemas: dict[str, dict[str, Any]] = {}
        self._episode: Episode | None = None

    # ---- tasks ----------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._ids)

    def task(self, task_id: str) -> TaskInfo:
        """The id, category and split of any task of the suite."""
        return self.suite.task(task_id)

    @property
    def episode(self) -> Episode | None:
        """The episode being played (oracles read its ground truth), None between episodes."""
        return self._episode

    # ---- episode --------------------------------------------------------------------------
    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        if options:
            raise ValueError(f"reset(options=...) takes only 'task_id' here, got {sorted(options)}")
        if task_id is None:
            task_id = self._ids[int(self.np_random.integers(len(self._ids)))]
        episode = self.suite.open(task_id, self.np_random)
        self._episode = episode
        self._offer(episode.tools)
        self.max_turns = self.fixed_max_turns or episode.max_turns
        info = {"suite": self.suite_name, "category": episode.task.category,
                "split": episode.task.split}
        return Opening(list(episode.opening), episode.task.id, info=info)

    def _offer(self, tools: list[dict[str, Any]]) -> None:
        """Make ``tools`` the ones offered. The action space is changed in place, so its
        random state (seeded by checkers and tests) carries over."""
        self.tools = list(tools)
        self._schemas = {t["function"]["name"]: t for t in self.tools}
        self.action_space.tools = [dict(t) for t in self.tools]
        self.action_space.tool_names = frozenset(self._schemas)

    def _act(self, turn: AssistantTurn) -> Transition:
        assert self._episode is not None
        if not turn.tool_calls:
            outcome = self._episode.after_text(turn.content)
            return self._transition([], outcome, {"calls": 0.0, "call_errors": 0.0})
        records, replies = [], []
        bounded = getattr(self._episode, "runs_tools", True)
        for call in turn.tool_calls:
            problem = call_problem(self._schemas[call.name], call.arguments) or \
                (arguments_problem(call.name, call.arguments) if bounded else None)
            result = None if problem else self._run(call)
            records.append(CallRecord(call, problem, result))
            replies.append({"role": "tool", "tool_call_id": call.id,
                            "content": problem if problem else result})
        metrics = {"calls": float(len(records)),
                   "call_errors": float(sum(1 for r in records if r.ran and _is_error(r.result))),
                   "invalid_action": float(any(not r.ran for r in records))}
        return self._transition(replies, self._episode.after_calls(records), metrics)

    def _run(self, call: ToolCall) -> str:
        assert self._episode is not None
        try:
            result = self._episode.call(call)
        except EnvError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool's own failure is the agent's observation
            result = f"Error: {type(exc).__name__}: {exc}"
        return clip(result, getattr(self._episode, "max_output_chars", MAX_OUTPUT_CHARS))

    def _transition(self, replies: list[Message], outcome: Outcome,
                    metrics: dict[str, float]) -> Transition:
        messages = replies + outcome.messages
        info = dict(outcome.info)
        if outcome.tools is not None:
            self._offer(outcome.tools)
            info["tools"] = [dict(t) for t in self.tools]
        return Transition(messages, reward=outcome.reward, stop=outcome.stop,
                          next_state=outcome.next_state, metrics={**metrics, **outcome.metrics},
                          info=info)

    def _invalid(self, exc: InvalidAction, action: object) -> Transition:
        transition = super()._invalid(exc, action)
        if self._episode is not None:
            outcome = self._episode.after_invalid(_as_message(action))
            if outcome is not None:
                transition.messages.extend(outcome.messages)
                transition.reward = outcome.reward
                transition.stop = outcome.stop
                transition.metrics.update(outcome.metrics)
                transition.info.update(outcome.info)
        transition.metrics.setdefault("calls", 0.0)
        transition.metrics.setdefault("call_errors", 0.0)
        return transition

    def _on_truncate(self, reason: StopReason, transition: Transition) -> Transition:
        if self._episode is None:
            return transition
        outcome = self._episode.on_budget_end()
        why = "Time is up" if reason is StopReason.TIME_LIMIT else "The turn budget is used up"
        transition.messages.append({"role": "user", "content": f"{why}; the episode is over."})
        transition.reward += outcome.reward
        transition.metrics.update(outcome.metrics)
        transition.info.update(outcome.info)
        return transition

    # ---- resources ------------------------------------------------------------------------
    def _release(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            episode.close()

    def _shutdown(self) -> None:
        self.suite.close()


def _as_message(action: object) -> Message | None:
    """A malformed action as the assistant message it tried to be (None if it was none)."""
    if isinstance(action, dict):
        return {"role": "assistant", **action}
    if isinstance(action, str):
        try:
            return parse_text_action(action)
        except ValueError:
            return None
    return None


def _is_error(result: str | None) -> bool:
    return result is not None and result.lstrip().startswith(("Error", "error"))




def _select(suite: Suite, split: str, task_ids: tuple[str, ...]) -> list[str]:
    if task_ids:
        for task_id in task_ids:
            suite.task(task_id)  # raises, naming the problem, for an unknown id
        return list(task_ids)
    ids = suite.task_ids()
    if not ids:
        raise ValueError(f"no task is in split={split!r} of this suite; use split='all' or "
                         "widen the selection")
    return ids


class ToolMathEnv(ToolCallEnv):
    """:class:`ToolCallEnv` with ``suite="toolmath"`` (``clawgym/ToolMath-v0``). Its own
    class so that its ``sandbox`` argument is in the signature, where tools that need to
    know whether an env takes a sandbox (the test suite's checker) look."""

    def __init__(self, sandbox: str = "auto", **kwargs: Any) -> None:
        kwargs.pop("suite", None)
        super().__init__(suite="toolmath", sandbox=sandbox, **kwargs)
