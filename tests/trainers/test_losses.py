from __future__ import annotations

import math

import pytest
import torch

from trainers.losses import K3_CAP, clipped_token_loss, k3_kl, token_logprobs, truncated_importance_weights


def _logp_for_ratios(ratios, old):
    """logp_theta such that exp(logp - old) equals ``ratios``, as a leaf that takes grad."""
    old_BT = torch.tensor([old])
    logp_BT = (torch.log(torch.tensor([ratios])) + old_BT).requires_grad_(True)
    return logp_BT, old_BT


# Five tokens of one sample, each probing one side of the asymmetric clip [0.8, 1.28]:
#   t  rho  A   rho*A  clip(rho)*A  -min(.)  clip active?
#   0  1.5  +1  1.5    1.28         -1.28    yes: A>0 capped at 1 + 0.28
#   1  0.5  -1  -0.5   -0.8          0.8     yes: A<0 floored at 1 - 0.2
#   2  0.5  +1  0.5    0.8          -0.5     no: min picks the unclipped term
#   3  1.5  -1  -1.5   -1.28         1.5     no: min picks the unclipped term
#   4  1.1  +2  2.2    2.2          -2.2     no: inside the band
# loss = (-1.28 + 0.8 - 0.5 + 1.5 - 2.2) / 5 = -1.68 / 5 = -0.336
RATIOS = [1.5, 0.5, 0.5, 1.5, 1.1]
ADV = [1.0, -1.0, 1.0, -1.0, 2.0]
OLD = [-1.0, -2.0, -0.5, -1.0, -3.0]


def test_clip_on_both_bounds_and_both_signs():
    logp_BT, old_BT = _logp_for_ratios(RATIOS, OLD)
    loss, stats = clipped_token_loss(logp_BT, old_BT, torch.tensor([ADV]), torch.ones(1, 5))
    assert loss.item() == pytest.approx(-0.336, abs=1e-6)
    assert stats["loss/policy"] == pytest.approx(-0.336, abs=1e-6)
    assert stats["loss/clip_frac"] == pytest.approx(2 / 5)  # tokens 0 and 1
    assert stats["loss/ratio_mean"] == pytest.approx((1.5 + 0.5 + 0.5 + 1.5 + 1.1) / 5)  # 1.02
    assert stats["loss/adv_mean"] == pytest.approx((1 - 1 + 1 - 1 + 2) / 5)  # 0.4
    assert stats["loss/kl"] == 0.0


def test_gradient_is_zero_where_clipped_and_minus_rho_adv_elsewhere():
    # Unclipped: L_t = -rho_t * A_t / T and d rho_t / d logp_t = rho_t,
    # so dL/dlogp_t = -rho_t * A_t / 5:
    #   t2: -0.5 * 1 / 5 = -0.1;  t3: -1.5 * -1 / 5 = 0.3;  t4: -1.1 * 2 / 5 = -0.44
    # Clipped (t0, t1): the loss is constant in logp, gradient 0.
    logp_BT, old_BT = _logp_for_ratios(RATIOS, OLD)
    old_BT.requires_grad_(True)
    adv_BT = torch.tensor([ADV], requires_grad=True)
    loss, _ = clipped_token_loss(logp_BT, old_BT, adv_BT, torch.ones(1, 5))
    loss.backward()
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[0.0, 0.0, -0.1, 0.3, -0.44]]))
    assert old_BT.grad is None and adv_BT.grad is None  # only logp carries gradient


def test_custom_clip_bounds():
    # eps_low = eps_high = 0.5: rho 1.5 with A=+1 is now at the bound, not past it;
    # rho 0.5 with A=-1 likewise -> no clip active, loss = -(1.5*1 + 0.5*-1) / 2 = -0.5
    logp_BT, old_BT = _logp_for_ratios([1.5, 0.5], [-1.0, -1.0])
    loss, stats = clipped_token_loss(
        logp_BT, old_BT, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), eps_low=0.5, eps_high=0.5
    )
    assert loss.item() == pytest.approx(-0.5, abs=1e-6)
    assert stats["loss/clip_frac"] == 0.0


