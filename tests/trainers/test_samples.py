"""Scored episodes -> training samples: rewards, GRPO groups, OPD teacher gaps, combine."""

from __future__ import annotations

import math

import pytest

from agents.policy import Completion
from trainers.config import TrainConfig
from trainers.live.learner import record_samples
from trainers.live.store import TurnRecord
from trainers.rollout import Episode, Turn
from trainers.samples import assign_rewards, build_samples, group_advantages, run_reward, signal_groups, teacher_passes

A = 1 / math.sqrt(2)  # returns [1, -1]: mean 0, sample std sqrt(2), A = ±1/sqrt(2) (eps shifts the 7th digit)


def completion(ids: list[int], logprobs: list[float] | None = None, finish: str = "stop",
               version: int = 0, temperature: float = 1.0) -> Completion:
    return Completion(message={"role": "assistant", "content": "x"}, text="x", prompt_ids=[1, 2, 3],
                      completion_ids=list(ids), logprobs=logprobs if logprobs is not None else [-1.0] * len(ids),
                      weight_version=version, finish_reason=finish, temperature=temperature)


def turn(ids: list[int] | None = None, *, judge_score: int | None = None, env_reward: float = 0.0,
         hint: str | None = None, finish: str = "stop", logprobs: list[float] | None = None,
         version: int = 0, index: int = 0) -> Turn:
    ids = [10, 11, 2] if ids is None else ids
    return Turn(context=[{"role": "user", "content": "hi"}], tools=[],
                completion=completion(ids, logprobs, finish, version), next_state="ok", next_role="user",
                env_reward=env_reward, metrics={}, index=index, judge_score=judge_score, hint=hint)


def episode(group: int, *turns: Turn, error: str | None = None) -> Episode:
    return Episode(task_id=f"task-{group}", group=group, turns=list(turns), error=error)


def config(**kwargs: object) -> TrainConfig:
    return TrainConfig(**kwargs)  # type: ignore[arg-type]


def no_teacher(turns: list[Turn]) -> list[list[float]]:
    raise AssertionError("grpo must not ask the teacher")


# ---- rewards ------------------------------------------------------------------------------
@pytest.mark.parametrize("reward, prm_coef, expected", [("env", 1.0, [0.5, -1.0, 0.0]),
                                                         ("judge", 1.0, [1.0, 0.0, -1.0]),
                                                         ("both", 0.5, [1.0, -1.0, -0.5])])
def test_assign_rewards(reward, prm_coef, expected):
    # judge_score None (an unparsed verdict) counts as 0
    ep = episode(0, turn(judge_score=1, env_reward=0.5), turn(judge_score=None, env_reward=-1.0),
                 turn(judge_score=-1, env_reward=0.0))
    assign_rewards([ep], config(reward=reward, prm_coef=prm_coef))
    assert [t.reward for t in ep.turns] == pytest.approx(expected)
    assert ep.reward_return == pytest.approx(sum(expected))


# ---- GRPO -----------------------------------------------------------------------------
def test_grpo_group_advantage_is_broadcast_to_every_token_of_every_turn():
    good = episode(0, turn([5, 6, 2], judge_score=1), turn([7, 2], judge_score=0, index=1))
    bad = episode(0, turn([8, 9, 9, 2], judge_score=-1))
    episodes = [good, bad]
    assign_rewards(episodes, config(method="grpo"))
    samples, stats = build_samples(episodes, config(method="grpo"), no_teacher)
    assert [s.completion_ids for s in samples] == [[5, 6, 2], [7, 2], [8, 9, 9, 2]]
    assert samples[0].advantages == pytest.approx([A] * 3, abs=1e-5)
    assert samples[1].advantages == pytest.approx([A] * 2, abs=1e-5)
    assert samples[2].advantages == pytest.approx([-A] * 4, abs=1e-5)
    assert samples[0].prompt_ids == [1, 2, 3] and samples[0].old_logprobs == [-1.0] * 3
    assert stats["samples/count"] == 3 and stats["samples/skipped_groups"] == 0


