"""Seed-aware verdicts: each member's seed-mean curve, bootstrapped over its seeds.

A member is the runs that differ only by seed (`hyrl.batchsize.seeds.group_name`). Notation: S
is samples (responses consumed), the target is the analysis' target value, `start` the
reference run's first evaluation, levels l_1 .. l_L the alignment levels
(`curves.alignment_levels`: from start + 10% of (target - start) up to the target).

1. Seed-mean curve (`hyrl.batchsize.seed_curves`): the mean over seeds of the runs' curves
   interpolated on the union of their evaluation samples; a run that --stop-at-target ended
   carries its last value forward, any other stops the mean where it stops. Min and max over
   seeds, and the BAND_QUANTILES (10%-90%) band of the bootstrapped mean, go with it; the same
   against elapsed_s draws the wall-clock plot.
2. S-bar(l): samples at which the seed-mean curve first reaches level l (linear interpolation,
   `curves.samples_to_reach`); S-bar = S-bar(target). Not reached where the mean curve stops:
   censored, +inf here, "never within N samples" in words (N: where the mean curve stops). A
   censored S-bar is never a number in a median; a seed that never reached still contributes
   its curve to the mean.
3. Bootstrap: `n_boot` resamples (default 2000) of each member's seeds with replacement, from a
   numpy Generator with the fixed seed BOOTSTRAP_SEED, so the same runs give the same verdicts.
   Members with the same seed set (the reference's, in a sweep with --seeds) draw the same seed
   indices: paired, as they ran next to each other in time; other members draw independently.
   Intervals are the central `confidence` interval of the resamples (5%-95% at 0.9), over the
   resamples where the quantity is defined.
4. Ratios to the reference member, per resample: samples ratio at the target
   S-bar / S-bar_ref (censored: inf; inf / inf undefined: the resample cannot rank), per-level
   r_l = S-bar(l) / S-bar_ref(l), weights w_l = (l - start) / (target - start), and the curve
   ratio exp(sum_l w_l log r_l / sum_l w_l) over the levels both reach. A level the reference
   reaches and the member does not enters as its bound r_l > N_member / S-bar_ref(l) (the
   curve ratio is then a lower bound), one the member reaches and the reference does not as
   r_l < S-bar(l) / N_ref (an upper bound); with both kinds, or no level, it cannot rank.
5. Material margin tau = max(tolerance, band_ref), band_ref = q_hi(S-bar_ref) / S-bar_ref - 1
   with q_hi the (1 + confidence) / 2 quantile (95th percentile at 0.9) of the reference's
   bootstrapped S-bar: the reference's own seed noise. The floor applies when the reference's
   mean never reaches the target; with q_hi infinite tau is infinite and no verdict is given.
6. Validity, one-sided: p_more = share of resamples whose curve ratio is > 1 + tau (a lower
   bound above it counts); p_not_more = share whose ratio is <= 1 + tau (an upper bound below
   it counts). "rejected: needs materially more samples" when p_more >= confidence, "valid"
   when p_not_more >= confidence (p_more <= 1 - confidence when every resample ranks), else
   "cannot tell". Needing fewer samples never rejects; the reference is valid by definition.
7. R ratio (`hyrl.batchsize.throughput_ratios`): from the sweep's throughput probes where it has
   them (--throughput-rounds: the median over rounds of the member's rate over the same round's
   reference rate, its interval from resampling the rounds, independent of the seeds'),
   else per seed, the run's throughput over the same seed's reference run's, the median over
   seeds, bootstrapped with the seeds' resamples; a seed outside Tukey's fences of the
   member's ratios is "load-affected?" and left out of its R (its curve stays in).
   T ratio = samples ratio at the target / R ratio.
8. Fastest: among members not rejected, per resample the least S-bar / R ratio (T ratio times
   S-bar_ref, which orders members as the T ratio does and still orders them when the
   reference is censored; censored: inf; ties share the resample; all inf: none).
   p_fastest = share of resamples. The fastest is named when p_fastest >= confidence, else
   every candidate with p_fastest >= LIST_SHARE is listed: the seeds cannot separate them.
9. Pairwise (`p_needs_more`): each fixed-lr control against the member of its B with an lr
   rule: p = share of resamples with S-bar_fixed > S-bar_scaled (inf > finite counts, inf vs
   inf does not); "holds" when p >= confidence.

Pure: numpy, `Run`s and the analysis rows; no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hyrl.batchsize.curves import samples_to_reach
from hyrl.batchsize.runs import Run
from hyrl.batchsize.seed_curves import (
    SeedCurves,
    curve_ends,
    ended_at_target,
    first_crossings,
    resample_counts,
    seed_curves,
)
from hyrl.batchsize.seed_verdicts import (
    estimate,
    fastest_and_pairwise,
    interval,
    p_needs_more,
    tau_sentence,
    verdict_lines,
)
from hyrl.batchsize.throughput_ratios import probes_of, throughput_ratio

DEFAULT_BOOTSTRAP = 2000
DEFAULT_CONFIDENCE = 0.9
BOOTSTRAP_SEED = 2000  # the Generator's fixed seed: the same runs give the same verdicts
BAND_QUANTILES = (0.10, 0.90)  # the plotted bootstrap band of the seed-mean curve
LIST_SHARE = 0.05  # "cannot separate" lists the candidates fastest in at least this share

# curve ratio kinds (per resample)
EXACT, LOWER, UPPER, UNDEFINED = 0, 1, 2, 3
_BOUND_NAMES = {EXACT: None, LOWER: "lower", UPPER: "upper", UNDEFINED: None}

__all__ = [
    "BOOTSTRAP_SEED",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_CONFIDENCE",
    "Settings",
    "curve_ratios",
    "over_seeds",
    "p_needs_more",
]


@dataclass(frozen=True)
class Settings:
    """The analysis' target and the bootstrap's parameters."""

    metric: str
    target: float
    start_value: float
    higher_is_better: bool
    levels: tuple[float, ...]
    tolerance: float
    n_boot: int = DEFAULT_BOOTSTRAP
    confidence: float = DEFAULT_CONFIDENCE
    rng_seed: int = BOOTSTRAP_SEED


def curve_ratios(
    member_samples: np.ndarray,
    ref_samples: np.ndarray,
    member_budget: np.ndarray,
    ref_budget: np.ndarray,
    weights: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Curve ratio per row (module docstring, 4): `*_samples` (n, L) S-bar at each level (inf:
    censored), `*_budget` (n,) where each mean curve stops. Returns (ratio, kind) with kind
    EXACT, LOWER (a lower bound), UPPER (an upper bound) or UNDEFINED (ratio NaN)."""
    m, r = np.atleast_2d(member_samples), np.atleast_2d(ref_samples)
    mb, rb = np.asarray(member_budget, float)[:, None], np.asarray(ref_budget, float)[:, None]
    m_ok, r_ok = np.isfinite(m) & (m > 0), np.isfinite(r) & (r > 0)
    exact = m_ok & r_ok
    lower = np.isposinf(m) & r_ok
    upper = m_ok & np.isposinf(r)
    bad = (lower & ~(mb > 0)) | (upper & ~(rb > 0))  # a bound with no budget: no bound
    with np.errstate(divide="ignore", invalid="ignore"):
        log_r = np.where(exact, np.log(m / r), 0.0)
        log_r = np.where(lower & ~bad, np.log(mb / r), log_r)
        log_r = np.where(upper & ~bad, np.log(m / rb), log_r)
    used = (exact | lower | upper) & ~bad
    w = np.where(used, weights[None, :], 0.0)
    w_sum = w.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.exp((w * log_r).sum(axis=1) / w_sum)
    has_lower, has_upper = (lower & used).any(axis=1), (upper & used).any(axis=1)
    kind = np.where(has_lower, LOWER, np.where(has_upper, UPPER, EXACT))
    undefined = (w_sum <= 0) | (has_lower & has_upper) | bad.any(axis=1)
    kind = np.where(undefined, UNDEFINED, kind)
    return np.where(undefined, np.nan, ratio), kind


