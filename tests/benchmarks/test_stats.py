"""benchmarks.stats: the Wilson interval, checked against numbers worked out by hand."""

from __future__ import annotations

import pytest

from benchmarks.stats import bootstrap_interval, newcombe_difference, pass_at_k, pass_hat_k, wilson_interval

# z = 1.96, z^2 = 3.8416; d = 1 + z^2/n; c = (p + z^2/2n) / d; s = sqrt(p(1-p)/n + z^2/4n^2); h = z s / d
#   k/n    z^2/n     d         c                      s                              h         (c - h, c + h)
#   7/10   0.38416   1.38416   0.89208/d  = 0.644492  sqrt(0.021 + 0.009604) = 0.17494  0.247719  (0.396773, 0.892211)
#   0/24   0.160067  1.160067  0.080033/d = 0.068990  sqrt(0 + 0.001667) = 0.040833     0.068990  (0, 0.137981)
#   24/24  0.160067  1.160067  1.080033/d = 0.931010  as 0/24                           0.068990  (0.862019, 1)
#   1/2    1.9208    2.9208    1.4604/d   = 0.5       sqrt(0.125 + 0.2401) = 0.604235   0.405471  (0.094529, 0.905471)
CASES = [(7, 10, 0.396773, 0.892211), (0, 24, 0.0, 0.137981), (24, 24, 0.862019, 1.0),
         (1, 2, 0.094529, 0.905471)]


@pytest.mark.parametrize("successes, trials, low, high", CASES, ids=["7of10", "0of24", "24of24", "1of2"])
def test_wilson_matches_the_hand_computed_table(successes, trials, low, high) -> None:
    assert wilson_interval(successes, trials) == pytest.approx((low, high), abs=1e-6)


def test_the_extremes_keep_a_width_and_stay_inside_zero_one() -> None:
    low, high = wilson_interval(0, 24)
    assert low == 0.0 and high > 0.1  # 0/24 does not prove p = 0
    low, high = wilson_interval(24, 24)
    assert high == 1.0 and low < 0.9


def test_no_trials_say_nothing_and_impossible_counts_are_refused() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="0 <= successes <= trials"):
        wilson_interval(3, 2)


def test_a_fractional_success_sum_lies_between_its_neighbours() -> None:
    low, high = wilson_interval(7.5, 10)
    assert wilson_interval(7, 10)[0] < low < wilson_interval(8, 10)[0]
    assert wilson_interval(7, 10)[1] < high < wilson_interval(8, 10)[1]


# ---- pass@k and pass^k ----------------------------------------------------------------------
# n episodes, c successes:  pass@k = 1 - C(n-c, k) / C(n, k)     pass^k = C(c, k) / C(n, k)
#   n  c  k   C(n-c,k)  C(c,k)  C(n,k)   pass@k              pass^k
#   5  2  2   3         1       10       0.7                 0.1
#   4  2  1   2         2       4        0.5                 0.5      (k = 1: both are c/n)
#  10  3  5   21        0       252      1 - 21/252 = 11/12  0
#   3  1  3   0         0       1        1 (any)             0 (all)
#   3  3  3   0         1       1        1                   1
#   3  0  3   1         0       1        0                   0
PASS_CASES = [(5, 2, 2, 0.7, 0.1), (4, 2, 1, 0.5, 0.5), (10, 3, 5, 11 / 12, 0.0), (3, 1, 3, 1.0, 0.0),
              (3, 3, 3, 1.0, 1.0), (3, 0, 3, 0.0, 0.0)]


@pytest.mark.parametrize("n, c, k, at_k, hat_k", PASS_CASES)
def test_pass_at_k_and_pass_hat_k_match_the_hand_computed_table(n, c, k, at_k, hat_k) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(at_k) and pass_hat_k(n, c, k) == pytest.approx(hat_k)


def test_pass_at_k_refuses_fewer_episodes_than_k() -> None:
    with pytest.raises(ValueError, match="1 <= k <= episodes"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="0 <= successes <= episodes"):
        pass_hat_k(2, 3, 1)


# ---- the bootstrap --------------------------------------------------------------------------
# 2000 resamples; the bounds are the 50th and 1950th smallest resample means.
#   [0] [1]:          a resample's mean is 0, 1/2, 1 with chance 1/4, 1/2, 1/4: ~500 means are 0
#                     and ~500 are 1, so ranks 50 and 1950 give (0, 1).
#   [0] [0] [0] [1]:  the ones drawn ~ Binomial(4, 1/4): P(0) = 81/256 = 0.32 -> low 0; P(4) = 1/256
#                     (~8 means of 1), P(3) = 12/256 (~94 means of 3/4): the 51st largest is 3/4.
#   [1, 1, 1] [0]:    whole tasks are drawn; a resample of one of each pools 3 of 4 values: 3/4, not
#                     1/2. P(both the first) = P(both the second) = 1/4 -> (0, 1) again.
BOOTSTRAP_CASES = [([[0.0], [1.0]], (0.0, 1.0)), ([[0.0], [0.0], [0.0], [1.0]], (0.0, 0.75)),
                   ([[1.0, 1.0, 1.0], [0.0]], (0.0, 1.0)), ([[2.0, 2.0], [2.0]], (2.0, 2.0))]


@pytest.mark.parametrize("groups, interval", BOOTSTRAP_CASES, ids=["0-1", "three-0-one-1", "clustered", "const"])
def test_the_bootstrap_matches_the_hand_worked_distributions(groups, interval) -> None:
    assert bootstrap_interval(groups, seed=0) == pytest.approx(interval)


def test_the_bootstrap_is_a_function_of_its_seed() -> None:
    groups = [[0.2], [0.9], [0.4], [0.7], [0.1]]
    assert bootstrap_interval(groups, seed=3) == bootstrap_interval(groups, seed=3)
    low, high = bootstrap_interval(groups, seed=3)
    assert 0.1 <= low < 0.46 < high <= 0.9  # the mean, 0.46, lies inside, the range bounds it
    assert bootstrap_interval([], seed=0) == (0.0, 0.0)


# ---- the difference of two rates: Newcombe's method 10 ---------------------------------------
# Wilson (z = 1.96): 56/70 -> (0.691831, 0.876954); 48/80 -> (0.490453, 0.700383).
#   d = 0.8 - 0.6 = 0.2
#   low  = 0.2 - sqrt((0.8 - 0.691831)^2 + (0.700383 - 0.6)^2) = 0.2 - sqrt(0.011701 + 0.010077) = 0.052429
#   high = 0.2 + sqrt((0.876954 - 0.8)^2 + (0.6 - 0.490453)^2) = 0.2 + sqrt(0.005922 + 0.012001) = 0.333875
# Newcombe's paper (his Table II, example (a)) prints 0.0524 and 0.3339; for 9/10 - 3/10 (example (d))
# 0.1705 and 0.8090.
def test_newcombe_matches_the_hand_computed_and_published_values() -> None:
    assert newcombe_difference(56, 70, 48, 80) == pytest.approx((0.2, 0.052429, 0.333875), abs=1e-6)
    assert newcombe_difference(9, 10, 3, 10) == pytest.approx((0.6, 0.1705, 0.8090), abs=1e-4)
    d, low, high = newcombe_difference(48, 80, 56, 70)  # swapping the runs mirrors the interval
    assert (d, low, high) == pytest.approx((-0.2, -0.333875, -0.052429), abs=1e-6)
    assert newcombe_difference(0, 0, 1, 2) == (-0.5, -1.0, 1.0)
