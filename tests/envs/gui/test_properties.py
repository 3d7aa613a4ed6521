"""Property tests of the browser env's tools against hostile arguments: megabyte strings,
control characters, negative, huge and 400-digit coordinates, refs no element has, key
combinations ending in a key that does not exist, values of the wrong type. Each is the
agent's mistake: a tool message that starts with ``Error:``, ``invalid_action`` 1, the
page untouched (nothing held down, nothing typed), and every message and
``info["next_state"]`` bounded whatever the argument's size.

One episode on the widgets page serves every example (a failed action changes nothing);
``CLAWGYM_PROPERTY_EXAMPLES`` raises the number of examples, e.g. to 2000.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.gui import BrowserEnv
from envs.gui.actions import MAX_TEXT
from envs.gui.oracles import tool_call
from envs.gui.snapshot import REF_RE

pytestmark = pytest.mark.browser

EXAMPLES = int(os.environ.get("CLAWGYM_PROPERTY_EXAMPLES", 0)) or 40
TOOL_MESSAGE_MAX = 600
"""Most characters a tool message may have, whatever the arguments were."""
HUGE = "y" * 1_000_000
CONTROL = "".join(map(chr, range(1, 32))) + "\x7f\u202e\u200b\ufeff"
NOT_STRINGS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                        st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
HOSTILE_STRINGS = st.sampled_from([HUGE, CONTROL, CONTROL * 40, "\x00", "e2\x00", "\u202ee2"])
BAD_REFS = st.one_of(
    NOT_STRINGS, HOSTILE_STRINGS,
    st.sampled_from(["", " ", "e0", "e-1", "E2", "e2e", "#go", "button", "e" + "9" * 5000]),
    st.integers(min_value=100, max_value=10**30).map(lambda n: f"e{n}"),  # a ref no element has
    st.text(max_size=20).filter(lambda s: not REF_RE.match(s.strip())))
SHORT_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
BAD_COORDINATES = st.one_of(
    st.floats(max_value=-0.001, allow_nan=False, allow_infinity=False),
    st.floats(min_value=800, allow_nan=False, allow_infinity=False),
    st.integers(min_value=800, max_value=10**400), st.integers(min_value=-10**400, max_value=-1),
    st.none(), st.booleans(), st.sampled_from(["5", "", HUGE]), st.lists(st.integers(), max_size=2))


def _not_an_option(value: object) -> bool:
    return not isinstance(value, str) or value.strip().lower() not in ("red", "blue", "r", "b")


HOSTILE_CALLS = st.one_of(
    st.tuples(st.sampled_from(["click", "hover"]), st.fixed_dictionaries({}, optional={"ref": BAD_REFS})),
    st.tuples(st.just("select"), st.fixed_dictionaries({"ref": BAD_REFS, "option": st.just("Red")})),
    st.tuples(st.just("select"), st.fixed_dictionaries({"ref": st.just("e7"), "option": st.one_of(
        NOT_STRINGS, HOSTILE_STRINGS, st.text(max_size=20)).filter(_not_an_option)})),
    st.tuples(st.just("type"), st.fixed_dictionaries({"text": st.one_of(
        NOT_STRINGS, HOSTILE_STRINGS.filter(lambda s: len(s) > MAX_TEXT), st.just("a" * (MAX_TEXT + 1)))},
        optional={"ref": st.just("e6")})),
    st.tuples(st.just("type"), st.fixed_dictionaries({
        "text": SHORT_TEXT, "ref": st.one_of(BAD_REFS.filter(lambda r: r is not None), st.just("e2"))})),
    st.tuples(st.just("press"), st.fixed_dictionaries({}, optional={"key": st.one_of(
        NOT_STRINGS, HOSTILE_STRINGS, st.sampled_from([
            "", " ", "\t", "NoSuchKey", "Shift+Nope", "Control+Shift+Nope", "Alt+Meta+Nope", "Control+",
            "++", "a" * 61, "中"]))})),
    st.tuples(st.just("scroll"), st.fixed_dictionaries({"direction": st.one_of(
        NOT_STRINGS, HOSTILE_STRINGS, st.sampled_from(["", "UP", "sideways", "up down"]))},
        optional={"ref": st.just("e8")})),
    st.tuples(st.just("scroll"), st.fixed_dictionaries({
        "direction": st.just("down"), "ref": BAD_REFS.filter(lambda r: r is not None)})),
    st.tuples(st.just("click_xy"), st.one_of(
        st.fixed_dictionaries({"x": BAD_COORDINATES, "y": st.just(5)}),
        st.fixed_dictionaries({"x": st.just(5), "y": BAD_COORDINATES}),
        st.fixed_dictionaries({}, optional={"x": BAD_COORDINATES, "y": BAD_COORDINATES}))),
)


@pytest.fixture(scope="module")
def env(browser_ok: None, pages: Path) -> Iterator[BrowserEnv]:
    """One open episode on the widgets page for every example."""
    made = BrowserEnv(suite="user", tasks_dir=str(pages), tasks=["widgets"], action_timeout_s=1.0,
                      page_timeout_s=5.0, max_turns=100_000)
    made.reset(seed=0, options={"task_id": "widgets"})
    yield made
    made.close()


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(call=HOSTILE_CALLS)
def test_a_hostile_argument_is_a_clear_error_and_leaves_the_page_as_it_was(env, call):
    name, arguments = call
    obs, reward, terminated, truncated, info = env.step(tool_call(name, arguments, "call_1"))
    assert (reward, terminated, truncated, "error" in info) == (0.0, False, False, False), info.get("error")
    (tool, page), limit = obs, env.max_snapshot_chars
    assert tool["content"].startswith("Error:") and len(tool["content"]) <= TOOL_MESSAGE_MAX, tool["content"][:200]
    assert info["metrics"]["invalid_action"] == 1.0
    assert len(page["content"]) <= limit + 100
    assert info["next_state"] == f"{tool['content']}\nThe page did not change."


def test_after_hostile_arguments_the_page_takes_keys_and_clicks_as_before(env):
    for key in ("Shift+Nope", "Control+Alt+Nope", "Meta+Nope"):
        text, *_ = env.step(tool_call("press", {"key": key}, "call_1"))[0]
        assert text["content"].startswith("Error: press failed: Unknown key")
    obs, *_ = env.step(tool_call("type", {"ref": "e6", "text": "Ada"}, "call_2"))
    assert obs[0]["content"] == "Typed 'Ada' into [ref=e6]."
    obs, *_ = env.step(tool_call("click", {"ref": "e2"}, "call_3"))
    assert obs[0]["content"] == "Clicked [ref=e2]."
    assert env.evaluate("() => [document.getElementById('name').value, window.log.slice(-1)]") == ["Ada", ["go"]]
