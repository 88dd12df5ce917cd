"""Specification of hyrl.algorithms.ppo, with hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from hyrl.algorithms.ppo import explained_variance, gae, masked_whiten, token_rewards, value_loss


def t(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def rows(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


# Two rows, L = 8. Row 0: prompt positions 0..2, response positions 3..6, padding at 7.
# Row 1: a shorter response at positions 1..2. Values outside the mask are garbage (9.0) and
# must not leak into anything.
MASK = rows([0, 0, 0, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0, 0, 0])
REWARDS = rows([5, 5, 5, 0, 0, 0, 1, 5], [5, 0, 2, 5, 5, 5, 5, 5])
VALUES = rows([9, 9, 9, 0.5, 0.6, 0.7, 0.8, 9], [9, 1.0, 1.0, 9, 9, 9, 9, 9])


# --- gae ----------------------------------------------------------------------------------


def test_gae_by_hand_at_an_offset_with_independent_rows():
    # gamma = 0.9, lambd = 0.8, gamma * lambd = 0.72. Row 0, right to left (positions 6..3):
    #   delta_6 = 1 + 0            - 0.8 = 0.2        (episode ends: bootstrap 0)
    #   delta_5 = 0 + 0.9 * 0.8    - 0.7 = 0.02
    #   delta_4 = 0 + 0.9 * 0.7    - 0.6 = 0.03
    #   delta_3 = 0 + 0.9 * 0.6    - 0.5 = 0.04
    #   A_6 = 0.2
    #   A_5 = 0.02 + 0.72 * 0.2     = 0.164
    #   A_4 = 0.03 + 0.72 * 0.164   = 0.14808
    #   A_3 = 0.04 + 0.72 * 0.14808 = 0.1466176
    #   R = A + V = [0.6466176, 0.74808, 0.864, 1.0]
    # Row 1 (positions 2, 1), rewards [0, 2], values [1, 1]:
    #   delta_2 = 2 - 1 = 1;  delta_1 = 0 + 0.9 * 1 - 1 = -0.1
    #   A_2 = 1;  A_1 = -0.1 + 0.72 * 1 = 0.62;  R = [1.62, 2.0]
    A, R = gae(REWARDS, VALUES, MASK, gamma=0.9, lambd=0.8)
    assert torch.allclose(
        A,
        rows([0, 0, 0, 0.1466176, 0.14808, 0.164, 0.2, 0], [0, 0.62, 1.0, 0, 0, 0, 0, 0]),
        atol=1e-6,
        rtol=0,
    )
    assert torch.allclose(
        R,
        rows([0, 0, 0, 0.6466176, 0.74808, 0.864, 1.0, 0], [0, 1.62, 2.0, 0, 0, 0, 0, 0]),
        atol=1e-6,
        rtol=0,
    )


def test_gae_carries_across_the_tokens_an_environment_wrote_between_turns():
    # Row 0 of the test above with two environment tokens (positions 5 and 6, outside the mask,
    # garbage rewards and values) between the model's positions 4 and 7: position 4 bootstraps
    # from position 7, so the model's four positions get the advantages and returns of the
    # trajectory without the gap, and the environment's positions get none. A GAE that ended at
    # every unmasked position would bootstrap 0 at position 4 (delta_4 = -0.6) and cut the
    # trajectory in two.
    mask = rows([0, 0, 0, 1, 1, 0, 0, 1, 1, 0])
    rewards = rows([5, 5, 5, 0, 0, 5, 5, 0, 1, 5])
    values = rows([9, 9, 9, 0.5, 0.6, 9, 9, 0.7, 0.8, 9])
    A, R = gae(rewards, values, mask, gamma=0.9, lambd=0.8)
    expected = rows([0, 0, 0, 0.1466176, 0.14808, 0, 0, 0.164, 0.2, 0])
    assert torch.allclose(A, expected, atol=1e-6, rtol=0)
    assert torch.allclose(
        R, rows([0, 0, 0, 0.6466176, 0.74808, 0, 0, 0.864, 1.0, 0]), atol=1e-6, rtol=0
    )


def test_gae_with_gamma_and_lambda_one_is_final_reward_minus_value():
    # gamma = lambd = 1: A_t = sum of the remaining rewards - V_t = 1 - V_t; every R_t = 1.
    A, R = gae(REWARDS[:1], VALUES[:1], MASK[:1], gamma=1.0, lambd=1.0)
    assert torch.allclose(A, rows([0, 0, 0, 0.5, 0.4, 0.3, 0.2, 0]), atol=1e-6, rtol=0)
    assert torch.allclose(R, rows([0, 0, 0, 1, 1, 1, 1, 0]), atol=1e-6, rtol=0)


def test_gae_with_lambda_zero_is_the_one_step_td_error():
    A, _ = gae(REWARDS[:1], VALUES[:1], MASK[:1], gamma=0.9, lambd=0.0)
    assert torch.allclose(A, rows([0, 0, 0, 0.04, 0.03, 0.02, 0.2, 0]), atol=1e-6, rtol=0)


def test_gae_passes_no_gradient_to_the_values():
    values = VALUES.clone().requires_grad_(True)
    A, R = gae(REWARDS, values, MASK, gamma=0.9, lambd=0.8)
    assert not A.requires_grad and not R.requires_grad


# --- token_rewards ------------------------------------------------------------------------


def test_score_goes_on_the_last_masked_position_of_each_row():
    r = token_rewards(t(3.0, -1.0), MASK)
    assert torch.equal(r, rows([0, 0, 0, 0, 0, 0, 3, 0], [0, 0, -1, 0, 0, 0, 0, 0]))


def test_kl_penalty_is_subtracted_at_every_masked_position_only():
    kl = torch.full((2, 8), 2.0)
    r = token_rewards(t(3.0, -1.0), MASK, kl=kl, kl_coef=0.1)
    # each response position gets -0.1 * 2 = -0.2; the last one also gets its score
    assert torch.allclose(
        r,
        rows([0, 0, 0, -0.2, -0.2, -0.2, 2.8, 0], [0, -0.2, -1.2, 0, 0, 0, 0, 0]),
        atol=1e-6,
        rtol=0,
    )


def test_response_ending_at_the_last_position_and_empty_rows():
    mask = rows([0, 0, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0])
    r = token_rewards(t(1.0, 7.0, 2.0), mask, kl=torch.ones(3, 4), kl_coef=0.5)
    # row 1 has no response: its score and its KL are dropped, no crash
    assert torch.equal(r, rows([0, 0, -0.5, 0.5], [0, 0, 0, 0], [1.5, 0, 0, 0]))


def test_kl_coef_without_kl_is_an_error():
    with pytest.raises(ValueError, match="kl"):
        token_rewards(t(1.0, 1.0), MASK, kl_coef=0.1)


# --- masked_whiten ------------------------------------------------------------------------


def test_whiten_gives_zero_mean_unit_population_variance_on_the_mask():
    x = rows([100, 1, 2, 3], [4, -50, 100, 100])
    mask = rows([0, 1, 1, 1], [1, 0, 0, 0])
    w = masked_whiten(x, mask)
    # masked entries 1, 2, 3, 4: mean 2.5, population variance 1.25
    s = math.sqrt(1.25)
    assert torch.allclose(
        w, rows([0, -1.5 / s, -0.5 / s, 0.5 / s], [1.5 / s, 0, 0, 0]), atol=1e-6, rtol=0
    )
    kept = w[mask > 0]
    assert abs(kept.mean().item()) < 1e-6
    assert abs(kept.var(unbiased=False).item() - 1) < 1e-5


def test_whiten_without_shifting_keeps_the_mean():
    w = masked_whiten(t(1, 2, 3, 4), t(1, 1, 1, 1), shift_mean=False)
    s = math.sqrt(1.25)
    assert torch.allclose(
        w, t(2.5 - 1.5 / s, 2.5 - 0.5 / s, 2.5 + 0.5 / s, 2.5 + 1.5 / s), atol=1e-6, rtol=0
    )


# --- value_loss ---------------------------------------------------------------------------


def test_clipped_branch_is_taken_when_it_is_larger():
    # old 0, V 1, R 2, c 0.2: unclipped (1 - 2)^2 = 1; V_clip = 0.2, (0.2 - 2)^2 = 3.24
    # loss = 0.5 * 3.24 = 1.62; clip_frac 1. V_clip is clamped, so d loss / d V = 0.
    values = t(1.0).requires_grad_(True)
    loss, clip_frac = value_loss(values, t(0.0), t(2.0), t(1.0), value_clip=0.2)
    assert loss.item() == pytest.approx(1.62, abs=1e-6)
    assert clip_frac.item() == 1.0
    loss.backward()
    assert values.grad.item() == 0.0


def test_unclipped_branch_is_taken_when_it_is_larger():
    # old 0, V 1, R 0.5, c 0.2: unclipped (1 - 0.5)^2 = 0.25; V_clip 0.2, (0.2 - 0.5)^2 = 0.09
    # loss = 0.5 * 0.25 = 0.125; clip_frac 0; d loss / d V = V - R = 0.5.
    values = t(1.0).requires_grad_(True)
    loss, clip_frac = value_loss(values, t(0.0), t(0.5), t(1.0), value_clip=0.2)
    assert loss.item() == pytest.approx(0.125, abs=1e-6)
    assert clip_frac.item() == 0.0
    loss.backward()
    assert values.grad.item() == pytest.approx(0.5, abs=1e-6)


def test_zero_clip_is_the_plain_squared_error():
    # same numbers as the clipped case, c = 0: 0.5 * (1 - 2)^2 = 0.5, gradient V - R = -1
    values = t(1.0).requires_grad_(True)
    loss, clip_frac = value_loss(values, t(0.0), t(2.0), t(1.0), value_clip=0.0)
    assert loss.item() == pytest.approx(0.5, abs=1e-6)
    assert clip_frac.item() == 0.0
    loss.backward()
    assert values.grad.item() == pytest.approx(-1.0, abs=1e-6)


def test_value_loss_is_a_masked_token_mean_with_an_optional_global_total():
    # tokens: [clipped 1.62, unclipped 0.125, masked out (huge)]
    values, old, R, mask = t(1, 1, 100), t(0, 0, 0), t(2, 0.5, 0), t(1, 1, 0)
    loss, clip_frac = value_loss(values, old, R, mask, value_clip=0.2)
    assert loss.item() == pytest.approx((1.62 + 0.125) / 2, abs=1e-6)
    assert clip_frac.item() == pytest.approx(0.5)
    loss, clip_frac = value_loss(values, old, R, mask, value_clip=0.2, total_tokens=5)
    assert loss.item() == pytest.approx((1.62 + 0.125) / 5, abs=1e-6)
    assert clip_frac.item() == pytest.approx(1 / 5)


# --- explained_variance -------------------------------------------------------------------


def test_perfect_critic_explains_all_variance():
    R = rows([9, 1, 2, 3], [4, 9, 9, 9])
    mask = rows([0, 1, 1, 1], [1, 0, 0, 0])
    V = R * mask + (1 - mask) * -7  # wrong only outside the mask
    assert explained_variance(V, R, mask) == pytest.approx(1.0)


def test_predicting_the_mean_return_explains_nothing():
    R, mask = t(1, 2, 3, 4, 50), t(1, 1, 1, 1, 0)
    assert explained_variance(torch.full((5,), 2.5), R, mask) == pytest.approx(0.0, abs=1e-12)


def test_explained_variance_by_hand():
    # R = [1, 3], V = [1.5, 2.5]: Var[R] = 1, R - V = [-0.5, 0.5], Var = 0.25 -> 1 - 0.25 = 0.75
    assert explained_variance(t(1.5, 2.5), t(1, 3), t(1, 1)) == pytest.approx(0.75)


def test_constant_returns_give_nan():
    assert math.isnan(explained_variance(t(0.1, 0.5, 0.3), t(0.9, 0.9, 0.9), t(1, 1, 1)))
    assert math.isnan(explained_variance(t(1, 2), t(1, 2), t(0, 0)))


def test_explained_variance_is_nan_when_returns_differ_only_by_rounding_noise():
    # every reward 0: R = A + V is zero up to float error, there is nothing to explain
    returns = torch.tensor([[3e-12, -1e-12, 2e-12]])
    values = torch.tensor([[0.5, -0.2, 0.1]])
    assert math.isnan(explained_variance(values, returns, torch.ones(1, 3)))
