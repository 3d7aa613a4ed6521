"""OpenEnv both ways, against openenv-core's real server and client over a real socket:
a served clawgym env answers OpenEnv's own client, sessions are isolated, bounded and
closed, the served env wrapped back as a clawgym env keeps the contract, malformed actions
get the contract's answer, and a plain (non-clawgym) OpenEnv server trains as a clawgym env."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from envs import EnvError, check_env, make_vec
from envs.guess import GuessNumberEnv
from envs.registration import register_with_gymnasium
from tests.helpers import require

if importlib.util.find_spec("openenv") is not None:
    from openenv.core import GenericEnvClient
    from websockets.sync.client import connect

    from envs.interop import openenv as interop
    from envs.interop.openenv.__main__ import main as serve_main
    from envs.interop.openenv.__main__ import parse_serve_args
else:  # the module's tests fail under CI=true and skip elsewhere, saying what to install
    GenericEnvClient = interop = connect = serve_main = parse_serve_args = None


@pytest.fixture(autouse=True)
def _needs_openenv() -> None:
    require(interop is not None, "openenv-core is not installed: pip install -e '.[openenv]'")


class CountingGuess(GuessNumberEnv):
    """GuessNumber that records its lifecycle, so a test can see what the server did."""

    events: list[tuple[int, str]] = []

    def reset(self, **kwargs: Any) -> Any:
        CountingGuess.events.append((id(self), "reset"))
        return super().reset(**kwargs)

    def close(self) -> None:
        CountingGuess.events.append((id(self), "close"))
        super().close()


register_with_gymnasium("clawgym-test/CountingGuess-v0", "tests.envs.test_interop_openenv:CountingGuess")


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """``app`` on uvicorn on a free loopback port, in a thread; yields its http:// URL."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """CountingGuess served with at most 2 sessions."""
    if interop is None:
        yield ""
        return
    with running(interop.build_app("clawgym-test/CountingGuess-v0", max_sessions=2)) as url:
        yield url


def guess(n: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "guess", "arguments": json.dumps({"number": n})}}]}


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# ---- OpenEnv's client against a served clawgym env ------------------------------------------
def test_openenvs_client_resets_and_steps_a_clawgym_env_over_the_wire(served):
    with GenericEnvClient(base_url=served).sync() as client:
        opening = client.reset(task_id="guess-42")
        assert [m["role"] for m in opening.observation["messages"]] == ["system", "user"]
        assert opening.observation["info"]["task_id"] == "guess-42"
        assert opening.observation["info"]["tools"][0]["function"]["name"] == "guess"
        assert opening.observation["max_turns"] == 10 and opening.done is False

        low = client.step({"message": guess(10)})
        assert low.observation["messages"] == [{"role": "tool", "tool_call_id": "c1", "content": "higher"}]
        assert (low.reward, low.done, low.observation["info"]["metrics"]["invalid_action"]) == (0.0, False, 0.0)

        hit = client.step({"message": '<tool_call>{"name": "guess", "arguments": {"number": 42}}</tool_call>'})
        assert hit.observation["messages"][0]["content"] == "correct"
        assert (hit.reward, hit.done, hit.observation["terminated"], hit.observation["truncated"]) == (1.0, True, True, False)
        assert hit.observation["info"]["stop_reason"] == "solved"
        assert client.state()["step_count"] == 2 and client.state()["task_id"] == "guess-42"


def test_the_typed_client_gives_claw_observations(served):
    client_cls = interop.client_class()
    with client_cls(base_url=served).sync() as client:
        opening = client.reset(seed=7)
        assert isinstance(opening.observation, interop.ClawObservation)
        secret = int(opening.observation.info["task_id"].removeprefix("guess-"))
        result = client.step(interop.ClawAction(message=guess(secret)))
        assert result.reward == 1.0 and result.observation.terminated and result.done


