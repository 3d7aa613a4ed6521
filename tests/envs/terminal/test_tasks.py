"""Task folders: every shipped task.yaml loads, and a broken one is refused naming its field."""

from __future__ import annotations

import importlib.metadata
from collections import Counter
from pathlib import Path

import pytest

from envs.terminal import CATEGORIES, TASKS_DIR, TaskError, TerminalEnv, load_tasks
from envs.terminal.intercode import EXCLUDED, load_intercode_tasks
from envs.terminal.tasks import hashed_split, parse_task
from tests.helpers import require

SHIPPED = sorted(p.name for p in TASKS_DIR.iterdir() if p.is_dir())


@pytest.mark.parametrize("task_id", SHIPPED)
def test_every_shipped_task_loads(task_id):
    task = parse_task(TASKS_DIR / task_id, suite="clawgym")
    assert task.id == task_id
    assert task.category in CATEGORIES
    assert task.tests and task.solution.strip() and task.instruction


def test_the_shipped_suite_covers_every_category_and_holds_out_a_fifth():
    tasks = load_tasks()
    assert len(tasks) >= 60
    by_category = Counter(t.category for t in tasks)
    assert set(by_category) == set(CATEGORIES)
    assert min(by_category.values()) >= 6
    heldout = [t for t in tasks if t.split == "heldout"]
    assert 0.15 <= len(heldout) / len(tasks) <= 0.25
    assert {t.category for t in heldout} == set(CATEGORIES)
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}


def _write(root: Path, task_id: str, text: str) -> Path:
    folder = root / task_id
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(text)
    return folder


GOOD = """\
instruction: Write hi to out.txt.
category: files
difficulty: easy
solution: echo hi > out.txt
tests:
  written: grep -qx hi out.txt
"""


def test_a_minimal_task_loads_with_defaults(tmp_path):
    task = parse_task(_write(tmp_path, "write-hi", GOOD))
    assert task.tests == (("written", "grep -qx hi out.txt"),)
    assert task.split == hashed_split("write-hi")
    assert task.limits.max_turns == 20 and task.limits.command_timeout_s == 30
    assert task.suite == "user" and task.setup == "" and task.files == ()


