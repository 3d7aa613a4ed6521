"""Advantages for binary RL (GRPO), on-policy distillation (OPD), and their combination.

The choices, as OpenClaw-RL states them (the methods page of the docs,
docs/concepts/methods.md), plus the ones it leaves open:

- **GRPO groups** (Track-2 envs): ``A_i = (R_i - mean(R)) / (std(R) + eps)``, with
  ``eps = 1e-6`` and the std division optional. ``std`` is the *sample* (unbiased,
  ``N - 1``) standard deviation, as in TRL and ``torch.std``'s default; METHODS leaves the
  convention open. A group whose rewards are all equal carries no signal and yields
  ``None``: the caller skips it rather than padding the batch with zero-advantage samples.
- **Live turns** are groups of one: ``A = r``, no normalisation
  (:func:`single_turn_advantage`).
- **OPD**: the per-token advantage is the teacher/student log-prob gap
  ``A_t = clip(log pi_T(a_t | s + hint) - log pi_old(a_t | s), -c, c)``, ``c = 5``.
  Centred per reply (``opd_center``, off by default), the reply's mean clipped gap is
  subtracted from each of its tokens: the term then only moves credit between the reply's
  tokens and cannot push the whole reply up or down (that is left to the RL term).
- **Combine**: ``A_t = w_opd * OPD_t + w_rl * r``; the RL scalar is broadcast to every
  completion token. A turn with neither a hint nor a score, or whose advantage is zero on
  every token, yields ``None``: a sample with zero advantage does not take a batch slot.
  A hinted turn without a score trains on the OPD term alone, scaled by ``alone`` (1: as
  is; 0: it yields ``None``, so OPD only reshapes turns the RL term also judges).
- **Bounded teacher** (``opd_teacher=bounded``): the teacher's log-prob of each token is the
  median of the reply's own, the policy's given the hint and the base model's given the
  hint (:func:`bounded_teacher_logprobs`). The gap is then the hint's effect on the policy,
  but only until the policy reaches what the base model does with the hint, and zero
  where the two teachers disagree in sign: it saturates, and never pulls back.

All functions are pure: they never modify their inputs and return detached tensors.
"""

from __future__ import annotations

import torch

GRPO_EPS = 1e-6
"""Added to the group's std before dividing, so a near-constant group cannot blow up."""

OPD_CLIP = 5.0
"""``c``: the OPD log-prob gap is clipped to ``[-c, c]`` (one token's gap can be huge)."""


def grpo_advantages(
    rewards_G: torch.Tensor, normalize_std: bool = True, eps: float = GRPO_EPS
) -> torch.Tensor | None:
    """Group-relative advantages for the ``G`` rollouts of one task.

    Args:
        rewards_G: one scalar reward per rollout of the group, shape ``(G,)``.
        normalize_std: divide the centred rewards by ``std(R) + eps``; when False the
            advantage is only ``R_i - mean(R)``.
        eps: added to the std before dividing.

    Returns:
        ``A_G`` (float32, shape ``(G,)``), or ``None`` when every reward is equal (this
        includes a group of one): such a group carries no signal and is skipped. The std
        is the sample (unbiased, ``G - 1``) standard deviation, as TRL's GRPO uses. Live
        turns, which are groups of one with no normalisation, use
        :func:`single_turn_advantage` instead.
    """
    if rewards_G.dim() != 1 or rewards_G.numel() == 0:
        raise ValueError(
            f"rewards_G must be a non-empty 1-D tensor (one reward per rollout), "
            f"got shape {tuple(rewards_G.shape)}"
        )
    rewards_G = rewards_G.detach().to(torch.float32)
    if bool(torch.all(rewards_G == rewards_G[0])):
        return None
    centred_G = rewards_G - rewards_G.mean()
    if not normalize_std:
        return centred_G
    return centred_G / (rewards_G.std(unbiased=True) + eps)


def single_turn_advantage(reward: float) -> float:
    """The advantage of a live turn, a group of one: ``A = r``, not normalised.

    There is no group to centre against, and centring a group of one would zero it.
    """
    return float(reward)


def broadcast(adv: float, length: int) -> torch.Tensor:
    """One scalar advantage repeated over the ``length`` tokens of a completion: ``(T,)``."""
    if length < 0:
        raise ValueError(f"length must be >= 0 (the completion's token count), got {length}")
    return torch.full((length,), float(adv), dtype=torch.float32)


