"""What the preference checkers count: sentences, words, list lines, emoji.

- *Sentences* (:func:`sentences`): the text is split after ``.``, ``!`` or ``?`` runs that
  are followed by whitespace or the end, and at line breaks; empty pieces and pieces with
  no letter or digit (a bare bullet, "---") are ignored. "3.5" does not split; "Dr. Smith"
  does (the count is strict, never lenient). A reply cut off mid-sentence counts its
  fragment as a sentence.
- *Words* (:func:`words`): whitespace-separated tokens holding at least one letter or digit,
  so list markers and dashes are not words.
- *List lines*: a line whose first non-space characters are ``-``, ``*`` or ``•`` followed
  by a space (a bullet) or digits followed by ``.`` or ``)`` and a space (a numbered item).
  ``**bold**`` at the start of a line is not a bullet.
"""

from __future__ import annotations

import re

_SENTENCE_END_RE = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|\n+")
_ALNUM_RE = re.compile(r"[^\W_]")
BULLET_RE = re.compile(r"^\s*[-*•]\s+\S")
NUMBERED_RE = re.compile(r"^\s*(\d+)[.)]\s+\S")

# Emoji: the pictographic blocks, dingbats and misc symbols, regional-indicator flags,
# keycaps, and the stars/arrows-in-squares that render as emoji. Plain arrows (→), ©,
# ® and ™ are not counted. Text emoticons :) ;-) :D :P <3 count too: a user who asks for
# no emoji does not want them either.
_EMOJI_RE = re.compile(
    "["
    "\U0001F000-\U0001FAFF"  # mahjong .. symbols & pictographs extended-A (incl. flags, faces)
    "\u2600-\u27BF"          # misc symbols (☀ ☺ ♥) and dingbats (✂ ✅ ✈ ✨ ✔)
    "\u2B00-\u2BFF"          # ⭐ ⬛ ⬜ ⭕ and friends
    "\u231A\u231B\u23E9-\u23FA\u24C2\u3030\u303D\u3297\u3299"
    "\u20E3"                 # combining keycap (1️⃣)
    "]"
    r"|(?<!\S)[:;]-?[)(DPp](?![\w])"
    r"|(?<![\w<])<3(?![\d.])"
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see the module docstring)."""
    return [p.strip() for p in _SENTENCE_END_RE.split(text) if _ALNUM_RE.search(p)]


def words(text: str) -> list[str]:
    """Whitespace-separated tokens that hold at least one letter or digit."""
    return [w for w in text.split() if _ALNUM_RE.search(w)]


def has_emoji(text: str) -> bool:
    """Whether ``text`` holds an emoji or a text emoticon (see ``_EMOJI_RE``)."""
    return _EMOJI_RE.search(text) is not None


def nonblank_lines(text: str) -> list[str]:
    """The lines of ``text`` that hold more than whitespace."""
    return [line for line in text.splitlines() if line.strip()]
