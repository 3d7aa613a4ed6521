"""Hostile agents on the tiny instance, through the env on real sandboxes: nothing an agent
adds changes how the tests run or are reported, and what it breaks is its own loss (reward
0, counted), never an env error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.swe.env import SWEEnv
from envs.swe.verify import VANDALS, vandal_run
from envs.terminal.verify import tool_call
from tests.helpers import DOCKER_SLOW_BACKENDS, require_backend

from .conftest import GOOD


@pytest.fixture(scope="module", params=DOCKER_SLOW_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Both backends, docker's run of the vandal sweep marked slow (about a minute there)."""
    require_backend(request.param)
    return request.param


@pytest.fixture(scope="module")
def env(backend: str, tiny: Path, cache_root: Path) -> Iterator[SWEEnv]:
    made = SWEEnv(instances=str(tiny), split="all", sandbox=backend, cache_dir=str(cache_root),
                  test_timeout_s=5)
    yield made
    made.close()


def run(env: SWEEnv, command: str) -> str:
    obs, *_ = env.step(tool_call("bash", {"command": command}, "call_0"))
    return obs[0]["content"]


def submit(env: SWEEnv) -> tuple[float, dict]:
    _, reward, terminated, truncated, info = env.step(tool_call("submit", {}, "call_submit"))
    assert terminated or truncated
    return reward, info


@pytest.mark.parametrize("vandal", sorted(VANDALS))
def test_no_vandal_resolves_the_instance_or_errs(env, vandal):
    reward, info = vandal_run(env, "calc__newtest-1", vandal)  # its test_patch adds a test file
    assert "error" not in info, info.get("error")
    assert reward == 0.0 and info["grade"]["resolved"] is False, info["grade"]


def test_a_conftest_hook_that_marks_failures_passed_scores_zero_and_is_named(env):
    # issue 45: this agent scored 1.0 ("FAIL_TO_PASS 2/2 pass") with no fix
    reward, info = vandal_run(env, GOOD, "conftest")
    assert reward == 0.0 and info["grade"]["FAIL_TO_PASS"]["failure"] == \
        ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_zero"]
    assert info["grade"]["dropped"] == ["conftest.py (conftest.py: pytest runs its hooks)"]
    assert "conftest.py" not in info["model_patch"]


def test_the_fix_is_graded_and_the_hooks_beside_it_are_dropped(env):
    env.reset(options={"task_id": GOOD})
    for name in ("conftest", "pytest-ini", "shadow-pytest", "entry-point", "user-site"):
        run(env, VANDALS[name][1])
    run(env, "sed -i 's/a - b/a + b/' calc/__init__.py")
    reward, info = submit(env)
    assert reward == 1.0 and info["model_patch"].startswith("diff --git a/calc/__init__.py")
    assert info["model_patch"].count("diff --git") == 1
    assert {d.split(" (")[0] for d in info["grade"]["dropped"]} >= {
        "conftest.py", "pytest.ini", "pytest.py", "vandal_forge.py",
        "vandal_forge-1.0.dist-info/entry_points.txt"}


def test_un_ignoring_install_outputs_does_not_smuggle_them_in(env):
    # install's outputs are ignored at base; a `!` rule in the agent's .gitignore does not
    # put a .pth into the graded patch
    env.reset(options={"task_id": "calc__built-1"})
    run(env, "printf '!build/\\n!*.pth\\n' >> .gitignore && echo 'import os' > build/evil.pth "
             "&& echo x > build/lib2.txt")
    reward, info = submit(env)
    assert reward == 0.0 and "diff --git a/build/" not in info["model_patch"]
    assert ".gitignore" in info["model_patch"]  # the agent's own edit is still its diff


@pytest.mark.parametrize("command", [
    "rm -rf tests && echo gone > tests",
    "rm -rf tests && ln -s /nonexistent tests",
    "rm -rf tests && ln -s calc tests",
])
def test_a_broken_test_tree_is_unresolved_not_an_env_error(env, command):
    # issue 45: the test_patch (which adds tests/test_add.py) then "did not apply", an env
    # error blamed on the data; the agent's changes to tests are not graded now
    env.reset(options={"task_id": "calc__newtest-1"})
    run(env, command)
    reward, info = submit(env)
    assert "error" not in info, info.get("error")
    assert reward == 0.0 and info["grade"]["FAIL_TO_PASS"]["failure"] == ["tests/test_add.py::test_add"]


