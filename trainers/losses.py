"""The token-level clipped policy loss shared by GRPO, OPD and their combination.

The choices, as OpenClaw-RL states them (the methods page of the docs,
docs/concepts/methods.md), plus the ones it leaves open:

- **Ratio and clip**: ``rho_t = exp(log pi_theta(a_t) - log pi_old(a_t))`` and
  ``L_t = -min(rho_t * A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) * A_t)`` with an
  asymmetric clip, ``eps_low = 0.2``, ``eps_high = 0.28`` (a higher ceiling lets rare
  good tokens grow faster than bad ones shrink).
- **Staleness**: ``log pi_old`` is recorded at rollout time. For a sample produced by an
  older weight version, the caller passes truncated importance weights
  ``w_t = min(pi_train_old / pi_rollout, C)``, ``C = 2`` (:func:`truncated_importance_weights`);
  they multiply the policy term only, not the KL term.
- **KL**: optional, to the reference (the base model, adapter disabled, or the ``init=``
  run's weights), by the k3 estimator ``exp(ref - theta) - (ref - theta) - 1``
  (:func:`k3_kl`), capped at ``K3_CAP = 10`` per token as verl's and slime's
  ``low_var_kl`` are, and added per token as ``beta * kl_t``; ``beta = 0`` by default. The
  cap matters: k3 grows as ``e^x`` in ``x = ref - theta``. Uncapped, one step of GRPO after
  sft on toolmath (kl_beta 0.05) logged a mean KL of 710 with the ratio's mean at 0.9993,
  what a single token some 13 nats below the reference gives, and the KL was then nearly
  the whole of that step's loss.
- **Aggregation**: mean over each sample's masked tokens, then mean over samples, so a
  long completion weighs as much as a short one. Samples with no masked token are left
  out; if none is left the loss is a differentiable zero.
- Only ``logp_BT`` carries gradient: old log-probs, advantages, importance weights and
  reference log-probs are detached. Values at padding positions are never read, so they
  may hold anything (``-inf`` included) without producing NaN.
"""

from __future__ import annotations

import math

import torch

CLIP_EPS_LOW = 0.2
"""``eps_low``: the ratio is clipped below at ``1 - eps_low``."""

CLIP_EPS_HIGH = 0.28
"""``eps_high``: the ratio is clipped above at ``1 + eps_high``."""

IS_CAP = 2.0
K3_CAP = 10.0
"""The most one token's k3 KL counts (beyond it the token adds no KL gradient)."""
"""``C``: truncated importance weights never exceed this."""


def token_logprobs(logits_BTV: torch.Tensor, target_ids_BT: torch.Tensor) -> torch.Tensor:
    """Log-probs of ``target_ids_BT`` under ``logits_BTV``: ``(B, T)``, float32.

    The log-softmax runs in float32 whatever the logits' dtype, so bf16 logits do not
    lose the small differences the ratio depends on. Position ``t`` of the logits must
    already be aligned with token ``t`` of the targets (the caller shifts by one).
    """
    if logits_BTV.shape[:-1] != target_ids_BT.shape:
        raise ValueError(
            f"logits_BTV{tuple(logits_BTV.shape)} and target_ids_BT{tuple(target_ids_BT.shape)} "
            "must agree on every dimension but the last (the vocabulary)"
        )
    logp_BTV = torch.log_softmax(logits_BTV.float(), dim=-1)
    return logp_BTV.gather(-1, target_ids_BT.long().unsqueeze(-1)).squeeze(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, cap: float = K3_CAP) -> torch.Tensor:
    """The k3 estimator of ``KL(pi_theta || pi_ref)``, per token, at most ``cap``.

    ``kl = exp(ref - logp) - (ref - logp) - 1``: zero when the log-probs agree and
    positive otherwise (``e^x >= 1 + x``), and unbiased for tokens sampled from
    ``pi_theta``. Elementwise; gradients flow through both arguments, except where the cap
    holds.
    """
    log_ratio = ref_logp - logp
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(max=cap)


