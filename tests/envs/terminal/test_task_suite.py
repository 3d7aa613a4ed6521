"""Every task is fair: its reference solution passes every test; doing nothing, or deleting
everything in /workspace, passes none.

The runs go through the env as scripted agents (``envs.terminal.verify``). Every task runs
on bwrap (~10 ms a command); one task per category, and the InterCode tasks, run on docker
too, which proves the image has every tool the tasks need.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envs.terminal import CATEGORIES, TerminalEnv, load_tasks
from envs.terminal.verify import check_task, reference_run, tool_call
from tests.helpers import require

from tests.helpers import require_backend
from .test_tasks import _installed

TASK_IDS = [t.id for t in load_tasks()]
ONE_PER_CATEGORY = [next(t.id for t in load_tasks() if t.category == c and t.difficulty != "easy")
                    for c in CATEGORIES]


def _intercode_ids() -> list[str]:
    if not _installed("intercode-bench"):
        return []
    from envs.terminal.intercode import load_intercode_tasks

    return [t.id for t in load_intercode_tasks()]


def _env(backend: str, suite: str) -> Iterator[TerminalEnv]:
    require_backend(backend)
    env = TerminalEnv(suite=suite, split="all", sandbox=backend)
    yield env
    env.close()


@pytest.fixture(scope="module")
def bwrap_env() -> Iterator[TerminalEnv]:
    yield from _env("bwrap", "clawgym")


@pytest.fixture(scope="module")
def docker_env() -> Iterator[TerminalEnv]:
    yield from _env("docker", "clawgym")


@pytest.fixture(scope="module", params=[pytest.param("bwrap", marks=pytest.mark.bwrap),
                                        pytest.param("docker", marks=pytest.mark.docker)])
def intercode_env(request: pytest.FixtureRequest) -> Iterator[TerminalEnv]:
    require(_installed("intercode-bench"), "intercode-bench is not installed: "
            "pip install --no-deps intercode-bench==0.1.22")
    yield from _env(request.param, "intercode")


def _assert_fair(env: TerminalEnv, task_id: str) -> None:
    check = check_task(env, task_id)
    assert check.ok, f"{task_id}: " + "; ".join(check.problems)
    # Stricter than check_task: a shipped task gives no partial credit for doing nothing.
    assert check.idle_reward == 0.0, f"{task_id}: doing nothing already earns {check.idle_reward:.2f}"


@pytest.mark.bwrap
@pytest.mark.parametrize("task_id", TASK_IDS)
def test_task_is_fair_on_bwrap(bwrap_env, task_id):
    _assert_fair(bwrap_env, task_id)


@pytest.mark.docker
@pytest.mark.parametrize("task_id", ONE_PER_CATEGORY)
def test_task_is_fair_on_docker(docker_env, task_id):
    _assert_fair(docker_env, task_id)


@pytest.mark.parametrize("task_id", _intercode_ids())
def test_intercode_task_is_fair(intercode_env, task_id):
    _assert_fair(intercode_env, task_id)


@pytest.mark.bwrap
def test_intercode_reads_the_last_output_when_no_answer_is_submitted():
    require(_installed("intercode-bench"), "intercode-bench is not installed")
    require_backend("bwrap")
    env = TerminalEnv(suite="intercode", split="all", sandbox="bwrap")
    try:
        env.reset(options={"task_id": "intercode-bash-000"})  # count everything under the testbed
        *_, info = env.step({"role": "assistant", "content": "```bash\nfind testbed | wc -l\n```"})
        assert info["next_state"] == "exit code 0\n30"
        _, reward, *_ = env.step(tool_call("submit", {}))
        assert reward == 1.0
        reward, info = reference_run(env, "intercode-bash-016")  # writes hashes.txt
        assert reward == 1.0 and [t["name"] for t in info["tests"]] == ["same_files"]
    finally:
        env.close()