def test_grpo_without_std_division():
    episodes = [episode(0, turn(judge_score=1)), episode(0, turn(judge_score=-1)), episode(0, turn(judge_score=-1))]
    cfg = config(method="grpo", normalize_std=False)
    assign_rewards(episodes, cfg)
    samples, _ = build_samples(episodes, cfg, no_teacher)
    # returns [1, -1, -1], mean -1/3
    assert [s.advantages[0] for s in samples] == pytest.approx([4 / 3, -2 / 3, -2 / 3])


def test_group_with_equal_returns_is_skipped_not_padded():
    episodes = [episode(0, turn(judge_score=1)), episode(0, turn(judge_score=-1)),
                episode(1, turn(judge_score=1)), episode(1, turn(judge_score=1))]
    cfg = config(method="grpo")
    assign_rewards(episodes, cfg)
    advantages, skipped = group_advantages(episodes, cfg)
    assert set(advantages) == {0, 1} and skipped == 1
    samples, stats = build_samples(episodes, cfg, no_teacher)
    assert len(samples) == 2
    assert stats["samples/skipped_groups"] == 1
    assert stats["samples/count"] == 2
    assert stats["rollout/episodes"] == 4


def test_signal_groups_are_those_whose_returns_differ_in_order_of_appearance():
    """fill_groups keeps these: an errored member does not count, a group left with one
    member has no baseline, and a group is listed once, where it first appears."""
    episodes = [episode(7, turn(judge_score=1)), episode(3, turn(judge_score=1)), episode(3, turn(judge_score=1)),
                episode(5, turn(judge_score=1)), episode(5, turn(judge_score=-1), error="sandbox died"),
                episode(3, turn(judge_score=-1)), episode(7, turn(judge_score=0)), episode(9, turn(judge_score=0)),
                episode(9, turn(judge_score=0))]
    cfg = config(method="grpo")
    assign_rewards(episodes, cfg)
    assert signal_groups(episodes, cfg) == [7, 3]
    assert signal_groups([], cfg) == []


def test_error_episodes_are_counted_and_never_trained_on():
    episodes = [episode(0, turn(judge_score=1)), episode(0, turn(judge_score=-1), error="sandbox died"),
                episode(1, turn(judge_score=1)), episode(1, turn(judge_score=-1))]
    cfg = config(method="grpo")
    assign_rewards(episodes, cfg)
    samples, stats = build_samples(episodes, cfg, no_teacher)
    # group 0 lost its errored member: a group of one has no baseline and is skipped
    assert [s.advantages[0] for s in samples] == pytest.approx([A, -A], abs=1e-5)
    assert stats["rollout/env_errors"] == 1
    assert stats["samples/skipped_groups"] == 1
    assert stats["rollout/turns"] == 4


def test_cut_and_empty_completions_are_counted_not_trained_on():
    cut = turn([5, 6, 7], judge_score=1, finish="length")
    empty = turn([], judge_score=1, finish="context")
    episodes = [episode(0, cut, empty, turn([4, 2], judge_score=1, index=2)), episode(0, turn(judge_score=-1))]
    cfg = config(method="grpo")
    assign_rewards(episodes, cfg)
    samples, stats = build_samples(episodes, cfg, no_teacher)
    # the first episode's return (3) still sets the group baseline; only its stopped turn trains
    assert [s.completion_ids for s in samples] == [[4, 2], [10, 11, 2]]
    assert stats["rollout/cut_completions"] == 2  # "length" and "context"
    assert stats["rollout/empty_completions"] == 1
    assert stats["samples/count"] == 2
    # train_cut=true: the cut turn trains too (the empty one never can)
    samples, _ = build_samples(episodes, config(method="grpo", train_cut=True), no_teacher)
    assert [s.completion_ids for s in samples] == [[5, 6, 7], [4, 2], [10, 11, 2]]