@dataclass
class _Member:
    name: str
    runs: list[Run]
    rows: list[dict]
    seed_key: tuple
    samples_curves: SeedCurves | None
    elapsed_curves: SeedCurves | None


def _members(runs: Sequence[Run], rows: Sequence[dict], settings: Settings) -> list[_Member]:
    row_of = {r["name"]: r for r in rows}
    grouped: dict[str, list[tuple[Run, dict]]] = {}
    for run in runs:
        row = row_of[run.name]
        grouped.setdefault(row["group"], []).append((run, row))
    out = []
    for name, pairs in grouped.items():
        pairs.sort(key=lambda p: (p[1]["seed"] is None, p[1]["seed"] or 0, p[0].name))
        member_runs = [run for run, _ in pairs]
        seeds = tuple(row["seed"] if row["seed"] is not None else row["name"] for _, row in pairs)
        out.append(
            _Member(
                name=name,
                runs=member_runs,
                rows=[row for _, row in pairs],
                seed_key=seeds,
                samples_curves=seed_curves(member_runs, settings.metric, "samples"),
                elapsed_curves=seed_curves(member_runs, settings.metric, "elapsed_s"),
            )
        )
    out.sort(
        key=lambda m: (
            m.rows[0]["responses_per_step"] is None,
            m.rows[0]["responses_per_step"] or 0,
            m.name,
        )
    )
    return out


