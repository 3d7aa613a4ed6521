"""The browser env on a real Chromium: the snapshot and its refs, each tool, invalid refs,
screenshots, MiniWoB solved by its oracle and failed by an idle agent, and the contract."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from envs.checker import check_env
from envs.gui import BrowserEnv
from envs.gui.actions import MAX_TEXT
from envs.gui.miniwob import DEFAULT_SUBSET, EXCLUDED
from envs.gui.oracles import run_oracle, tool_call
from envs.gui.snapshot import refs_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def env(browser_ok: None, pages: Path) -> Iterator[BrowserEnv]:
    """One env (one Chromium) for the module's tests, each starting its own episode."""
    made = BrowserEnv(suite="user", tasks_dir=str(pages), tasks="all", action_timeout_s=1.0,
                      page_timeout_s=5.0, max_turns=20)
    yield made
    made.close()


def act(env: BrowserEnv, name: str, **arguments: object) -> tuple[str, dict]:
    """One tool call; (the tool message's text, info)."""
    obs, _, _, _, info = env.step(tool_call(name, arguments, "call_1"))
    return obs[0]["content"], info


def widgets(env: BrowserEnv) -> str:
    """A fresh episode on the widgets page; the page as the agent first sees it."""
    obs, _ = env.reset(seed=0, options={"task_id": "widgets"})
    return obs[1]["content"]


def test_the_snapshot_gives_every_actionable_element_a_ref(env):
    page = widgets(env)
    assert page.startswith("Task: Press Go.\n\nThe page:\n")
    lines = page.split("The page:\n", 1)[1].splitlines()
    assert 'heading "Widgets" [level=1]' in lines  # shown, but nothing to act on: no ref
    assert '[ref=e1] clickable "nam"' in lines  # a <span> with a click listener
    assert '[ref=e2] button "Go"' in lines
    assert '[ref=e5] checkbox "I agree"' in lines  # named by its label, which is not repeated
    assert '[ref=e6] textbox "Name" value=""' in lines
    assert '[ref=e7] combobox "Colour" value="Red"' in lines
    assert '  option "Blue"' in lines
    assert not any("Ghost" in line or "Later" in line for line in lines)  # hidden: left out
    assert not any("I agree" in line and line.startswith("text") for line in lines)
    assert refs_in(page) == [f"e{i}" for i in range(1, 10)]


def test_refs_stay_with_their_elements_as_the_page_changes(env):
    widgets(env)
    text, info = act(env, "click", ref="e3")  # Show: reveals the "Later" button
    assert text == "Clicked [ref=e3]."
    assert info["next_state"] == ('Clicked [ref=e3].\nThe page changed:\n-[ref=e3] button "Show"\n'
                                  '+[ref=e10] button "Later"\n+[ref=e3] button "Show" [focused]')
    text, info = act(env, "click", ref="e2")  # Go renames itself
    assert '+[ref=e2] button "Went" [focused]' in info["next_state"]
    act(env, "click", ref="e5")  # check the box; nothing else moves
    obs, *_ = env.step(tool_call("click", {"ref": "e4"}, "call_2"))  # remove Go
    page = obs[-1]["content"]
    assert '[ref=e5] checkbox "I agree" [checked]' in page and '[ref=e10] button "Later"' in page
    assert "[ref=e2]" not in page and '[ref=e9] button "Hover me"' in page


def test_each_tool_acts_on_the_page(env):
    widgets(env)
    assert act(env, "click", ref="e1")[0] == "Clicked [ref=e1]."
    assert act(env, "type", ref="e6", text="Ada")[0] == "Typed 'Ada' into [ref=e6]."
    assert act(env, "press", key="Enter")[0] == "Pressed Enter."
    assert act(env, "select", ref="e7", option="Blue")[0] == "Selected 'Blue' in [ref=e7]."
    assert act(env, "hover", ref="e9")[0] == "The mouse is over [ref=e9]."
    assert act(env, "scroll", direction="down", ref="e8")[0] == "Scrolled [ref=e8] down."
    assert act(env, "scroll", direction="down")[0] == "Scrolled the page down."
    assert act(env, "scroll", direction="up")[0] == "Scrolled the page up."
    assert "did not move" in act(env, "scroll", direction="up")[0]
    go = env.evaluate("() => { const r = document.getElementById('go').getBoundingClientRect(); "
                      "return [r.x + r.width / 2, r.y + r.height / 2]; }")
    assert act(env, "click_xy", x=go[0], y=go[1])[0].startswith("Clicked at (")
    state = env.evaluate("() => [window.log, document.getElementById('name').value, "
                         "document.getElementById('colour').value, window.hovered, "
                         "document.getElementById('box').scrollTop > 0]")
    assert state == [["word", "key:Delete", "key:A", "key:d", "key:a", "key:Enter", "go"], "Ada", "b", True, True]
    obs, reward, terminated, truncated, info = env.step(tool_call("done", {}, "call_done"))
    assert (reward, terminated, truncated, info["stop_reason"]) == (1.0, True, False, "submitted")
    assert info["metrics"]["solved"] == 1.0 and obs[0]["content"] == "Done. The task is scored: reward 1."