def test_sample_mean_then_batch_mean_and_padding_ignored():
    # rho = 1 everywhere, so L_t = -A_t.
    # sample 0: one real token, A = 2 -> L = [-2]            sample mean -2
    # sample 1: three real tokens, A = -1 -> L = [1, 1, 1]    sample mean  1
    # sample-then-batch mean = (-2 + 1) / 2 = -0.5
    # (a token mean would give (-2 + 3) / 4 = 0.25)
    # Padding holds garbage (-inf old logp, NaN advantage) that must not count or leak NaN.
    nan, inf = float("nan"), float("inf")
    logp_BT = torch.tensor([[-1.0, 0.0, 0.0], [-1.0, -2.0, -3.0]], requires_grad=True)
    old_BT = torch.tensor([[-1.0, -inf, -inf], [-1.0, -2.0, -3.0]])
    adv_BT = torch.tensor([[2.0, nan, 1e9], [-1.0, -1.0, -1.0]])
    mask_BT = torch.tensor([[1, 0, 0], [1, 1, 1]])
    loss, stats = clipped_token_loss(logp_BT, old_BT, adv_BT, mask_BT)
    assert loss.item() == pytest.approx(-0.5, abs=1e-6)
    assert stats["loss/ratio_mean"] == pytest.approx(1.0)
    assert stats["loss/adv_mean"] == pytest.approx((2 - 3) / 4)  # over the 4 real tokens
    loss.backward()
    # dL/dlogp_t = -rho * A / n_tokens(sample) / n_samples:
    #   sample 0: -2 / 1 / 2 = -1;  sample 1: 1 / 3 / 2 = 0.166667; padding 0
    torch.testing.assert_close(
        logp_BT.grad, torch.tensor([[-1.0, 0.0, 0.0], [1 / 6, 1 / 6, 1 / 6]])
    )


def test_sample_with_no_tokens_is_excluded():
    # sample 1 is fully masked: the loss is sample 0's alone, -1 * 1 = -1 (not -0.5)
    logp_BT = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    loss, _ = clipped_token_loss(
        logp_BT, logp_BT.detach().clone(), torch.ones(2, 2), torch.tensor([[1, 1], [0, 0]])
    )
    assert loss.item() == pytest.approx(-1.0)


def test_all_masked_batch_gives_differentiable_zero():
    logp_BT = torch.zeros(2, 3, requires_grad=True)
    mask_BT = torch.zeros(2, 3)
    loss, stats = clipped_token_loss(logp_BT, torch.zeros(2, 3), torch.ones(2, 3), mask_BT)
    assert loss.item() == 0.0 and not math.isnan(loss.item())
    loss.backward()
    torch.testing.assert_close(logp_BT.grad, torch.zeros(2, 3))
    assert all(not math.isnan(v) for v in stats.values())


def test_importance_weights_multiply_the_policy_term():
    # rho = 1, A = 1, w = [2, 0.5]: L = [-2, -0.5], mean -1.25
    # grad = -rho * A * w / 2 = [-1, -0.25]
    logp_BT = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    w_BT = torch.tensor([[2.0, 0.5]], requires_grad=True)
    loss, _ = clipped_token_loss(
        logp_BT, logp_BT.detach().clone(), torch.ones(1, 2), torch.ones(1, 2), is_weight_BT=w_BT
    )
    assert loss.item() == pytest.approx(-1.25)
    loss.backward()
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[-1.0, -0.25]]))
    assert w_BT.grad is None


def test_truncated_importance_weights_capped_at_two():
    # log ratios train_old - rollout = [0, 1, -0.5, 99, 1000]
    # ratios [1, e = 2.718 -> 2, 0.606531, huge -> 2, overflow-free -> 2]
    train_old_BT = torch.tensor([[-1.0, -1.0, -1.0, -1.0, 0.0]])
    rollout_BT = torch.tensor([[-1.0, -2.0, -0.5, -100.0, -1000.0]])
    w_BT = truncated_importance_weights(train_old_BT, rollout_BT)
    torch.testing.assert_close(w_BT, torch.tensor([[1.0, 2.0, math.exp(-0.5), 2.0, 2.0]]))
    assert not w_BT.requires_grad
    # cap = 1.5: e -> 1.5
    w_BT = truncated_importance_weights(train_old_BT, rollout_BT, cap=1.5)
    assert w_BT[0, 1].item() == pytest.approx(1.5)
    with pytest.raises(ValueError):
        truncated_importance_weights(train_old_BT, rollout_BT, cap=0.0)


def test_k3_is_zero_when_equal_and_positive_otherwise():
    logp = torch.tensor([-1.0, -1.0, -2.0])
    ref = torch.tensor([-1.0, -2.0, -1.0])
    # d = ref - logp = [0, -1, 1]
    # k3 = e^d - d - 1 = [0, e^-1 + 1 - 1 = 0.367879, e - 1 - 1 = 0.718282]
    torch.testing.assert_close(
        k3_kl(logp, ref), torch.tensor([0.0, math.exp(-1), math.e - 2.0])
    )


