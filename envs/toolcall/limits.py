"""What one tool call may cost where the tools run: bounded arguments, clipped results.

Every suite whose tools run (BFCL multi-turn's backends, tau2's domains, toolmath's
``python``) gets the same guard before a call runs, whatever the tool: a tool does not
have to know it is being attacked. :func:`arguments_problem` refuses

- a number beyond ±:data:`MAX_NUMBER` (an exponent, a precision, a count: Python's big
  integers and ``decimal``/``mpmath`` precisions make such a number cost seconds to hours
  of CPU: ``power(base=10, exponent=10**7)`` took 5.7 s, ``10**9`` would take hours);
- arguments of more than :data:`MAX_ARGUMENT_CHARS` characters of JSON in all (long
  strings, long or deep lists).

Every legitimate argument in BFCL's and tau2's ground truth is far inside both bounds
(numbers up to 987,654; at most 6,826 characters of arguments). What the guard cannot see
(a cheap-looking call that is still slow, state that grows call by call) is stopped by
the per-call time limit of the process the tools run in (:mod:`envs.toolcall.worker`).
Results are clipped by :func:`clip` like every other observation in clawgym.
"""

from __future__ import annotations

import json
from typing import Any

from envs.terminal.shell import cut_middle

MAX_NUMBER = 10**6
"""Largest magnitude of a number in a call's arguments."""
MAX_ARGUMENT_CHARS = 20_000
"""Most characters of JSON a call's arguments may take together."""
MAX_OUTPUT_CHARS = 50_000
"""The clip of a tool message where a suite sets none."""


def arguments_problem(name: str, arguments: dict[str, Any]) -> str | None:
    """Why a call of ``name`` with ``arguments`` is too costly to run; None if it is not."""
    size = len(json.dumps(arguments, ensure_ascii=False))
    if size > MAX_ARGUMENT_CHARS:
        return (f"Error: the arguments of `{name}` are {size:,} characters of JSON; the tools "
                f"here take at most {MAX_ARGUMENT_CHARS:,}. Send less.")
    for path, number in _numbers(arguments, ""):
        if abs(number) > MAX_NUMBER:
            return (f"Error: argument {path!r} of `{name}` is {_shown(number)}; the tools here "
                    f"take numbers within ±{MAX_NUMBER:,}.")
    return None


def _shown(number: int | float) -> str:
    text = repr(number)
    return text if len(text) <= 30 else f"a number of {len(text.lstrip('-'))} digits"


def _numbers(value: Any, path: str) -> list[tuple[str, int | float]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [(path, value)]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in _numbers(v, f"{path}[{i}]")]
    return []


def clip(text: str, limit: int) -> str:
    """``text`` if it fits in about ``limit`` characters, else its head and tail around a
    note of how much was cut (the terminal family's rule)."""
    if len(text) <= limit:
        return text
    return cut_middle(text, limit - 40)  # room for the marker line
