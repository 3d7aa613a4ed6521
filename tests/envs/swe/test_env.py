"""The SWE env on real sandboxes (both backends): the repo an agent starts from, scripted
agents that resolve and fail, the reward modes, budgets, and faults that must be env errors."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import envs
from envs.checker import check_env
from envs.swe.env import DEFAULT_INSTANCES, SWEEnv
from envs.swe.repos import RepoError
from envs.swe.verify import VANDAL_COMMAND, apply_with_tools, gold_run, idle_run, vandal_run
from envs.terminal.verify import tool_call

from .conftest import GOOD
from .tiny import GOLD_PATCH


def bash(command: str, call_id: str = "call_0") -> dict:
    return tool_call("bash", {"command": command}, call_id)


def edit(call_id: str = "call_e", **arguments: object) -> dict:
    return tool_call("str_replace_editor", arguments, call_id)


def submit() -> dict:
    return tool_call("submit", {}, "call_submit")


def run(env: SWEEnv, command: str) -> str:
    obs, *_ = env.step(bash(command))
    return obs[0]["content"]


# ---- the starting state -----------------------------------------------------------------------
def test_reset_puts_the_repo_at_base_commit_in_workspace(make_env):
    env = make_env()
    obs, info = env.reset(options={"task_id": GOOD})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert "add(2, 3) returns -1" in obs[1]["content"] and "/workspace" in obs[0]["content"]
    assert [t["function"]["name"] for t in info["tools"]] == ["bash", "str_replace_editor", "submit"]
    assert info["task_id"] == GOOD and info["base_commit"] == env.instance(GOOD).base_commit
    assert run(env, "git status --porcelain && pwd") == "exit code 0\n/workspace"
    assert run(env, "grep -c 'return a - b' calc/__init__.py") == "exit code 0\n1"  # the bug
    # one commit holding base_commit's tree: the later fix commit is nowhere to be found
    log = run(env, "git log --all --format=%s")
    assert log == f"exit code 0\nbase_commit {env.instance(GOOD).base_commit}"
    assert run(env, "test -z \"$(find . ! -user \"$(id -u)\")\" && echo owned") == "exit code 0\nowned"
    # git works for an agent: edit, diff, stash, commit
    run(env, "sed -i 's/a - b/a + b/' calc/__init__.py")
    assert "+    return a + b" in run(env, "git diff")
    assert run(env, "git stash -q && git status --porcelain && git stash pop -q && git status --porcelain") \
        == "exit code 0\n M calc/__init__.py"
    assert run(env, "git commit -qam wip && git log --oneline | wc -l") == "exit code 0\n2"


def test_each_reset_starts_from_a_fresh_copy(make_env):
    env = make_env()
    env.reset(options={"task_id": GOOD})
    run(env, "rm -rf calc .git && echo junk > junk.txt")
    env.reset(options={"task_id": GOOD})
    assert run(env, "ls -A | sort | tr '\\n' ' '") == "exit code 0\n.git .gitignore calc tests "
    assert run(env, "git status --porcelain") == "exit code 0"


# ---- scripted agents ----------------------------------------------------------------------------
def test_an_oracle_applying_the_gold_patch_with_the_editor_is_resolved(make_env):
    env = make_env()
    env.reset(options={"task_id": GOOD})
    obs, reward, terminated, truncated, info = env.step(edit(
        command="str_replace", path="/workspace/calc/__init__.py",
        old_str="    return a - b\n", new_str="    return a + b\n"))
    assert obs[0]["content"].startswith("The file /workspace/calc/__init__.py has been edited.")
    assert info["metrics"]["edits"] == 1.0 and info["next_state"] == obs[0]["content"]
    obs, reward, terminated, truncated, info = env.step(submit())
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["stop_reason"] == "submitted"
    assert obs[0]["content"] == "Resolved: FAIL_TO_PASS 2/2 pass, PASS_TO_PASS 1/1 pass."
    assert info["metrics"] == {"commands": 0.0, "edits": 0.0, "resolved": 1.0, "f2p_passed": 1.0,
                               "p2p_passed": 1.0, "patch_applied": 1.0, "patch_lines": 2.0,
                               "forged": 0.0, "invalid_action": 0.0}
    assert info["grade"]["status"] == "RESOLVED_FULL"
    assert info["model_patch"].startswith("diff --git a/calc/__init__.py b/calc/__init__.py")


def test_the_verify_oracle_resolves_through_the_tools(make_env):
    env = make_env()
    reward, info = gold_run(env, GOOD)
    assert reward == 1.0 and info["grade"]["resolved"] is True


def test_an_empty_submit_is_not_resolved(make_env):
    env = make_env()
    reward, info = idle_run(env, GOOD)
    assert reward == 0.0 and info["metrics"]["resolved"] == 0.0
    assert info["grade"]["FAIL_TO_PASS"]["failure"] == ["tests/test_calc.py::test_add",
                                                       "tests/test_calc.py::test_add_zero"]
    assert info["metrics"]["p2p_passed"] == 1.0 and info["model_patch"] == ""


def test_deleting_the_tests_is_not_resolved(make_env):
    env = make_env()
    env.reset(options={"task_id": GOOD})
    assert run(env, f"{VANDAL_COMMAND}; git status --porcelain") == "exit code 0\n D tests/test_calc.py"
    _, reward, _, _, info = env.step(submit())
    assert reward == 0.0 and info["metrics"]["patch_applied"] == 1.0
    assert vandal_run(env, GOOD)[0] == 0.0


def test_faking_the_tests_does_not_resolve_it(make_env):
    # editing the test file to make it pass is undone: grading restores the test files
    env = make_env()
    env.reset(options={"task_id": GOOD})
    run(env, "printf 'def test_add():\\n    pass\\ndef test_add_zero():\\n    pass\\n' >> tests/test_calc.py")
    _, reward, *_ = env.step(submit())
    assert reward == 0.0


def test_reward_mode_fraction_is_the_passing_share_of_fail_to_pass(make_env):
    env = make_env(reward_mode="fraction")
    env.reset(options={"task_id": GOOD})
    run(env, "sed -i 's/return a - b/return abs(a - b)/' calc/__init__.py")  # add(0, 7) now passes
    _, reward, _, _, info = env.step(submit())
    assert reward == 0.5 and info["metrics"]["f2p_passed"] == 0.5 and info["metrics"]["resolved"] == 0.0
    env.reset(options={"task_id": GOOD})
    apply_with_tools(env, GOLD_PATCH)
    assert env.step(submit())[1] == 1.0


def test_new_files_are_part_of_the_patch(make_env):
    env = make_env()
    env.reset(options={"task_id": GOOD})
    run(env, "mkdir -p calc/impl && printf 'def add(a, b):\\n    return a + b\\n' > calc/impl/ops.py && "
             "sed -i 's/^def add(a, b):/from calc.impl.ops import add as _add\\n\\n\\ndef add(a, b):\\n"
             "    return _add(a, b)\\n\\n\\ndef _old_add(a, b):/' calc/__init__.py")
    _, reward, _, _, info = env.step(submit())
    assert reward == 1.0 and "new file mode" in info["model_patch"]
    assert "calc/impl/ops.py" in info["model_patch"] and "__pycache__" not in info["model_patch"]


def test_the_budget_running_out_still_grades_the_work(make_env):
    env = make_env(max_turns=1)
    env.reset(options={"task_id": GOOD})
    obs, reward, terminated, truncated, info = env.step(edit(
        command="str_replace", path="/workspace/calc/__init__.py", old_str="a - b", new_str="a + b"))
    assert (reward, terminated, truncated) == (1.0, False, True)
    assert info["stop_reason"] == "max_turns" and info["metrics"]["resolved"] == 1.0
    assert obs[-1]["content"].startswith("The turn budget is used up; your changes were graded. Resolved")


def test_a_fenced_bash_block_runs_and_bad_arguments_are_invalid_actions(make_env):
    env = make_env()
    env.reset(options={"task_id": GOOD})
    obs, *_ , info = env.step("Let me look.\n```bash\nls calc\n```")
    assert obs == [{"role": "user", "content": "exit code 0\n__init__.py"}]
    obs, *_, info = env.step(edit(command="str_replace", path="calc/__init__.py", old_str="x"))
    assert info["metrics"]["invalid_action"] == 1.0 and "not an absolute path" in obs[0]["content"]
    obs, *_, info = env.step(tool_call("bash", {"command": "ls", "timeout": 0}))
    assert info["metrics"]["invalid_action"] == 1.0 and obs[0]["content"].startswith("Error: `timeout`")


# ---- install and its cache ---------------------------------------------------------------
def test_install_outputs_are_cached_and_invisible_to_git(make_env):
    env = make_env()
    _, info = env.reset(options={"task_id": "calc__built-1"})
    assert run(env, "cat build/lib.txt && ls calc && git status --porcelain") == \
        "exit code 0\nartifact\n__init__.py\n_speedups.so"
    env.reset(options={"task_id": "calc__built-1"})  # from the cache this time
    assert run(env, "cat build/lib.txt") == "exit code 0\nartifact"
    _, reward, _, _, step_info = env.step(submit())
    assert step_info["model_patch"] == "" and reward == 0.0


# ---- faults are env errors, never crashes -----------------------------------------------------
def test_a_failing_install_is_an_env_error(make_env, tiny, backend, cache_root):
    env = make_env()
    with pytest.raises(RepoError, match=r"calc__broken-install-1: install exited with code 3: 'no compiler'; "
                                        r"fix `install` in .*instances.jsonl:3"):
        env.reset(options={"task_id": "calc__broken-install-1"})
    with pytest.raises(RepoError, match="install exited with code 3"):  # remembered, not re-run
        env.reset(options={"task_id": "calc__broken-install-1"})
    with pytest.raises(envs.ResetNeeded):
        env.step(submit())
    env.reset(options={"task_id": GOOD})  # the env still works
    with envs.make_vec("swe", 2, backend="sync", env_kwargs={
            "instances": str(tiny), "task_ids": ["calc__broken-install-1"], "sandbox": backend,
            "cache_dir": str(cache_root)}) as vec:
        obs, infos = vec.reset(seed=0)
    assert obs == [None, None] and all(i["stop_reason"] == "error" for i in infos)
    assert "RepoError" in infos[0]["error"] and "install exited with code 3" in infos[0]["error"]


def test_an_install_that_changes_tracked_files_is_an_env_error(make_env):
    with pytest.raises(RepoError, match=r"install changed tracked files \['calc/__init__.py'\]"):
        make_env().reset(options={"task_id": "calc__touchy-install-1"})


def test_a_missing_repository_names_the_field(make_env):
    with pytest.raises(RepoError, match=r"calc__missing-1: .*fix `repo` in .*instances.jsonl:6"):
        make_env().reset(options={"task_id": "calc__missing-1"})


def test_a_hung_test_is_an_env_error(make_env):
    env = make_env(test_timeout_s=2)
    env.reset(options={"task_id": "calc__hang-1"})
    obs, reward, terminated, truncated, info = env.step(submit())
    assert (reward, terminated, truncated, info["stop_reason"]) == (0.0, False, True, "error")
    assert "GradingError" in info["error"] and "ran past 2 s" in info["error"]
    env.reset(options={"task_id": GOOD})  # and the next episode is fine
    assert run(env, "git status --porcelain") == "exit code 0"


# ---- the contract --------------------------------------------------------------------------
def test_the_env_passes_check_env(tiny, backend, cache_root):
    env = gym.make("clawgym/SWE-v1", instances=str(tiny), task_ids=[GOOD], sandbox=backend,
                   cache_dir=str(cache_root))
    try:
        check_env(env)
    finally:
        env.close()


def test_the_env_pickles_without_its_sandbox(make_env):
    env = make_env()
    env.reset(options={"task_id": GOOD})
    copy = pickle.loads(pickle.dumps(env))
    try:
        copy.reset(options={"task_id": GOOD})
        assert run(copy, "git status --porcelain") == "exit code 0"
    finally:
        copy.close()


def test_arguments_select_instances_and_bad_ones_say_how_to_fix_them(tiny, tmp_path):
    assert SWEEnv(instances=str(tiny), split="heldout").task_ids() == ["calc__built-1"]
    assert SWEEnv(instances=str(tiny), task_ids="calc__calc-1, calc__hang-1").task_ids() == \
        ["calc__calc-1", "calc__hang-1"]
    with pytest.raises(ValueError, match="reward_mode must be one of resolved, fraction"):
        SWEEnv(instances=str(tiny), reward_mode="partial")
    with pytest.raises(ValueError, match=r"task_ids \['nope'\] are not instances"):
        SWEEnv(instances=str(tiny), task_ids="nope")
    with pytest.raises(ValueError, match="no such instance file"):
        SWEEnv(instances=str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="command_timeout_s must be a number of seconds in"):
        SWEEnv(instances=str(tiny), command_timeout_s=0)


# ---- the shipped instances ------------------------------------------------------------------------
@pytest.mark.skipif(not DEFAULT_INSTANCES.exists(), reason="envs/swe/data/instances.jsonl not generated yet")
def test_a_shipped_instance_resolves_with_the_gold_patch(backend, cache_root):
    env = SWEEnv(split="heldout", sandbox=backend, cache_dir=str(cache_root))
    try:
        task_id = env.task_ids()[0]
        reward, info = gold_run(env, task_id)
        assert reward == 1.0, info["grade"]
    finally:
        env.close()


# ---- python -m envs.swe list|check ------------------------------------------------------------
def test_list_shows_each_instance_and_the_split_counts(tiny, capsys):
    from envs.swe.__main__ import main

    assert main(["list", str(tiny)]) == 0
    out = capsys.readouterr().out
    assert "calc__calc-1" in out and "calc__built-1" in out and "heldout" in out
    assert out.rstrip().endswith("7 instances (6 train, 1 heldout)")


def test_check_names_what_is_wrong_by_field(tmp_path, backend, capsys):
    from envs.swe.__main__ import main

    from .tiny import make_repo, record, write_instances

    repo, base = make_repo(tmp_path)
    path = write_instances(tmp_path / "weak.jsonl", [
        record(repo, base, instance_id="calc__invalid-1", base_commit="HEAD"),
        # test_mul passes before the fix: it cannot tell a fix from no fix
        record(repo, base, instance_id="calc__weak-1", FAIL_TO_PASS=["tests/test_calc.py::test_mul"],
               PASS_TO_PASS=[]),
    ])
    assert main(["check", str(path), "--backend", backend]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"INVALID {path}:1: base_commit 'HEAD' must be a commit sha (7 to 64 lowercase "
                      "hex digits)")
    assert out[1].startswith("calc__weak-1: gold 1.00, idle 1.00, vandal 1.00: UNFAIR: FAIL_TO_PASS test "
                             "tests/test_calc.py::test_mul passes without the patch; an empty patch "
                             "resolves it; deleting the test files resolves it")
    assert out[2] == "0/2 instances fair"


@pytest.mark.slow
def test_check_passes_a_fair_instance_and_fails_a_gold_patch_that_does_not_fix(tmp_path, backend, capsys):
    from envs.swe.__main__ import main

    from .tiny import make_repo, record, write_instances

    repo, base = make_repo(tmp_path)
    path = write_instances(tmp_path / "mixed.jsonl", [
        record(repo, base),
        record(repo, base, instance_id="calc__nofix-1", patch=GOLD_PATCH.replace("a + b\n \n", "a * b\n \n")),
    ])
    assert main(["check", str(path), "--backend", backend]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("calc__calc-1: gold 1.00, idle 0.00, vandal 0.00: ok")
    assert out[1].startswith("calc__nofix-1: gold 0.00, idle 0.00, vandal 0.00: UNFAIR: FAIL_TO_PASS test "
                             "tests/test_calc.py::test_add fails with the gold patch; FAIL_TO_PASS test "
                             "tests/test_calc.py::test_add_zero fails with the gold patch")
    assert out[2] == "1/2 instances fair"
    assert main(["check", str(path), "--backend", backend, "--instance", "calc__calc-1"]) == 0


# ---- a SWE-bench image in the local daemon (docker only) --------------------------------------
EVAL_SCRIPT = """#!/bin/bash
set -uxo pipefail
cd /testbed
git checkout {base} tests/test_calc.py
git apply -v - <<'EOF_114329324912'
{test_patch}
EOF_114329324912
: '>>>>> Start Test Output'
python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py
: '>>>>> End Test Output'
git checkout {base} tests/test_calc.py
"""


@pytest.fixture(scope="module")
def swebench_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A stand-in for a SWE-bench image (``sweb.eval.x86_64.<id>:latest``, the name swebench's
    harness builds locally): the swe rootfs with the repo, full history, at /testbed."""
    import subprocess

    from tests.helpers import require_backend

    from .tiny import git, make_repo, record, write_instances

    require_backend("docker")
    root = tmp_path_factory.mktemp("sweb")
    repo, base = make_repo(root / "context")
    git(repo, "checkout", "-q", base)
    (root / "context" / "Dockerfile").write_text("FROM clawgym-swe:current\nCOPY calc-repo /testbed\n")
    image = "sweb.eval.x86_64.calc__calc-img-1:latest"
    subprocess.run(["docker", "build", "-q", "-t", image, str(root / "context")], check=True,
                   capture_output=True)
    plain = {**record(repo, base, instance_id="calc__calc-img-1"), "repo": "calc/calc"}
    scripted = {**plain, "instance_id": "calc__calc-img-2", "image": image,
                "eval_script": EVAL_SCRIPT.format(base=base, test_patch=plain["test_patch"].rstrip("\n"))}
    try:
        yield write_instances(root / "sweb.jsonl", [plain, scripted]), image
    finally:
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("task_id", ["calc__calc-img-1", "calc__calc-img-2"])
def test_a_swebench_image_is_used_on_docker(swebench_image, cache_root, task_id):
    path, image = swebench_image
    env = SWEEnv(instances=str(path), split="all", sandbox="docker", cache_dir=str(cache_root))
    try:
        env.reset(options={"task_id": task_id})
        # /testbed and /workspace are one directory; the image's history is kept
        assert run(env, "touch x && test -e /testbed/x && rm x && git log --oneline | wc -l") == "exit code 0\n2"
        assert run(env, "git status --porcelain") == "exit code 0"
        assert gold_run(env, task_id)[0] == 1.0
        assert idle_run(env, task_id)[0] == 0.0
    finally:
        env.close()
    with pytest.raises(RepoError, match="SWE-bench images need sandbox='docker'") as caught:
        SWEEnv(instances=str(path), split="all", sandbox="bwrap", cache_dir=str(cache_root)).reset(
            options={"task_id": task_id})
    assert "calc/calc" in str(caught.value)