def test_k3_is_capped_where_the_policy_fell_far_below_the_reference():
    # d = ref - logp = [13, 2]: k3 = [e^13 - 14 = 442399.4, e^2 - 3 = 4.389056]; the first
    # is capped at 10 and so gives no gradient, the second keeps d k3/d logp = 1 - e^2.
    logp = torch.tensor([-14.0, -3.0], requires_grad=True)
    ref = torch.tensor([-1.0, -1.0])
    kl = k3_kl(logp, ref)
    torch.testing.assert_close(kl.detach(), torch.tensor([K3_CAP, math.exp(2) - 3]))
    kl.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, 1 - math.exp(2)]))
    # the loss caps the same way: one runaway token adds at most beta * 10 / n
    logp_BT = logp.detach()[None].clone().requires_grad_(True)
    loss, stats = clipped_token_loss(logp_BT, logp_BT.detach().clone(), torch.zeros(1, 2), torch.ones(1, 2),
                                     kl_ref_logp_BT=ref[None], kl_beta=0.1)
    assert stats["loss/kl"] == pytest.approx((10 + math.exp(2) - 3) / 2)
    assert float(loss.detach()) == pytest.approx(0.1 * (10 + math.exp(2) - 3) / 2)


def test_kl_term_is_added_with_beta_and_not_importance_weighted():
    # A = 0, so the policy term is 0. kl per token from the k3 test: [0.367879, 0.718282],
    # mean 0.543081; loss = 0.1 * 0.543081 = 0.0543081.
    # d k3 / d theta = 1 - e^(ref - theta): [1 - e^-1, 1 - e] = [0.632121, -1.718282],
    # times beta / T = 0.05 -> [0.0316060, -0.0859141]. The IS weight of 2 changes none of it.
    logp_BT = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref_BT = torch.tensor([[-2.0, -1.0]], requires_grad=True)
    loss, stats = clipped_token_loss(
        logp_BT, logp_BT.detach().clone(), torch.zeros(1, 2), torch.ones(1, 2),
        is_weight_BT=torch.full((1, 2), 2.0), kl_ref_logp_BT=ref_BT, kl_beta=0.1,
    )
    kl = (math.exp(-1) + math.e - 2) / 2
    assert stats["loss/kl"] == pytest.approx(kl)
    assert stats["loss/policy"] == pytest.approx(0.0)
    assert loss.item() == pytest.approx(0.1 * kl)
    loss.backward()
    torch.testing.assert_close(
        logp_BT.grad, torch.tensor([[0.05 * (1 - math.exp(-1)), 0.05 * (1 - math.e)]])
    )
    assert ref_BT.grad is None


def test_kl_reported_but_not_added_when_beta_is_zero():
    logp_BT = torch.tensor([[-1.0]], requires_grad=True)
    loss, stats = clipped_token_loss(
        logp_BT, logp_BT.detach().clone(), torch.ones(1, 1), torch.ones(1, 1),
        kl_ref_logp_BT=torch.tensor([[-2.0]]),
    )
    assert stats["loss/kl"] == pytest.approx(math.exp(-1))
    assert loss.item() == pytest.approx(-1.0)


def test_bad_inputs_raise():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="kl_ref_logp_BT"):
        clipped_token_loss(x, x, x, x, kl_beta=0.1)
    with pytest.raises(ValueError, match="adv_BT"):
        clipped_token_loss(x, x, torch.zeros(1, 3), x)
    with pytest.raises(ValueError, match="batch, tokens"):
        clipped_token_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2))


def test_token_logprobs():
    # logits [0, ln 2, ln 3] -> softmax [1/6, 2/6, 3/6]
    logits_BTV = torch.log(torch.tensor([[[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]]))
    logp_BT = token_logprobs(logits_BTV, torch.tensor([[2, 0]]))
    torch.testing.assert_close(logp_BT, torch.tensor([[math.log(3 / 6), math.log(1 / 3)]]))


def test_token_logprobs_is_stable_and_float32():
    # logits [1000, 0]: log-softmax [0, -1000] without overflow
    logits_BTV = torch.tensor([[[1000.0, 0.0], [1000.0, 0.0]]], dtype=torch.bfloat16)
    logp_BT = token_logprobs(logits_BTV, torch.tensor([[0, 1]]))
    assert logp_BT.dtype == torch.float32
    torch.testing.assert_close(logp_BT, torch.tensor([[0.0, -1000.0]]))
    with pytest.raises(ValueError, match="vocabulary"):
        token_logprobs(logits_BTV, torch.tensor([[0, 1, 1]]))


def test_token_logprobs_gradient_flows_to_logits():
    logits_BTV = torch.zeros(1, 1, 2, requires_grad=True)
    token_logprobs(logits_BTV, torch.tensor([[0]])).sum().backward()
    # d log softmax_0 / d logits = onehot(0) - softmax = [0.5, -0.5]
    torch.testing.assert_close(logits_BTV.grad, torch.tensor([[[0.5, -0.5]]]))
