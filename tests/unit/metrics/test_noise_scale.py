"""Specification of hyrl.metrics.noise_scale (McCandlish et al. 2018, appendix A), with numbers
that can be checked by hand and a least-squares problem whose noise scale is known exactly."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hyrl.metrics.noise_scale import GradientNoiseScale, two_batch_estimates

# --- two_batch_estimates --------------------------------------------------------------------


def test_two_batch_estimates_match_hand_numbers():
    # b=1, B=4, |g_b|^2=5, |g_B|^2=2: |G|^2 = (4*2 - 1*5)/(4-1) = 1, tr(S) = (5-2)/(1-1/4) = 4
    grad_sq, trace_sigma = two_batch_estimates(5.0, 2.0, 1, 4)
    assert grad_sq == pytest.approx(1.0, rel=1e-12)
    assert trace_sigma == pytest.approx(4.0, rel=1e-12)


def test_two_batch_estimates_invert_the_expected_norms():
    # E|g_b|^2 = |G|^2 + tr(S)/b; with |G|^2=3, tr(S)=12, b=2, B=6: 3+6=9 and 3+2=5
    grad_sq, trace_sigma = two_batch_estimates(9.0, 5.0, 2, 6)
    assert grad_sq == pytest.approx(3.0, rel=1e-12)
    assert trace_sigma == pytest.approx(12.0, rel=1e-12)


def test_one_step_noise_scale_is_the_ratio_of_the_hand_numbers():
    ns = GradientNoiseScale()
    ns.update([5.0], 2.0, b_small=1, b_big=4)
    assert ns.b_simple == pytest.approx(4.0, rel=1e-12)  # 4 / 1


def test_everything_is_nan_before_the_first_update():
    ns = GradientNoiseScale()
    assert math.isnan(ns.grad_sq) and math.isnan(ns.trace_sigma) and math.isnan(ns.b_simple)


def test_noise_scale_is_nan_when_the_gradient_estimate_is_not_positive():
    ns = GradientNoiseScale()
    ns.update([10.0], 1.0, b_small=1, b_big=4)  # |G|^2 = (4 - 10)/3 = -2
    assert ns.grad_sq == pytest.approx(-2.0, rel=1e-12)
    assert math.isnan(ns.b_simple)


# --- EMA bias correction --------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 0.99, 0.999])
def test_after_one_update_the_properties_are_that_steps_raw_estimates(beta):
    ns = GradientNoiseScale(beta)
    ns.update([5.0], 2.0, b_small=1, b_big=4)
    assert ns.grad_sq == pytest.approx(1.0, rel=1e-12)
    assert ns.trace_sigma == pytest.approx(4.0, rel=1e-12)


def test_after_two_updates_with_beta_half_the_newer_step_weighs_twice_the_older():
    # raw x1 = (|G|^2 1, tr 4); raw x2 from b=2, B=6, |g_b|^2=5, |g_B|^2=3:
    #   |G|^2 = (6*3 - 2*5)/4 = 2, tr = (5-3)/(1/2 - 1/6) = 6.
    # ema_2 = 0.25 x1 + 0.5 x2, divided by 1 - 0.5^2 = 0.75 -> (x1 + 2 x2) / 3
    ns = GradientNoiseScale(beta=0.5)
    ns.update([5.0], 2.0, b_small=1, b_big=4)
    ns.update([5.0], 3.0, b_small=2, b_big=6)
    assert ns.grad_sq == pytest.approx((1 + 2 * 2) / 3, rel=1e-12)  # 5/3
    assert ns.trace_sigma == pytest.approx((4 + 2 * 6) / 3, rel=1e-12)  # 16/3
    assert ns.b_simple == pytest.approx(16 / 5, rel=1e-12)  # ratio of the EMAs


def test_the_step_estimates_are_the_last_updates_own_not_the_averages():
    # the same two updates as above with beta 0.5: the averages are (5/3, 16/3), the second
    # step's own estimates (2, 6); before any update both are nan
    ns = GradientNoiseScale(beta=0.5)
    assert math.isnan(ns.step_grad_sq) and math.isnan(ns.step_trace_sigma)
    ns.update([5.0], 2.0, b_small=1, b_big=4)
    ns.update([5.0], 3.0, b_small=2, b_big=6)
    assert (ns.step_grad_sq, ns.step_trace_sigma) == pytest.approx((2.0, 6.0), rel=1e-12)
    assert ns.grad_sq == pytest.approx(5 / 3, rel=1e-12)


def test_beta_zero_keeps_only_the_latest_step():
    ns = GradientNoiseScale(beta=0.0)
    ns.update([5.0], 2.0, b_small=1, b_big=4)
    ns.update([5.0], 3.0, b_small=2, b_big=6)
    assert (ns.grad_sq, ns.trace_sigma) == pytest.approx((2.0, 6.0), rel=1e-12)


# --- known answer: least squares ------------------------------------------------------------


def test_recovers_the_closed_form_noise_scale_of_least_squares():
    # Per-example loss l = 0.5 (x.w - y)^2 with y = x.w* + eps, x ~ N(0, I_d), eps ~ N(0, s^2),
    # evaluated at a fixed w, D = w - w*. The per-example gradient is g = x (x.D - eps).
    #   G     = E[x x^T] D - E[x eps] = D
    #   E[g g^T] = E[x x^T (x.D)^2] + s^2 I = (|D|^2 I + 2 D D^T) + s^2 I   (Isserlis)
    #   Sigma = E[g g^T] - G G^T = (|D|^2 + s^2) I + D D^T
    #   tr(Sigma) = (d + 1)|D|^2 + d s^2
    # With d=50, |D|=1, s=0.5: |G|^2 = 1, tr(Sigma) = 51 + 12.5 = 63.5, B_simple = 63.5.
    d, s, steps, n_micro, b = 50, 0.5, 2000, 4, 8
    g = torch.Generator().manual_seed(0)
    w_star = torch.randn(d, generator=g, dtype=torch.float64)
    D = torch.randn(d, generator=g, dtype=torch.float64)
    w = w_star + D / D.norm()  # |w - w*| = 1
    x = torch.randn(steps, n_micro, b, d, generator=g, dtype=torch.float64)
    y = x @ w_star + s * torch.randn(steps, n_micro, b, generator=g, dtype=torch.float64)
    per_example = x * (x @ w - y).unsqueeze(-1)  # [steps, micro, b, d]
    g_small = per_example.mean(dim=2)  # one per micro-batch
    g_big = g_small.mean(dim=1)  # accumulated step
    small_sq = (g_small**2).sum(-1).tolist()
    big_sq = (g_big**2).sum(-1).tolist()

    # beta=0.999 averages over ~1000 of the 2000 steps: the seed-to-seed spread of the
    # estimates is then ~2% (about 5% for the |G|^2 estimate at beta=0.99), so 10% is a margin.
    ns = GradientNoiseScale(beta=0.999)
    for small, big in zip(small_sq, big_sq):
        ns.update(small, big, b_small=b, b_big=n_micro * b)

    true_grad_sq, true_trace = 1.0, (d + 1) * 1.0 + d * s**2
    assert ns.grad_sq == pytest.approx(true_grad_sq, rel=0.10)
    assert ns.trace_sigma == pytest.approx(true_trace, rel=0.10)
    assert ns.b_simple == pytest.approx(true_trace / true_grad_sq, rel=0.10)


# --- small norms are averaged ---------------------------------------------------------------


def test_repeating_a_small_norm_changes_nothing():
    one, two = GradientNoiseScale(0.9), GradientNoiseScale(0.9)
    for small, big in [(5.0, 2.0), (7.0, 3.0), (4.0, 1.5)]:
        one.update([small], big, b_small=1, b_big=4)
        two.update([small, small], big, b_small=1, b_big=4)
    assert one.state_dict() == two.state_dict()


def test_several_small_norms_count_as_their_mean():
    one, many = GradientNoiseScale(0.9), GradientNoiseScale(0.9)
    one.update([5.0], 2.0, b_small=1, b_big=4)
    many.update([3.0, 7.0, 4.0, 6.0], 2.0, b_small=1, b_big=4)  # mean 5
    assert many.grad_sq == pytest.approx(one.grad_sq, rel=1e-12)
    assert many.trace_sigma == pytest.approx(one.trace_sigma, rel=1e-12)


def test_small_norms_may_be_any_iterable_of_numbers_or_scalar_tensors():
    ns = GradientNoiseScale()
    ns.update((torch.tensor(v) for v in (3.0, 7.0)), torch.tensor(2.0), 1, 4)
    assert (ns.grad_sq, ns.trace_sigma) == pytest.approx((1.0, 4.0), rel=1e-6)


# --- checkpoint / resume --------------------------------------------------------------------


def test_state_dict_round_trip_through_json_continues_identically():
    steps = [([5.0, 6.0], 2.0), ([7.0], 3.0), ([4.0, 4.5], 1.5), ([6.0], 2.5)]
    straight = GradientNoiseScale(0.9)
    for small, big in steps:
        straight.update(small, big, b_small=2, b_big=8)

    first = GradientNoiseScale(0.9)
    for small, big in steps[:2]:
        first.update(small, big, b_small=2, b_big=8)
    resumed = GradientNoiseScale()  # default beta: restored
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for small, big in steps[2:]:
        resumed.update(small, big, b_small=2, b_big=8)

    assert resumed.state_dict() == straight.state_dict()
    assert resumed.b_simple == straight.b_simple


def test_loading_a_fresh_state_gives_nan_again():
    ns = GradientNoiseScale()
    ns.update([5.0], 2.0, 1, 4)
    ns.load_state_dict(GradientNoiseScale().state_dict())
    assert math.isnan(ns.b_simple)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [-0.1, 1.0, 1.5, math.nan])
def test_beta_outside_zero_one_is_rejected(beta):
    with pytest.raises(ValueError, match="beta"):
        GradientNoiseScale(beta)


def test_loading_a_state_with_a_bad_beta_is_rejected():
    state = GradientNoiseScale().state_dict() | {"beta": 1.0}
    with pytest.raises(ValueError, match="beta"):
        GradientNoiseScale().load_state_dict(state)


@pytest.mark.parametrize(
    "b_small, b_big, name",
    [
        (0, 4, "b_small"),
        (-1, 4, "b_small"),
        (1, 0, "b_big"),
        (1, -4, "b_big"),
        (4, 4, "b_small must be < b_big"),
        (8, 4, "b_small must be < b_big"),
    ],
)
def test_bad_batch_sizes_are_rejected(b_small, b_big, name):
    with pytest.raises(ValueError, match=name):
        two_batch_estimates(5.0, 2.0, b_small, b_big)
    ns = GradientNoiseScale()
    with pytest.raises(ValueError, match=name):
        ns.update([5.0], 2.0, b_small, b_big)
    assert ns.step == 0 and math.isnan(ns.b_simple)  # nothing was recorded


def test_no_small_norms_is_rejected():
    ns = GradientNoiseScale()
    with pytest.raises(ValueError, match="small_sq_norms"):
        ns.update([], 2.0, 1, 4)
    assert ns.step == 0