def opd_token_advantages(
    teacher_logp_T: torch.Tensor, old_logp_T: torch.Tensor, clip: float = OPD_CLIP, center: bool = False
) -> torch.Tensor:
    """OPD per-token advantage: the teacher's log-prob gap over the rollout policy.

    ``A_t = clip(log pi_T(a_t | s + hint) - log pi_old(a_t | s), -clip, clip)``, where the
    teacher was teacher-forced on the *same* completion tokens with the hint appended.

    Args:
        teacher_logp_T: teacher log-probs of the completion tokens, shape ``(T,)``.
        old_logp_T: rollout-time policy log-probs of the same tokens, shape ``(T,)``.
        clip: ``c``; the gap is clipped to ``[-c, c]``.
        center: subtract the mean of the clipped gaps over the reply's ``T`` tokens, so
            the advantages sum to zero over the reply.

    Returns:
        ``A_T``, float32, detached.
    """
    _check_same_shape(teacher_logp_T=teacher_logp_T, old_logp_T=old_logp_T)
    if clip <= 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    gap_T = teacher_logp_T.detach().float() - old_logp_T.detach().float()
    adv_T = gap_T.clamp(-clip, clip)
    if center and adv_T.numel():
        adv_T = adv_T - adv_T.mean()
    return adv_T


def bounded_teacher_logprobs(
    old_logp_T: torch.Tensor, policy_logp_T: torch.Tensor, base_logp_T: torch.Tensor
) -> torch.Tensor:
    """The bounded teacher's per-token log-probs: ``median(old, policy, base)``.

    So the OPD gap ``teacher - old`` equals ``median(0, policy - old, base - old)``: the
    policy teacher's gap (the hint's effect on the current weights) shrunk to the base
    teacher's gap (the distance to what the base model writes given the hint) when that is
    smaller, and zero when the two point opposite ways. The policy teacher's gap does not
    shrink as the policy follows it: a hint that keeps coming (a user the model cannot yet
    satisfy) keeps pushing the same way, step after step. The base teacher's does, but it
    also pulls every token the adapter has learned back toward the base model. The median
    keeps the first's direction and the second's stopping point.

    Args:
        old_logp_T: rollout-time log-probs of the completion tokens, ``(T,)``.
        policy_logp_T: the policy's (adapter on) log-probs of them given the hint, ``(T,)``.
        base_logp_T: the base model's (adapter off) log-probs of them given the hint, ``(T,)``.

    Returns:
        ``(T,)`` float32 log-probs, each one of the three inputs.
    """
    _check_same_shape(old_logp_T=old_logp_T, policy_logp_T=policy_logp_T, base_logp_T=base_logp_T)
    stacked_3T = torch.stack([old_logp_T, policy_logp_T, base_logp_T]).detach().float()
    return stacked_3T.median(dim=0).values


def combine_token_advantages(
    old_logp_T: torch.Tensor,
    teacher_logp_T: torch.Tensor | None,
    reward: float | None,
    w_opd: float = 1.0,
    w_rl: float = 1.0,
    clip: float = OPD_CLIP,
    center: bool = False,
    alone: float = 1.0,
) -> torch.Tensor | None:
    """The combined per-token advantage of one turn: ``w_opd * OPD_t + w_rl * r``.

    Args:
        old_logp_T: rollout-time log-probs of the completion tokens, shape ``(T,)``; sets
            the length and is the OPD baseline.
        teacher_logp_T: teacher log-probs of the same tokens given the hint, ``(T,)``, or
            None when the turn has no hint.
        reward: the RL scalar broadcast to every token, or None when the turn has no
            score. It is whatever the caller passes: a GRPO-normalised group advantage in
            env tracks, or the raw judge score ``r`` for live turns (groups of one).
        w_opd: weight of the OPD term.
        w_rl: weight of the RL term.
        clip: ``c`` for the OPD gap (see :func:`opd_token_advantages`).
        center: centre the OPD term over the reply (see :func:`opd_token_advantages`).
        alone: the weight of the OPD term on a hint without a score (1: the term as is,
            0: nothing); ``True``/``False`` read as 1/0.

    Returns:
        ``A_T`` (float32). Hint and score give both terms, hint only the OPD term times
        ``alone`` (``None`` when that is 0), score only the RL term. ``None`` when there is neither, or
        when every token's advantage is zero: a sample with zero advantage does not take
        a batch slot.
    """
    if reward is None and (teacher_logp_T is None or alone <= 0):
        return None
    adv_T = torch.zeros(old_logp_T.shape, dtype=torch.float32)
    if teacher_logp_T is not None:
        weight = w_opd if reward is not None else w_opd * float(alone)
        adv_T = adv_T + weight * opd_token_advantages(teacher_logp_T, old_logp_T, clip, center)
    if reward is not None:
        adv_T = adv_T + w_rl * broadcast(reward, old_logp_T.numel()).reshape(old_logp_T.shape)
    if not bool(torch.any(adv_T != 0)):
        return None
    return adv_T


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"these tensors must have the same shape, got {shapes}")