# ---- OPD ------------------------------------------------------------------------------
def test_opd_advantage_is_the_clipped_teacher_gap():
    hinted = turn([5, 6, 7, 2], hint="Call me Sam.", logprobs=[-1.0, -2.0, -0.5, -9.0], version=3)
    plain = turn([8, 2], hint=None)
    cut = turn([9, 9], hint="Shorter, please.", finish="length")
    asked: list[list[Turn]] = []

    def teacher(turns: list[Turn]) -> list[list[float]]:
        asked.append(turns)
        return [[-0.5, -2.5, -0.5, -1.0] for _ in turns]

    samples, stats = build_samples([episode(0, hinted, plain, cut)], config(method="opd", opd_clip=5.0), teacher)
    assert asked == [[hinted]]  # only trainable turns with a hint reach the teacher
    assert len(samples) == 1
    # teacher - old = [0.5, -0.5, 0.0, 8.0] -> the last token clipped to 5
    assert samples[0].advantages == pytest.approx([0.5, -0.5, 0.0, 5.0])
    assert samples[0].weight_version == 3
    assert stats["samples/hinted_turns"] == 1
    assert stats["samples/zero_advantage"] == 1  # the trainable turn without a hint
    assert stats["samples/skipped_groups"] == 0


def test_opd_sample_equal_to_the_teacher_takes_no_slot():
    t = turn([5, 2], hint="Use Celsius, please.", logprobs=[-1.0, -2.0])
    samples, stats = build_samples([episode(0, t)], config(method="opd"), lambda turns: [[-1.0, -2.0]])
    assert samples == []
    assert stats["samples/zero_advantage"] == 1


def test_opd_without_hints_never_calls_the_teacher():
    samples, stats = build_samples([episode(0, turn(judge_score=-1))], config(method="opd"), no_teacher)
    assert samples == [] and stats["samples/hinted_turns"] == 0


