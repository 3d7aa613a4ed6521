"""Web tasks as folders: task.yaml errors name the field; every shipped task is fair, and
``python -m envs.gui check`` says which of a user's tasks is not. Snapshot diffs by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.gui import BrowserEnv
from envs.gui.__main__ import main
from envs.gui.snapshot import clip, page_changes, refs_in
from envs.gui.tasks import TASKS_DIR, TaskError, load_tasks, parse_task
from envs.gui.verify import check_task

from .conftest import write_tasks

PAGE = "<!DOCTYPE html><html><body><button id='b' onclick='window.hit = true'>Hit</button></body></html>"


def folder(tmp_path: Path, spec: str, name: str = "task-one") -> Path:
    return write_tasks(tmp_path, {name: (PAGE, spec)}) / name


def test_the_shipped_tasks_load():
    tasks = load_tasks(TASKS_DIR)
    assert [t.id for t in tasks] == ["add-two-numbers", "choose-shipping", "delete-todo",
                                     "subscribe-newsletter"]
    assert {t.suite for t in tasks} == {"clawgym"}
    assert tasks[2].reward_python == TASKS_DIR / "delete-todo" / "reward.py"
    assert tasks[0].reference[0].arguments == {"selector": "#answer",
                                               "text_js": "String(window.a + window.b)"}


@pytest.mark.parametrize("spec, problem", [
    ("instruction: x\nreference: [done]\n", "give exactly one of reward"),
    ("instruction: x\nreward: '1'\nreward_python: r.py\nreference: [done]\n", "give exactly one of reward"),
    ("instruction: x\nreward: '1'\n", "reference must be a non-empty list"),
    ("instruction: x\nreward: '1'\nreference: [{drag: {}}]\n", "reference[0]: unknown tool 'drag'"),
    ("instruction: x\nreward: '1'\nreference: [done]\nviewport: [10, 10]\n", "viewport must be"),
    ("instruction: x\nreward: '1'\nreference: [done]\npage: nope.html\n", "page 'nope.html' must be a file"),
    ("reward: '1'\nreference: [done]\n", "instruction must be a non-empty string"),
    ("instruction: x\nreward: '1'\nreference: [done]\ntests: 1\n", "tests is not a known field"),
    ("instruction: x\nreward: '1'\nreward: '0'\nreference: [done]\n", "duplicate key 'reward'"),
])
def test_a_broken_task_yaml_names_the_field(tmp_path, spec, problem):
    with pytest.raises(TaskError, match="task-one/task.yaml") as caught:
        parse_task(folder(tmp_path, spec))
    assert problem in str(caught.value)


@pytest.mark.browser
@pytest.mark.slow
def test_every_shipped_task_is_fair(browser_ok):
    env = BrowserEnv(suite="clawgym", tasks="all", split="all")
    try:
        results = [check_task(env, task_id) for task_id in env.task_ids()]
    finally:
        env.close()
    assert [r.problems for r in results] == [[]] * 4
    assert [(r.reference_reward, r.idle_reward) for r in results] == [(1.0, 0.0)] * 4


@pytest.mark.browser
def test_check_says_which_user_task_is_unfair(browser_ok, tmp_path, capsys):
    write_tasks(tmp_path, {
        "fair": (PAGE, "instruction: Hit it.\nreward: 'window.hit ? 1 : 0'\n"
                       "reference:\n  - click: {selector: '#b'}\n"),
        "always-won": (PAGE, "instruction: Hit it.\nreward: '1'\nreference:\n  - click: {selector: '#b'}\n"),
        "wrong-reference": (PAGE, "instruction: Hit it.\nreward: 'window.hit ? 1 : 0'\n"
                                  "reference:\n  - click: {selector: '#missing'}\n"),
    })
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "always-won: reference 1, idle 1: UNFAIR: doing nothing solves the task: its reward cannot fail"
    assert out[1] == "fair: reference 1, idle 0: ok"
    assert out[2].startswith("wrong-reference: reference 0, idle 0: UNFAIR: reference step 1 (click): "
                             "selector '#missing' matches no element")
    assert out[3] == "1/3 tasks fair"


def test_page_changes_lists_the_lines_that_went_and_came():
    before = '[ref=e1] button "Go"\ntext "a long paragraph that stays the same"\n[ref=e2] checkbox "x"'
    after = '[ref=e1] button "Go"\ntext "a long paragraph that stays the same"\n[ref=e2] checkbox "x" [checked]'
    assert page_changes(before, before) == "The page did not change."
    assert page_changes(before, after) == ('The page changed:\n-[ref=e2] checkbox "x"\n'
                                           '+[ref=e2] checkbox "x" [checked]')
    # When the diff is no shorter than the page, the page itself is clearer.
    assert page_changes('[ref=e1] button "Go"', 'text "Thanks"') == 'The page now:\ntext "Thanks"'


def test_clip_cuts_at_a_line_and_says_how_much_is_left():
    page = "\n".join(f"[ref=e{i}] button \"{i}\"" for i in range(1, 11))  # 10 lines of 19-20 chars
    assert clip(page, 10_000) == page
    assert clip(page, 60) == page.splitlines()[0] + "\n" + page.splitlines()[1] + "\n" + \
        page.splitlines()[2] + "\n... (7 more lines not shown)"
    assert refs_in(page) == [f"e{i}" for i in range(1, 11)]