def test_two_concurrent_clients_never_share_an_episode_and_sessions_are_bounded(served):
    CountingGuess.events.clear()
    first, second = GenericEnvClient(base_url=served).sync(), GenericEnvClient(base_url=served).sync()
    try:
        first.reset(task_id="guess-10")
        second.reset(task_id="guess-90")
        barrier = threading.Barrier(2)
        answers: dict[str, list[str]] = {}

        def play(name: str, client: Any, numbers: list[int]) -> None:
            barrier.wait()  # both step at once, interleaved on the server
            answers[name] = [client.step({"message": guess(n)}).observation["messages"][0]["content"]
                             for n in numbers]

        threads = [threading.Thread(target=play, args=("first", first, [50, 10])),
                   threading.Thread(target=play, args=("second", second, [50, 10, 90]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        # the same guesses, each answered by its own episode's secret
        assert answers == {"first": ["lower", "correct"], "second": ["higher", "higher", "correct"]}
        # a third session is refused: the server says so unprompted, then closes the socket
        with connect(served.replace("http://", "ws://") + "/ws") as third:
            refusal = json.loads(third.recv(timeout=30))
        assert refusal["type"] == "error" and refusal["data"]["code"] == "CAPACITY_REACHED"
        with pytest.raises(EnvError, match="max_sessions"):  # and a clawgym client says what to do
            interop.OpenEnvEnv(url=served).reset()
        assert len({env for env, event in CountingGuess.events if event == "reset"}) == 2
    finally:
        first.close()
        second.close()
    # each ended session closed its env (on the server's own thread, soon after)
    wait_for(lambda: sum(event == "close" for _, event in CountingGuess.events) >= 2, "sessions to close")
    closed = {env for env, event in CountingGuess.events if event == "close"}
    assert {env for env, event in CountingGuess.events if event == "reset"} <= closed
    with GenericEnvClient(base_url=served).sync() as again:  # the slots are free again
        assert again.reset(task_id="guess-3").observation["info"]["task_id"] == "guess-3"


def test_a_client_that_vanishes_or_sends_garbage_ends_only_its_own_session(served):
    CountingGuess.events.clear()
    ws_url = served.replace("http://", "ws://") + "/ws"
    with connect(ws_url) as rude:  # resets, then drops its socket without OpenEnv's close message
        rude.send(json.dumps({"type": "reset", "data": {"task_id": "guess-5"}}))
        assert json.loads(rude.recv(timeout=30))["type"] == "observation"
    with connect(ws_url) as hostile:  # JSON nested past Python's recursion limit
        hostile.send("[" * 100_000 + "]" * 100_000)
        assert json.loads(hostile.recv(timeout=30))["type"] == "error"
    wait_for(lambda: sum(event == "close" for _, event in CountingGuess.events) >= 1, "the dropped session's env to close")
    with GenericEnvClient(base_url=served).sync() as polite:  # the server goes on, slots free
        assert polite.reset(task_id="guess-6").observation["info"]["task_id"] == "guess-6"
        assert polite.step({"message": guess(6)}).reward == 1.0


def test_a_malformed_action_over_the_wire_gets_the_contracts_answer(served):
    with GenericEnvClient(base_url=served).sync() as client:
        client.reset(task_id="guess-40")
        deep: list[Any] = []
        for _ in range(100):
            deep = [deep]
        hostile = {"role": "assistant", "content": [{"type": "text", "text": "x", "more": deep}]}
        for bad in (42, {"role": "assistant", "content": 7}, None, hostile):
            result = client.step({"message": bad})
            assert result.observation["info"]["metrics"]["invalid_action"] == 1.0, bad
            assert result.observation["messages"] and result.done is False
        broken = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "bad", "type": "function", "function": {"name": "guess", "arguments": "{oops"}}]}
        answer = client.step({"message": broken}).observation["messages"][0]
        assert answer["role"] == "tool" and answer["tool_call_id"] == "bad"
        # a payload that is no ClawAction is OpenEnv's validation error; the session goes on
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"msg": guess(40)})
        assert client.step({"message": guess(40)}).reward == 1.0