# ---- combine --------------------------------------------------------------------------
def test_combine_sums_the_weighted_terms():
    hinted_good = turn([5, 6, 2], judge_score=1, hint="Sign it as Ava.", logprobs=[-1.0, -1.0, -1.0])
    plain_bad = turn([7, 2], judge_score=-1, logprobs=[-1.0, -1.0])
    hint_only_same_return = turn([8, 2], judge_score=1, hint="No emoji, please.", logprobs=[-2.0, -1.0])
    episodes = [episode(0, hinted_good), episode(0, plain_bad),
                episode(1, hint_only_same_return), episode(1, turn([3, 2], judge_score=1))]
    cfg = config(method="combine", w_opd=0.5, w_rl=2.0, opd_clip=5.0)
    assign_rewards(episodes, cfg)
    samples, stats = build_samples(episodes, cfg, lambda turns: [[0.0] * len(t.completion.completion_ids)
                                                                 for t in turns])
    by_ids = {tuple(s.completion_ids): s.advantages for s in samples}
    # hint and score: 0.5 * (0 - (-1)) + 2 * A
    assert by_ids[(5, 6, 2)] == pytest.approx([0.5 + 2 * A] * 3, abs=1e-5)
    # score only: 2 * (-A)
    assert by_ids[(7, 2)] == pytest.approx([-2 * A] * 2, abs=1e-5)
    # hint only (its group was skipped for equal returns): 0.5 * [2, 1]
    assert by_ids[(8, 2)] == pytest.approx([1.0, 0.5])
    # neither: no sample
    assert (3, 2) not in by_ids
    assert stats["samples/count"] == 3
    assert stats["samples/skipped_groups"] == 1
    assert stats["samples/zero_advantage"] == 1
    assert stats["samples/hinted_turns"] == 2

    # opd_center: the OPD term loses its mean per reply; [1, 1, 1] centres to zero, so the
    # hinted good reply keeps only its RL term, and [2, 1] centres to [0.5, -0.5]
    cfg = config(method="combine", w_opd=0.5, w_rl=2.0, opd_clip=5.0, opd_center=True)
    samples, _ = build_samples(episodes, cfg, lambda turns: [[0.0] * len(t.completion.completion_ids)
                                                             for t in turns])
    by_ids = {tuple(s.completion_ids): s.advantages for s in samples}
    assert by_ids[(5, 6, 2)] == pytest.approx([2 * A] * 3, abs=1e-5)
    assert by_ids[(8, 2)] == pytest.approx([0.25, -0.25])

    # opd_alone=false: the hinted turn of the skipped group is no sample and never reaches
    # the teacher; the hinted turn of the group with a signal keeps both terms
    asked: list[list[Turn]] = []

    def teacher(turns: list[Turn]) -> list[list[float]]:
        asked.append(turns)
        return [[0.0] * len(t.completion.completion_ids) for t in turns]

    cfg = config(method="combine", w_opd=0.5, w_rl=2.0, opd_clip=5.0, opd_alone=False)
    samples, stats = build_samples(episodes, cfg, teacher)
    by_ids = {tuple(s.completion_ids): s.advantages for s in samples}
    assert asked == [[hinted_good]]
    assert by_ids[(5, 6, 2)] == pytest.approx([0.5 + 2 * A] * 3, abs=1e-5)
    assert by_ids[(7, 2)] == pytest.approx([-2 * A] * 2, abs=1e-5)
    assert (8, 2) not in by_ids and (3, 2) not in by_ids
    assert stats["samples/count"] == 2 and stats["samples/zero_advantage"] == 2
    assert stats["samples/hinted_turns"] == 1
    assert stats["samples/opd_alone_weight"] == 0.0

    # opd_alone=share: one of the two groups has a signal, so the hint-only turn trains on
    # half its OPD term, 0.5 * 0.5 * [2, 1]; the turns of the group with a signal are as before
    asked.clear()
    cfg = config(method="combine", w_opd=0.5, w_rl=2.0, opd_clip=5.0, opd_alone="share")
    samples, stats = build_samples(episodes, cfg, teacher)
    by_ids = {tuple(s.completion_ids): s.advantages for s in samples}
    assert asked == [[hinted_good, hint_only_same_return]]
    assert by_ids[(8, 2)] == pytest.approx([0.5, 0.25])
    assert by_ids[(5, 6, 2)] == pytest.approx([0.5 + 2 * A] * 3, abs=1e-5)
    assert stats["samples/opd_alone_weight"] == 0.5
    # the step's size counts the hint-only turn at that weight too (step_scale=evidence)
    assert {tuple(s.completion_ids): s.weight for s in samples} == {(5, 6, 2): 1.0, (7, 2): 1.0, (8, 2): 0.5}
    # no group with a signal: nothing trains on the teacher's gap alone, and no teacher pass
    asked.clear()
    samples, stats = build_samples(episodes[2:], cfg, teacher)
    assert samples == [] and asked == [] and stats["samples/opd_alone_weight"] == 0.0


def test_both_rewards_use_prm_coef_in_group_returns():
    # env rewards tie, judge scores differ: only prm_coef * judge separates the pair
    episodes = [episode(0, turn(judge_score=1, env_reward=1.0)), episode(0, turn(judge_score=-1, env_reward=1.0))]
    cfg = config(method="grpo", reward="both", prm_coef=0.25, normalize_std=False)
    assign_rewards(episodes, cfg)
    assert [e.reward_return for e in episodes] == pytest.approx([1.25, 0.75])
    samples, _ = build_samples(episodes, cfg, no_teacher)
    assert [s.advantages[0] for s in samples] == pytest.approx([0.25, -0.25])
    env_only = config(method="grpo", reward="env")
    assign_rewards(episodes, env_only)
    assert build_samples(episodes, env_only, no_teacher)[0] == []  # equal env returns: no signal