@dataclass(frozen=True)
class _Crossings:
    """A member's S-bar at each level, +inf where censored: the point estimate `point` (L,)
    and per resample `boot` (n_boot, L); where its seed-mean curve stops: `budget` and per
    resample `budgets` (n_boot,); its curves for the report."""

    point: np.ndarray
    boot: np.ndarray
    budget: float
    budgets: np.ndarray
    curve_vs_samples: dict | None
    curve_vs_time: dict | None

    @property
    def at_target(self) -> float:
        return float(self.point[-1])

    @property
    def boot_at_target(self) -> np.ndarray:
        return self.boot[:, -1]


def _crossings(member: _Member, counts: np.ndarray, settings: Settings) -> _Crossings:
    """S-bar at every level on the member's seed-mean curve (curves.samples_to_reach) and on
    each resample's mean (seed_curves.first_crossings); all censored without a curve."""
    n_boot, n_levels = counts.shape[0], len(settings.levels)
    elapsed = member.elapsed_curves
    curve_vs_time = _curve_json(elapsed, elapsed.means(counts)) if elapsed is not None else None
    curves = member.samples_curves
    if curves is None:
        return _Crossings(
            point=np.full(n_levels, np.inf),
            boot=np.full((n_boot, n_levels), np.inf),
            budget=math.nan,
            budgets=np.full(n_boot, np.nan),
            curve_vs_samples=None,
            curve_vs_time=curve_vs_time,
        )
    mean, end = curves.mean(), curves.end()
    reached = [
        samples_to_reach(
            curves.x[:end].tolist(), mean[:end].tolist(), level, settings.higher_is_better
        )
        for level in settings.levels
    ]
    means = curves.means(counts)
    boot = np.column_stack(
        [
            first_crossings(curves.x, means, level, settings.higher_is_better)
            for level in settings.levels
        ]
    )
    return _Crossings(
        point=np.array([math.inf if x is None else x for x in reached], dtype=float),
        boot=boot,
        budget=float(curves.x[end - 1]) if end else math.nan,
        budgets=curve_ends(curves.x, means),
        curve_vs_samples=_curve_json(curves, means),
        curve_vs_time=curve_vs_time,
    )


def _curve_json(curves: SeedCurves | None, means: np.ndarray) -> dict | None:
    """{"x", "mean", "min", "max", "band_low", "band_high"} on the seed-mean curve's extent."""
    if curves is None or curves.end() == 0:
        return None
    end = curves.end()
    low, high = curves.spread()
    band = np.quantile(means[:, :end], BAND_QUANTILES, axis=0)
    return {
        "x": curves.x[:end].tolist(),
        "mean": curves.mean()[:end].tolist(),
        "min": low.tolist(),
        "max": high.tolist(),
        "band_low": band[0].tolist(),
        "band_high": band[1].tolist(),
    }