def test_reset_refuses_what_it_does_not_take(served):
    with GenericEnvClient(base_url=served).sync() as client:
        with pytest.raises(RuntimeError, match="ValueError: task_id must look like"):
            client.reset(task_id="no-such-task")
        with pytest.raises(RuntimeError, match="reset takes seed, episode_id, task_id, options; got colour"):
            client.reset(colour="red")
        assert client.reset(seed=1).observation["info"]["task_id"].startswith("guess-")


# ---- the served env wrapped back as a clawgym env -------------------------------------------
def test_the_served_env_wrapped_back_passes_check_env(served):
    CountingGuess.events.clear()
    env = gym.make(interop.ENV_ID, url=served)
    check_env(env)
    assert sum(event == "reset" for _, event in CountingGuess.events) >= 5  # the server did the work


def test_the_wrapped_env_mirrors_the_served_one(served):
    remote = interop.OpenEnvEnv(url=served)
    obs, info = remote.reset(options={"task_id": "guess-33"})
    local_obs, local_info = GuessNumberEnv().reset(options={"task_id": "guess-33"})
    assert (obs, info) == (local_obs, local_info) and remote.max_turns == 10
    assert remote.step(guess(20))[0][0]["content"] == "higher"
    obs, reward, terminated, truncated, info = remote.step(guess(33))
    assert (reward, terminated, truncated, info["stop_reason"], info["metrics"]["solved"]) == (1.0, True, False, "solved", 1.0)
    with pytest.raises(ValueError, match="task_id must look like"):  # the server's ValueError stays one
        remote.reset(options={"task_id": "nope"})
    remote.close()


def test_a_server_that_is_not_there_is_an_env_error_and_one_that_goes_away_truncates():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(EnvError, match=r"no OpenEnv server answers at .*python -m envs.interop.openenv serve"):
        interop.OpenEnvEnv(url=nobody).reset()
    with pytest.raises(ValueError, match="needs url="):
        interop.OpenEnvEnv()

    with running(interop.build_app("guess")) as url:
        env = interop.OpenEnvEnv(url=url, timeout_s=5)
        env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step(guess(50))  # the server is gone
    assert truncated and not terminated and info["stop_reason"] == "error"
    assert "the OpenEnv server at" in info["error"]
    with pytest.raises(EnvError):
        env.reset()
    env.close()


def test_a_grpo_group_one_seed_plays_one_task_through_vector_envs(served):
    vec = make_vec(interop.ENV_ID, 2, env_kwargs={"url": served})
    try:
        _, infos = vec.reset(seed=[11, 11])
        assert infos[0]["task_id"] == infos[1]["task_id"]
        _, infos = vec.reset(seed=[11, 12])
        assert infos[0]["task_id"] != infos[1]["task_id"]
    finally:
        vec.close()


# ---- a plain OpenEnv server (not clawgym's) as a clawgym env ---------------------------------
def _counter_app() -> Any:
    """A minimal OpenEnv env written the way OpenEnv's docs write one: add ``n`` to a total;
    the reward is ``n``; done once the total reaches 3."""
    from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app

    class AddAction(Action):
        n: int

    class TotalObservation(Observation):
        total: int = 0

    class Counter(Environment):
        def __init__(self) -> None:
            super().__init__()
            self._state, self.total = State(), 0

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
            self._state, self.total = State(episode_id=episode_id), 0
            return TotalObservation(total=0)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            self.total += action.n
            return TotalObservation(total=self.total, reward=float(action.n), done=self.total >= 3)

        @property
        def state(self) -> State:
            return self._state

    return create_fastapi_app(Counter, AddAction, TotalObservation)