# ---- what drives an update: the size of each term ----------------------------------------
def test_advantage_stats_report_each_terms_size():
    # teacher - old = [0.5, -0.5, 0.0, 8.0] (clipped to 5) and [-7.0, 1.0] (clipped to -5)
    opd = turn([5, 6, 7, 2], hint="Call me Sam.", logprobs=[-1.0, -2.0, -0.5, -9.0])
    other = turn([8, 2], hint="No emoji.", logprobs=[-1.0, -1.0])

    def teacher(turns: list[Turn]) -> list[list[float]]:
        return [[-0.5, -2.5, -0.5, -1.0] if t is opd else [-8.0, 0.0] for t in turns]

    _, stats = build_samples([episode(0, opd), episode(1, other)], config(method="opd", opd_clip=5.0), teacher)
    clipped = [0.5, -0.5, 0.0, 5.0, -5.0, 1.0]
    assert stats["adv/opd_abs"] == pytest.approx(sum(map(abs, clipped)) / 6)
    assert stats["adv/opd_mean"] == pytest.approx(sum(clipped) / 6)
    assert stats["adv/opd_clipped"] == pytest.approx(2 / 6)
    assert stats["adv/opd_zero"] == pytest.approx(1 / 6)
    assert stats["adv/opd_gap_min"] == pytest.approx(-7.0)
    assert stats["adv/negative_tokens"] == pytest.approx(2 / 6)  # the 0.0 token is neither
    assert "adv/rl_abs" not in stats


def test_advantage_stats_of_grpo_have_no_opd_terms():
    episodes = [episode(0, turn(judge_score=1)), episode(0, turn(judge_score=-1))]
    cfg = config(method="grpo")
    assign_rewards(episodes, cfg)
    _, stats = build_samples(episodes, cfg, no_teacher)
    assert stats["adv/rl_abs"] == pytest.approx(A, abs=1e-5)
    assert stats["adv/negative_tokens"] == pytest.approx(0.5)
    assert not any(k.startswith("adv/opd") for k in stats)


# ---- who the teacher is ------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained_policy():
    import torch

    from agents.adapters import LoraSettings
    from agents.policy import TransformersPolicy

    policy = TransformersPolicy(lora=LoraSettings(rank=4, alpha=8))
    generator = torch.Generator().manual_seed(0)
    policy.load_trainable_state({k: torch.randn(v.shape, generator=generator) * 0.05 if "lora_B" in k else v
                                 for k, v in policy.trainable_state().items()}, version=1)
    return policy


@pytest.mark.parametrize("method, who, adapter", [("combine", "base", False), ("combine", "policy", True),
                                                ("combine", "auto", True), ("opd", "auto", False)])
def test_the_teacher_reads_the_hinted_prompt_with_the_model_opd_teacher_names(trained_policy, method, who, adapter):
    from trainers.judge_parsing import append_hint
    from trainers.samples import teacher_logprobs

    context = [{"role": "user", "content": "Suggest a dinner for tonight."}]
    ids = trained_policy.tokenizer.encode(" Pasta with tomatoes and basil.", add_special_tokens=False)
    got = teacher_logprobs(trained_policy, config(method=method, opd_teacher=who), [context], ["No meat, please."],
                           [None], [ids], [[-1.0] * len(ids)], 1.0)
    hinted = trained_policy.encode(append_hint(context, "No meat, please."))
    assert got[0] == pytest.approx(trained_policy.score([hinted], [ids], adapter=adapter)[0], abs=1e-6)
    other = trained_policy.score([hinted], [ids], adapter=not adapter)
    assert max(abs(a - b) for a, b in zip(got[0], other[0])) > 1e-3  # the adapter changes the answer
    unhinted = trained_policy.score([trained_policy.encode(context)], [ids], adapter=adapter)
    assert got[0] != pytest.approx(unhinted[0], abs=1e-3)  # the hint is in the teacher's prompt


