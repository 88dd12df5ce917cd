"""Specification of hyrl.algorithms.grpo and hyrl.algorithms.losses, with hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from hyrl.algorithms.grpo import group_advantages
from hyrl.algorithms.losses import grpo_loss, kl_penalty, masked_token_mean, policy_loss

LOG = math.log


def t(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


# --- group_advantages -----------------------------------------------------------------------


def test_advantage_is_reward_minus_group_mean_over_population_std():
    # group 0: mean 0.5, population std 0.5 -> (r - 0.5) / 0.5; group 1: all equal -> 0
    A = group_advantages(t(1, 0, 0, 1, 1, 1, 1, 1), group_size=4)
    assert torch.allclose(A, t(1, -1, -1, 1, 0, 0, 0, 0), atol=1e-5)


def test_std_is_the_population_std_not_the_sample_std():
    # [0, 1, 2]: mean 1, population std sqrt(2/3) = 0.8165 (the sample std would be 1)
    A = group_advantages(t(0, 1, 2), group_size=3)
    s = math.sqrt(2 / 3)
    assert torch.allclose(A, t(-1 / s, 0, 1 / s), atol=1e-5)


def test_without_std_normalisation_advantage_is_reward_minus_group_mean():
    A = group_advantages(t(1, 0, 0, 1, 1, 1, 1, 1), group_size=4, normalize_std=False)
    assert torch.equal(A, t(0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0))


def test_groups_of_equal_rewards_get_exactly_zero_even_when_the_mean_rounds():
    # in float32, 0.9 - mean([0.9, 0.9, 0.9]) = 6e-8, not 0; that rounding must not be
    # amplified into a nonzero advantage by the division by (std + eps).
    A = group_advantages(t(0.9, 0.9, 0.9, 0.1, 0.1, 0.1), group_size=3)
    assert torch.equal(A, torch.zeros(6))


def test_groups_are_contiguous_rows():
    # G = 2: [3, 1] and [5, 9] -> each group is (+1, -1) / (-1, +1) after normalisation
    A = group_advantages(t(3, 1, 5, 9), group_size=2)
    assert torch.allclose(A, t(1, -1, -1, 1), atol=1e-5)


def test_reward_count_must_split_into_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages(t(1, 0, 0, 1, 1), group_size=4)


# --- policy_loss --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratio, A, eps_high, loss, clipped",
    [
        (1.5, +1.0, 0.2, -1.2, 1.0),  # min(1.5, 1.2) = 1.2: the clip caps the gain
        (0.5, +1.0, 0.2, -0.5, 0.0),  # min(0.5, 0.8) = 0.5: pessimistic branch is unclipped
        (0.5, -1.0, 0.2, +0.8, 1.0),  # min(-0.5, -0.8) = -0.8
        (1.5, -1.0, 0.2, +1.5, 0.0),  # min(-1.5, -1.2) = -1.5
        (1.5, +1.0, 0.28, -1.28, 1.0),  # DAPO clip-higher: upper bound 1 + 0.28
        (1.0, +2.0, 0.2, -2.0, 0.0),  # on-policy: loss = -A
    ],
)
def test_policy_loss_is_the_ppo_clip_surrogate(ratio, A, eps_high, loss, clipped):
    old = torch.tensor([[LOG(0.4)]])
    new = old + LOG(ratio)
    loss_t, clipped_t = policy_loss(
        new, old, torch.tensor([[A]]), eps_clip=0.2, eps_clip_high=eps_high
    )
    assert loss_t.item() == pytest.approx(loss, abs=1e-6)
    assert clipped_t.item() == clipped


def test_policy_loss_upper_clip_defaults_to_the_lower_one():
    old = torch.zeros(1, 1)
    loss, _ = policy_loss(old + LOG(1.5), old, torch.ones(1, 1), eps_clip=0.2)
    assert loss.item() == pytest.approx(-1.2)


def test_policy_loss_broadcasts_a_per_sequence_advantage():
    old = torch.zeros(2, 3)
    loss, _ = policy_loss(old, old, t(2, -1).unsqueeze(-1), eps_clip=0.2, eps_clip_high=0.2)
    assert torch.equal(loss, t([-2, -2, -2], [1, 1, 1]))


# --- kl_penalty ---------------------------------------------------------------------------


def test_k3_kl_by_hand():
    # p = 0.5, p_ref = 0.25: r = p_ref / p = 0.5 -> r - log r - 1 = 0.5 + 0.693147 - 1
    kl = kl_penalty(t(LOG(0.5)), t(LOG(0.25)), "low_var_kl")
    assert kl.item() == pytest.approx(0.19314718, abs=1e-6)


def test_k1_kl_is_the_log_ratio():
    kl = kl_penalty(t(LOG(0.5), LOG(0.25)), t(LOG(0.25), LOG(0.5)), "k1")
    assert torch.allclose(kl, t(LOG(2), -LOG(2)))


def test_k3_is_zero_at_equal_policies_and_never_negative():
    logp = torch.linspace(-5, 0, 11)
    assert torch.equal(kl_penalty(logp, logp, "low_var_kl"), torch.zeros(11))
    assert (kl_penalty(logp, logp.flip(0), "low_var_kl") >= 0).all()


def test_k3_is_clamped_to_10_with_finite_gradients():
    # log r = +100 would overflow exp(); log r = -30 gives r - log r - 1 = 29
    logp = torch.tensor([0.0, 0.0], requires_grad=True)
    kl = kl_penalty(logp, t(100.0, -30.0), "low_var_kl")
    assert torch.equal(kl.detach(), t(10, 10))
    kl.sum().backward()
    assert torch.isfinite(logp.grad).all()


def test_unknown_kl_kind_names_the_allowed_ones():
    with pytest.raises(ValueError, match="k1.*low_var_kl"):
        kl_penalty(t(0.0), t(0.0), "k2")


# --- masked_token_mean --------------------------------------------------------------------


def test_masked_token_mean_ignores_masked_values():
    values = t([1, 2, 100], [3, 100, 100])
    mask = t([1, 1, 0], [1, 0, 0])
    assert masked_token_mean(values, mask).item() == pytest.approx((1 + 2 + 3) / 3)


def test_masked_token_mean_divides_by_an_explicit_total():
    values = t([1, 2, 100], [3, 100, 100])
    mask = t([1, 1, 0], [1, 0, 0])
    assert masked_token_mean(values, mask, total_tokens=12.0).item() == pytest.approx(6 / 12)


def test_masked_token_mean_of_an_empty_mask_is_zero_not_nan():
    assert masked_token_mean(t(5.0, 7.0), t(0.0, 0.0)).item() == 0.0


def test_micro_batch_shares_of_a_global_total_sum_to_the_global_mean():
    values = t([1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12])
    mask = t([1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0])  # 6 tokens, sum 1+2+4+7+8+9 = 31
    shares = [
        masked_token_mean(values[i : i + 2], mask[i : i + 2], total_tokens=6.0) for i in (0, 2)
    ]
    assert sum(shares).item() == pytest.approx(31 / 6)
    assert masked_token_mean(values, mask).item() == pytest.approx(31 / 6)


# --- grpo_loss ----------------------------------------------------------------------------

# A 2x3 batch; row 0 has 2 response tokens, row 1 has 1 (3 tokens in all), old policy p = 0.5.
#   token (0,0): p = 0.75, ratio 1.5, A = +1 -> pg = -min(1.5, 1.2)   = -1.2  (clipped)
#   token (0,1): p = 0.5,  ratio 1,   A = +1 -> pg = -1
#   token (1,0): p = 0.25, ratio 0.5, A = -1 -> pg = -min(-0.5, -0.8) = +0.8  (clipped)
#   pg_loss   = (-1.2 - 1 + 0.8) / 3 = -0.466667,  clip_frac = 2/3
#   ref = p except at (0,1), where p_ref = 0.25: k3 = 0.19314718 -> kl = 0.19314718 / 3
#   entropy on response tokens 1, 2, 3 -> mean 2
#   approx_kl, k3 with r = p_old / p: (2/3 - log(2/3) - 1) + 0 + (2 - log 2 - 1) = 0.378985 / 3
#   loss = pg_loss + 0.5 * kl - 0.1 * entropy = -0.466667 + 0.032191 - 0.2 = -0.634476
MASK = t([1, 1, 0], [1, 0, 0])
OLD = torch.full((2, 3), LOG(0.5))
NEW = t([LOG(0.75), LOG(0.5), LOG(0.01)], [LOG(0.25), LOG(0.9), LOG(0.01)])  # masked: anything
REF = t([LOG(0.75), LOG(0.25), 0.0], [LOG(0.25), 0.0, 0.0])
ENTROPY = t([1, 2, 50], [3, 50, 50])
ADV = t(1, -1)


def _example(**overrides):
    kwargs = dict(
        eps_clip=0.2,
        eps_clip_high=0.2,
        ref_log_probs=REF,
        kl_loss_coef=0.5,
        entropy=ENTROPY,
        entropy_coef=0.1,
    )
    kwargs.update(overrides)
    return grpo_loss(NEW, OLD, ADV, MASK, **kwargs)


def test_grpo_loss_by_hand():
    loss, stats = _example()
    assert loss.item() == pytest.approx(-0.634476, abs=1e-5)
    assert stats["pg_loss"].item() == pytest.approx(-1.4 / 3, abs=1e-6)
    assert stats["clip_frac"].item() == pytest.approx(2 / 3)
    assert stats["kl"].item() == pytest.approx(0.19314718 / 3, abs=1e-6)
    assert stats["entropy"].item() == pytest.approx(2.0)
    assert stats["approx_kl"].item() == pytest.approx(0.378985 / 3, abs=1e-5)
    assert all(v.dim() == 0 and not v.requires_grad for v in stats.values())


def test_grpo_loss_accepts_token_level_advantages():
    loss_b, _ = _example()
    loss_bt, _ = grpo_loss(
        NEW,
        OLD,
        ADV.unsqueeze(-1).expand(2, 3),
        MASK,
        eps_clip=0.2,
        eps_clip_high=0.2,
        ref_log_probs=REF,
        kl_loss_coef=0.5,
        entropy=ENTROPY,
        entropy_coef=0.1,
    )
    assert loss_bt.item() == pytest.approx(loss_b.item())


def test_grpo_loss_without_reference_or_entropy_is_the_pg_loss():
    loss, stats = _example(ref_log_probs=None, entropy=None)
    assert loss.item() == pytest.approx(-1.4 / 3, abs=1e-6)
    assert set(stats) == {"pg_loss", "clip_frac", "approx_kl"}


def test_grpo_loss_with_an_explicit_total_is_this_batchs_share():
    # the same sums divided by 12 instead of 3
    loss, stats = _example(total_tokens=12.0)
    assert loss.item() == pytest.approx(-0.634476 * 3 / 12, abs=1e-5)
    assert stats["clip_frac"].item() == pytest.approx(2 / 12)
    assert stats["entropy"].item() == pytest.approx(6 / 12)


def test_gradient_on_policy_is_minus_advantage_over_token_count():
    # at ratio 1, d(-ratio * A)/d(log p) = -A on each response token, divided by total = 3
    log_probs = OLD.clone().requires_grad_(True)
    loss, _ = grpo_loss(log_probs, OLD, t(2, -3), MASK, eps_clip=0.2, eps_clip_high=0.2)
    loss.backward()
    assert torch.allclose(log_probs.grad, t([-2 / 3, -2 / 3, 0], [1, 0, 0]))


def test_no_gradient_flows_through_clipped_tokens():
    log_probs = NEW.clone().requires_grad_(True)
    loss, _ = grpo_loss(log_probs, OLD, ADV, MASK, eps_clip=0.2, eps_clip_high=0.2)
    loss.backward()
    # (0,0) and (1,0) are clipped, (0,1) is on-policy with A = +1: gradient -1/3
    assert torch.allclose(log_probs.grad, t([0, -1 / 3, 0], [0, 0, 0]))
