"""How sure a benchmark's numbers are: the Wilson score interval, and friends.

A suite of ``n`` tasks solved ``k`` times estimates a success probability ``p = k / n``.
The Wilson interval is the set of ``p`` whose normal test would not reject the observed
``k``: with ``z`` the normal quantile (1.96 for 95%),

    center = (k/n + z^2 / 2n) / (1 + z^2 / n)
    half   = z * sqrt(k/n * (1 - k/n) / n + z^2 / 4n^2) / (1 + z^2 / n)

Unlike the textbook ``k/n +- z * sqrt(p(1-p)/n)`` it never leaves [0, 1] and does not
collapse to a single point at 0/n or n/n, where benchmark numbers often sit (a small model
that solves nothing, a strong one that solves everything). ``k`` may be a sum of
fractional successes (a reward in [0, 1]): such a variable's variance is at most the
Bernoulli ``p(1 - p)`` the formula assumes, so the interval stays conservative.

Env errors are neither successes nor failures: the caller leaves them out of ``n`` and
reports them beside the rate.

Beside it: pass@k and pass^k from ``n`` episodes of a task with ``c`` successes (the
unbiased estimators, :func:`pass_at_k`, :func:`pass_hat_k`), a seeded cluster bootstrap
interval for a mean (:func:`bootstrap_interval`), and Newcombe's interval for the
difference of two success rates (:func:`newcombe_difference`).
"""

from __future__ import annotations

import math

Z_95 = 1.96
"""The normal quantile of a two-sided 95% interval, as tables round it (the exact
1.959964 moves the bounds in the fifth decimal)."""


def wilson_interval(successes: float, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` for ``successes`` out of ``trials``.

    ``trials == 0`` says nothing: ``(0.0, 1.0)``.
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    z2_n = z * z / trials
    center = (p + z2_n / 2) / (1 + z2_n)
    half = z * math.sqrt(p * (1 - p) / trials + z2_n / (4 * trials)) / (1 + z2_n)
    return max(0.0, center - half), min(1.0, center + half)


# ---- several episodes per task: pass@k and pass^k -------------------------------------------
def pass_at_k(episodes: int, successes: int, k: int) -> float:
    """The chance that at least one of ``k`` episodes drawn without replacement from the
    ``episodes`` played succeeds: ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021's unbiased
    estimator); with ``n == k`` it is 1 if any episode succeeded, else 0."""
    _check_counts(episodes, successes, k)
    return 1.0 - math.comb(episodes - successes, k) / math.comb(episodes, k)


def pass_hat_k(episodes: int, successes: int, k: int) -> float:
    """The chance that all of ``k`` episodes drawn without replacement succeed:
    ``C(c, k) / C(n, k)`` (tau-bench's pass^k); with ``n == k`` it is 1 if every episode
    succeeded, else 0."""
    _check_counts(episodes, successes, k)
    return math.comb(successes, k) / math.comb(episodes, k)


def _check_counts(episodes: int, successes: int, k: int) -> None:
    if not 1 <= k <= episodes or not 0 <= successes <= episodes:
        raise ValueError(f"need 1 <= k <= episodes and 0 <= successes <= episodes, "
                         f"got k={k}, {successes} of {episodes}")


# ---- how sure a mean is: the bootstrap -------------------------------------------------------
def bootstrap_interval(groups: list[list[float]], seed: int, resamples: int = 2000,
                       level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval for the mean of all values in ``groups``.

    Whole groups are resampled with replacement (a cluster bootstrap): a task's episodes
    share the task's difficulty, so they are not independent draws; groups of one value are
    the textbook bootstrap. Each resample's mean pools its values, as the point estimate
    does. ``seed`` makes the interval reproducible. The bounds are order statistics of the
    sorted resample means at ``(1 - level) / 2`` and ``(1 + level) / 2`` (nearest rank).
    No values: ``(0.0, 0.0)``.
    """
    import random

    groups = [g for g in groups if g]
    if not groups:
        return 0.0, 0.0
    rng = random.Random(seed)
    sums, sizes = [sum(g) for g in groups], [len(g) for g in groups]
    means = []
    for _ in range(resamples):
        picks = [rng.randrange(len(groups)) for _ in groups]
        means.append(sum(sums[i] for i in picks) / sum(sizes[i] for i in picks))
    means.sort()
    low = means[max(0, math.ceil((1 - level) / 2 * resamples) - 1)]
    high = means[min(resamples - 1, math.ceil((1 + level) / 2 * resamples) - 1)]
    return low, high


# ---- two success rates: Newcombe's interval for their difference -----------------------------
def newcombe_difference(successes_a: float, trials_a: int, successes_b: float, trials_b: int,
                        z: float = Z_95) -> tuple[float, float, float]:
    """``p_a - p_b`` and its interval ``(low, high)`` by Newcombe's hybrid score method
    (his method 10, Statistics in Medicine 1998): with ``(l, u)`` each rate's Wilson interval,

        low  = d - sqrt((p_a - l_a)^2 + (u_b - p_b)^2)
        high = d + sqrt((u_a - p_a)^2 + (p_b - l_b)^2)

    It treats the two runs as independent samples, which is conservative when both ran the
    same tasks (a paired analysis would be narrower). An empty side says nothing: ``(-1, 1)``.
    """
    if not trials_a or not trials_b:
        p_a = successes_a / trials_a if trials_a else 0.0
        p_b = successes_b / trials_b if trials_b else 0.0
        return p_a - p_b, -1.0, 1.0
    p_a, p_b = successes_a / trials_a, successes_b / trials_b
    l_a, u_a = wilson_interval(successes_a, trials_a, z)
    l_b, u_b = wilson_interval(successes_b, trials_b, z)
    d = p_a - p_b
    return d, d - math.hypot(p_a - l_a, u_b - p_b), d + math.hypot(u_a - p_a, p_b - l_b)