def test_the_bounded_teacher_is_the_median_of_the_rollout_and_both_teachers(trained_policy):
    from trainers.judge_parsing import append_hint
    from trainers.samples import teacher_logprobs

    context = [{"role": "user", "content": "Suggest a dinner for tonight."}]
    ids = trained_policy.tokenizer.encode(" Pasta with tomatoes and basil.", add_special_tokens=False)
    hinted = trained_policy.encode(append_hint(context, "No meat, please."))
    on = trained_policy.score([hinted], [ids], adapter=True)[0]
    off = trained_policy.score([hinted], [ids], adapter=False)[0]
    # the rollout's own log-probs: the policy's without the hint, so each token's gap is the hint's effect
    old = trained_policy.score([trained_policy.encode(context)], [ids], adapter=True)[0]
    got = teacher_logprobs(trained_policy, config(method="combine", opd_teacher="bounded"), [context],
                           ["No meat, please."], [None], [ids], [old], 1.0)[0]
    assert got == pytest.approx([sorted(t)[1] for t in zip(old, on, off)], abs=1e-6)
    gaps = [(g - o, p - o, b - o) for g, o, p, b in zip(got, old, on, off)]
    # each gap is the policy's or the base's, whichever is nearer zero, or zero when they disagree
    assert all(g == pytest.approx(0.0 if p * b <= 0 else min(p, b, key=abs), abs=1e-6) for g, p, b in gaps)
    assert any(abs(g) > 1e-3 for g, _, _ in gaps)  # the hint moves some token
    assert not teacher_logprobs(trained_policy, config(method="combine", opd_teacher="bounded"), [], [], [], [], [], 1.0)


def test_an_unknown_opd_teacher_is_refused_by_name():
    from trainers.config import ConfigError

    with pytest.raises(ConfigError, match="opd_teacher='student' is not allowed; choose one of: auto, base, policy, bounded"):
        config(opd_teacher="student")


# ---- live turns (groups of one) ------------------------------------------------------------
def record(rid: int, score: int | None, hint: str | None) -> TurnRecord:
    return TurnRecord(id=rid, request_id=f"r{rid}", session_id="s", turn_index=0, turn_type="main",
                      messages=[{"role": "user", "content": "hi"}], tools=[],
                      response={"role": "assistant", "content": "x"}, prompt_ids=[1, 2], completion_ids=[5, 2],
                      logprobs=[-1.0, -1.0], weight_version=0, finish_reason="stop", temperature=0.6,
                      score=score, hint=hint)


def test_opd_gate_replay_keeps_the_opd_term_only_where_the_teachers_own_reply_earned_more():
    """With opd_gate=replay a hinted turn reaches the teacher only when its teacher_reward
    (the teacher's own reply, replayed and scored as the run scores turns: here reward=judge)
    beats its reward: a tie or an unreplayed turn (None) loses its OPD term; an RL term stays
    whatever the gate says."""
    beaten = turn([5, 2], judge_score=-1, env_reward=-0.5, hint="Call me Sam.", logprobs=[-1.0, -1.0])
    tied = turn([6, 2], judge_score=-1, env_reward=-0.5, hint="Call me Sam.", logprobs=[-1.0, -1.0])
    unreplayed = turn([7, 2], judge_score=-1, env_reward=-0.5, hint="Call me Sam.", logprobs=[-1.0, -1.0])
    scored_worse = turn([8, 2], judge_score=0, env_reward=-1.0, hint="No emoji.", logprobs=[-1.0, -1.0])
    beaten.teacher_reward, tied.teacher_reward, scored_worse.teacher_reward = 0.0, -1.0, -1.0
    # group 0's returns are all -1 (no RL term); group 1 has one: [0, 1]
    episodes = [episode(0, beaten), episode(0, tied), episode(0, unreplayed),
                episode(1, scored_worse), episode(1, turn([9, 2], judge_score=1))]
    asked: list[list[Turn]] = []

    def teacher(turns: list[Turn]) -> list[list[float]]:
        asked.append(turns)
        return [[0.0] * len(t.completion.completion_ids) for t in turns]

    cfg = config(method="combine", opd_gate="replay")
    assign_rewards(episodes, cfg)
    samples, stats = build_samples(episodes, cfg, teacher)
    by_ids = {tuple(s.completion_ids): s.advantages for s in samples}
    assert asked == [[beaten]]
    assert by_ids[(5, 2)] == pytest.approx([1.0, 1.0])  # OPD alone: 0 - (-1)
    assert by_ids[(8, 2)] == pytest.approx([-A, -A], abs=1e-5) and by_ids[(9, 2)] == pytest.approx([A, A], abs=1e-5)
    assert set(by_ids) == {(5, 2), (8, 2), (9, 2)}
    assert stats["samples/hinted_turns"] == 1 and stats["samples/gate_failed"] == 3

    ungated, ungated_stats = build_samples(episodes, config(method="combine"), teacher)
    assert len(ungated) == 5 and ungated_stats["samples/hinted_turns"] == 4 and "samples/gate_failed" not in ungated_stats


