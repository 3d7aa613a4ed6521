"""trainers.rollout.collect: what each turn's prompt holds when the env changes mid-episode,
where a rollout's time goes, and what its progress shows."""

from __future__ import annotations

import io
import itertools
import re
import statistics
import time
from typing import Any

import pytest

import envs
from agents.policy import Completion, SamplingParams
from trainers.progress import EpisodeProgress
from trainers.rollout import Job, Replay, RolloutTimes, collect, replay, replay_steps


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
    """The same policy, taking at least a known time over each generate call; ``inside_s``
    is the time it measured inside its calls."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.calls, self.inside_s = seconds, 0, 0.0

    def generate(self, histories: list[list[dict[str, Any]]], tools: list[list[dict[str, Any]]],
                 sampling: SamplingParams) -> list[Completion]:
        begun = time.perf_counter()
        self.calls += 1
        time.sleep(self.seconds)
        out = super().generate(histories, tools, sampling)
        self.inside_s += time.perf_counter() - begun
        return out


def test_a_rollout_says_how_long_it_spent_generating_and_in_the_env() -> None:
    policy = SlowToAnswer(0.2)
    times = RolloutTimes()
    with envs.make_vec("bfcl-multi", 2) as vec:
        begun = time.perf_counter()
        collect(vec, policy, [Job(0, "multi_turn_base_0", seed=0), Job(0, "multi_turn_base_1", seed=0)],
                SamplingParams(0.0), times=times)
        wall = time.perf_counter() - begun
    assert policy.calls >= 2
    # Nested clock reads, so these orders hold however loaded the machine: the policy's own time
    # inside generate is within generate_s, and generate_s and env_s are apart, within the wall.
    assert 0.2 * policy.calls <= policy.inside_s <= times.generate_s
    assert 0 < times.env_s and times.generate_s + times.env_s <= wall


class Repeats:
    """A policy that gives every turn the same reply."""

    def __init__(self, text: str) -> None:
        self.text = text

    def generate(self, histories: list[list[dict[str, Any]]], tools: list[list[dict[str, Any]]],
                 sampling: SamplingParams) -> list[Completion]:
        return [Completion(message={"role": "assistant", "content": self.text}, text=self.text, prompt_ids=[1],
                           completion_ids=[2], logprobs=[-0.1], weight_version=0, finish_reason="stop",
                           temperature=1.0) for _ in histories]


def test_a_replay_brings_the_env_back_to_a_later_turn_and_scores_another_reply_there() -> None:
    # a scripted user who corrects three replies: turns 1 and 2 are reached by stepping the earlier replies again
    kwargs = {"persona": "friend", "patience": 3, "partial_credit": True}
    with envs.make_vec("chat", 2, env_kwargs=kwargs) as vec:
        jobs = [Job(0, "friend/cook-01", seed=11), Job(0, "friend/travel-02", seed=12)]
        episodes = collect(vec, Repeats("Sure. Here is a long answer about it."), jobs, SamplingParams(0.0))
        assert [len(e.turns) for e in episodes] == [3, 3] and [e.job for e in episodes] == jobs
        own = [Replay(e, k, e.turns[k].completion.message) for e in episodes for k in range(3)]
        assert replay(vec, own) == [t.env_reward for e in episodes for t in e.turns]
        # the same next state too (what a judge reads), the user's correction of that reply
        assert [(s.next_state, s.next_role) for s in replay_steps(vec, own)] \
            == [(t.next_state, t.next_role) for e in episodes for t in e.turns]
        assert all(t.next_state for e in episodes for t in e.turns[:2])
        other = "Sam, here you go. Want more?"  # two more of friend's four checks than the episodes' reply
        times = RolloutTimes()
        rewards = replay(vec, [Replay(episodes[0], 2, {"role": "assistant", "content": other}),
                               Replay(episodes[1], 0, {"role": "assistant", "content": other})], times)
        probe = envs.make("chat", **kwargs).unwrapped
        # partial credit: 2 x (the fraction of that task's preferences the reply meets) - 1
        expected = [2 * statistics.fmean(probe.preferences_met(other, e.task_id).values()) - 1 for e in episodes]
        assert rewards == pytest.approx(expected) and rewards != [t.env_reward for t in (episodes[0].turns[2],
                                                                                          episodes[1].turns[0])]
        assert times.env_s > 0 and times.generate_s == 0
        # the rollout after a replay starts clean, whatever a replay left mid-episode
        again = collect(vec, Repeats("Sure. Here is a long answer about it."), jobs, SamplingParams(0.0))
        assert [[t.env_reward for t in e.turns] for e in again] == [[t.env_reward for t in e.turns] for e in episodes]


def test_a_replay_of_an_env_without_task_ids_resets_from_the_seed_alone() -> None:
    # the guess env draws its secret from the reset seed; a job without a task passes no options
    with envs.make_vec("guess", 2) as vec:
        jobs = [Job(0, None, seed=3), Job(1, None, seed=4)]
        episodes = collect(vec, Repeats("50"), jobs, SamplingParams(0.0))  # no tool call: never solved
        assert all(len(e.turns) >= 3 for e in episodes)
        own = [Replay(e, k, e.turns[k].completion.message) for e in episodes for k in range(len(e.turns))]
        assert replay(vec, own) == [t.env_reward for e in episodes for t in e.turns]
        # the secret came back with the seed: guessing it at turn 1 or 2 solves that episode only
        secrets = [int(e.task_id.removeprefix("guess-")) for e in episodes]
        assert secrets[0] != secrets[1]

        def guess(n: int) -> dict[str, Any]:
            return {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": f'{{"number": {n}}}'}}]}

        assert replay(vec, [Replay(episodes[0], 1, guess(secrets[0])), Replay(episodes[1], 1, guess(secrets[0])),
                            Replay(episodes[1], 2, guess(secrets[1]))]) == [1.0, 0.0, 1.0]


def test_a_rollout_reports_its_turns_and_ended_episodes_as_they_happen() -> None:
    # guess: a reply without a tool call is reminded, never solves, so each episode plays max_turns=3
    log = io.StringIO()
    jobs = [Job(g, f"guess-{g + 1}", seed=g) for g in range(3)]
    with envs.make_vec("guess", 2, env_kwargs={"max_turns": 3}) as vec, \
            EpisodeProgress("rollout step 1", len(jobs), stream=log, log_every_s=0) as progress:
        episodes = collect(vec, Repeats("Is it 50?"), jobs, SamplingParams(0.0), progress=progress)
    assert progress.turns == sum(len(e.turns) for e in episodes) == 9 and progress.episodes == 3
    counts = [(int(m[1]), int(m[2])) for m in re.finditer(r"(\d+)/3 episodes \[[^]]*\], (\d+) turn", log.getvalue())]
    seen = [count for count, _ in itertools.groupby(counts)]  # a reset's note redraws the same counts
    # two waves (2 envs, 3 jobs): every turn batch is counted as it ends, each episode when it does
    assert seen == [(0, 0), (0, 2), (0, 4), (2, 6), (2, 7), (2, 8), (3, 9)]
    assert re.search("starting 2 episodes$", log.getvalue(), re.M) and re.search("starting 1 episode$", log.getvalue(), re.M)
