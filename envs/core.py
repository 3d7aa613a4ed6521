"""The Env contract: chat-message observations, assistant-message actions.

Every clawgym environment subclasses :class:`ClawEnv`, a ``gymnasium.Env``:

``reset(*, seed=None, options=None) -> (obs, info)``
    ``obs`` is the list of messages that open the episode (system, user).
    ``options={"task_id": ...}`` picks a task; otherwise one is drawn with ``np_random``.
    ``info["task_id"]`` names the task, ``info["tools"]`` holds the OpenAI tool schemas.
    A ``task_id`` that is not a non-empty string, or names no task, raises ``ValueError``;
    an env whose setup fails raises an ``EnvError`` (e.g. ``TaskSetupError``). After any
    reset that raised, the previous episode is over and ``step`` raises ``ResetNeeded``
    until a reset succeeds.
``step(action) -> (obs, reward, terminated, truncated, info)``
    ``action`` is one assistant message (text and/or ``tool_calls``); a plain string is
    parsed (``<tool_call>`` blocks become tool calls). ``obs`` is the list of *new*
    messages. ``info["next_state"]`` is the text a judge reads to score this step.

``terminated``: the task ended by itself (submitted, solved, user left).
``truncated``: a budget ran out (turns, tokens, wall clock) or infrastructure failed.
Never both. Reserved ``info`` keys: ``task_id``, ``tools``, ``next_state``, ``metrics``
(floats, aggregated by trainers), ``stop_reason`` (set on the last step), ``error``
(an infrastructure failure: the trajectory is not trained on), and the optional
``user_id``.

``info["user_id"]`` (optional, reset's): a non-empty string naming the user the episode
belongs to, for envs whose episodes stand for different people (the chat env's persona).
``trainers.run adapters=per_user`` trains one LoRA adapter per user id and refuses an env
whose episodes name none; every other trainer ignores it. An env sets it through
``Opening.info``; one that names no user leaves it out.

A malformed action is the agent's mistake, not a crash: the agent gets an error message
as the observation (a ``tool`` message when it belongs to a tool call) and
``info["metrics"]["invalid_action"] == 1``. It costs a turn, like any other action.
Malformed means anything :func:`envs.messages.to_assistant_turn` refuses: a value that is
neither a string nor a dict; a dict that is not an assistant message or holds anything
but plain JSON values (nested deeper than ``MAX_JSON_DEPTH``, a lone surrogate, NaN, an
integer over 4300 digits, a non-string key, a tuple or object); text with a lone
surrogate; a call to an unknown tool; ``arguments`` that :func:`envs.messages.parse_json`
refuses (bad JSON or any of the above) or that are not a JSON object. An env refuses
what its own tools cannot take the same way (the terminal env: a command holding a NUL
byte). ``step`` raises only ``ResetNeeded`` (no successful reset yet) and
``EpisodeEndedError`` (the episode ended).

At most ``max_tool_calls`` calls of one message run (:data:`DEFAULT_MAX_TOOL_CALLS`, a
constructor argument of every env): each call may cost up to its tool's own timeout, so the
cap bounds what one step costs. The calls past it are not run; each is answered with a
``tool`` message saying so (send it again next turn), and the step counts
``info["metrics"]["calls_not_run"]`` and ``invalid_action`` 1.

Subclasses implement :meth:`ClawEnv._open` and :meth:`ClawEnv._act` (and
:meth:`ClawEnv._release` if they hold resources). Constructors stay cheap and picklable:
sandboxes and browsers start in ``_open`` and are released in ``_release``; an env that
keeps one across episodes (wiped and reused) frees it in :meth:`ClawEnv._shutdown`,
which only ``close`` calls.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, ClassVar

import gymnasium as gym

from envs.errors import EnvError, EpisodeEndedError, ResetNeeded
from envs.messages import AssistantTurn, InvalidAction, Message, ToolCall, text_of, to_assistant_turn
from envs.spaces import ConversationSpace, MessageSpace

RESERVED_INFO_KEYS = ("task_id", "tools", "next_state", "metrics", "stop_reason", "error", "user_id")
DEFAULT_MAX_TOOL_CALLS = 8
"""Calls of one message that run. BFCL's parallel questions, the most calls one message
of the suites here needs, ask for up to 8."""


class StopReason(str, Enum):
    """Why an episode ended. The first four terminate it; the rest truncate it."""

    SUBMITTED = "submitted"
    SOLVED = "solved"
    FAILED = "failed"
    USER_LEFT = "user_left"
    MAX_TURNS = "max_turns"
    MAX_TOKENS = "max_tokens"
    TIME_LIMIT = "time_limit"
    ERROR = "error"

    @property
    def terminates(self) -> bool:
        return self in (StopReason.SUBMITTED, StopReason.SOLVED, StopReason.FAILED,
                        StopReason.USER_LEFT)


@dataclass
class Opening:
    """What ``_open`` returns: the first messages and the task they pose."""

    messages: list[Message]
    task_id: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Transition:
    """What ``_act`` returns for one assistant turn."""

    messages: list[Message]
    reward: float = 0.0
    stop: StopReason | None = None
    next_state: str | None = None
    """Defaults to the text of ``messages``."""
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def name_list(value: list[str] | str | None, what: str = "task_ids") -> tuple[str, ...]:
    """An env argument that names several things (``task_ids``, ``categories``): a list, or a
    comma-separated string as the CLI passes it. Anything else is a ValueError naming ``what``."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings or a comma-separated string, got {value!r:.200}")
    return tuple(v.strip() for v in value if v.strip())


