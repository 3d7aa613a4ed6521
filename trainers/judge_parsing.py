"""The text side of the judge (PRM) and the hint judge: parsing, voting, hint selection.

No model is called here. The choices, as OpenClaw-RL states them (the methods page of the
docs, docs/concepts/methods.md), plus the ones it leaves open:

- **Scores**: the judge answers ``\\boxed{1}`` (progress), ``\\boxed{-1}`` (correction,
  redo, error) or ``\\boxed{0}`` (ambiguous). The *last* complete ``\\boxed{...}`` counts,
  since a judge that reasons first may quote the format before answering. Its content,
  stripped, must be exactly ``1``, ``+1``, ``0`` or ``-1`` (``+0``/``-0`` read as 0);
  anything else is a failed parse (``None``).
- **Vote**: over ``m`` judge samples, failed parses are ignored; the most frequent valid
  score wins; a tie for the top count, or no valid vote, gives 0.
- **Hints**: the hint judge adds ``[HINT_START]...[HINT_END]``; the last such span
  counts, stripped, and an empty one is no hint. Of the ``m`` outputs, the longest hint
  among the positive votes (``\\boxed{1}``) is kept if it is longer than 10 characters
  (ties go to the earliest); hints under other votes are ignored.
- **Teacher prompt**: the kept hint is appended to the last user message as
  ``"\\n\\n[user's hint / instruction]\\n" + hint``.
"""

from __future__ import annotations

import copy
import re
from collections import Counter

from envs.messages import Message

VALID_SCORES = (1, 0, -1)
"""The scores a judge may give."""

HINT_MIN_CHARS = 10
"""A hint must be longer than this many characters (after stripping) to be kept."""

HINT_HEADER = "\n\n[user's hint / instruction]\n"
"""Joins the hint to the last user message of the teacher's prompt."""

_BOXED_OPEN = "\\boxed{"
_SCORE_RE = re.compile(r"[+-]?[01]")
_HINT_RE = re.compile(r"\[HINT_START\](.*?)\[HINT_END\]", re.DOTALL)


def parse_boxed(text: str) -> int | None:
    """The score in the last complete ``\\boxed{...}`` of ``text``; None if absent or invalid.

    Braces inside the box are matched, so ``\\boxed{\\text{1}}`` is one (invalid) box,
    not a box around ``\\text{1``. Whitespace around the score is allowed.
    """
    contents = _boxed_contents(text)
    if not contents:
        return None
    score = contents[-1].strip()
    if not _SCORE_RE.fullmatch(score):
        return None
    return int(score)


def majority_vote(votes: list[int | None]) -> int:
    """The score most of the valid votes agree on; 0 on a tie for the top or no valid vote.

    ``None`` (a failed parse) and anything outside {1, 0, -1} are ignored.
    """
    counts = Counter(v for v in votes if v in VALID_SCORES)
    ranked = counts.most_common()
    if not ranked:
        return 0
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return 0
    return ranked[0][0]


def parse_hint(text: str) -> tuple[int | None, str | None]:
    """``(vote, hint)`` from one hint-judge output.

    The vote is :func:`parse_boxed` of the text; the hint is the stripped text of the
    last ``[HINT_START]...[HINT_END]`` span, or None when there is none or it is empty.
    """
    vote = parse_boxed(text)
    spans = _HINT_RE.findall(text)
    if not spans:
        return vote, None
    # A non-greedy match from an earlier, unclosed [HINT_START] would swallow a later one.
    hint = spans[-1].rsplit("[HINT_START]", 1)[-1].strip()
    return vote, hint or None


def select_hint(
    outputs: list[tuple[int | None, str | None]], min_chars: int = HINT_MIN_CHARS
) -> str | None:
    """The longest hint among the positive votes, if longer than ``min_chars``; else None.

    Args:
        outputs: ``(vote, hint)`` pairs from :func:`parse_hint`, one per judge sample.
        min_chars: the kept hint must have strictly more characters than this.

    Returns:
        The hint, or None: the turn then yields no OPD sample. Hints under a vote other
        than 1 are ignored; among equally long hints the earliest wins.
    """
    best: str | None = None
    for vote, hint in outputs:
        if vote != 1 or hint is None:
            continue
        hint = hint.strip()
        if best is None or len(hint) > len(best):
            best = hint
    if best is None or len(best) <= min_chars:
        return None
    return best


def append_hint(messages: list[Message], hint: str) -> list[Message]:
    """A copy of ``messages`` with ``hint`` appended to the last user message.

    The hint is joined by :data:`HINT_HEADER`. String content gets the text appended;
    list content (parts) gets a new text part; ``None`` content becomes the header and
    hint. With no user message, a new user message ``"[user's hint / instruction]\\n" +
    hint`` is appended. The input is never mutated.
    """
    out = copy.deepcopy(messages)
    addition = HINT_HEADER + hint
    for message in reversed(out):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content.append({"type": "text", "text": addition})
        else:
            message["content"] = (content or "") + addition
        return out
    out.append({"role": "user", "content": addition.lstrip("\n")})
    return out


def _boxed_contents(text: str) -> list[str]:
    """The contents of every complete, brace-balanced ``\\boxed{...}`` in order."""
    contents: list[str] = []
    start = text.find(_BOXED_OPEN)
    while start != -1:
        body_start = start + len(_BOXED_OPEN)
        depth, i = 1, body_start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            contents.append(text[body_start : i - 1])
        start = text.find(_BOXED_OPEN, body_start)
    return contents