def truncated_importance_weights(
    train_old_logp_BT: torch.Tensor, rollout_logp_BT: torch.Tensor, cap: float = IS_CAP
) -> torch.Tensor:
    """Per-token ``min(pi_train_old / pi_rollout, cap)`` for samples from a stale version.

    Args:
        train_old_logp_BT: log-probs of the completion tokens under the weights the
            optimizer is about to update.
        rollout_logp_BT: log-probs recorded at rollout time, by the (older) weight
            version that produced the sample.
        cap: ``C``; weights are truncated at this value.

    Returns:
        ``w_BT``, detached. The ratio is capped in log space before ``exp``, so a large
        log-prob gap cannot overflow.
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    if train_old_logp_BT.shape != rollout_logp_BT.shape:
        raise ValueError(
            f"train_old_logp_BT{tuple(train_old_logp_BT.shape)} and "
            f"rollout_logp_BT{tuple(rollout_logp_BT.shape)} must have the same shape"
        )
    log_ratio_BT = train_old_logp_BT.detach().float() - rollout_logp_BT.detach().float()
    return torch.exp(log_ratio_BT.clamp(max=math.log(cap)))


def clipped_token_loss(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    eps_low: float = CLIP_EPS_LOW,
    eps_high: float = CLIP_EPS_HIGH,
    is_weight_BT: torch.Tensor | None = None,
    kl_ref_logp_BT: torch.Tensor | None = None,
    kl_beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The asymmetric-clip token loss, per-sample mean then batch mean.

    Args:
        logp_BT: log-probs of the completion tokens under the current weights; the only
            input that carries gradient.
        old_logp_BT: log-probs recorded at rollout time (``log pi_old``).
        adv_BT: per-token advantages (the RL scalar broadcast, the OPD gap, or both).
        mask_BT: 1 (or True) on completion tokens, 0 on prompt and padding.
        eps_low: the ratio is clipped below at ``1 - eps_low``.
        eps_high: the ratio is clipped above at ``1 + eps_high``.
        is_weight_BT: truncated importance weights for stale samples
            (:func:`truncated_importance_weights`), multiplying the policy term; None
            means weight 1.
        kl_ref_logp_BT: reference log-probs for the k3 KL term; None means no KL.
        kl_beta: ``beta``, the KL coefficient; must be 0 when ``kl_ref_logp_BT`` is None.

    Returns:
        ``(loss, stats)``: the scalar loss and floats ``loss/policy`` (policy term,
        aggregated like the loss), ``loss/kl`` (k3 KL before ``beta``, aggregated like the
        loss; 0 without a reference), ``loss/clip_frac`` (fraction of masked tokens whose
        clip is active, i.e. whose gradient is cut), ``loss/ratio_mean`` and
        ``loss/adv_mean`` (means over masked tokens).
    """
    _check_inputs(logp_BT, old_logp_BT, adv_BT, mask_BT, is_weight_BT, kl_ref_logp_BT)
    if kl_beta != 0.0 and kl_ref_logp_BT is None:
        raise ValueError(f"kl_beta is {kl_beta} but no kl_ref_logp_BT was given; pass both")
    if not (0.0 <= eps_low < 1.0 and eps_high >= 0.0):
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")

    mask_BT = mask_BT.detach().bool()
    zero = logp_BT.new_zeros(())
    # Padding positions are replaced by neutral values *before* any exp, so garbage there
    # (-inf, NaN) can neither overflow nor leak NaN into the gradient through where().
    log_ratio_BT = torch.where(mask_BT, logp_BT - old_logp_BT.detach(), zero)
    adv_BT = torch.where(mask_BT, adv_BT.detach().to(logp_BT.dtype), zero)
    ratio_BT = torch.exp(log_ratio_BT)
    clipped_ratio_BT = ratio_BT.clamp(1.0 - eps_low, 1.0 + eps_high)
    policy_BT = -torch.minimum(ratio_BT * adv_BT, clipped_ratio_BT * adv_BT)
    if is_weight_BT is not None:
        policy_BT = policy_BT * torch.where(mask_BT, is_weight_BT.detach().to(logp_BT.dtype), zero)

    if kl_ref_logp_BT is not None:
        ref_minus_theta_BT = torch.where(mask_BT, kl_ref_logp_BT.detach() - logp_BT, zero)
        kl_BT = (torch.exp(ref_minus_theta_BT) - ref_minus_theta_BT - 1).clamp(max=K3_CAP)  # k3_kl
    else:
        kl_BT = torch.zeros_like(policy_BT)

    policy = _sample_then_batch_mean(policy_BT, mask_BT)
    kl = _sample_then_batch_mean(kl_BT, mask_BT)
    loss = policy + kl_beta * kl

    with torch.no_grad():
        n_tokens = max(int(mask_BT.sum()), 1)
        # The clip is active where min() picks the clipped term and so cuts the gradient.
        clipped_above_BT = (adv_BT > 0) & (ratio_BT > 1.0 + eps_high)
        clipped_below_BT = (adv_BT < 0) & (ratio_BT < 1.0 - eps_low)
        clip_active_BT = mask_BT & (clipped_above_BT | clipped_below_BT)
        stats = {
            "loss/policy": float(policy),
            "loss/kl": float(kl),
            "loss/clip_frac": float(clip_active_BT.sum()) / n_tokens,
            "loss/ratio_mean": float(ratio_BT[mask_BT].sum()) / n_tokens,
            "loss/adv_mean": float(adv_BT[mask_BT].sum()) / n_tokens,
        }
    return loss, stats


def _sample_then_batch_mean(values_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Mean over each sample's masked tokens, then over the samples that have any."""
    lengths_B = mask_BT.sum(dim=-1)
    has_tokens_B = lengths_B > 0
    if not bool(has_tokens_B.any()):
        return (values_BT * 0).sum()  # a zero that still belongs to the graph
    sums_B = torch.where(mask_BT, values_BT, 0).sum(dim=-1)
    per_sample_B = sums_B / lengths_B.clamp(min=1)
    return per_sample_B[has_tokens_B].mean()


def _check_inputs(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    is_weight_BT: torch.Tensor | None,
    kl_ref_logp_BT: torch.Tensor | None,
) -> None:
    if logp_BT.dim() != 2:
        raise ValueError(f"logp_BT must be (batch, tokens), got shape {tuple(logp_BT.shape)}")
    named = {"old_logp_BT": old_logp_BT, "adv_BT": adv_BT, "mask_BT": mask_BT,
             "is_weight_BT": is_weight_BT, "kl_ref_logp_BT": kl_ref_logp_BT}
    for name, tensor in named.items():
        if tensor is not None and tensor.shape != logp_BT.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but logp_BT has "
                f"{tuple(logp_BT.shape)}; every per-token input must match it"
            )
