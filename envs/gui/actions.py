"""The browser env's tools: their schemas, and carrying one call out on a page.

Refs (``e12``) come from the latest snapshot (``envs.gui.snapshot``). A call the page
cannot take — a ref no element has, a hidden element, a key Playwright does not know,
typing into a button, an option the dropdown lacks, an element another one covers — is
the agent's mistake: :class:`ActionError`, whose message the agent reads. A browser that
fails underneath is not: the session turns that into ``BrowserError`` (an ``EnvError``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from envs.gui.session import BrowserSession
from envs.gui.snapshot import REF_ATTR, REF_RE
from envs.messages import ToolCall, tool_schema

MAX_TEXT = 1000
"""Most characters one ``type`` call may type."""
KEYED_CHARS = 100
"""Of a text, the last this many characters are typed key by key (about 3 ms a key); the
rest goes in at once, as a paste does (one ``input`` event), so ``MAX_TEXT`` characters
take well under a second. A page that reads the field on a key (a search box, a terminal
of MiniWoB's) gets keys after the whole text is in."""
SCROLL_FRACTION = 0.8
"""How much of the viewport (or element) one ``scroll`` moves."""

_REF = {"type": "string", "description": "the element's ref from the page snapshot, e.g. \"e12\""}
TOOLS_BY_NAME = {
    "click": tool_schema("click", "Click an element.", {"ref": _REF}),
    "type": tool_schema(
        "type", f"Replace the text in a text field with `text` (its last {KEYED_CHARS} characters "
                "typed key by key, the rest pasted). Without `ref`, type into the focused element.",
        {"ref": _REF, "text": {"type": "string", "maxLength": MAX_TEXT,
                               "description": f"what to type, at most {MAX_TEXT} characters"}},
        required=["text"]),
    "press": tool_schema("press", "Press a key or a combination on the focused element.", {
        "key": {"type": "string", "description": "e.g. Enter, Tab, ArrowDown, Backspace, Control+a"}}),
    "select": tool_schema("select", "Choose an option of a dropdown (combobox or listbox).", {
        "ref": _REF, "option": {"type": "string", "description": "the option's text (or value)"}}),
    "scroll": tool_schema(
        "scroll", "Scroll the page, or the element `ref`, by most of a screen.",
        {"direction": {"type": "string", "enum": ["up", "down", "left", "right"]}, "ref": _REF},
        required=["direction"]),
    "hover": tool_schema("hover", "Move the mouse over an element.", {"ref": _REF}),
    "click_xy": tool_schema("click_xy", "Click at a point of the screenshot, in its pixels "
                                        "(x from the left, y from the top).", {
        "x": {"type": "number", "minimum": 0, "maximum": 4000},
        "y": {"type": "number", "minimum": 0, "maximum": 4000}}),
    "done": tool_schema("done", "Say the task is finished; the episode ends and is scored.", {}),
}
REF_TOOLS = ("click", "select", "hover")
"""Tools that only work with a ref, left out when the agent sees no snapshot."""


def tools_for(obs_mode: str) -> list[dict[str, Any]]:
    """The tool schemas an agent gets: every tool, or without the ref-only ones when it
    sees a screenshot and no snapshot (``obs_mode="screenshot"``)."""
    return [schema for name, schema in TOOLS_BY_NAME.items()
            if obs_mode != "screenshot" or name not in REF_TOOLS]


class ActionError(Exception):
    """The agent's action cannot be carried out; the message says why, for the agent."""


def perform(session: BrowserSession, call: ToolCall, *, timeout_s: float,
            viewport: tuple[int, int]) -> str:
    """Carry out one tool call (not ``done``) on the session's page; return what happened.

    Raises :class:`ActionError` for the agent's mistakes; a failing browser raises
    ``BrowserError`` (through the caller's ``session.guard``).
    """
    from playwright.sync_api import Error as PlaywrightError

    page = session.page
    args = call.arguments
    timeout_ms = timeout_s * 1000
    try:
        if call.name == "click":
            ref = _ref(args)
            return _click(_element(page, ref), ref, timeout_ms)
        if call.name == "hover":
            ref = _ref(args)
            _element(page, ref).hover(timeout=timeout_ms)
            return f"The mouse is over [ref={ref}]."
        if call.name == "type":
            return _type(page, args, timeout_ms)
        if call.name == "press":
            key = args.get("key")
            if not isinstance(key, str) or not key.strip() or len(key) > 60:
                raise ActionError("Error: `key` must name a key, e.g. \"Enter\", \"Tab\" or \"Control+a\".")
            _press(page, key.strip())
            return f"Pressed {key.strip()}."
        if call.name == "select":
            return _select(page, args, timeout_ms)
        if call.name == "scroll":
            return _scroll(page, args)
        if call.name == "click_xy":
            x, y = _point(args, viewport)
            page.mouse.click(x, y)
            return f"Clicked at ({x:g}, {y:g})."
    except PlaywrightError as exc:
        if session.broken is not None or page.is_closed() or _INFRASTRUCTURE.search(str(exc)):
            raise
        raise ActionError(f"Error: {call.name} failed: {_reason(exc)}") from None
    raise ActionError(f"Error: unknown tool {_shown(call.name)}.")


# Playwright errors that mean the browser failed, not the agent.
_INFRASTRUCTURE = re.compile(r"Target crashed|Target (page, context or browser )?(has been )?closed|"
                             r"Browser (has been )?closed|Connection closed")


def _ref(args: dict[str, Any]) -> str:
    ref = args.get("ref")
    if not isinstance(ref, str) or not REF_RE.match(ref.strip()):
        raise ActionError(f"Error: `ref` must be an element's ref from the page snapshot, such as "
                          f"\"e3\"; got {ref!r:.40}.")
    return ref.strip()


def _element(page: Any, ref: str) -> Any:
    """The element with ``ref`` in any frame of the page, if it is there and visible."""
    selector = f'[{REF_ATTR}="{ref}"]'
    for frame in page.frames:
        locator = frame.locator(selector)
        if locator.count():
            element = locator.first
            if not element.is_visible():
                raise ActionError(f"Error: [ref={ref}] is hidden now (not displayed on the page); "
                                  "act on an element the latest snapshot shows.")
            return element
    raise ActionError(f"Error: no element has [ref={ref}] now (it was removed, or never "
                      "existed); use a ref from the latest page snapshot.")


# Whether the element is what a click at its centre would hit (after scrolling it into view).
_HIT_JS = """el => {
  const box = el.getBoundingClientRect();
  if (box.bottom < 0 || box.right < 0 || box.top > innerHeight || box.left > innerWidth)
    el.scrollIntoView({block: 'center', inline: 'center'});
  const r = el.getBoundingClientRect();
  const hit = el.ownerDocument.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return !hit || hit === el || el.contains(hit) || (hit.tagName === 'LABEL' && hit.control === el);
}"""
# MiniWoB's own element click (core.elementClick), for an element another one covers.
_DOM_CLICK_JS = "el => { el.click(); if (el.focus) el.focus(); }"


def _click(element: Any, ref: str, timeout_ms: float) -> str:
    """A real mouse click at the element's centre; when another element covers that point
    (MiniWoB draws buttons at random places, sometimes on top of each other), the element
    is clicked directly, as MiniWoB's own element click does."""
    if element.evaluate(_HIT_JS):
        element.click(timeout=timeout_ms)
        return f"Clicked [ref={ref}]."
    element.evaluate(_DOM_CLICK_JS)
    return f"Clicked [ref={ref}] (another element covers it, so it was clicked directly)."


def _type(page: Any, args: dict[str, Any], timeout_ms: float) -> str:
    text = args.get("text")
    if not isinstance(text, str):
        raise ActionError(f"Error: `text` must be a string (what to type, at most {MAX_TEXT} characters).")
    if len(text) > MAX_TEXT:
        raise ActionError(f"Error: `text` has {len(text)} characters, more than the {MAX_TEXT} one "
                          "call may type; split it over several calls.")
    pasted, keyed = text[:-KEYED_CHARS], text[-KEYED_CHARS:]
    if args.get("ref") is None:
        if pasted:
            page.keyboard.insert_text(pasted)
        page.keyboard.type(keyed)
        return f"Typed {_shown(text)} into the focused element."
    ref = _ref(args)
    element = _element(page, ref)
    editable = element.evaluate("el => el.isContentEditable || ((el.tagName === 'INPUT' || "
                                "el.tagName === 'TEXTAREA') && !el.readOnly && !el.disabled && "
                                "!['checkbox','radio','button','submit','reset','file','image',"
                                "'range','color','hidden'].includes(el.type))")
    if not editable:
        raise ActionError(f"Error: [ref={ref}] is not a text field; type into a textbox.")
    element.fill(pasted, timeout=timeout_ms)  # replaces what was there, and focuses the field
    page.keyboard.type(keyed)  # KEYED_CHARS keys at most: bounded without a timeout
    return f"Typed {_shown(text)} into [ref={ref}]."


def _select(page: Any, args: dict[str, Any], timeout_ms: float) -> str:
    ref = _ref(args)
    option = args.get("option")
    if not isinstance(option, str):
        raise ActionError("Error: `option` must be the text of one of the dropdown's options.")
    element = _element(page, ref)
    options = element.evaluate("el => el.tagName === 'SELECT' ? Array.from(el.options).map("
                               "o => [o.textContent.replace(/\\s+/g, ' ').trim(), o.value]) : null")
    if options is None:
        raise ActionError(f"Error: [ref={ref}] is not a dropdown; `select` works on a combobox or listbox.")
    wanted = option.strip()
    for matches in (lambda label, value: label == wanted, lambda label, value: value == wanted,
                    lambda label, value: label.lower() == wanted.lower()):
        for label, value in options:
            if matches(label, value):
                element.select_option(value=value, timeout=timeout_ms)
                return f"Selected {_shown(label)} in [ref={ref}]."
    shown = ", ".join(_shown(label, 40) for label, _ in options[:20])
    more = f" and {len(options) - 20} more" if len(options) > 20 else ""
    raise ActionError(f"Error: [ref={ref}] has no option {_shown(option)}; its options: {shown}{more}.")


_SCROLL_JS = """([el, dx, dy]) => {
  const target = el || document.scrollingElement || document.documentElement;
  const before = [target.scrollLeft, target.scrollTop];
  const width = el ? el.clientWidth : window.innerWidth, height = el ? el.clientHeight : window.innerHeight;
  target.scrollBy(dx * width, dy * height);
  return before[0] !== target.scrollLeft || before[1] !== target.scrollTop;
}"""
_DIRECTIONS = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def _scroll(page: Any, args: dict[str, Any]) -> str:
    direction = args.get("direction")
    if not isinstance(direction, str) or direction not in _DIRECTIONS:
        raise ActionError(f"Error: `direction` must be one of {', '.join(_DIRECTIONS)}; got {direction!r:.20}.")
    dx, dy = (SCROLL_FRACTION * d for d in _DIRECTIONS[direction])
    if args.get("ref") is None:
        moved = page.evaluate(_SCROLL_JS, [None, dx, dy])
        what = "the page"
    else:
        ref = _ref(args)
        moved = _element(page, ref).evaluate(f"(el, d) => ({_SCROLL_JS})([el, d[0], d[1]])", [dx, dy])
        what = f"[ref={ref}]"
    return f"Scrolled {what} {direction}." if moved else \
        f"Scrolled {what} {direction}: it did not move (already at the {'end' if dy > 0 or dx > 0 else 'start'})."


def _point(args: dict[str, Any], viewport: tuple[int, int]) -> tuple[float, float]:
    x, y = (_number(args.get(name)) for name in ("x", "y"))
    if x is None or y is None or math.isnan(x) or math.isnan(y):
        raise ActionError("Error: `x` and `y` must be numbers (pixels of the screenshot).")
    if not (0 <= x < viewport[0] and 0 <= y < viewport[1]):
        raise ActionError(f"Error: ({x:g}, {y:g}) is outside the page, which is "
                          f"{viewport[0]}x{viewport[1]} pixels.")
    return x, y


def _number(value: object) -> float | None:
    """``value`` as a float (an int too large for one is infinite), None if not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _press(page: Any, key: str) -> None:
    """Press ``key`` as Playwright's ``keyboard.press`` does ("Control+a": the modifiers
    down, the key pressed, the modifiers up), but release the modifiers whatever happens:
    Playwright's leaves them held when the last key is unknown ("Control+Nope"), and
    every later key of the episode would come with Control."""
    *modifiers, last = _split_keys(key)
    held: list[str] = []
    try:
        for modifier in modifiers:
            page.keyboard.down(modifier)
            held.append(modifier)
        page.keyboard.press(last)
    finally:
        for modifier in reversed(held):
            page.keyboard.up(modifier)


def _split_keys(key: str) -> list[str]:
    """``key`` split at ``+`` as Playwright splits it (a ``+`` that starts a part is the
    key itself: ``"Shift++"`` is Shift and ``+``)."""
    parts, building = [], ""
    for char in key:
        if char == "+" and building:
            parts.append(building)
            building = ""
        else:
            building += char
    parts.append(building)
    return parts


def _reason(exc: BaseException) -> str:
    """Playwright's message cut to what an agent can use: the first line, and the line
    that says what is in the way (e.g. another element intercepting the click)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    first = first.split(": ", 1)[-1] if first.startswith(("Locator.", "Keyboard.", "Mouse.")) else first
    detail = next((line.lstrip("- ") for line in lines if "intercepts pointer events" in line
                   or "not visible" in line or "not enabled" in line), "")
    reason = f"{first} ({detail})" if detail and detail not in first else first
    return reason if len(reason) <= 300 else reason[:300] + "..."


def _shown(text: str, limit: int = 60) -> str:
    """``text`` quoted for a tool message, cut after ``limit`` characters of its quoted
    form (an agent's text may be long, or all escapes), with its length when cut."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else f"{quoted[:limit]}... ({len(text)} characters)"