def test_a_patch_that_hangs_the_tests_is_unresolved_not_an_env_error(env):
    env.reset(options={"task_id": GOOD})
    run(env, "printf 'import time\\ntime.sleep(3600)\\n' >> calc/__init__.py")
    reward, info = submit(env)
    assert "error" not in info, info.get("error")
    assert reward == 0.0 and info["grade"]["reason"] == "the tests ran past 5 s with your patch"


def test_the_new_test_instance_is_fair(env):
    from envs.swe.verify import gold_run

    assert gold_run(env, "calc__newtest-1")[0] == 1.0


def test_a_patch_that_deletes_the_graders_files_is_unresolved(env):
    env.reset(options={"task_id": GOOD})
    run(env, "printf 'import shutil\\nshutil.rmtree(\"/tmp/.clawgym\", ignore_errors=True)\\n' "
             ">> calc/__init__.py")
    reward, info = submit(env)
    assert "error" not in info, info.get("error")
    assert reward == 0.0 and info["grade"]["reason"] == "the test run left no results with your patch"


def test_a_diff_over_the_cap_is_not_carried_in_info(env):
    env.reset(options={"task_id": GOOD})
    run(env, "head -c 17M /dev/zero | tr '\\0' 'x' | fold -w 100 > calc/blob.txt")
    reward, info = submit(env)
    assert reward == 0.0 and info["model_patch"] == ""
    assert re.fullmatch(r"the diff is 18,\d{3},\d{3} bytes, over the 16 MiB limit", info["model_patch_omitted"])
    assert info["grade"]["reason"].endswith("over the 16 MiB limit; it was not graded")
    assert len(repr(info)) < 10_000


# ---- source that forges pytest's reports from inside the test process -----------------------
def test_source_that_forges_pytests_reports_is_caught_by_the_canary(env):
    # the kept source runs in the test process: this one, imported by the tests, reported
    # every failure as passed and scored 1.0 (FAIL_TO_PASS 2/2) with no fix
    reward, info = vandal_run(env, GOOD, "forge-source")
    assert "error" not in info, info.get("error")
    assert reward == 0.0 and info["metrics"]["forged"] == 1.0 and info["grade"]["forged"] is True
    assert info["grade"]["reason"].startswith("the test run's results are forged")
    assert info["grade"]["FAIL_TO_PASS"]["failure"] == ["tests/test_calc.py::test_add",
                                                        "tests/test_calc.py::test_add_zero"]
    assert "calc/__init__.py" in info["model_patch"]  # the forger is graded source, not dropped


@pytest.mark.parametrize("task_id, f2p, p2p", [
    (GOOD, ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_zero"], ["tests/test_calc.py::test_mul"]),
    ("calc__newtest-1", ["tests/test_add.py::test_add"], []),  # the canary beside a file the test_patch adds
])
def test_the_fix_is_resolved_with_the_canary_beside_it_and_the_report_holds_only_the_instances_tests(
        env, task_id, f2p, p2p):
    env.reset(options={"task_id": task_id})
    run(env, "sed -i 's/a - b/a + b/' calc/__init__.py")
    reward, info = submit(env)
    assert reward == 1.0 and info["metrics"]["forged"] == 0.0
    assert info["grade"]["FAIL_TO_PASS"] == {"success": f2p, "failure": []}
    assert info["grade"]["PASS_TO_PASS"] == {"success": p2p, "failure": []}  # no canary among them


def test_printed_passed_lines_are_still_refuted_by_the_exit_status(env):
    # the canary's deliberate failure must not set the exit status swebench checks the log
    # against: source that prints PASSED lines for the failing tests at exit stays unresolved
    env.reset(options={"task_id": GOOD})
    run(env, "printf '\\nimport atexit\\natexit.register(print, \"PASSED tests/test_calc.py::test_add\\\\n"
             "PASSED tests/test_calc.py::test_add_zero\")\\n' >> calc/__init__.py && tail -3 calc/__init__.py")
    reward, info = submit(env)
    assert "error" not in info, info.get("error")
    assert reward == 0.0 and info["grade"]["reason"] == "the test command's exit status contradicts its log"
