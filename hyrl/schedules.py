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


def parse_batch_ramp(text: str) -> tuple[int, int, int]:
    """"START:END:STEPS" -> (start, end, steps): responses per optimizer step go from START to
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