@pytest.mark.parametrize("reward, passes", [("env", False), ("judge", True), ("both", True)])
def test_the_gate_compares_the_teachers_reward_with_the_turns_as_the_run_scores_it(reward, passes):
    """The student's reply: env 0.5, judge -1; the teacher's replayed reply scored 0.0 in the
    run's units. reward=env: 0.0 < 0.5; judge: 0.0 > -1; both (prm_coef 1): 0.0 > 0.5 - 1."""
    student = turn([5, 2], judge_score=-1, env_reward=0.5, hint="Shorter.")
    student.teacher_reward = 0.0
    cfg = config(method="combine", opd_gate="replay", reward=reward)
    assign_rewards([episode(0, student)], cfg)
    assert student.reward == {"env": 0.5, "judge": -1.0, "both": -0.5}[reward]
    assert teacher_passes(cfg, student) is passes
    assert run_reward(cfg, 0.5, None) == {"env": 0.5, "judge": 0.0, "both": 0.5}[reward]  # unparsed: 0
    assert run_reward(config(reward="both", prm_coef=0.5), 1.0, -1) == 0.5


@pytest.mark.parametrize("alone", ["true", "false", "share"])
def test_live_combine_opd_alone(alone):
    # scored -1 with a hint: both terms, gap [1, 0] - 1; scored 0 with a hint: the OPD term
    # alone, nothing (and no teacher pass) with opd_alone=false, or with share the OPD term
    # times the share of turns with a score (1 of 2)
    scored, unscored = record(1, -1, "Shorter."), record(2, 0, "Shorter.")
    asked: list[list[int]] = []

    def teacher(records: list[TurnRecord]) -> list[list[float]]:
        asked.append([r.id for r in records])
        return [[0.0, -1.0] for _ in records]

    ready, no_sample = record_samples([scored, unscored], config(method="combine", opd_alone=alone), teacher)
    advantages = {rid: s.advantages for rid, s in ready}
    assert advantages[1] == pytest.approx([0.0, -1.0])
    if alone == "false":
        assert asked == [[1]] and 2 not in advantages and no_sample == [2]
    else:
        weight = 1.0 if alone == "true" else 0.5
        assert asked == [[1, 2]] and advantages[2] == pytest.approx([weight, 0.0]) and no_sample == []
        assert {rid: s.weight for rid, s in ready} == {1: 1.0, 2: weight}


def test_opd_alone_takes_the_old_booleans_and_refuses_the_rest():
    from trainers.config import ConfigError

    assert config(opd_alone=False).opd_alone == "false" and config(opd_alone=True).opd_alone == "true"
    with pytest.raises(ConfigError, match="opd_alone='half' is not allowed; choose one of: true, false, share"):
        config(opd_alone="half")
