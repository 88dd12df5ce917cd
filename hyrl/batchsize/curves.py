"""Learning curves of a run and their alignment with a reference's (the module doc of
`hyrl.batchsize.analyze` defines the levels and the verdict)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hyrl.batchsize.runs import Run
from hyrl.metrics.run_dir import number as _num

CLEAR_FRACTION = 0.10  # first alignment level = start + CLEAR_FRACTION * (target - start)
DEFAULT_LEVELS = 10
_EPS = 1e-9  # slack on the tolerance band against float round-off


def metric_curve(
    run: Run, metric: str
) -> tuple[list[float], list[float], list[float], list[float]]:
    """(samples, elapsed_s, steps, values) at the records holding a finite `metric`. A record
    that lacks `samples` / `elapsed_s` takes the last value logged before it (NaN if none)."""
    samples, elapsed, steps, values = [], [], [], []
    last_samples, last_elapsed = math.nan, math.nan
    for rec in run.records:
        s, e = _num(rec.get("samples")), _num(rec.get("elapsed_s"))
        last_samples = s if math.isfinite(s) else last_samples
        last_elapsed = e if math.isfinite(e) else last_elapsed
        if metric not in rec:
            continue
        v = _num(rec[metric])
        if not math.isfinite(v) or not math.isfinite(last_samples):
            continue
        samples.append(last_samples)
        elapsed.append(last_elapsed)
        steps.append(_num(rec.get("step")))
        values.append(v)
    return samples, elapsed, steps, values


def generated_curve(run: Run, metric: str) -> tuple[list[float], list[float]] | None:
    """(samples_generated, values) at the records holding a finite `metric`: responses
    decoded, filtered ones too (--dynamic-sampling); None for a run that does not log them."""
    if not any("samples_generated" in rec for rec in run.records):
        return None
    generated, values = [], []
    last = math.nan
    for rec in run.records:
        g = _num(rec.get("samples_generated"))
        last = g if math.isfinite(g) else last
        v = _num(rec.get(metric)) if metric in rec else math.nan
        if math.isfinite(v) and math.isfinite(last):
            generated.append(last)
            values.append(v)
    return generated, values


def samples_to_reach(
    samples: Sequence[float], values: Sequence[float], level: float, higher_is_better: bool = True
) -> float | None:
    """x (cumulative samples; or elapsed seconds, or steps) at which `values` first reaches
    `level` (>= level, or <= level when lower is better), linearly interpolated between the two
    evaluations around the crossing. The first evaluation reaching it gives its own x. None if
    the curve never reaches the level (or x is unknown there)."""
    prev: tuple[float, float] | None = None  # (x, v) of the evaluation before
    for x, v in zip(samples, values):
        x, v = float(x), float(v)
        if not math.isfinite(v):
            continue
        hit = v >= level if higher_is_better else v <= level
        if hit:
            if prev is None or v == prev[1]:
                out = x
            else:
                prev_x, prev_v = prev
                out = prev_x + (level - prev_v) / (v - prev_v) * (x - prev_x)
            return out if math.isfinite(out) else None
        prev = x, v
    return None


def alignment_levels(
    target: float, start_value: float, n_levels: int = DEFAULT_LEVELS
) -> list[float]:
    """n evenly spaced levels from start + CLEAR_FRACTION * (target - start) to the target."""
    first = start_value + CLEAR_FRACTION * (target - start_value)
    if n_levels <= 1:
        return [float(target)]
    step = (target - first) / (n_levels - 1)
    return [first + i * step for i in range(n_levels - 1)] + [float(target)]


def _xy(curve) -> tuple[Sequence[float], Sequence[float]]:
    """(x, values) from a metric_curve 4-tuple or an (x, values) pair."""
    if len(curve) == 4:
        return curve[0], curve[3]
    if len(curve) == 2:
        return curve[0], curve[1]
    raise TypeError(
        "a curve is (samples, values) or metric_curve's (samples, elapsed, steps, values)"
    )


def alignment_detail(
    run_curve,
    ref_curve,
    target: float,
    start_value: float,
    tolerance: float,
    n_levels: int = DEFAULT_LEVELS,
    higher_is_better: bool | None = None,
) -> tuple[bool, list[tuple[float, float]], str]:
    """alignment() plus the reason, in words."""
    if higher_is_better is None:
        higher_is_better = target >= start_value
    if target == start_value:
        return False, [], "the target equals the reference's starting value; no level to compare"
    run_x, run_v = _xy(run_curve)
    ref_x, ref_v = _xy(ref_curve)
    ratios: list[tuple[float, float]] = []
    run_hits = ref_hits = 0
    for level in alignment_levels(target, start_value, n_levels):
        s_run = samples_to_reach(run_x, run_v, level, higher_is_better)
        s_ref = samples_to_reach(ref_x, ref_v, level, higher_is_better)
        run_hits += s_run is not None
        ref_hits += s_ref is not None
        if s_run is None or s_ref is None or s_ref <= 0:
            continue
        ratios.append((level, s_run / s_ref))
    if not ratios:
        if not run_v:
            why = "the run has no evaluations of the metric"
        elif run_hits == 0:
            why = "the run reaches none of the levels"
        elif ref_hits == 0:
            why = "the reference reaches none of the levels"
        else:
            why = "the run and the reference reach no level in common after their start"
        return False, [], f"no common level: {why}"
    lo, hi = 1 - tolerance, 1 + tolerance
    outside = [(lv, r) for lv, r in ratios if not lo - _EPS <= r <= hi + _EPS]
    span = f"{min(r for _, r in ratios):.3g}-{max(r for _, r in ratios):.3g}"
    if outside:
        lv, r = max(outside, key=lambda t: abs(t[1] - 1))
        return (
            False,
            ratios,
            (
                f"samples ratio {r:.3g} at level {lv:.4g} lies outside "
                f"1 +/- {tolerance:g} ({len(outside)} of {len(ratios)} levels; "
                f"ratios {span})"
            ),
        )
    return (
        True,
        ratios,
        (f"all {len(ratios)} common levels within 1 +/- {tolerance:g} (ratios {span})"),
    )


def alignment(
    run_curve,
    ref_curve,
    target: float,
    start_value: float,
    tolerance: float,
    n_levels: int = DEFAULT_LEVELS,
    higher_is_better: bool | None = None,
) -> tuple[bool, list[tuple[float, float]]]:
    """(aligned, [(level, run samples / reference samples), ...]) over the levels both curves
    reach, from start + 10% of (target - start) up to the target (n evenly spaced). Curves are
    metric_curve() tuples or (samples, values) pairs. Aligned iff every ratio lies within
    1 +/- tolerance; no common level -> not aligned."""
    aligned, ratios, _ = alignment_detail(
        run_curve, ref_curve, target, start_value, tolerance, n_levels, higher_is_better
    )
    return aligned, ratios
