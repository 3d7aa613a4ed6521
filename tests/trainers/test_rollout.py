"""trainers.rollout.collect: what each turn's prompt holds when the env changes mid-episode,
and where a rollout's time goes."""

from __future__ import annotations

import time
from typing import Any

import envs
from agents.policy import Completion, SamplingParams
from trainers.rollout import Job, RolloutTimes, collect


class AnswersInWords:
    """A policy that never calls a tool (each reply ends the BFCL turn), recording the tool
    names it was offered at every call: what the rollout hands the model."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    def generate(self, histories: list[list[dict[str, Any]]], tools: list[list[dict[str, Any]]],
                 sampling: SamplingParams) -> list[Completion]:
        out = []
        for tool_list in tools:
            self.offered.append(sorted(t["function"]["name"] for t in tool_list))
            out.append(Completion(message={"role": "assistant", "content": "Done."}, text="Done.", prompt_ids=[1],
                                  completion_ids=[2], logprobs=[-0.1], weight_version=0, finish_reason="stop",
                                  temperature=1.0))
        return out


def test_tools_the_env_adds_mid_episode_reach_the_next_prompt_and_the_turn_that_saw_them() -> None:
    # BFCL's miss-func conversations hold some functions back and add them at a later user turn
    policy = AnswersInWords()
    with envs.make_vec("bfcl-multi", 1) as vec:
        [episode] = collect(vec, policy, [Job(0, "multi_turn_miss_func_0", seed=0)], SamplingParams(0.0))
    counts = [len(names) for names in policy.offered]
    assert len(counts) == len(episode.turns) >= 2
    grew = [i for i in range(1, len(counts)) if counts[i] > counts[i - 1]]
    assert grew, f"the tool list never grew: {counts}"
    added = set(policy.offered[grew[0]]) - set(policy.offered[grew[0] - 1])
    assert added and all(name in str(episode.turns[grew[0] - 1].next_state) for name in added)
    # each turn keeps the tools its prompt had
    assert [sorted(t["function"]["name"] for t in turn.tools) for turn in episode.turns] == policy.offered


class SlowToAnswer(AnswersInWords):
    """The same policy, taking a known time over each generate call."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.calls = seconds, 0

    def generate(self, histories: list[list[dict[str, Any]]], tools: list[list[dict[str, Any]]],
                 sampling: SamplingParams) -> list[Completion]:
        self.calls += 1
        time.sleep(self.seconds)
        return super().generate(histories, tools, sampling)


def test_a_rollout_says_how_long_it_spent_generating_and_in_the_env() -> None:
    policy = SlowToAnswer(0.2)
    times = RolloutTimes()
    with envs.make_vec("bfcl-multi", 2) as vec:
        begun = time.perf_counter()
        collect(vec, policy, [Job(0, "multi_turn_base_0", seed=0), Job(0, "multi_turn_base_1", seed=0)],
                SamplingParams(0.0), times=times)
        wall = time.perf_counter() - begun
    assert policy.calls >= 2
    assert 0.2 * policy.calls <= times.generate_s < 0.2 * policy.calls + 0.5
    assert 0 < times.env_s and times.generate_s + times.env_s <= wall