def test_any_openenv_server_plays_as_a_clawgym_env_through_a_step_tool():
    with running(_counter_app()) as url:
        env = interop.OpenEnvEnv(url=url)
        obs, info = env.reset(seed=5)
        assert info["task_id"].startswith("seed-") and '"total": 0' in obs[0]["content"]
        tool = info["tools"][0]["function"]
        assert tool["name"] == "step" and set(tool["parameters"]["properties"]) == {"n"}

        def step_call(args: Any, call_id: str = "s1") -> dict[str, Any]:
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "step", "arguments": json.dumps(args)}}]}

        obs, reward, terminated, truncated, info = env.step(step_call({"n": 2}))
        assert json.loads(obs[0]["content"])["total"] == 2 and reward == 2.0 and not (terminated or truncated)
        obs, reward, *_, info = env.step(step_call({"n": "many"}))  # the server's schema refuses it
        assert info["metrics"]["invalid_action"] == 1.0 and "Refused" in obs[0]["content"] and reward == 0.0
        obs, reward, terminated, truncated, info = env.step(step_call({"n": 1}))
        assert (reward, terminated, truncated, info["stop_reason"]) == (1.0, True, False, "submitted")
        env.close()


def test_a_server_posing_as_clawgym_with_malformed_messages_is_an_env_error():
    """A fault no real clawgym server shows: messages that are not chat messages."""
    from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app

    class AnyAction(Action):
        message: Any = None

    class Posing(Observation):
        messages: list[Any] = []
        info: dict[str, Any] = {}
        terminated: bool = False
        truncated: bool = False

    class Liar(Environment):
        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
            return Posing(messages=[{"role": "wizard", "content": 3}],
                          info={"task_id": "t", "tools": []})

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            return Posing()

        @property
        def state(self) -> State:
            return State()

    with running(create_fastapi_app(Liar, AnyAction, Posing)) as url:
        env = interop.OpenEnvEnv(url=url)
        with pytest.raises(EnvError, match="sent a malformed observation"):
            env.reset()
        env.close()


# ---- the CLI ------------------------------------------------------------------------------------
def test_serve_arguments_parse_like_the_other_key_value_clis():
    settings = parse_serve_args(["env=guess", "port=9001", "max_sessions=3",
                                         "env_kwargs.high=50", "env_kwargs.persona=student"])
    assert settings == {"env": "guess", "port": 9001, "host": "127.0.0.1", "max_sessions": 3,
                        "idle_timeout_s": None, "env_kwargs": {"high": 50, "persona": "student"}}
    with pytest.raises(ValueError, match="unknown key 'sessions'"):
        parse_serve_args(["env=guess", "sessions=3"])
    with pytest.raises(ValueError, match="env= is required"):
        parse_serve_args(["port=1"])


def test_serve_names_a_bad_env_or_kwarg_before_listening(capsys):
    assert serve_main(["serve", "env=no-such-env"]) == 2
    assert "unknown env 'no-such-env'" in capsys.readouterr().err
    assert serve_main(["serve", "env=guess", "env_kwargs.low=9", "env_kwargs.high=1"]) == 2
    assert "low must be <= high" in capsys.readouterr().err
    assert serve_main(["serve", "env=guess", "max_sessions=0"]) == 2
    assert "max_sessions must be an integer >= 1" in capsys.readouterr().err


# ---- the example ------------------------------------------------------------------------------
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "interop" / "openenv_guess.py"


def test_the_example_plays_guess_from_both_sides(served, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("openenv_guess_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--url", served, "--task", "guess-73"])
    example.main()
    out = capsys.readouterr().out
    assert "guess  73 -> correct" in out
    assert out.splitlines()[-1].startswith("openenv client: 6 turns, return 1; clawgym env: ")
    assert out.splitlines()[-1].endswith("turns, return 1")


@pytest.mark.slow
def test_the_example_starts_its_own_server_with_the_cli():
    run = subprocess.run([sys.executable, str(EXAMPLE)], cwd=EXAMPLE.parents[2], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "serving clawgym/GuessNumber-v0 as an OpenEnv server" in run.stdout
    assert run.stdout.splitlines()[-1].startswith("openenv client: 6 turns, return 1; clawgym env: ")