def _validity(p_more: float, p_not_more: float, tau: float, confidence: float) -> tuple[str, str]:
    if math.isinf(tau):
        return (
            "cannot tell",
            "the reference's own seed band is unbounded: no margin to test against",
        )
    margin = f"1 + tau = {1 + tau:.2f}"
    if p_more >= confidence:
        return (
            "rejected: needs materially more samples",
            f"curve ratio > {margin} in {p_more:.0%} of bootstraps (>= {confidence:.0%})",
        )
    if p_not_more >= confidence:
        return (
            "valid",
            f"curve ratio <= {margin} in {p_not_more:.0%} of bootstraps (>= {confidence:.0%})",
        )
    return (
        "cannot tell",
        f"curve ratio > {margin} in {p_more:.0%} and <= it in {p_not_more:.0%} of bootstraps "
        f"(a verdict needs {confidence:.0%})",
    )


def _is_fixed_lr(member: _Member) -> bool:
    """The sweep's fixed-lr control: named b{B}-fixed, or run with lr_scaling "none" at a B
    other than its base recipe's (base_global_batch_size)."""
    if re.fullmatch(r"b\d+-fixed", member.name.rsplit("/", 1)[-1]):
        return True
    config, run = member.runs[0].config, member.runs[0]
    base_b = config.get("base_global_batch_size")
    return (
        config.get("lr_scaling") == "none"
        and isinstance(base_b, (int, float))
        and run.responses_per_step is not None
        and base_b != run.responses_per_step
    )


def _margin(ref: _Crossings, settings: Settings) -> tuple[float, str, float]:
    """(tau, its source, the reference's seed band): band = q_hi(S-bar_ref) / S-bar_ref - 1,
    q_hi the (1 + confidence) / 2 quantile of the bootstrapped S-bar_ref (inf when more than
    (1 - confidence) / 2 of them are censored; NaN when S-bar_ref itself is);
    tau = max(tolerance, band)."""
    q_high = interval(ref.boot_at_target, settings.confidence)[1]
    s_ref = ref.at_target
    band = q_high / s_ref - 1 if math.isfinite(s_ref) and s_ref > 0 else math.nan
    if math.isnan(band) or band <= settings.tolerance:
        return settings.tolerance, "tolerance", band
    return band, "reference seed band", band


def _ratio_estimates(
    st: _Crossings, ref: _Crossings, weights: np.ndarray, tau: float, confidence: float
) -> dict:
    """The member's ratios to the reference member: samples ratio at the target, per-level
    ratios, curve ratio, and the shares of resamples above and not above 1 + tau."""
    with np.errstate(divide="ignore", invalid="ignore"):
        samples_point = st.at_target / ref.at_target if ref.at_target > 0 else math.nan
        samples_boot = st.boot_at_target / ref.boot_at_target
    point, kind = curve_ratios(
        st.point[None, :],
        ref.point[None, :],
        np.array([st.budget]),
        np.array([ref.budget]),
        weights,
    )
    boot, kind_boot = curve_ratios(st.boot, ref.boot, st.budgets, ref.budgets, weights)
    above = boot > 1 + tau
    more = above & ((kind_boot == EXACT) | (kind_boot == LOWER))
    not_more = ~above & ((kind_boot == EXACT) | (kind_boot == UPPER)) & ~np.isnan(boot)
    levels: list[dict[str, Any]] = []
    for i in range(len(weights)):
        ratio, level_kind = curve_ratios(
            st.point[None, i : i + 1],
            ref.point[None, i : i + 1],
            np.array([st.budget]),
            np.array([ref.budget]),
            np.ones(1),
        )
        levels.append(
            {
                "weight": float(weights[i]),
                "samples": float(st.point[i]),
                "ratio": float(ratio[0]),
                "bound": _BOUND_NAMES[int(level_kind[0])],
            }
        )
    return {
        "samples_ratio": estimate(float(samples_point), samples_boot, confidence),
        "samples_ratio_boot": samples_boot,
        "level_ratios": levels,
        "curve_ratio": {
            **estimate(float(point[0]), boot, confidence),
            "bound": _BOUND_NAMES[int(kind[0])],
            "levels_compared": sum(1 for lv in levels if not math.isnan(lv["ratio"])),
        },
        "p_more": float(np.mean(more)),
        "p_not_more": float(np.mean(not_more)),
        "p_unranked": float(np.mean(~more & ~not_more)),
    }


