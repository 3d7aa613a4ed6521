"""Did the agent tell the user what a tau2 task says it must (``communicate_info``)?

tau2's own check (:func:`upstream_communicated`, ``evaluate_communicate_info``) passes when
each value is a *substring* of some agent message, lower-cased with commas removed. A
reply listing the numbers 0 to 99 therefore communicates every small count ("4" is in
"14"), and an agent trained on that reward learns to list. :func:`communicated`, the
default, counts a value only

- as **whole tokens**: a number equals a number of the same value (``481.5`` is
  ``$481.50``, ``1,093.34`` is ``1093.34``, but ``14`` does not hold ``4``); words match
  whole words, case aside (``IL`` is not in ``Illinois``), in order (``20 hours``);
- in a reply that is **not a list of candidates** for it: a reply may state each of the
  task's values of a number's *shape* (digits before the point, and whether it has a
  fraction) plus one other number of that shape, no more. "You can bring 4 suitcases,
  2 per passenger" communicates ``4``; "0, 1, 2, ..., 99" states ten one-digit numbers
  and does not. Dates (``2024-05-15``) and clock times (``10:30``) are not counted as
  candidates.

What it still lets through, stated: a reply may hedge between two values of a shape
(``3 or 4``), and lists spread over several replies are judged reply by reply; words are
not policed as candidates (a reply listing every fabric names ``cotton``).
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DATES_AND_TIMES = re.compile(r"\b\d{4}[-/]\d{1,2}[-/]\d{1,2}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b")
_TOKEN = re.compile(r"[a-z0-9]+(?:\.\d+)?")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def upstream_communicated(values: list[str], replies: list[str]) -> bool:
    """tau2's rule: each value a substring of some reply (lower-cased, commas removed)."""
    said = [reply.lower().replace(",", "") for reply in replies]
    return all(any(value.lower() in reply for reply in said) for value in values)


def communicated(values: list[str], replies: list[str]) -> bool:
    """clawgym's rule (see the module docstring): each value in some reply, as whole
    tokens, where that reply is not a list of candidates for it."""
    allowed = Counter(_shape(n) for value in set(values) for n in _tokens(value) if _NUMBER.fullmatch(n))
    read = [(_tokens(reply), _numbers(reply)) for reply in replies]
    return all(any(_holds(tokens, _tokens(value)) and not _lists(numbers, value, allowed)
                   for tokens, numbers in read) for value in values)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(_THOUSANDS.sub("", text.lower()))


def _numbers(reply: str) -> Counter[tuple[int, bool]]:
    """How many distinct numbers of each shape a reply states, dates and times aside."""
    numbers = {Decimal(t): _shape(t) for t in _tokens(_DATES_AND_TIMES.sub(" ", reply))
               if _NUMBER.fullmatch(t)}
    return Counter(numbers.values())


def _shape(number: str) -> tuple[int, bool]:
    whole, _, fraction = number.partition(".")
    return len(whole.lstrip("0") or "0"), bool(fraction)


def _holds(tokens: list[str], wanted: list[str]) -> bool:
    """``wanted`` appears in ``tokens`` as a run, numbers compared by value."""
    return bool(wanted) and any(all(_same(tokens[i + j], w) for j, w in enumerate(wanted))
                                for i in range(len(tokens) - len(wanted) + 1))


def _same(token: str, wanted: str) -> bool:
    if _NUMBER.fullmatch(token) and _NUMBER.fullmatch(wanted):
        return Decimal(token) == Decimal(wanted)
    return token == wanted


def _lists(numbers: Counter[tuple[int, bool]], value: str, allowed: Counter[tuple[int, bool]]) -> bool:
    """Whether a reply states more numbers of one of ``value``'s number shapes than the
    task has values of that shape, plus one: a list of candidates for it."""
    return any(numbers[_shape(n)] > allowed[_shape(n)] + 1 for n in _tokens(value) if _NUMBER.fullmatch(n))
