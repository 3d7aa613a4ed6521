"""BFCL v4 multi-turn conversations on the wheel's executable backends.

The four multi-turn categories of BFCL v4 (``multi_turn_base``, ``multi_turn_miss_func``,
``multi_turn_miss_param``, ``multi_turn_long_context``; 200 conversations each) from the
``bfcl-eval`` wheel (see :mod:`envs.toolcall.bfcl_data`). Each conversation has 3 to 6
user turns against one or more of BFCL's Python backends (``GorillaFileSystem``,
``MathAPI``, ``MessageAPI``, ``TwitterAPI``, ``TicketAPI``, ``TradingBot``,
``TravelAPI``, ``VehicleControlAPI``), which the wheel ships in
``bfcl_eval/eval_checker/multi_turn_eval/func_source_code/`` and which run here as they do
in BFCL, from the entry's ``initial_config``, in a child process
(:mod:`envs.toolcall.worker`, :mod:`envs.toolcall.bfcl_backends`).

The episode follows BFCL's function-calling inference loop
(``BaseHandler.inference_multi_turn_FC``): the agent sees turn 1's user message; its tool
calls run on the live backends and come back as ``tool`` messages; a message without tool
calls ends the turn and the next user turn follows. After the last turn the conversation
is scored by the wheel's own ``multi_turn_checker`` on every executed call, turn by turn:
after each turn with ground truth, each backend's public state must equal the state the
ground-truth calls leave, and every ground-truth call's result must appear among the
agent's results so far. Reward 1 if valid, else 0; ``info["verdict"]`` holds the
checker's error message.

Deviations, stated:

- Calls that break their schema (:mod:`envs.toolcall.schema`), name an argument the
  function does not declare (also where it declares none), or cost too much
  (:mod:`envs.toolcall.limits`: a number beyond ±10^6, over 20,000 characters of
  arguments) are refused and not run, so they are not replayed by the checker either;
  BFCL runs whatever decodes and lets the backend fail. The agent sees the refusal.
- BFCL executes a call by writing it as ``name(arg=repr(value), ...)`` and ``eval``-ing
  it, after a regular expression prefixes every ``word(`` in the text with the backend
  instance, string values included. Here a call is the live instance's method called
  with keyword arguments (:class:`~envs.toolcall.bfcl_backends.BFCLBackends`), so a
  string value reaches the backend exactly as sent. The checker can only replay strings
  (it calls ``execute_multi_turn_func_call`` itself), so it is given strings written
  from validated calls only (:func:`~envs.toolcall.bfcl_backends.replay_text`: offered
  method, declared identifiers, ``repr`` of plain JSON values, parsed back to check);
  its rewriting of ``word(`` in strings applies to the agent's calls and the ground
  truth alike, as in BFCL.
- Each call has a time limit (``call_timeout_s``, 10 s); past it the tools' process is
  killed and the episode ends (truncated, ``time_limit``, reward 0). BFCL has none. A tool
  message longer than ``max_output_chars`` (50,000; BFCL's longest ground-truth result,
  in ``long_context``, is 31,706) is cut in the middle.
- BFCL's loop forces a turn to end after 20 steps and fails the conversation; here the
  21st step with calls in one turn ends the episode (truncated, ``max_turns``, reward 0).
- In miss-func turns BFCL adds the held-out functions to the tool list and says "I have
  updated some more functions you can choose from. What about now?"; here the new list
  comes in that step's ``info["tools"]`` (``trainers.rollout.collect`` gives the next
  prompt that list) and the user message also lists their JSON schemas after that
  sentence, for agents that keep the tools they got at reset.
- Two ground truths cannot be replayed here: ``*_173`` (all four categories) calls
  ``close_ticket(ticket_id='ticket_001')`` for an integer ``ticket_id``, which the schema
  check refuses (BFCL runs it and compares the backend's error); ``multi_turn_miss_func_49``
  calls ``tail`` in turn 2, while the data holds it out until turn 4.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.core import StopReason
from envs.errors import EnvError
from envs.messages import Message, ToolCall
from envs.toolcall import bfcl_data
from envs.toolcall.bfcl import categories_option
from envs.toolcall.bfcl_backends import backend_class
from envs.toolcall.env import CallRecord, Outcome, TaskInfo, hashed_split
from envs.toolcall.worker import ToolStopped, WorkerHolder, stopped_message, tool_options

MAXIMUM_STEP_LIMIT = 20
"""BFCL's ``MAXIMUM_STEP_LIMIT``: steps with calls one user turn may take."""
ADDED_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"
"""BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``."""
MAX_OUTPUT_CHARS = 50_000
"""Default clip of a tool message: above BFCL's longest ground-truth result (31,706)."""
OPEN_TIMEOUT_S = 120.0
"""Loading a conversation's backends (long-context scenarios are large; a busy machine)."""
CHECK_TIMEOUT_S = 60.0
"""The checker's time limit beyond twice what the agent's calls took live."""