def over_seeds(
    runs: Sequence[Run],
    rows: Sequence[dict],
    reference: str,
    settings: Settings,
    probes: dict | None = None,
) -> dict | None:
    """The seed-aware statistics and verdicts (module docstring) of `runs`, given the
    analysis' per-run `rows` (hyrl.batchsize.analyze), its reference run's name and the
    sweep's throughput probes (`throughput_ratios.sweep_probes`, None: R from the runs); None
    when every member has one run. Values are Python floats with +inf for censored and NaN for
    undefined: pass the result through analyze.json_safe before writing JSON."""
    members = _members(runs, rows, settings)
    if all(len(m.runs) == 1 for m in members):
        return None
    row_of = {r["name"]: r for r in rows}
    ref_group = row_of[reference]["group"]
    ref_member = next(m for m in members if m.name == ref_group)
    start, span = settings.start_value, settings.target - settings.start_value
    weights = np.array(
        [(lv - start) / span if span else 1.0 for lv in settings.levels], dtype=float
    )
    confidence = settings.confidence

    # the resamples: one index matrix per seed set (paired within it), the reference's first
    rng = np.random.default_rng(settings.rng_seed)
    indices: dict[tuple, np.ndarray] = {}
    for m in [ref_member, *members]:
        if m.seed_key not in indices:
            indices[m.seed_key] = rng.integers(0, len(m.runs), size=(settings.n_boot, len(m.runs)))
    crossings = {
        m.name: _crossings(m, resample_counts(indices[m.seed_key], len(m.runs)), settings)
        for m in members
    }
    ref = crossings[ref_group]
    probe_rng = np.random.default_rng(settings.rng_seed + 1)  # the rounds' resamples
    tau, tau_source, band = _margin(ref, settings)

    out_members, notes = [], []
    sbar_over_r: dict[str, np.ndarray] = {}
    for m in members:
        st, is_ref = crossings[m.name], m is ref_member
        ratios = _ratio_estimates(st, ref, weights, tau, confidence)
        samples_ratio_boot = ratios.pop("samples_ratio_boot")
        for level, entry in zip(settings.levels, ratios["level_ratios"]):
            entry["level"] = float(level)
        if is_ref:
            ratios.update(p_more=0.0, p_not_more=1.0, p_unranked=0.0)
            validity, reason = "valid", "the reference (valid by definition)"
        else:
            validity, reason = _validity(ratios["p_more"], ratios["p_not_more"], tau, confidence)
        r_est, r_boot = throughput_ratio(
            m.rows,
            row_of,
            ref_group,
            indices[m.seed_key],
            probes_of(probes, m.name),
            probe_rng,
            confidence,
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            t_point = ratios["samples_ratio"]["value"] / r_est["value"]
            t_boot = samples_ratio_boot / r_boot
            sbar_over_r[m.name] = st.boot_at_target / r_boot
        lr_scaling = m.runs[0].config.get("lr_scaling")
        out_members.append(
            {
                "member": m.name,
                "is_reference": is_ref,
                "responses_per_step": m.rows[0]["responses_per_step"],
                "lr": m.rows[0]["lr"],
                "lr_scaling": lr_scaling if isinstance(lr_scaling, str) else None,
                "fixed_lr": _is_fixed_lr(m),
                "seeds": [row["seed"] for row in m.rows],
                "runs": [run.name for run in m.runs],
                "n_seeds": len(m.runs),
                "n_reached": sum(bool(row["reached"]) for row in m.rows),
                "paired_with_reference": m.seed_key == ref_member.seed_key,
                "curve_end_samples": st.budget,
                "samples_to_target": estimate(st.at_target, st.boot_at_target, confidence),
                **ratios,
                "throughput_ratio": r_est,
                "time_ratio": estimate(t_point, t_boot, confidence),
                "validity": validity,
                "validity_reason": reason,
                "p_fastest": None,
                "seed_spread": seed_spread(m.rows),
                "max_eval_step_fraction": max_eval_step_fraction(
                    st.curve_vs_samples, settings.start_value, settings.target
                ),
                "curve_vs_samples": st.curve_vs_samples,
                "curve_vs_time": st.curve_vs_time,
            }
        )
        carried = [run.name for run in m.runs if ended_at_target(run)]
        if len(m.runs) > 1 and carried:
            notes.append(
                f"{m.name}: {len(carried)} of {len(m.runs)} runs stopped at the target "
                "(--stop-at-target) and hold their last value in the seed-mean curve, which "
                "then reaches the target only as the slower seeds arrive: its S-bar leans to "
                "the slowest seed and its band narrows; run every member to the same budget "
                "for seed-aware verdicts"
            )
        if len(m.runs) > 1 and not np.isfinite(st.point).any():
            notes.append(f"{m.name}: its seed-mean curve reaches none of the levels")
        dropped = len(m.runs) - (m.samples_curves.n_seeds if m.samples_curves is not None else 0)
        if dropped:
            notes.append(
                f"{m.name}: {dropped} run(s) without an evaluation of {settings.metric} "
                "left out of its mean"
            )

    verdicts = fastest_and_pairwise(
        out_members,
        sbar_over_r,
        {name: c.boot_at_target for name, c in crossings.items()},
        confidence,
        LIST_SHARE,
    )
    seeds_all = sorted({s for m in members for s in m.seed_key if isinstance(s, int)})
    result = {
        "seeds": seeds_all,
        "n_seeds": len(seeds_all),
        "n_boot": settings.n_boot,
        "confidence": confidence,
        "bootstrap_seed": settings.rng_seed,
        "band_quantiles": list(BAND_QUANTILES),
        "reference_member": ref_group,
        "levels": [float(lv) for lv in settings.levels],
        "level_weights": weights.tolist(),
        "tau": tau,
        "tau_source": tau_source,
        "tolerance": settings.tolerance,
        "reference_band": band,
        "tau_sentence": tau_sentence(tau, tau_source, band, settings.tolerance, confidence),
        "members": out_members,
        **verdicts,
        "notes": notes,
    }
    ref_out = next(m for m in out_members if m["is_reference"])
    result["testbed"] = {
        "reference_seed_spread": ref_out["seed_spread"],
        "reference_max_eval_step_fraction": ref_out["max_eval_step_fraction"],
    }
    result["verdicts"] = verdict_lines(result)
    return result


def seed_spread(rows: Sequence[dict]) -> dict:
    """How far a member's single runs lie apart: {"n", "reached", "max_over_min"}, the last the
    largest over the smallest samples to target of its runs (each run's own first crossing),
    None unless every run reached the target (a run that never did makes the spread
    unbounded: "1.0x to never")."""
    values = [row["samples_to_target"] for row in rows]
    reached = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    spread = max(reached) / min(reached) if reached and len(reached) == len(values) else None
    return {"n": len(values), "reached": len(reached), "max_over_min": spread}


def max_eval_step_fraction(curve: dict | None, start: float, target: float) -> float | None:
    """The largest move of the seed-mean curve between two neighbouring evaluations, up to where
    it first reaches the target, as a fraction of the way from start to target:
    max_i |mean_(i+1) - mean_i| / |target - start|. A metric that moves smoothly keeps it small
    (the testbed's rule: at most 1/5); None without a curve or a span."""
    if not curve or len(curve["mean"]) < 2 or target == start:
        return None
    means = curve["mean"]
    higher = target > start
    end = next(
        (i for i, v in enumerate(means) if (v >= target if higher else v <= target)),
        len(means) - 1,
    )
    steps = [abs(b - a) for a, b in zip(means[: end + 1], means[1 : end + 1])]
    return max(steps) / abs(target - start) if steps else None