def test_type_takes_its_documented_maximum_and_refuses_more(env):
    text = ("Grüße, 中文 and more; " * 60)[:MAX_TEXT - 4] + "done"
    widgets(env)
    reply, info = act(env, "type", ref="e6", text=text)
    assert reply.startswith("Typed 'Grüße, 中文") and reply.endswith(f"({MAX_TEXT} characters) into [ref=e6].")
    assert len(reply) < 200 and info["metrics"]["invalid_action"] == 0.0
    # The page gets the keys of the text's end, so handlers that read the field on a key see all of it.
    assert env.evaluate("() => [document.getElementById('name').value, window.log.slice(-4)]") == \
        [text, ["key:d", "key:o", "key:n", "key:e"]]
    widgets(env)
    act(env, "click", ref="e6")
    reply, info = act(env, "type", text=text)  # into the focused element
    assert reply.endswith("characters) into the focused element.") and info["metrics"]["invalid_action"] == 0.0
    assert env.evaluate("() => document.getElementById('name').value") == text
    reply, info = act(env, "type", ref="e6", text=text + "!")
    assert reply == (f"Error: `text` has {MAX_TEXT + 1} characters, more than the {MAX_TEXT} one call "
                     "may type; split it over several calls.")
    assert info["metrics"]["invalid_action"] == 1.0
    assert env.evaluate("() => document.getElementById('name').value") == text


def test_next_state_is_clipped_like_the_page(env):
    env.reset(seed=0, options={"task_id": "large"})
    obs, _, _, _, info = env.step(tool_call("click", {"ref": env.ref_of("#grow")}, "call_1"))
    page = obs[-1]["content"]
    assert "5000 more lines not shown" not in page and "more lines not shown" in page
    for text in (page, info["next_state"]):
        assert len(text) <= env.max_snapshot_chars + 100 and "more lines not shown" in text


def test_a_covered_element_is_clicked_directly_as_miniwob_does(env):
    obs, _ = env.reset(seed=0, options={"task_id": "covered"})
    assert obs[1]["content"].endswith('[ref=e1] button "Under"')  # the cover has nothing to act on
    text, _ = act(env, "click", ref="e1")
    assert text == "Clicked [ref=e1] (another element covers it, so it was clicked directly)."
    assert env.evaluate("() => window.clicked") is True


@pytest.mark.parametrize("call, why", [
    (("click", {"ref": "e99"}), "no element has [ref=e99] now"),
    (("click", {"ref": "button"}), "`ref` must be an element's ref"),
    (("type", {"ref": "e2", "text": "x"}), "[ref=e2] is not a text field"),
    (("select", {"ref": "e7", "option": "Green"}), "has no option 'Green'; its options: 'Red', 'Blue'"),
    (("press", {"key": "NoSuchKey"}), "press failed: Unknown key: \"NoSuchKey\""),
    (("click_xy", {"x": 5000, "y": 1}), "outside the page"),
])
def test_an_action_the_page_cannot_take_is_an_invalid_action(env, call, why):
    widgets(env)
    text, info = act(env, call[0], **call[1])
    assert why in text and text.startswith("Error:")
    assert info["metrics"]["invalid_action"] == 1.0 and "stop_reason" not in info


def test_a_hidden_ref_is_an_invalid_action_that_says_so(env):
    widgets(env)
    act(env, "click", ref="e3")  # Show: "Later" (e10) appears
    env.evaluate("() => { document.getElementById('later').style.display = 'none'; }")
    text, info = act(env, "click", ref="e10")
    assert text.startswith("Error: [ref=e10] is hidden now") and info["metrics"]["invalid_action"] == 1.0


