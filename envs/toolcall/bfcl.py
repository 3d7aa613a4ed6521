"""BFCL v4 single-turn questions, one answer turn each, scored by BFCL's AST matcher.

The categories are BFCL's own (:data:`envs.toolcall.bfcl_data.SINGLE_TURN`): ``simple_python``,
``simple_java``, ``simple_javascript``, ``multiple``, ``parallel``, ``parallel_multiple``,
``irrelevance`` and the live variants ``live_simple``, ``live_multiple``,
``live_parallel``, ``live_parallel_multiple``, ``live_irrelevance``, ``live_relevance``
(3,641 questions). Categories left out are listed with their reason in
:data:`envs.toolcall.bfcl_data.EXCLUDED`; multi-turn is its own suite
(:mod:`envs.toolcall.bfcl_multi`). Task ids are BFCL's (``simple_python_0``,
``live_multiple_12-4-3``); BFCL has no train/test split, so ``split`` is a stable hash of
the id (20% heldout); benchmarks that report leaderboard numbers use ``split=all``.

How an episode follows BFCL's function-calling ("FC") evaluation of OpenAI-style models,
and where it departs, honestly:

- The agent sees the question's messages (no system prompt, as BFCL's FC handlers send
  none) and the functions as OpenAI tools, converted as BFCL's OpenAI handler does
  (:func:`envs.toolcall.bfcl_data.to_openai_tools`; ``math.factorial`` is offered as
  ``math_factorial``). Java and JavaScript parameters are strings of source text, and the
  wheel's converters read them back, as in BFCL.
- The first assistant message is the answer; the episode ends with it. Its tool calls
  are scored by :func:`envs.toolcall.bfcl_ast.check`, BFCL's AST checker rule for rule;
  ``irrelevance``/``live_irrelevance`` pass with no call, ``live_relevance`` with any.
  A call whose arguments are not JSON makes the whole answer "no call", as BFCL's decoder
  does (so it passes an irrelevance question and fails every other).
- Calls are also checked against their schemas (:mod:`envs.toolcall.schema`), and a
  failure shows in the tool message and ``invalid_action``, but never changes the score:
  BFCL scores what was called, and 16 of its own ground-truth answers break their
  schemas (an enum value the schema does not list; a string, which BFCL's "variable"
  rule accepts, where it declares an array); they still score 1.
- Six questions have ground truth no answer can meet under BFCL's own checker (the wheel's
  checker agrees): ``simple_java_36`` and ``_65`` (an ArrayList of ``any`` items, which
  BFCL's Java converter can only make strings, holding ints and booleans),
  ``live_simple_106-63-0`` and ``112-68-0`` (a required array with no acceptable value),
  ``live_multiple_862-181-3`` (a parameter the function lacks) and ``964-207-0`` (a
  required parameter missing). They stay in, as on the leaderboard; the oracle fails them.
- Nothing is executed; each call is answered "recorded". ``info["verdict"]`` holds the
  checker's explanation and ``info["error_type"]`` its BFCL error type.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.core import StopReason
from envs.messages import Message, ToolCall, parse_json
from envs.toolcall import bfcl_data
from envs.toolcall.bfcl_ast import Call, Verdict, check
from envs.toolcall.env import CallRecord, Outcome, TaskInfo, hashed_split

RECORDED = "Recorded; this question is scored on the calls themselves, so nothing was run."


def categories_option(value: list[str] | str | None, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """``categories=`` as a tuple: None or ``"all"`` for every allowed category."""
    if value is None or value == "all":
        return allowed
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        why = "; ".join(f"{n}: {bfcl_data.EXCLUDED[n]}" for n in unknown if n in bfcl_data.EXCLUDED)
        raise ValueError(f"categories {unknown or names} are not available here"
                         f"{' (' + why + ')' if why else ''}; choose from {', '.join(allowed)}")
    return tuple(names)


class BFCLSuite:
    """BFCL v4 single-turn. Arguments: ``split``; ``categories`` (a list or comma-separated
    string of :data:`~envs.toolcall.bfcl_data.SINGLE_TURN` names; default all)."""

    def __init__(self, split: str = "train", categories: list[str] | str | None = None) -> None:
        bfcl_data.check_wheel()
        self.split = split
        self.categories = categories_option(categories, bfcl_data.SINGLE_TURN)

    def task_ids(self) -> list[str]:
        return [i for i in _all_ids(self.categories) if self.split == "all" or hashed_split(i) == self.split]

    def task(self, task_id: str) -> TaskInfo:
        category = bfcl_data.category_of(task_id)
        if category not in self.categories or task_id not in _all_ids((category,)):
            raise ValueError(f"unknown task_id {task_id!r}: not a question of the BFCL categories "
                             f"{', '.join(self.categories)}")
        return TaskInfo(task_id, category, hashed_split(task_id))

    def open(self, task_id: str, rng: np.random.Generator) -> BFCLQuestion:
        return BFCLQuestion(self.task(task_id), bfcl_data.entry(task_id))

    def close(self) -> None:
        pass


@functools.cache
def _all_ids(categories: tuple[str, ...]) -> list[str]:
    return [e["id"] for c in categories for e in bfcl_data.entries(c)]


@dataclass
class BFCLQuestion:
    """One single-turn question being answered."""

    task: TaskInfo
    entry: dict[str, Any]
    max_turns: int = 1
    runs_tools: bool = False
    """Calls are only recorded: BFCL scores them as sent, whatever they would cost."""

    def __post_init__(self) -> None:
        self.tools = bfcl_data.to_openai_tools(self.entry["function"])
        self.opening: list[Message] = [dict(m) for m in self.entry["question"][0]]

    def call(self, call: ToolCall) -> str:
        return RECORDED

    def after_calls(self, records: list[CallRecord]) -> Outcome:
        return self._answer([{r.call.name: r.call.arguments} for r in records])

    def after_text(self, content: str) -> Outcome:
        return self._answer(None)

    def after_invalid(self, message: Message | None) -> Outcome:
        return self._answer(decode_calls(message))

    def on_budget_end(self) -> Outcome:
        return Outcome(metrics={"solved": 0.0})

    def close(self) -> None:
        pass

    def _answer(self, calls: list[Call] | None) -> Outcome:
        verdict = score(self.entry, calls)
        text = "correct" if verdict.valid else f"wrong: {verdict.message}"
        return Outcome(reward=float(verdict.valid), stop=StopReason.SUBMITTED,
                       metrics={"solved": float(verdict.valid)}, next_state=text,
                       info={"verdict": text, "error_type": verdict.error_type})


def decode_calls(message: Message | None) -> list[Call] | None:
    """A message's tool calls as BFCL's FC decoder reads them: ``[{name: arguments}]``, or
    None ("no function call") when there are none or any arguments are not a JSON object."""
    tool_calls = (message or {}).get("tool_calls")
    if not isinstance(tool_calls, list):  # absent, or not what a JSON array parses to: no call
        return None
    calls: list[Call] = []
    for call in tool_calls:
        try:
            function = call["function"]
            arguments = parse_json(function["arguments"]) if function["arguments"].strip() else {}
            name = function["name"]
        except (TypeError, KeyError, AttributeError, ValueError):
            return None
        if not isinstance(arguments, dict) or not isinstance(name, str):
            return None
        calls.append({name: arguments})
    return calls or None


def score(entry: dict[str, Any], calls: list[Call] | None) -> Verdict:
    """BFCL's verdict on ``calls`` (None: the answer made no call) for one entry."""
    category = bfcl_data.category_of(entry["id"])
    if category in bfcl_data.RELEVANCE:
        made_call = bool(calls) and not (len(calls) == 1 and not calls[0])
        if "irrelevance" in category:
            return Verdict(True) if not made_call else Verdict(
                False, ("Valid syntax. Successfully decode AST when it should not.",),
                "irrelevance_error:decoder_success")
        return Verdict(True) if made_call else Verdict(
            False, ("Invalid syntax. Failed to decode AST when it should have.",),
            "relevance_error:decoder_failed")
    if calls is None:
        return Verdict(False, ("Invalid syntax. Failed to decode AST: the answer has no tool call.",),
                       "ast_decoder:decoder_failed")
    return check(entry["checker_function"], calls, entry["ground_truth"], category)
