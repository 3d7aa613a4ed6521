"""The ray backend on a real Ray cluster: a head node (2 CPUs) and a worker node (1 CPU and
the custom resource ``clawgym_worker``), both started with ``ray start`` on this machine
(:mod:`envs.ray_cluster`). A lost node is a real one: its raylet and actors SIGKILLed."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest

from envs import make_vec
from envs.ray_cluster import WORKER_RESOURCE, LocalCluster, free_port
from envs.ray_members import connect_ray, sandbox_resources
from tests.envs.fault_env import FAULT_ID

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]
SPARE = "clawgym_spare"  # room for the kill tests' actors: on the head and on the node they kill
HEAD_SPARE = 2


def guess(n: int) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "guess", "arguments": json.dumps({"number": n})}}]}


@pytest.fixture(scope="module")
def cluster():
    ray.shutdown()  # a local instance left by another module would keep make_vec off the cluster
    with LocalCluster(head_cpus=2, worker_cpus=(1,), head_resources={SPARE: HEAD_SPARE}) as local, local.as_driver():
        try:
            yield local
        finally:
            ray.shutdown()  # before the nodes go: a driver whose cluster vanished exits the process


@pytest.fixture
def fresh_driver(cluster, monkeypatch):
    """Each test joins the cluster its own way (RAY_ADDRESS or ray_address) from scratch."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray.shutdown()
    yield cluster
    ray.shutdown()


def _node_with(resource: str) -> str:
    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"])


class _Holder:
    def ready(self) -> bool:
        return True


