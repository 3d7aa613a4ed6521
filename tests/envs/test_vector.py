"""Vector envs: identical across backends, idle members, faults contained per member."""

from __future__ import annotations

import json
import time

import pytest

import envs
from envs import make_vec
from tests.envs.fault_env import FAULT_ID

BACKENDS = ["sync", "thread", "process", pytest.param("ray", marks=pytest.mark.ray)]
ALL = ["sync", "thread", "process", "ray"]


def guess(n: int) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "guess", "arguments": json.dumps({"number": n})}}]}


def _ray_available(backend: str) -> None:
    if backend == "ray":
        pytest.importorskip("ray")


def _rollout(backend: str) -> list:
    trace = []
    with make_vec("guess", 3, backend=backend) as vec:
        obs, infos = vec.reset(seed=11)
        trace.append((obs, infos))
        guesses = [[50, 50, 50], [25, 75, 60], [12, 88, 55], [6, 94, 58]]
        for row in guesses:
            actions = [guess(g) if active else None for g, active in zip(row, vec.active)]
            trace.append(vec.step(actions))
    return trace


def test_results_are_identical_across_backends():
    pytest.importorskip("ray")
    traces = {b: _rollout(b) for b in ALL}
    assert traces["sync"][0][1][0]["task_id"] != traces["sync"][0][1][1]["task_id"]  # seed + i
    for backend in ALL[1:]:
        assert traces[backend] == traces["sync"], backend


@pytest.mark.parametrize("backend", ["sync", "thread", "process"])
def test_idle_members_and_no_autoreset(backend):
    with make_vec("guess", 3, backend=backend) as vec:
        vec.reset(options={"task_id": "guess-50"})  # one GRPO group: same task everywhere
        obs, rewards, terminated, truncated, infos = vec.step([guess(50), guess(10), None])
        assert terminated == [True, False, False] and rewards == [1.0, 0.0, 0.0]
        assert obs[2] is None and infos[2] == {}
        assert vec.active == [False, True, True]
        with pytest.raises(ValueError, match="env 0 is not in an episode"):
            vec.step([guess(1), None, None])
        obs, *_ = vec.step([None, guess(50), guess(50)])
        assert obs[0] is None and vec.active == [False, False, False]


def test_bad_batch_shapes_and_backends_are_named():
    with pytest.raises(ValueError, match="choose one of"):
        make_vec("guess", 2, backend="gpu")
    with make_vec("guess", 2, backend="sync") as vec:
        vec.reset()
        with pytest.raises(ValueError, match="pass None for idle"):
            vec.step([guess(1)])
        with pytest.raises(ValueError, match="seed has 3 entries"):
            vec.reset(seed=[1, 2, 3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_member_that_raises_is_truncated_and_the_batch_completes(backend):
    _ray_available(backend)
    with make_vec(FAULT_ID, 3, backend=backend) as vec:
        vec.reset(options=[{"task_id": "ok"}, {"task_id": "raise"}, {"task_id": "ok"}])
        obs, rewards, terminated, truncated, infos = vec.step(["a", "b", "c"])
        assert obs[0][0]["content"] == "echo: a" and obs[2][0]["content"] == "echo: c"
        assert truncated[1] and not terminated[1] and obs[1] == []
        assert "RuntimeError: the env crashed mid-step" in infos[1]["error"]
        assert infos[1]["stop_reason"] == "error" and infos[1]["task_id"] == "raise"
        # the member got a fresh env: it is usable again after reset
        obs, infos = vec.reset(options={"task_id": "ok"}, indices=[1])
        assert obs[1] is not None and obs[0] is None
        assert vec.step([None, "again", None])[0][1][0]["content"] == "echo: again"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_member_that_hangs_times_out_and_the_batch_completes(backend):
    _ray_available(backend)
    # A batch that waited for the hang would take a minute; one that did not takes the 1 s step
    # timeout plus milliseconds: 15 s is 4x under the one and over 10x the other. The process
    # and ray members are killed; a thread cannot be, so it sleeps its minute out (a daemon).
    with make_vec(FAULT_ID, 3, backend=backend, step_timeout_s=1.0, env_kwargs={"hang_s": 60.0}) as vec:
        vec.reset(options=[{"task_id": "hang"}, {"task_id": "ok"}, {"task_id": "ok"}])
        started = time.monotonic()
        obs, rewards, terminated, truncated, infos = vec.step(["a", "b", "c"])
        elapsed = time.monotonic() - started
        assert truncated == [True, False, False] and "did not return within 1 s" in infos[0]["error"]
        assert rewards[1:] == [1.0, 1.0]
        assert elapsed < 15  # the batch did not wait for the hung member
        obs, infos = vec.reset(options={"task_id": "ok"}, indices=[0])
        assert vec.step(["x", None, None])[0][0][0]["content"] == "echo: x"


def test_a_process_member_that_dies_is_reported_and_replaced():
    with make_vec(FAULT_ID, 2, backend="process") as vec:
        vec.reset(options=[{"task_id": "exit"}, {"task_id": "ok"}])
        obs, rewards, terminated, truncated, infos = vec.step(["a", "b"])
        assert truncated[0] and "process died (exit code 3)" in infos[0]["error"]
        assert obs[1][0]["content"] == "echo: b"
        obs, _ = vec.reset(options={"task_id": "ok"}, indices=[0])
        assert vec.step(["again", None])[0][0][0]["content"] == "echo: again"


def test_a_process_member_killed_between_steps_says_its_process_died():
    with make_vec(FAULT_ID, 2, backend="process") as vec:
        vec.reset(options={"task_id": "ok"})
        victim = vec._members[0]._proc
        victim.kill()  # SIGKILL while idle, as the OOM killer would
        victim.join(timeout=10)
        obs, rewards, terminated, truncated, infos = vec.step(["a", "b"])
        assert truncated[0] and infos[0]["stop_reason"] == "error"
        assert "process died between calls (exit code -9)" in infos[0]["error"]
        assert "ResetNeeded" not in infos[0]["error"]
        assert obs[1][0]["content"] == "echo: b" and vec.active == [False, True]
        vec.reset(options={"task_id": "ok"}, indices=[0])  # a fresh process takes over
        assert vec.step(["again", None])[0][0][0]["content"] == "echo: again"


@pytest.mark.parametrize("backend", ["sync", "thread", "process"])
def test_a_failed_reset_is_reported_per_member(backend):
    with make_vec(FAULT_ID, 2, backend=backend) as vec:
        obs, infos = vec.reset(options=[{"task_id": "raise_on_reset"}, {"task_id": "ok"}])
        assert obs[0] is None and "setup exploded" in infos[0]["error"]
        assert obs[1] is not None and vec.active == [False, True]


def test_close_is_idempotent_and_closed_vectors_refuse_work():
    vec = make_vec("guess", 2, backend="process")
    vec.reset()
    vec.close()
    vec.close()
    with pytest.raises(RuntimeError, match="closed"):
        vec.reset()


@pytest.fixture(scope="module", autouse=True)
def _shutdown_ray():
    yield
    try:
        import ray
        ray.shutdown()
    except ImportError:
        pass


def test_make_vec_passes_env_kwargs():
    with envs.make_vec("guess", 2, backend="thread", env_kwargs={"low": 3, "high": 3}) as vec:
        _, infos = vec.reset()
        assert [i["task_id"] for i in infos] == ["guess-3", "guess-3"]
