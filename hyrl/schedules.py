"""Learning-rate schedules: linear warmup, then constant, linear or cosine decay to min_lr."""

from __future__ import annotations

import math

DECAY_STYLES = ("constant", "linear", "cosine")


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, decay_style: str,
          total_steps: int) -> float:
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