class BFCLMultiTurnSuite(WorkerHolder):
    """BFCL v4 multi-turn. Arguments: ``split``; ``categories`` (a list or comma-separated
    string of :data:`~envs.toolcall.bfcl_data.MULTI_TURN` names; default all four);
    ``call_timeout_s`` (10) and ``max_output_chars`` (50,000) per tool call."""

    worker_kind = "bfcl"

    def __init__(self, split: str = "train", categories: list[str] | str | None = None,
                 call_timeout_s: float = 10.0, max_output_chars: int = MAX_OUTPUT_CHARS) -> None:
        bfcl_data.check_wheel()
        tool_options(call_timeout_s, max_output_chars)
        self.split = split
        self.categories = categories_option(categories, bfcl_data.MULTI_TURN)
        self.call_timeout_s, self.max_output_chars = call_timeout_s, max_output_chars

    def task_ids(self) -> list[str]:
        return [i for i in _all_ids(self.categories) if self.split == "all" or hashed_split(i) == self.split]

    def task(self, task_id: str) -> TaskInfo:
        category = bfcl_data.category_of(task_id)
        if category not in self.categories or task_id not in _all_ids((category,)):
            raise ValueError(f"unknown task_id {task_id!r}: not a conversation of the BFCL "
                             f"categories {', '.join(self.categories)}")
        return TaskInfo(task_id, category, hashed_split(task_id))

    def open(self, task_id: str, rng: np.random.Generator) -> BFCLConversation:
        return BFCLConversation(self.task(task_id), bfcl_data.entry(task_id), self)




@functools.cache
def _all_ids(categories: tuple[str, ...]) -> list[str]:
    return [e["id"] for c in categories for e in bfcl_data.entries(c)]