def _doomed_node(cluster: LocalCluster, members: int) -> tuple[int, str, dict, object]:
    """A worker node added for a test to kill, that alone has room for ``members`` actors.

    Both it and the head offer ``SPARE`` room, but a holder actor pinned to the head takes
    all the head's until the test kills it: then the lost actors' successors go there. Returns the node's index and id, the members'
    actor options, and the holder."""
    i = cluster.add_worker(cpus=1, resources={SPARE: members})
    connect_ray(cluster.address)
    deadline = time.monotonic() + 30  # until the scheduler's view holds the new node
    while SPARE not in ray.available_resources() and time.monotonic() < deadline:
        time.sleep(0.2)
    head = _node_with("node:__internal_head__")
    holder = ray.remote(_Holder).options(num_cpus=0, resources={SPARE: HEAD_SPARE},
                                         scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()
    ray.get(holder.ready.remote(), timeout=60)
    return i, _node_with(f"{WORKER_RESOURCE}_{i}"), {"resources": {SPARE: 1}}, holder


def _play_guess(vec, i: int = 0) -> None:
    obs, infos = vec.reset(options={"task_id": "guess-50"}, indices=[i])
    assert obs[i] is not None, infos[i].get("error")
    actions = [None] * vec.num_envs
    actions[i] = guess(50)
    obs, rewards, terminated, truncated, infos = vec.step(actions)
    assert terminated[i] and rewards[i] == 1.0


def test_ray_address_runs_episodes_on_the_cluster_where_the_options_place_them(fresh_driver, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", fresh_driver.address)
    on_worker = {"resources": {f"{WORKER_RESOURCE}_0": 0.5}}
    with make_vec("guess", 2, backend="ray", ray_actor_options=on_worker) as vec:
        assert ray.get_runtime_context().gcs_address.endswith(f":{fresh_driver.port}")  # joined, not local
        _play_guess(vec, 0)
        _play_guess(vec, 1)
        worker = _node_with(f"{WORKER_RESOURCE}_0")
        for member in vec._members:
            placed = member.placement()
            assert placed["node_id"] == worker and placed["resources"] == on_worker["resources"]
            # the actors run the checkout's code shipped as Ray's working_dir, not this folder
            assert not placed["code"].startswith(str(CHECKOUT)) and placed["code"].endswith("envs")


def test_ray_address_argument_gives_the_same_results_as_sync_and_reserves_nothing_for_io_envs(fresh_driver):
    def rollout(**kwargs) -> list:
        with make_vec("guess", 3, **kwargs) as vec:
            trace = [vec.reset(seed=11)]
            trace += [vec.step([guess(g) if a else None for g, a in zip(row, vec.active)])
                      for row in ([50, 50, 50], [25, 75, 60], [12, 88, 55])]
            if kwargs["backend"] == "ray":
                assert {tuple(m.placement()["resources"].items()) for m in vec._members} == {()}
            return trace

    assert rollout(backend="ray", ray_address=fresh_driver.address) == rollout(backend="sync")


def test_a_sandboxed_env_reserves_its_sandbox_cpus_and_memory_on_the_cluster(fresh_driver):
    sandbox = {"cpus": 1, "memory_mb": 256}
    with make_vec("terminal", 2, backend="ray", ray_address=fresh_driver.address,
                  env_kwargs={"sandbox_config": sandbox}) as vec:
        for member in vec._members:
            assert member.placement()["resources"] == {"CPU": 1.0, "memory": 256 * 2**20}
    with make_vec("terminal", 1, backend="ray", ray_address=fresh_driver.address,
                  env_kwargs={"sandbox_config": sandbox}, ray_actor_options={"num_cpus": 0.5}) as vec:
        assert vec._members[0].placement()["resources"] == {"CPU": 0.5, "memory": 256 * 2**20}


def test_more_reservations_than_the_cluster_holds_warn_and_name_the_fix(fresh_driver):
    connect_ray(fresh_driver.address)
    cpus = int(ray.cluster_resources()["CPU"])  # 3 (2 + 1) unless a node from another test lives
    with pytest.warns(RuntimeWarning, match=rf"{cpus + 1} env actors reserve {cpus + 1} CPUs but the "
                                            rf"Ray cluster has {cpus}; add nodes"):
        make_vec("terminal", cpus + 1, backend="ray", env_kwargs={"sandbox_config": {"memory_mb": 64}}).close()


@pytest.mark.slow
def test_a_node_lost_mid_step_is_an_env_error_and_the_next_reset_runs_on_a_live_node(fresh_driver):
    i, doomed, on_doomed, holder = _doomed_node(fresh_driver, members=1)
    with make_vec(FAULT_ID, 1, backend="ray", ray_address=fresh_driver.address, step_timeout_s=120,
                  env_kwargs={"hang_s": 60.0}, ray_actor_options=on_doomed) as vec:
        vec.reset(options={"task_id": "hang"})
        assert vec._members[0].placement()["node_id"] == doomed
        kill = threading.Timer(2.0, fresh_driver.kill_worker, args=(i,))
        kill.start()  # while the step sleeps on the doomed node
        try:
            obs, rewards, terminated, truncated, infos = vec.step(["a"])
        finally:
            kill.join()
        assert truncated == [True] and terminated == [False] and infos[0]["stop_reason"] == "error"
        assert "the env actor died" in infos[0]["error"] and doomed in infos[0]["error"]
        ray.kill(holder)  # room on the head for the successor
        obs, infos = vec.reset(options={"task_id": "ok"})
        assert obs[0] is not None, infos[0].get("error")
        assert vec._members[0].placement()["node_id"] == _node_with("node:__internal_head__")
        assert vec.step(["again"])[0][0][0]["content"] == "echo: again"


def test_an_actor_no_node_can_hold_times_out_saying_why(fresh_driver):
    with make_vec("guess", 1, backend="ray", ray_address=fresh_driver.address, reset_timeout_s=3,
                  ray_actor_options={"resources": {"clawgym_gpu_node": 1}}) as vec:
        obs, infos = vec.reset()
        assert obs == [None] and "did not return within 3 s: its Ray actor never started" in infos[0]["error"]
        assert "clawgym_gpu_node" in infos[0]["error"]


@pytest.mark.slow
def test_a_node_lost_between_calls_fails_the_step_not_the_reset_nor_the_close(fresh_driver):
    i, doomed, on_doomed, holder = _doomed_node(fresh_driver, members=3)
    vec = make_vec("guess", 3, backend="ray", ray_address=fresh_driver.address, ray_actor_options=on_doomed)
    try:
        vec.reset(options={"task_id": "guess-50"})
        assert {m.placement()["node_id"] for m in vec._members} == {doomed}
        fresh_driver.kill_worker(i)  # all idle: member 0 mid-episode, 1 about to reset, 2 left as is
        obs, rewards, terminated, truncated, infos = vec.step([guess(10), None, None])
        assert truncated[0] and "the env actor died" in infos[0]["error"] and doomed in infos[0]["error"]
        assert "ResetNeeded" not in infos[0]["error"]
        ray.kill(holder)  # room on the head for the successors
        # a reset has no episode to lose: it goes to a fresh actor on a live node at once
        _play_guess(vec, 1)
        _play_guess(vec, 0)
        head = _node_with("node:__internal_head__")
        assert [m.placement()["node_id"] for m in vec._members[:2]] == [head, head]
    finally:
        vec.close()  # returns although member 2's actor went down with its node
    assert [m._actor for m in vec._members] == [None, None, None]


def test_an_unreachable_address_fails_at_once_with_what_to_do():
    ray.shutdown()
    nobody = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionError, match=f"no Ray cluster answers at {nobody} .*ray start --head"):
        make_vec("guess", 1, backend="ray", ray_address=nobody)
    with pytest.raises(ValueError, match="is not host:port"):
        make_vec("guess", 1, backend="ray", ray_address="my-cluster")
    with pytest.raises(ValueError, match="max_restarts must be 0"):
        make_vec("guess", 1, backend="ray", ray_actor_options={"max_restarts": 3})
    assert not ray.is_initialized()  # nothing was started on the way to those errors


class _Sandboxed(gym.Env):
    def __init__(self, sandbox_config: dict | None = None) -> None:
        pass


class _AsksItsClass(gym.Env):
    @classmethod
    def sandbox_config_for(cls, kwargs: dict):
        from envs.sandbox import SandboxConfig
        return SandboxConfig(cpus=kwargs.get("cores", 3), memory_mb=2048)


@pytest.mark.parametrize("entry_point,kwargs,expected", [
    (_Sandboxed, {}, {"num_cpus": 1.0, "memory": 1024 * 2**20}),  # SandboxConfig's defaults
    (_Sandboxed, {"sandbox_config": {"cpus": 0.5, "memory_mb": 300}}, {"num_cpus": 0.5, "memory": 300 * 2**20}),
    (_AsksItsClass, {"cores": 2}, {"num_cpus": 2.0, "memory": 2048 * 2**20}),
    ("envs.guess:GuessNumberEnv", {}, {}),  # no sandbox: I/O bound, reserves nothing
    ("envs.swe.env:SWEEnv", {}, {"num_cpus": 1.0, "memory": 2048 * 2**20}),  # SWE's own 2 GiB default
    ("envs.swe.env:SWEEnv", {"sandbox_config": {"memory_mb": 4096}}, {"num_cpus": 1.0, "memory": 4096 * 2**20}),
])
def test_sandbox_resources_are_read_from_the_env_class_and_its_kwargs(entry_point, kwargs, expected):
    spec = gym.envs.registration.EnvSpec("clawgymtest/Resources-v0", entry_point=entry_point)
    assert sandbox_resources(spec, kwargs) == expected
