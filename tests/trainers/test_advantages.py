from __future__ import annotations

import math

import pytest
import torch

from trainers.advantages import (
    bounded_teacher_logprobs,
    broadcast,
    combine_token_advantages,
    grpo_advantages,
    opd_token_advantages,
    single_turn_advantage,
)


def test_grpo_uses_sample_std():
    # rewards [1, 0, 0, 1]: mean 0.5, deviations ±0.5,
    # sample var = 4 * 0.25 / (4 - 1) = 1/3, std = 0.57735
    # A = ±0.5 / (0.57735 + 1e-6) = ±0.866024
    adv_G = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert adv_G is not None
    torch.testing.assert_close(adv_G, torch.tensor([a, -a, -a, a]))
    assert a == pytest.approx(0.8660, abs=1e-4)


def test_grpo_uneven_group():
    # rewards [1, -1, -1]: mean -1/3, deviations [4/3, -2/3, -2/3],
    # sample var = (16/9 + 4/9 + 4/9) / 2 = 4/3, std = 1.154701
    # A = [1.154700, -0.577350, -0.577350] (eps shifts the 7th digit)
    adv_G = grpo_advantages(torch.tensor([1.0, -1.0, -1.0]))
    std = math.sqrt(4 / 3) + 1e-6
    torch.testing.assert_close(adv_G, torch.tensor([4 / 3 / std, -2 / 3 / std, -2 / 3 / std]))
    assert adv_G.sum().item() == pytest.approx(0.0, abs=1e-6)


def test_grpo_without_std_division_only_centres():
    # rewards [1, 0, 0, 1] -> A = R - 0.5
    adv_G = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), normalize_std=False)
    torch.testing.assert_close(adv_G, torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_grpo_eps_is_a_parameter():
    # rewards [0, 2]: mean 1, sample std sqrt(2) = 1.414214; with eps = 1: A = ±1 / 2.414214
    adv_G = grpo_advantages(torch.tensor([0.0, 2.0]), eps=1.0)
    d = 1 / (math.sqrt(2) + 1)
    torch.testing.assert_close(adv_G, torch.tensor([-d, d]))


@pytest.mark.parametrize("rewards", [[1.0, 1.0, 1.0], [0.0, 0.0], [-1.0], [0.5]])
def test_grpo_group_without_signal_is_skipped(rewards):
    assert grpo_advantages(torch.tensor(rewards)) is None


def test_grpo_rejects_bad_shape():
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="non-empty"):
        grpo_advantages(torch.zeros(0))


def test_grpo_does_not_mutate_input():
    rewards_G = torch.tensor([1.0, 0.0])
    grpo_advantages(rewards_G)
    torch.testing.assert_close(rewards_G, torch.tensor([1.0, 0.0]))


def test_single_turn_advantage_is_the_reward():
    assert single_turn_advantage(-1) == -1.0
    assert single_turn_advantage(1) == 1.0
    assert single_turn_advantage(0) == 0.0
    assert isinstance(single_turn_advantage(1), float)


def test_broadcast():
    torch.testing.assert_close(broadcast(0.5, 3), torch.tensor([0.5, 0.5, 0.5]))
    assert broadcast(1.0, 0).shape == (0,)
    assert broadcast(1, 2).dtype == torch.float32
    with pytest.raises(ValueError):
        broadcast(1.0, -1)


def test_opd_advantage_is_clipped_gap():
    # teacher - old = [-0.5 - -1.0, -9 - -1, -1 - -9, -2 - -2] = [0.5, -8, 8, 0]
    # clipped to [-5, 5]                                       = [0.5, -5, 5, 0]
    teacher_T = torch.tensor([-0.5, -9.0, -1.0, -2.0])
    old_T = torch.tensor([-1.0, -1.0, -9.0, -2.0])
    torch.testing.assert_close(
        opd_token_advantages(teacher_T, old_T), torch.tensor([0.5, -5.0, 5.0, 0.0])
    )
    # c = 1: [0.5, -1, 1, 0]
    torch.testing.assert_close(
        opd_token_advantages(teacher_T, old_T, clip=1.0), torch.tensor([0.5, -1.0, 1.0, 0.0])
    )


def test_opd_advantage_centred_per_reply():
    # clipped gaps [0.5, -5, 5, 0] (above), mean 0.125 -> [0.375, -5.125, 4.875, -0.125]
    teacher_T = torch.tensor([-0.5, -9.0, -1.0, -2.0])
    old_T = torch.tensor([-1.0, -1.0, -9.0, -2.0])
    adv_T = opd_token_advantages(teacher_T, old_T, center=True)
    torch.testing.assert_close(adv_T, torch.tensor([0.375, -5.125, 4.875, -0.125]))
    assert float(adv_T.sum()) == pytest.approx(0.0, abs=1e-6)
    # a reply the teacher dislikes uniformly (gap -2 everywhere) gets no push at all
    assert not bool(opd_token_advantages(torch.full((3,), -3.0), torch.full((3,), -1.0), center=True).any())
    assert opd_token_advantages(torch.zeros(0), torch.zeros(0), center=True).numel() == 0


def test_opd_advantage_is_detached_and_checks_shapes():
    teacher_T = torch.tensor([-0.5, -1.0], requires_grad=True)
    assert not opd_token_advantages(teacher_T, torch.tensor([-1.0, -1.0])).requires_grad
    with pytest.raises(ValueError, match="same shape"):
        opd_token_advantages(torch.zeros(2), torch.zeros(3))


