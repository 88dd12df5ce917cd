"""Learning-rate schedules: linear warmup, then constant, linear or cosine decay to min_lr;
the peak rate scaled with the global batch (`scaled_lr`); one model's schedule as a resolved
config sets it (`LrSchedule`); batch-size ramps."""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAY_STYLES = ("constant", "linear", "cosine")

# Learning-rate scaling with the global batch: lr(B) = LR0 * (B / B0) ** k, k by rule.
LR_SCALING_EXPONENTS = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}


def scaled_lr(base_lr: float, batch: int, ref_batch: int, rule: str) -> float:
    """The learning rate at global batch `batch` from a base recipe: LR0 x (B / B0)^k.

    `base_lr` is LR0, the peak learning rate tuned at `ref_batch` = B0 responses per optimizer
    step; k is 1/2 for rule "sqrt", 1 for "linear" and 0 for "none" (LR0 at every B). "sqrt" is
    the square-root scaling rule for Adam-style optimizers (Malladi et al. 2022, "On the SDEs
    and Scaling Rules for Adaptive Gradient Algorithms"; the batch-size study's "sqrt
    scaling"); "linear" is the rule for SGD (Goyal et al. 2017). Example: LR0 = 1e-6 at
    B0 = 1024 gives 2e-6 at B = 4096 under sqrt and 5e-7 at B = 512 under linear.

    Raises ValueError for an unknown rule, a batch below 1 or a rate that is not positive.
    """
    if rule not in LR_SCALING_EXPONENTS:
        raise ValueError(
            f"unknown learning-rate scaling rule {rule!r}; allowed: "
            + ", ".join(LR_SCALING_EXPONENTS)
        )
    for name, value in (("batch", batch), ("ref_batch", ref_batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if (
        isinstance(base_lr, bool)
        or not isinstance(base_lr, (int, float))
        or not (math.isfinite(base_lr) and base_lr > 0)
    ):
        raise ValueError(f"base_lr must be a finite number > 0, got {base_lr!r}")
    return float(base_lr) * (batch / ref_batch) ** LR_SCALING_EXPONENTS[rule]


def lr_at(
    step: int, *, lr: float, min_lr: float, warmup_steps: int, decay_style: str, total_steps: int
) -> float:
    """Learning rate for optimizer step `step` (0-based) of `total_steps`."""
    if decay_style not in DECAY_STYLES:
        raise ValueError(f"decay style {decay_style!r}; allowed: {', '.join(DECAY_STYLES)}")
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if decay_style == "constant":
        return lr
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / decay_steps, 1.0)
    if decay_style == "linear":
        factor = 1.0 - progress
    else:  # cosine (Loshchilov & Hutter 2017)
        factor = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr + (lr - min_lr) * factor


@dataclass(frozen=True)
class LrSchedule:
    """One model's learning rate as a resolved config sets it: the actor's, or the critic's
    under PPO (`hyrl.config.ResolvedConfig.optimizer`, `.critic`: their `lr_schedule`).

    `lr` is the peak rate at the configured batch; `base` is the base recipe it was scaled
    from, (LR0, B0) of --base-lr and --base-global-batch-size (or the critic's), or None when
    the rate was given as --lr; `scaling` is the --lr-scaling rule."""

    lr: float
    min_lr: float
    warmup_steps: int
    decay_style: str
    base: tuple[float, int] | None
    scaling: str

    def peak_at(self, batch: int) -> float:
        """The peak rate at `batch` responses per optimizer step: LR0 x (batch / B0)^k from the
        base recipe (`scaled_lr`), or `lr` when the rate was given as --lr (nothing to scale)."""
        if self.base is None:
            return self.lr
        base_lr, base_batch = self.base
        return scaled_lr(base_lr, batch, base_batch, self.scaling)

    def at(self, step: int, *, peak: float, total_steps: int) -> float:
        """The rate of optimizer step `step` (0-based) of `total_steps` whose peak is `peak`."""
        return lr_at(
            step,
            lr=peak,
            min_lr=self.min_lr,
            warmup_steps=self.warmup_steps,
            decay_style=self.decay_style,
            total_steps=total_steps,
        )


def parse_batch_ramp(text: str) -> tuple[int, int, int]:
    """ "START:END:STEPS" -> (start, end, steps): responses per optimizer step go from START to
    END over the first STEPS rollout steps, then stay at END."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"{text!r}: expected START:END:STEPS, e.g. 128:512:200")
    try:
        start, end, steps = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"{text!r}: START, END and STEPS must be integers") from None
    if start < 1 or end < 1 or steps < 1:
        raise ValueError(f"{text!r}: START, END and STEPS must each be >= 1")
    return start, end, steps


def batch_at(rollout_step: int, *, start: int, end: int, steps: int, unit: int) -> int:
    """Responses per optimizer step at rollout step t (1-based) of a linear ramp, rounded to a
    multiple of `unit` (what the data-parallel ranks, micro-batches and groups divide)."""
    progress = min(max(rollout_step - 1, 0) / steps, 1.0)
    exact = start + (end - start) * progress
    return max(unit, round(exact / unit) * unit)
