"""An oracle's episodes are recorded as a policy's: its messages the completions, the env's
next state after each; an oracle that raises fails its episode, an env that fails is an env error."""

from __future__ import annotations

from typing import Any

import envs
from envs.errors import EnvError
from envs.oracle import FamilyOracle
from trainers.oracle_rollout import play_episodes, play_one
from trainers.rollout import Job


def test_the_ground_truth_calls_are_recorded_as_turns_with_the_prompt_a_policy_would_have_seen() -> None:
    jobs = [Job(0, "simple_python_0", seed=0), Job(1, "simple_python_1", seed=1)]
    played = list(play_episodes("bfcl", {"split": "all"}, jobs, parallel=2))
    assert sorted(e.group for e, _ in played) == [0, 1] and [note for _, note in played] == [None, None]
    for episode, _ in played:
        assert episode.error is None and episode.env_return == 1.0 and episode.turns
        first = episode.turns[0]
        assert first.completion.finish_reason == "oracle" and first.completion.message["tool_calls"]
        assert first.context[-1]["role"] == "user" and first.tools  # the prompt and tools a policy gets


def test_an_oracle_that_raises_fails_its_episode_and_an_env_failure_is_an_env_error() -> None:
    def lost(env: Any, task_id: str, seed: int) -> None:
        env.reset(seed=seed, options={"task_id": task_id})
        raise ValueError("no element with a ref matches '#subbtn'")

    def broken(env: Any, task_id: str, seed: int) -> None:
        raise EnvError("the sandbox died")

    env = envs.make("bfcl", split="all").unwrapped
    try:
        episode, note = play_one(FamilyOracle(lost), env, Job(0, "simple_python_0", seed=0))
        assert (episode.stop_reason, episode.error, episode.turns) == ("oracle_failed", None, [])
        assert note == "the oracle failed: ValueError: no element with a ref matches '#subbtn'"
        episode, note = play_one(FamilyOracle(broken), env, Job(1, "simple_python_1", seed=1))
        assert (episode.stop_reason, episode.error, note) == ("error", "EnvError: the sandbox died", None)
    finally:
        env.close()