def test_a_turn_without_a_tool_call_is_told_what_to_do(env):
    widgets(env)
    obs, reward, terminated, _, info = env.step("I will click Go.")
    assert "No tool call found" in obs[0]["content"] and not terminated and reward == 0.0


def test_screenshot_modes_send_the_page_as_an_image_part(make_env):
    env = make_env(obs_mode="both")
    obs, info = env.reset(seed=0, options={"task_id": "widgets"})
    text, image = obs[1]["content"]
    assert text["type"] == "text" and '[ref=e2] button "Go"' in text["text"]
    url = image["image_url"]["url"]
    assert image["type"] == "image_url" and url.startswith("data:image/png;base64,")
    png = base64.b64decode(url.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (800, 600)
    obs, *_ = env.step(tool_call("click", {"ref": "e2"}, "call_1"))
    assert obs[0]["role"] == "tool" and obs[1]["content"][1]["type"] == "image_url"
    env.close()
    env.obs_mode = "screenshot"  # what the screenshot-only agent sees and may call
    assert {t["function"]["name"] for t in make_env(obs_mode="screenshot").tools} == \
        {"type", "press", "scroll", "click_xy", "done"}


@pytest.fixture(scope="module")
def miniwob_env(browser_ok: None, miniwob_ok: None) -> Iterator[BrowserEnv]:
    made = BrowserEnv(tasks="all")
    yield made
    made.close()


@pytest.mark.parametrize("task_id", ["click-button", "enter-text"])
def test_a_miniwob_task_solved_by_its_oracle_gets_miniwobs_reward(miniwob_env, task_id):
    result = run_oracle(miniwob_env, task_id, seed=3)
    assert result.error == "" and result.success
    assert result.reward == result.miniwob_reward == 1.0


def test_an_idle_agent_gets_zero_on_miniwob(miniwob_env):
    env = miniwob_env
    obs, info = env.reset(seed=7, options={"task_id": "click-checkboxes"})
    assert obs[1]["content"].startswith(f"Task: {info['instruction']}\n\nThe page:\n[ref=e1] checkbox")
    obs, reward, terminated, truncated, info = env.step(tool_call("done", {}, "call_1"))
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["metrics"]["solved"] == 0.0 and "not finished" in obs[0]["content"]
    # A wrong answer is MiniWoB's -1: click-test-2's button TWO.
    env.reset(seed=7, options={"task_id": "click-test-2"})
    obs, reward, terminated, _, info = env.step(tool_call("click", {"ref": env.ref_of("#subbtn2")}, "c"))
    assert (reward, terminated, info["stop_reason"]) == (-1.0, True, "failed")


def test_splits_divide_miniwob_seeds_and_folder_tasks():
    train, heldout = BrowserEnv(split="train"), BrowserEnv(split="heldout")
    assert train.task_ids() == heldout.task_ids()  # MiniWoB: every task, other seeds
    assert {train._page_seed() % 2 for _ in range(20)} == {0}
    assert {heldout._page_seed() % 2 for _ in range(20)} == {1}
    assert BrowserEnv(suite="clawgym", split="heldout").task_ids() == ["choose-shipping"]


def test_a_seed_gives_the_same_miniwob_episode(miniwob_env):
    first = miniwob_env.reset(seed=11, options={"task_id": "click-checkboxes"})
    again = miniwob_env.reset(seed=11, options={"task_id": "click-checkboxes"})
    other = miniwob_env.reset(seed=12, options={"task_id": "click-checkboxes"})
    assert first == again and first[0] != other[0]


def test_the_default_selection_is_miniwobs_default_subset(miniwob_ok):
    assert BrowserEnv().task_ids() == sorted(DEFAULT_SUBSET)
    assert set(BrowserEnv(tasks="all").task_ids()).isdisjoint(EXCLUDED)


def test_the_env_keeps_the_contract(browser_ok):
    # The shipped folder tasks: small pages, so the checker's ~20 resets stay quick (the
    # default MiniWoB env is checked in tests/envs/test_checker.py, marked slow there).
    check_env(gym.make("clawgym/Browser-v1", suite="clawgym", max_turns=3))