@pytest.mark.parametrize("change, message", [
    (GOOD.replace("instruction: Write hi to out.txt.\n", ""), "instruction must be a non-empty string"),
    (GOOD.replace("difficulty: easy", "difficulty: trivial"), "difficulty 'trivial' must be one of easy, medium, hard"),
    (GOOD.replace("category: files", "category: Files!"), "category must be a lowercase slug"),
    (GOOD + "split: test\n", "split 'test' must be one of train, heldout"),
    (GOOD.replace("solution: echo hi > out.txt\n", ""), "solution must be a non-empty bash script"),
    (GOOD.replace("tests:\n  written: grep -qx hi out.txt\n", "tests: [grep hi out.txt]\n"),
     "tests must be a non-empty mapping of test name -> bash check"),
    (GOOD + "  written: true\n", "duplicate key 'written'"),
    (GOOD.replace("  written:", "  'has space':"), "test name 'has space' must be"),
    (GOOD + "limits:\n  max_turns: 0\n", "limits.max_turns must be a positive integer"),
    (GOOD + "limits:\n  timeout: 5\n", "limits.timeout is not a known limit"),
    (GOOD + "files:\n  /etc/passwd: x\n", "must be a relative path inside /workspace"),
    (GOOD + "tags: [x]\n", "tags is not a known field"),
    ("- just a list\n", "must hold a mapping at the top level"),
    ("instruction: [unclosed\n", "is not valid YAML"),
])
def test_a_broken_task_is_refused_naming_the_field(tmp_path, change, message):
    folder = _write(tmp_path, "broken", change)
    with pytest.raises(TaskError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        parse_task(folder)
    assert "broken/task.yaml" in str(caught.value)


def test_folder_names_are_task_ids(tmp_path):
    with pytest.raises(TaskError, match="folder name is the task id"):
        parse_task(_write(tmp_path, "Bad_Name", GOOD))
    (tmp_path / "empty-task").mkdir()
    with pytest.raises(TaskError, match="every task folder needs a task.yaml"):
        parse_task(tmp_path / "empty-task")


def test_tasks_dir_adds_user_tasks_and_refuses_clashing_ids(tmp_path):
    _write(tmp_path / "mine", "write-hi", GOOD)
    env = TerminalEnv(suite="user", split="all", tasks_dir=str(tmp_path / "mine"))
    assert env.task_ids() == ["write-hi"] and env.task("write-hi").suite == "user"
    both = TerminalEnv(split="all", tasks_dir=str(tmp_path / "mine"))
    assert "write-hi" in both.task_ids() and len(both.task_ids()) == len(load_tasks()) + 1
    _write(tmp_path / "clash", "text-count-errors", GOOD)
    with pytest.raises(TaskError, match="used by both"):
        TerminalEnv(tasks_dir=str(tmp_path / "clash"))
    with pytest.raises(TaskError, match="is not a folder"):
        TerminalEnv(tasks_dir=str(tmp_path / "nowhere"))


def test_env_arguments_select_tasks_and_explain_mistakes():
    train, heldout = TerminalEnv().task_ids(), TerminalEnv(split="heldout").task_ids()
    assert not set(train) & set(heldout)
    assert len(train) + len(heldout) == len(load_tasks())
    git = TerminalEnv(categories="git", split="all").task_ids()
    assert git and all(i.startswith("git-") for i in git)
    assert TerminalEnv(task_ids=["git-first-commit", "sqlite-join-query"]).task_ids() == \
        ["git-first-commit", "sqlite-join-query"]  # task_ids override the split
    for kwargs, message in [({"suite": "bash"}, "suite must be one of"),
                            ({"split": "test"}, "split must be one of"),
                            ({"sandbox": "vm"}, "sandbox must be one of"),
                            ({"categories": ["gui"]}, r"categories \['gui'\] match no task"),
                            ({"task_ids": "nope"}, r"task_ids \['nope'\] are not tasks"),
                            ({"suite": "user"}, "needs tasks_dir"),
                            ({"sandbox_config": {"ram": 1}}, "sandbox_config.ram is not a SandboxConfig field")]:
        with pytest.raises(ValueError, match=message):
            TerminalEnv(**kwargs)


def test_intercode_suite_reads_the_wheel_and_leaves_out_what_cannot_be_checked():
    require(_installed("intercode-bench"), "intercode-bench is not installed: "
            "pip install --no-deps intercode-bench==0.1.22")
    tasks = load_intercode_tasks()
    assert len(tasks) == 24 - len(EXCLUDED)
    assert all(t.gold and t.suite == "intercode" and "/workspace/testbed" in t.setup for t in tasks)
    assert all("/testbed" not in t.gold.replace("/workspace/testbed", "") for t in tasks)
    env = TerminalEnv(suite="all", split="all")
    assert len(env.task_ids()) == len(load_tasks()) + len(tasks)


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_check_says_which_user_task_is_unfair(tmp_path, capsys):
    from envs.terminal.__main__ import main
    from tests.helpers import require_backend

    require_backend("bwrap")
    head = "instruction: Write hi to out.txt.\ncategory: files\ndifficulty: easy\n"
    tasks = {
        "fair": head + "solution: echo hi > out.txt\ntests:\n  written: grep -qx hi out.txt\n",
        "always-passes": head + "solution: echo hi > out.txt\ntests:\n  anything: 'true'\n",
        "wrong-solution": head + "solution: echo ho > out.txt\ntests:\n  written: grep -qx hi out.txt\n",
    }
    for name, text in tasks.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "task.yaml").write_text(text)
    assert main(["check", str(tmp_path), "--sandbox", "bwrap"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("always-passes: reference 1.00, idle 1.00, vandal 1.00: UNFAIR: "
                             "doing nothing passes every test")
    assert out[1] == "fair: reference 1.00, idle 0.00, vandal 0.00: ok"
    assert out[2].startswith("wrong-solution: reference 0.00, idle 0.00, vandal 0.00: UNFAIR: "
                             "the reference solution fails written")
    assert out[3] == "1/3 tasks fair"
    assert main(["check", str(tmp_path), "--sandbox", "bwrap", "--task", "fair"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1/1 tasks fair"