class ClawEnv(gym.Env[list[Message], Message]):
    """Base class of every clawgym environment. See the module docstring for the contract.

    Arguments:
        max_turns: assistant turns before the episode is truncated (``max_turns``).
        time_limit_s: wall-clock budget per episode; None for none.
        invalid_action_reward: reward for a malformed action (default 0).
        render_mode: None or ``"ansi"`` (the transcript as text).
        max_tool_calls: calls of one message that run; the rest are answered "not run"
            (default :data:`DEFAULT_MAX_TOOL_CALLS`).
    """

    # render_fps only matters to video recorders; declared so Gymnasium doesn't warn on render().
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    tools: list[dict[str, Any]] = []
    """OpenAI function schemas the agent may call; set per class or in ``__init__``."""
    headline_metric: ClassVar[str | None] = None
    """The ``info["metrics"]`` key an evaluation reports first, read on the first turn
    (None: the episode's env return). The chat env's is ``preference_met``."""
    rollout_temperature: ClassVar[float] = 1.0
    """The sampling temperature a trainer uses when its config leaves it unset. OpenClaw-RL
    uses 1.0 for env tracks and 0.6 for live use; the chat env, which imitates live use,
    says 0.6."""
    opd_gate: str = "none"
    """What a trainer's ``opd_gate=auto`` means for combine on this env: ``replay`` where
    replaying an episode to a turn (reset with its seed, its earlier replies stepped again)
    is exact and cheap, so checking the teacher's own reply costs little (the chat env with
    its scripted user says so); ``none`` elsewhere. Every env's seeded rollouts are
    deterministic (``check_env``), so ``opd_gate=replay`` may be asked for on any env; this
    only says whether it is on by default."""
    eval_max_turns: ClassVar[int | None] = None
    """Turns an evaluation needs to read the env's headline metric (None: whole episodes).
    The chat env's headline is its first response, so it says 1."""

    def __init__(self, *, max_turns: int = 20, time_limit_s: float | None = None,
                 invalid_action_reward: float = 0.0, render_mode: str | None = None,
                 max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int) or max_tool_calls < 1:
            raise ValueError(f"max_tool_calls must be an integer >= 1, got {max_tool_calls!r}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, "
                             f"got {render_mode!r}")
        self.max_turns = max_turns
        self.time_limit_s = time_limit_s
        self.invalid_action_reward = float(invalid_action_reward)
        self.render_mode = render_mode
        self.max_tool_calls = max_tool_calls
        self.action_space = MessageSpace(self.tools)
        self.observation_space = ConversationSpace()
        self.transcript: list[Message] = []
        self._task_id: str | None = None
        self._turn = 0
        self._done = False
        self._started_at = 0.0
        self._holding = False  # resources opened by _open and not yet released

    # ---- what a subclass implements -------------------------------------------------
    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        """Start an episode on ``task_id`` (or one drawn with ``self.np_random``)."""
        raise NotImplementedError

    def _act(self, turn: AssistantTurn) -> Transition:
        """Carry out one valid assistant turn."""
        raise NotImplementedError

    def _on_truncate(self, reason: StopReason, transition: Transition) -> Transition:
        """Called when a budget ends the episode; e.g. run the task's tests for a reward."""
        return transition

    def _graded_on_truncate(self, reason: StopReason, transition: Transition,
                            grade: Callable[[], tuple[float, dict[str, float], dict[str, Any], str]],
                            failed: str, graded: str = "") -> Transition:
        """The ``_on_truncate`` of an env that grades the work left when a budget runs out:
        ``grade()`` gives (reward, metrics, info, text); the user is told why the episode
        ended (``graded`` is added to that sentence) and the text. If grading raises an
        EnvError, ``info["error"]`` says ``failed`` and why, and the reward is untouched."""
        try:
            reward, metrics, info, text = grade()
        except EnvError as exc:
            transition.info["error"] = f"{type(exc).__name__}: {failed}: {exc}"
            return transition
        why = "Time is up" if reason is StopReason.TIME_LIMIT else "The turn budget is used up"
        transition.messages.append({"role": "user", "content": f"{why}{graded}. {text}"})
        transition.reward += reward
        transition.metrics.update(metrics)
        transition.info.update(info)
        return transition

    def _release(self) -> None:
        """Free what ``_open`` acquired (sandbox, browser). Called once per opening."""

    def _shutdown(self) -> None:
        """Free what an env keeps across episodes (e.g. a sandbox it wipes and reuses).
        Called by ``close`` only, never between episodes."""

    def task_ids(self) -> list[str]:
        """The task ids ``options={"task_id": ...}`` accepts (empty if tasks are generated)."""
        return []

    # ---- the contract -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode: ``(obs, info)`` as the module docstring states the contract."""
        super().reset(seed=seed)
        self._end_episode()
        self._task_id = None  # until _open succeeds, step() raises ResetNeeded
        options = self._options(options)
        task_id = self._task_id_option(options.pop("task_id", None))
        self._holding = True
        opening = self._open(task_id, options)
        self._task_id = opening.task_id
        self._turn = 0
        self._done = False
        self._started_at = time.monotonic()
        self.transcript = copy.deepcopy(opening.messages)
        info = {**copy.deepcopy(opening.info), "task_id": opening.task_id,
                "tools": copy.deepcopy(self.tools)}
        return copy.deepcopy(opening.messages), info

    @staticmethod
    def _options(options: object) -> dict[str, Any]:
        if options is None:
            return {}
        if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
            raise ValueError(f"reset(options=...) must be a dict with string keys, e.g. "
                             f"{{'task_id': ...}}; got {type(options).__name__}")
        return dict(options)

    def _task_id_option(self, task_id: object) -> str | None:
        """``options["task_id"]`` checked once for every env: None, or a non-empty string
        (whether it names a task is for ``_open`` to say, which knows the catalog)."""
        if task_id is None or (isinstance(task_id, str) and task_id):
            return task_id
        ids = self.task_ids()
        example = f", e.g. {ids[0]!r}" if ids else ""
        try:
            shown = repr(task_id)
        except (ValueError, RecursionError):  # a 5000-digit int, a list 100,000 deep
            shown = "(too large to show)"
        shown = shown if len(shown) <= 60 else shown[:60] + "..."
        raise ValueError(f"options['task_id'] must be a non-empty string naming a task (see "
                         f"task_ids(){example}), got {type(task_id).__name__} {shown}")

    def step(self, action: Message | str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Play one assistant message: ``(obs, reward, terminated, truncated, info)`` as the
        module docstring states the contract."""
        if self._task_id is None:
            raise ResetNeeded()
        if self._done:
            raise EpisodeEndedError()
        self._turn += 1
        try:
            turn = to_assistant_turn(action, self.action_space.tool_names,
                                     call_id_prefix=f"call_{self._turn}")
        except InvalidAction as exc:
            transition = self._invalid(exc, action)
        else:
            self.transcript.append(copy.deepcopy(turn.message))
            surplus = turn.tool_calls[self.max_tool_calls:]
            if surplus:
                turn = dataclasses.replace(turn, tool_calls=turn.tool_calls[:self.max_tool_calls])
            try:
                transition = self._act(turn)
            except EnvError as exc:
                transition = Transition([], stop=StopReason.ERROR, next_state="",
                                        info={"error": f"{type(exc).__name__}: {exc}"})
            else:
                if surplus:
                    self._refuse_surplus(transition, surplus)
            transition.metrics.setdefault("invalid_action", 0.0)
        return self._finish(transition)

    def _refuse_surplus(self, transition: Transition, surplus: tuple[ToolCall, ...]) -> None:
        """Answer the calls past ``max_tool_calls``, right after the answers of those that
        ran (before any user message the env added), so every call has its tool message."""
        total = self.max_tool_calls + len(surplus)
        replies: list[Message] = [
            {"role": "tool", "tool_call_id": call.id,
             "content": f"Not run: at most {self.max_tool_calls} tool calls of one message run; "
                        f"this was call {self.max_tool_calls + 1 + i} of {total}. Send it again "
                        "in your next message if it is still needed."}
            for i, call in enumerate(surplus)]
        answered = [i for i, m in enumerate(transition.messages) if m.get("role") == "tool"]
        at = answered[-1] + 1 if answered else 0
        transition.messages[at:at] = replies
        transition.metrics["calls_not_run"] = float(len(surplus))
        transition.metrics["invalid_action"] = 1.0

    def _invalid(self, exc: InvalidAction, action: object) -> Transition:
        if exc.tool_call_id is not None:
            if exc.message is not None:  # the parsed message holds the call being answered
                self.transcript.append(copy.deepcopy(exc.message))
            reply: Message = {"role": "tool", "tool_call_id": exc.tool_call_id, "content": str(exc)}
        else:
            reply = {"role": "user", "content": str(exc)}
        return Transition([reply], reward=self.invalid_action_reward,
                          metrics={"invalid_action": 1.0})

    def _finish(self, transition: Transition) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        stop = transition.stop
        if stop is None and self.time_limit_s is not None \
                and time.monotonic() - self._started_at > self.time_limit_s:
            stop = StopReason.TIME_LIMIT
        if stop is None and self._turn >= self.max_turns:
            stop = StopReason.MAX_TURNS
        if stop is not None and not stop.terminates and stop is not StopReason.ERROR:
            transition = self._on_truncate(stop, transition)
        self.transcript.extend(copy.deepcopy(transition.messages))
        info = copy.deepcopy(transition.info)
        info["task_id"] = self._task_id
        info["next_state"] = (transition.next_state if transition.next_state is not None
                              else "\n".join(text_of(m) for m in transition.messages))
        info["metrics"] = {k: float(v) for k, v in transition.metrics.items()}
        terminated = truncated = False
        if stop is not None:
            self._done = True
            info["stop_reason"] = stop.value
            terminated, truncated = stop.terminates, not stop.terminates
        return (copy.deepcopy(transition.messages), float(transition.reward),
                terminated, truncated, info)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        lines = []
        for m in self.transcript:
            calls = "".join(f"\n  -> {c['function']['name']}({c['function']['arguments']})"
                            for c in m.get("tool_calls") or [])
            lines.append(f"[{m['role']}] {text_of(m)}{calls}")
        return "\n".join(lines)

    def close(self) -> None:
        """Release the episode's resources and the env's own. Idempotent; the env can be
        reset again after."""
        self._end_episode()
        self._shutdown()

    def _end_episode(self) -> None:
        if self._holding:
            self._holding = False
            self._release()
