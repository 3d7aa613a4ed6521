"""The page as text: an accessibility-style snapshot with stable refs, and what changed.

``page.js`` (installed in every frame) walks the DOM and writes one line per element the
agent can see, indented under dialogs, lists, tables and forms::

    text "Select DKkQH and click Submit."
    [ref=e4] checkbox "USa"
    [ref=e6] checkbox "DKkQH" [checked]
    [ref=e7] button "Submit"
    [ref=e8] textbox "Name" value="Ada" [focused]
    [ref=e9] combobox "Colour" value="red"
      option "red" [selected]
      option "blue"

A line is ``[ref=eN] role "name"`` then ``value="..."`` and states (``[checked]``,
``[selected]``, ``[expanded]``, ``[disabled]``, ``[focused]``, ``[level=N]``). Every element
the agent can act on has a ref: form controls, links and buttons, anything with an ARIA
widget role, and anything the page made clickable (a click listener, ``onclick``,
``tabindex``, a pointer cursor), shown as ``clickable`` when it has no role. A ref is a
``data-clawgym-ref`` attribute set the first time the element is seen, so it names the
same element for as long as the element lives; elements the page creates later get new
refs. Hidden elements (``display: none``, ``visibility: hidden``, zero size, zero opacity,
``aria-hidden``) are left out and lose nothing: their ref comes back when they show again.

Playwright's own ``aria_snapshot(mode="ai")`` (1.65) also gives refs, but drops inline
elements whose only child is text, such as MiniWoB's clickable ``<span>`` links, so an
agent could not click them; hence this walker.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

REF_ATTR = "data-clawgym-ref"
REF_RE = re.compile(r"^e[1-9][0-9]{0,8}\Z")  # no page has a billion elements: longer is garbage
_REF_IN_LINE = re.compile(r"\[ref=(e[0-9]+)\]")
# location.href is unforgeable: a page's script cannot make it say another URL.
_SNAPSHOT_JS = "root => [location.href, window.__clawgym ? window.__clawgym.snapshot(root) : '']"


def take_snapshot(page: Any, root: str | None = None) -> tuple[str, str]:
    """(the URL of the document the snapshot was taken in, the snapshot of ``page`` under
    the CSS selector ``root``, default the body). Check the URL before showing the
    snapshot: the page may have navigated since anyone last looked.

    A navigation racing the call (a click that submits a form) is waited out once.
    """
    from playwright.sync_api import Error as PlaywrightError

    try:
        url, text = page.evaluate(_SNAPSHOT_JS, root)
        return url, text
    except PlaywrightError as exc:
        if "context was destroyed" not in str(exc) and "navigat" not in str(exc):
            raise
    page.wait_for_load_state("load")
    url, text = page.evaluate(_SNAPSHOT_JS, root)
    return url, text


def refs_in(snapshot: str) -> list[str]:
    """The refs a snapshot shows, in order."""
    return _REF_IN_LINE.findall(snapshot)


def clip(snapshot: str, max_chars: int) -> str:
    """``snapshot`` cut at a line boundary to at most ``max_chars``, saying how much is left out."""
    if len(snapshot) <= max_chars:
        return snapshot
    kept, size = [], 0
    lines = snapshot.splitlines()
    for line in lines:
        if size + len(line) + 1 > max_chars:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept) + f"\n... ({len(lines) - len(kept)} more lines not shown)"


def page_changes(before: str, after: str) -> str:
    """What changed between two snapshots, compactly: the lines that went (``-``) and came
    (``+``); the whole new snapshot when that is shorter; a sentence when nothing did."""
    if before == after:
        return "The page did not change."
    diff = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    changes = "\n".join(diff)
    if len(changes) >= len(after):
        return "The page now:\n" + (after or "(empty)")
    return "The page changed:\n" + changes