@dataclass
class BFCLConversation:
    """One multi-turn conversation being played."""

    task: TaskInfo
    entry: dict[str, Any]
    suite: BFCLMultiTurnSuite
    turn: int = 0
    executed: list[list[list[list[Any]]]] = field(default_factory=lambda: [[]])
    """Per user turn, per step, the calls that ran, as ``[name, arguments]``."""
    steps_this_turn: int = 0
    stopped: str | None = None
    """The tool message of a call that was stopped (time limit): the episode ends."""

    def __post_init__(self) -> None:
        self.functions = list(self.entry["function"])
        self.tools = bfcl_data.to_openai_tools(self.functions)
        self.opening: list[Message] = [dict(m) for m in self.entry["question"][0]]
        self.max_turns = len(self.entry["question"]) * (MAXIMUM_STEP_LIMIT + 2)
        self._opened = False
        self._step: list[list[Any]] = []
        self._call_s = 0.0

    # ---- backends -----------------------------------------------------------------------
    def backend_methods(self) -> dict[str, inspect.Signature]:
        """Each public backend method's signature (oracles name positional arguments)."""
        methods = {}
        for class_name in self.entry["involved_classes"]:
            for name, function in inspect.getmembers(backend_class(class_name), inspect.isfunction):
                if not name.startswith("_"):
                    methods[name] = inspect.signature(function)
        return methods

    def _request(self, op: str, timeout_s: float, **fields: Any) -> Any:
        """``op`` on the conversation's backends, loaded at its first call. Raises
        :class:`ToolStopped` when ``op`` is stopped."""
        worker = self.suite.worker()
        if not self._opened:
            worker.request_or_fail("open", OPEN_TIMEOUT_S, entry_id=self.task.id,
                                   max_output_chars=self.suite.max_output_chars)
            self._opened = True
        elif not worker.alive:
            raise EnvError("the BFCL tool process ended between calls, and the conversation's "
                           "backend state with it")
        return worker.request(op, timeout_s, **fields)

    # ---- the episode --------------------------------------------------------------------
    def call(self, call: ToolCall) -> str:
        if self.stopped:
            return "Error: not run: an earlier call of this message was stopped."
        started = time.monotonic()
        try:
            answer = self._request("call", self.suite.call_timeout_s, name=call.name,
                                   arguments=dict(call.arguments))
        except ToolStopped as exc:
            self.stopped = stopped_message(call.name, exc, self.suite.call_timeout_s)
            return self.stopped
        self._call_s += time.monotonic() - started
        if answer["ran"]:
            self._step.append([call.name, dict(call.arguments)])
        return answer["result"]

    def after_calls(self, records: list[CallRecord]) -> Outcome:
        if self._step:
            self.executed[-1].append(self._step)
            self._step = []
        if self.stopped:
            return Outcome(stop=StopReason.TIME_LIMIT, metrics={"solved": 0.0},
                           info={"verdict": f"wrong: {self.stopped}"})
        self.steps_this_turn += 1
        if self.steps_this_turn > MAXIMUM_STEP_LIMIT:
            return Outcome(stop=StopReason.MAX_TURNS, metrics={"solved": 0.0},
                           info={"verdict": f"force-terminated: more than {MAXIMUM_STEP_LIMIT} "
                                            f"steps in turn {self.turn + 1}"})
        return Outcome()

    def after_text(self, content: str) -> Outcome:
        self.turn += 1
        self.steps_this_turn = 0
        questions = self.entry["question"]
        if self.turn >= len(questions):
            return self._score()
        self.executed.append([])
        messages = [dict(m) for m in questions[self.turn]]
        added = self.entry.get("missed_function", {}).get(str(self.turn))
        if not added:
            return Outcome(messages=messages, metrics={"turn": float(self.turn)})
        self.functions += added
        self.tools = bfcl_data.to_openai_tools(self.functions)
        new = bfcl_data.to_openai_tools(added)
        text = f"{ADDED_FUNCTIONS}\n\nThe new functions:\n{json.dumps(new, indent=1)}"
        return Outcome(messages=[{"role": "user", "content": text}], tools=self.tools,
                       metrics={"turn": float(self.turn)})

    def after_invalid(self, message: Message | None) -> None:
        self.steps_this_turn += 1
        return None

    def on_budget_end(self) -> Outcome:
        return Outcome(metrics={"solved": 0.0})

    def _score(self) -> Outcome:
        limit = CHECK_TIMEOUT_S + 2 * self._call_s
        try:
            result = self._request("check", limit, steps=self.executed)
        except ToolStopped as exc:  # the replay of the agent's own calls: the agent's doing
            why = f"ran past its {limit:.0f} s limit" if exc.reason == "timeout" else \
                "ended the tool process (out of memory, or a crash)"
            result = {"valid": False, "error_type": "clawgym:checker_stopped",
                      "error_message": f"the checker's replay of the calls {why}"}
        valid = bool(result["valid"])
        verdict = "correct" if valid else f"wrong: {result['error_message']}"
        return Outcome(reward=float(valid), stop=StopReason.SUBMITTED,
                       metrics={"solved": float(valid)}, next_state=verdict,
                       info={"verdict": verdict, "error_type": result["error_type"]})

    def close(self) -> None:
        pass
