"""Specification of hyrl.config.schedules (lr_at, scaled_lr), with values computed by hand.

Running example: lr 1.0, min_lr 0.1, 4 warmup steps, 12 steps in all, so decay runs over the
8 steps 4..12: step 6 is a quarter of the way, step 8 half way, step 12 the end.
"""

from __future__ import annotations

import math

import pytest

from hyrl.config.schedules import DECAY_STYLES, LR_SCALING_EXPONENTS, lr_at, scaled_lr


def lr(
    step: int,
    style: str,
    *,
    warmup_steps: int = 4,
    total_steps: int = 12,
    peak: float = 1.0,
    min_lr: float = 0.1,
) -> float:
    return lr_at(
        step,
        lr=peak,
        min_lr=min_lr,
        warmup_steps=warmup_steps,
        decay_style=style,
        total_steps=total_steps,
    )


@pytest.mark.parametrize("style", DECAY_STYLES)
def test_warmup_rises_linearly_to_lr_over_warmup_steps(style):
    # lr * (step + 1) / warmup: the first step already has a nonzero rate
    assert [lr(s, style) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])


def test_warmup_scales_with_the_peak_lr():
    assert lr(0, "cosine", peak=3e-4) == pytest.approx(0.75e-4)
    assert lr(1, "cosine", peak=3e-4) == pytest.approx(1.5e-4)


def test_without_warmup_the_first_step_is_at_lr():
    assert lr(0, "linear", warmup_steps=0) == pytest.approx(1.0)
    assert lr(0, "cosine", warmup_steps=0) == pytest.approx(1.0)


def test_constant_stays_at_lr_after_warmup_and_ignores_min_lr():
    assert [lr(s, "constant") for s in (4, 8, 12, 100)] == [1.0, 1.0, 1.0, 1.0]


def test_linear_decay_start_quarter_middle_end():
    assert lr(4, "linear") == pytest.approx(1.0)  # progress 0
    assert lr(6, "linear") == pytest.approx(0.775)  # 0.1 + 0.9 * 0.75
    assert lr(8, "linear") == pytest.approx(0.55)  # 0.1 + 0.9 * 0.5
    assert lr(12, "linear") == pytest.approx(0.1)  # progress 1


def test_cosine_decay_start_quarter_middle_end():
    assert lr(4, "cosine") == pytest.approx(1.0)  # cos 0 = 1
    # 0.1 + 0.9 * 0.5 * (1 + cos(pi/4)) = 0.1 + 0.9 * 0.853553 = 0.868198
    assert lr(6, "cosine") == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.sqrt(0.5)))
    assert lr(6, "cosine") == pytest.approx(0.868198, abs=1e-6)
    assert lr(8, "cosine") == pytest.approx(0.55)  # cos(pi/2) = 0
    assert lr(12, "cosine") == pytest.approx(0.1)  # cos(pi) = -1


def test_cosine_stays_above_linear_in_the_first_half_of_decay():
    assert lr(5, "cosine") > lr(5, "linear")
    assert lr(7, "cosine") > lr(7, "linear")


@pytest.mark.parametrize("style", ["linear", "cosine"])
def test_min_lr_is_a_floor_reached_at_the_end_and_kept_after_it(style):
    values = [lr(s, style) for s in range(4, 30)]
    assert min(values) == pytest.approx(0.1)
    assert all(v >= 0.1 - 1e-12 for v in values)
    assert lr(13, style) == pytest.approx(0.1)
    assert lr(1000, style) == pytest.approx(0.1)


@pytest.mark.parametrize("style", ["linear", "cosine"])
def test_decay_is_monotone_non_increasing(style):
    values = [lr(s, style) for s in range(4, 13)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_min_lr_zero_decays_to_zero():
    assert lr(12, "linear", min_lr=0.0) == 0.0
    assert lr(8, "linear", min_lr=0.0) == pytest.approx(0.5)


def test_unknown_decay_style_raises():
    with pytest.raises(ValueError, match="exponential"):
        lr(0, "exponential")


def test_batch_ramp_goes_linearly_from_start_to_end_in_multiples_of_the_unit():
    from hyrl.config.schedules import batch_at

    ramp = dict(start=128, end=512, steps=4, unit=32)
    # exact values 128, 224, 320, 416, 512, then END held
    assert [batch_at(t, **ramp) for t in range(1, 8)] == [128, 224, 320, 416, 512, 512, 512]
    # rounded to the unit: 128 + 384 * 1/3 = 256 exactly, 128 + 384 * 1/6 = 192
    assert batch_at(2, start=128, end=512, steps=6, unit=64) == 192
    assert batch_at(2, start=512, end=128, steps=2, unit=64) == 320  # ramps down as well


def test_batch_ramp_text_must_be_three_positive_integers():
    from hyrl.config.schedules import parse_batch_ramp

    assert parse_batch_ramp("128:512:200") == (128, 512, 200)
    for bad in ("128:512", "a:b:c", "0:512:10", "128:512:0"):
        with pytest.raises(ValueError):
            parse_batch_ramp(bad)


# --------------------------------------------------------------------------- learning-rate scaling


def test_scaled_lr_hand_numbers():
    assert scaled_lr(1e-6, 4096, 1024, "sqrt") == pytest.approx(2e-6, rel=1e-12)
    assert scaled_lr(1e-6, 512, 1024, "linear") == pytest.approx(5e-7, rel=1e-12)
    assert scaled_lr(1e-6, 4096, 1024, "none") == 1e-6
    assert scaled_lr(1e-6, 1024, 1024, "sqrt") == 1e-6  # at B0 every rule gives LR0
    assert LR_SCALING_EXPONENTS == {"none": 0.0, "sqrt": 0.5, "linear": 1.0}
    assert "Malladi" in scaled_lr.__doc__ and "sqrt" in scaled_lr.__doc__


@pytest.mark.parametrize(
    "args",
    [
        (1e-6, 4096, 1024, "cubic"),
        (1e-6, 0, 1024, "sqrt"),
        (1e-6, 4096, 0, "sqrt"),
        (0.0, 4096, 1024, "sqrt"),
        (float("nan"), 4096, 1024, "sqrt"),
    ],
)
def test_scaled_lr_rejects_bad_inputs(args):
    with pytest.raises(ValueError):
        scaled_lr(*args)
