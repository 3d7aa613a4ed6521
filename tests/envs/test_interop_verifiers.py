"""envs.interop.verifiers through verifiers' own entry point: ``vf-eval clawgym-verifiers``
(in .venv-verifiers, ``make verifiers``) plays clawgym envs against clawgym's live server
serving the default model. Each episode verifiers records is then replayed on a fresh
clawgym env with the same task, seed and replies: every observation the model was shown,
every step's reward, the return verifiers scored and the stop reason must be the env's."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envs
from tests.helpers import require
from trainers.config import apply_overrides
from trainers.live.config import ServeConfig
from trainers.serve import serve_in_thread

pytestmark = [pytest.mark.verifiers, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
VF_EVAL = ROOT / ".venv-verifiers" / "bin" / "vf-eval"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """clawgym's live server (what ``python -m trainers.serve learn=false`` runs) serving the
    default model on a free port: its ``/v1`` base URL."""
    probe = subprocess.run([str(ROOT / ".venv-verifiers" / "bin" / "python"), "-c",
                            "import verifiers, clawgym_verifiers"], capture_output=True, text=True) \
        if VF_EVAL.exists() else None
    require(probe is not None and probe.returncode == 0,
            f"verifiers is not set up in .venv-verifiers: make verifiers "
            f"({probe.stderr.strip().splitlines()[-1] if probe and probe.stderr.strip() else 'no vf-eval'})")
    config = apply_overrides(ServeConfig(), ["learn=false"])
    with serve_in_thread(config, tmp_path_factory.mktemp("serve") / "run") as (url, _):
        yield url


def vf_eval(url: str, out: Path, env: str, env_kwargs: dict[str, Any], episodes: int) -> list[dict[str, Any]]:
    """Run verifiers' eval CLI on clawgym env ``env``; the episodes it wrote."""
    command = [str(VF_EVAL), "clawgym-verifiers", "--env.taskset.env", env,
               "--env.taskset.env-kwargs", json.dumps(env_kwargs), "-m", "clawgym",
               "--client.base-url", url, "--client.api-key-var", "CLAWGYM_TEST_NO_KEY",
               "-n", str(episodes), "--sampling.max-tokens", "32", "--no-push", "--no-rich",
               "-o", str(out), "--run.dir", "run"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=out.parent,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, f"vf-eval failed:\n{done.stderr[-3000:]}"
    episodes = [json.loads(line) for line in (out / "run" / "traces.jsonl").read_text().splitlines()]
    return sorted(episodes, key=lambda e: e["task"]["data"]["idx"])  # written as they finish


def as_action(message: dict[str, Any]) -> dict[str, Any]:
    """A reply verifiers recorded, as the clawgym action it stands for."""
    action = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        action["tool_calls"] = [{"id": c["id"], "type": "function",
                                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                                for c in message["tool_calls"]]
    return action


def shown(message: dict[str, Any]) -> tuple[Any, ...]:
    return message["role"], message["content"], message.get("tool_call_id")


def replay(trace: dict[str, Any]) -> tuple[list[float], str | None]:
    """Step a fresh env with the trace's replies, checking each observation the model was shown
    is the env's; ``(step rewards, stop reason)``."""
    data = trace["task"]["data"]
    env = envs.make(data["env"], **data["env_kwargs"])
    opening, info = env.reset(seed=data["seed"], options={"task_id": data["task_id"]})
    messages = [node["message"] for node in trace["nodes"]]
    assert [shown(m) for m in messages[:len(opening)]] == [shown(m) for m in opening]
    assert [t["name"] for t in trace["tools"]] == [t["function"]["name"] for t in info["tools"]]
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    assert replies and replies[0] == len(opening)
    rewards, stop = [], None
    for n, at in enumerate(replies):
        obs, reward, terminated, truncated, step_info = env.step(as_action(messages[at]))
        rewards.append(reward)
        if n + 1 < len(replies):  # what the model was shown next is the env's observation
            assert not (terminated or truncated)
            assert [shown(m) for m in messages[at + 1:replies[n + 1]]] == [shown(m) for m in obs]
        else:  # verifiers stopped where the env ended the episode
            assert terminated or truncated
            stop = step_info["stop_reason"]
    env.close()
    return rewards, stop


def check(episodes: list[dict[str, Any]], task_ids: list[str]) -> list[float]:
    returns = []
    assert [e["task"]["data"]["task_id"] for e in episodes] == task_ids  # the env's catalog, in order
    for episode in episodes:
        assert episode["ok"] and not episode["errors"], episode["errors"]
        (trace,) = episode["traces"]
        rewards, stop = replay(trace)
        assert trace["rewards"] == {"env_return": {"score": sum(rewards), "weight": 1.0}}
        assert trace["info"]["step_rewards"] == rewards and trace["info"]["stop_reason"] == stop
        assert trace["metrics"]["turns"] == len(rewards)
        returns.append(sum(rewards))
    return returns


def test_vf_eval_plays_guess_with_the_envs_tools_observations_and_rewards(endpoint, tmp_path) -> None:
    episodes = vf_eval(endpoint, tmp_path / "guess", "guess", {"high": 3, "max_turns": 2}, 3)
    returns = check(episodes, ["guess-1", "guess-2", "guess-3"])
    assert all(r in (0.0, 1.0) for r in returns)
    assert all(len(e["traces"][0]["info"]["step_rewards"]) <= 2 for e in episodes)  # the env's max_turns


def test_vf_eval_scores_chat_episodes_with_the_envs_nonzero_rewards(endpoint, tmp_path) -> None:
    # The chat env rewards every reply +1 or -1 (its scripted user), so a return verifiers
    # reported that were not the env's would show here, where guess's zeros could hide it.
    episodes = vf_eval(endpoint, tmp_path / "chat", "chat", {}, 2)
    catalog = envs.make("chat").unwrapped.task_ids()[:2]
    returns = check(episodes, catalog)
    assert all(r in (-1.0, 1.0) for r in returns)