OLD_T = torch.tensor([-1.0, -2.0, -3.0])
TEACHER_T = torch.tensor([-0.5, -2.0, -10.0])  # gap [0.5, 0, -7] -> clipped [0.5, 0, -5]


def test_combine_hint_and_score():
    # w_opd * [0.5, 0, -5] + w_rl * 1 = [1.5, 1, -4]
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=1.0)
    torch.testing.assert_close(adv_T, torch.tensor([1.5, 1.0, -4.0]))
    # weights: 2 * [0.5, 0, -5] + 0.5 * (-1) = [0.5, -0.5, -10.5]
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=-1.0, w_opd=2.0, w_rl=0.5)
    torch.testing.assert_close(adv_T, torch.tensor([0.5, -0.5, -10.5]))


def test_combine_centred_opd_term_plus_rl():
    # clipped gaps [0.5, 0, -5], mean -1.5 -> [2, 1.5, -3.5]; plus w_rl * 1
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=1.0, center=True)
    torch.testing.assert_close(adv_T, torch.tensor([3.0, 2.5, -2.5]))
    # hint only: the RL term is absent and the centred OPD term sums to zero
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=None, center=True)
    torch.testing.assert_close(adv_T, torch.tensor([2.0, 1.5, -3.5]))


def test_combine_hint_only_is_opd_term():
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=None)
    torch.testing.assert_close(adv_T, torch.tensor([0.5, 0.0, -5.0]))


def test_combine_without_opd_alone_needs_a_score():
    # a hint without a score gives nothing; with a score, both terms as usual
    assert combine_token_advantages(OLD_T, TEACHER_T, reward=None, alone=False) is None
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=-1.0, alone=False)
    torch.testing.assert_close(adv_T, torch.tensor([-0.5, -1.0, -6.0]))
    # a score of 0 is still a score: the OPD term stays
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=0.0, alone=False)
    torch.testing.assert_close(adv_T, torch.tensor([0.5, 0.0, -5.0]))


def test_combine_weighs_opd_alone_by_alone():
    # hint only, alone=0.25: 0.25 * w_opd * [0.5, 0, -5] = 0.25 * 2 * [...] = [0.25, 0, -2.5]
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=None, w_opd=2.0, alone=0.25)
    torch.testing.assert_close(adv_T, torch.tensor([0.25, 0.0, -2.5]))
    # with a score the OPD term keeps its full weight: 2 * [0.5, 0, -5] + 1 = [2, 1, -9]
    adv_T = combine_token_advantages(OLD_T, TEACHER_T, reward=1.0, w_opd=2.0, alone=0.25)
    torch.testing.assert_close(adv_T, torch.tensor([2.0, 1.0, -9.0]))
    assert combine_token_advantages(OLD_T, TEACHER_T, reward=None, alone=0.0) is None


def test_bounded_teacher_stops_at_the_base_teacher_and_never_pulls_back():
    old_T = torch.tensor([-2.0, -2.0, -2.0, -2.0, -2.0, -2.0])
    policy_T = torch.tensor([-1.0, -1.0, -3.0, -3.0, -1.0, -2.0])  # policy gaps  1,  1, -1, -1,  1,  0
    base_T = torch.tensor([-1.5, -0.5, -2.5, -4.0, -3.0, -1.0])    # base gaps  0.5, 1.5, -0.5, -2, -1,  1
    teacher_T = bounded_teacher_logprobs(old_T, policy_T, base_T)
    # gap = median(0, policy gap, base gap): the smaller push when both agree, 0 when they do not
    torch.testing.assert_close(teacher_T - old_T, torch.tensor([0.5, 1.0, -0.5, -1.0, 0.0, 0.0]))
    # in combine it is simply the teacher: hint only -> that gap as the token advantage
    adv_T = combine_token_advantages(old_T, teacher_T, reward=None)
    torch.testing.assert_close(adv_T, torch.tensor([0.5, 1.0, -0.5, -1.0, 0.0, 0.0]))
    # a policy that has reached the base teacher gets no push; its own rollout is a fixed point
    assert not bool(opd_token_advantages(bounded_teacher_logprobs(base_T, policy_T, base_T), base_T).any())
    with pytest.raises(ValueError, match="same shape"):
        bounded_teacher_logprobs(old_T, policy_T, base_T[:2])


def test_combine_score_only_is_broadcast_rl_term():
    # a GRPO-normalised group advantage of -0.866 on every token
    adv_T = combine_token_advantages(OLD_T, None, reward=-0.866)
    torch.testing.assert_close(adv_T, torch.tensor([-0.866, -0.866, -0.866]))


def test_combine_neither_or_zero_gives_no_sample():
    assert combine_token_advantages(OLD_T, None, None) is None
    # score 0 and no hint: zero on every token
    assert combine_token_advantages(OLD_T, None, reward=0.0) is None
    # teacher agrees with the policy on every token and no score
    assert combine_token_advantages(OLD_T, OLD_T.clone(), reward=None) is None
    # the two terms cancel: gap [1, 1] + (-1)
    old_T, teacher_T = torch.tensor([-2.0, -3.0]), torch.tensor([-1.0, -2.0])
    assert combine_token_advantages(old_T, teacher_T, reward=-1.0) is None
    # an empty completion
    assert combine_token_advantages(torch.zeros(0), None, 1.0) is None
