"""BFCL v4 multi-turn conversations on the wheel's executable backends.

The four multi-turn categories of BFCL v4 (``multi_turn_base``, ``multi_turn_miss_func``,
``multi_turn_miss_param``, ``multi_turn_long_context``; 200 conversations each) from the
``bfcl-eval`` wheel (see :mod:`envs.toolcall.bfcl_data`). Each conversation has 3 to 6
user turns against one or more of BFCL's Python backends (``GorillaFileSystem``,
``MathAPI``, ``MessageAPI``, ``TwitterAPI``, ``TicketAPI``, ``TradingBot``,
``TravelAPI``, ``VehicleControlAPI``), which the wheel ships in
``bfcl_eval/eval_checker/multi_turn_eval/func_source_code/`` and which run here as they do
in BFCL, from the entry's ``initial_config``.

The episode follows BFCL's function-calling inference loop
(``BaseHandler.inference_multi_turn_FC``): the agent sees turn 1's user message; its tool
calls run on the live backends through the wheel's own ``execute_multi_turn_func_call``
(each call written as ``name(arg=repr(value), ...)`` the way BFCL's OpenAI handler decodes
calls) and come back as ``tool`` messages; a message without tool calls ends the turn and
the next user turn follows. After the last turn the conversation is scored by the wheel's
own ``multi_turn_checker`` on every executed call, turn by turn: after each turn with
ground truth, each backend's public state must equal the state the ground-truth calls
leave, and every ground-truth call's result must appear among the agent's results so far.
Reward 1 if valid, else 0; ``info["verdict"]`` holds the checker's error message.

Deviations, stated:

- Calls that break their schema (:mod:`envs.toolcall.schema`) are refused and not run, so
  they are not replayed by the checker either; BFCL runs whatever decodes and lets the
  backend fail. The agent sees the schema error instead of the backend's.
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
- Backend instances live in the wheel's module namespace under a name unique to the
  episode (BFCL keys them by model and entry, which would share state between episodes
  of the same entry) and are deleted when the episode ends.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.core import StopReason
from envs.messages import Message, ToolCall
from envs.toolcall import bfcl_data
from envs.toolcall.bfcl import categories_option
from envs.toolcall.env import CallRecord, Outcome, TaskInfo, hashed_split

MAXIMUM_STEP_LIMIT = 20
"""BFCL's ``MAXIMUM_STEP_LIMIT``: steps with calls one user turn may take."""
ADDED_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"
"""BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``."""

_names = itertools.count()
_names_lock = threading.Lock()


class BFCLMultiTurnSuite:
    """BFCL v4 multi-turn. Arguments: ``split``; ``categories`` (a list or comma-separated
    string of :data:`~envs.toolcall.bfcl_data.MULTI_TURN` names; default all four)."""

    def __init__(self, split: str = "train", categories: list[str] | str | None = None) -> None:
        bfcl_data.check_wheel()
        self.split = split
        self.categories = categories_option(categories, bfcl_data.MULTI_TURN)

    def task_ids(self) -> list[str]:
        return [i for i in _all_ids(self.categories) if self.split == "all" or hashed_split(i) == self.split]

    def task(self, task_id: str) -> TaskInfo:
        category = bfcl_data.category_of(task_id)
        if category not in self.categories or task_id not in _all_ids((category,)):
            raise ValueError(f"unknown task_id {task_id!r}: not a conversation of the BFCL "
                             f"categories {', '.join(self.categories)}")
        return TaskInfo(task_id, category, hashed_split(task_id))

    def open(self, task_id: str, rng: np.random.Generator) -> BFCLConversation:
        return BFCLConversation(self.task(task_id), bfcl_data.entry(task_id))

    def close(self) -> None:
        pass


@functools.cache
def _all_ids(categories: tuple[str, ...]) -> list[str]:
    return [e["id"] for c in categories for e in bfcl_data.entries(c)]


def _utils() -> Any:
    bfcl_data.bfcl_utils()  # points BFCL's working folders at clawgym's cache first
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return multi_turn_utils


def call_text(call: ToolCall) -> str:
    """A call as BFCL's OpenAI handler decodes it for execution (``convert_to_function_call``)."""
    return f"{call.name}({','.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


@dataclass
class BFCLConversation:
    """One multi-turn conversation being played."""

    task: TaskInfo
    entry: dict[str, Any]
    turn: int = 0
    steps: list[list[list[str]]] = field(default_factory=list)
    """Per user turn, per step, the executed calls as BFCL's checker reads them."""
    steps_this_turn: int = 0

    def __post_init__(self) -> None:
        self.functions = list(self.entry["function"])
        self.tools = bfcl_data.to_openai_tools(self.functions)
        self.opening: list[Message] = [dict(m) for m in self.entry["question"][0]]
        self.max_turns = len(self.entry["question"]) * (MAXIMUM_STEP_LIMIT + 2)
        self.steps = [[]]
        with _names_lock:
            self._name = f"clawgym_{next(_names)}"
        self._long = "long_context" in self.task.category

    # ---- backends -----------------------------------------------------------------------
    def _execute(self, calls: list[str], name: str) -> list[str]:
        results, _ = _utils().execute_multi_turn_func_call(
            calls, self.entry["initial_config"], self.entry["involved_classes"], name,
            self.task.id, long_context=self._long, is_evaL_run=False)
        return results

    def backend_methods(self) -> dict[str, inspect.Signature]:
        """Each public backend method's signature (oracles name positional arguments)."""
        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

        methods = {}
        for class_name in self.entry["involved_classes"]:
            cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
            for name, function in inspect.getmembers(cls, inspect.isfunction):
                if not name.startswith("_"):
                    methods[name] = inspect.signature(function)
        return methods

    # ---- the episode --------------------------------------------------------------------
    def call(self, call: ToolCall) -> str:
        return self._execute([call_text(call)], self._name)[0]

    def after_calls(self, records: list[CallRecord]) -> Outcome:
        executed = [call_text(r.call) for r in records if r.ran]
        if executed:
            self.steps[-1].append(executed)
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
        self.steps.append([])
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
        _forget(self._name)
        return Outcome(metrics={"solved": 0.0})

    def _score(self) -> Outcome:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

        _forget(self._name)  # the conversation is over: its live backends are done
        with _names_lock:
            name = f"clawgym_check_{next(_names)}"
        try:
            result = multi_turn_checker(self.steps, self.entry["ground_truth"], self.entry,
                                        self.task.category, name)
        finally:
            _forget(name)
        valid = bool(result["valid"])
        verdict = "correct" if valid else f"wrong: {result.get('error_message', result)}"
        return Outcome(reward=float(valid), stop=StopReason.SUBMITTED,
                       metrics={"solved": float(valid)}, next_state=verdict,
                       info={"verdict": verdict, "error_type": result.get("error_type", "")})

    def close(self) -> None:
        _forget(self._name)


def _forget(name: str) -> None:
    """Delete the backend instances BFCL cached for ``name`` in its module namespace."""
    namespace = vars(_utils())
    prefix = re.sub(r"[-./:]", "_", name) + "_"
    for key in [k for k in list(namespace) if k.startswith(prefix)]:
        namespace.pop(key, None)
