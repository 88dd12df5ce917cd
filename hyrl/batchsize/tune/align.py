"""`hyrl tune`'s step 4, the alignment check: which members, their budgets and the verdicts
(pure functions), and the check's runs (`run_align_check`, each member through
`hyrl.batchsize.tune.members`, its arguments from `hyrl.batchsize.tune.plan`).

The samples model assumes every batch trains at its best lr; under a scaling rule a large batch
can be pushed past the stable lr, and then its curve against samples departs from the
reference's however small its noise scale. So after predicting, tune measures:

1. The reference (x1) from the recipe's start (its seed) until its metric is `fraction` of the
   way from its starting value (pass 1's first evaluation) to the target:
       level = start + fraction x (target - start)     (fraction 0.5: halfway)
   (`--stop-at-target` at that level); S_half = the samples it took.
2. The recommendation and its next larger candidate (`members`; x2 when the recommendation is
   x1), each from the same start and seed, for at most SLACK x S_half responses, also stopped
   at the level.
3. `hyrl analyze` of the three against the level, then a one-sided verdict (`verdicts`): a
   candidate is rejected when it did not reach the level, or when it needs materially *more*
   samples than the reference: its per-level samples ratios r (run / reference, the analysis's
   `alignment_ratios`) with the takeoff weighted down (`weighted_samples_ratio`)
       w = (level_i - start) / (level - start),   ratio = exp(sum w log r / sum w)
   above 1 + tolerance (the analysis's, default 0.2), or its ratio at the level alone above
   1 + 2 x tolerance (a curve that ends far behind). A candidate that needs fewer samples is
   never rejected: learning faster per sample costs no time. A rejected candidate takes every
   larger one with it (a larger batch under the same rule departs further). The
   recommendation is then the least predicted time among the candidates left: predicted,
   then measured. The analysis's two-sided `aligned` flag (every ratio within 1 +/- tolerance)
   is kept in each row for reference, but no longer decides.

Cost: the reference to halfway, and two candidates to at most SLACK x that: about a third of one
sweep member's budget each on a task whose target takes the whole budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from hyrl.batchsize.analyze import AnalysisError, analyze, parse_target
from hyrl.batchsize.runs import finite_or_none, load_run
from hyrl.batchsize.tune.members import run_member
from hyrl.batchsize.tune.plan import TuneError, TunePlan, align_args, align_plan

SLACK = 1.5  # a candidate may use this many times the reference's samples to the level
_EPS = 1e-9  # slack on the thresholds against float round-off


class AlignCheckError(ValueError):
    """The check cannot be made; the message says why and what to change."""


def start_value(records: Sequence[Mapping], metric: str) -> float:
    """The metric's first finite value in a run's records (its evaluation before training)."""
    for rec in records:
        v = finite_or_none(rec.get(metric))
        if v is not None:
            return v
    raise AlignCheckError(
        f"pass 1 logged no {metric}: its evaluation before training is the check's start"
    )


def level(start: float, target: float, fraction: float) -> float:
    """start + fraction x (target - start); refused for a target at or below the start (the
    trainer's --target and --stop-at-target reach upwards only)."""
    if not target > start:
        raise AlignCheckError(
            f"the target {target:g} is not above pass 1's starting value {start:g}; the check "
            "stops runs at a rising level"
        )
    return start + fraction * (target - start)


def members(mults: Sequence[int], recommended: int) -> list[int]:
    """The candidates to measure: the recommendation (unless x1) and the next larger one."""
    ordered = sorted(mults)
    larger = [m for m in ordered if m > recommended]
    picked = [recommended] if recommended != 1 else []
    return picked + larger[:1]


def budget_steps(samples_to_level: float, responses_per_rollout: int) -> int:
    """Rollout steps of a candidate: SLACK x the reference's samples to the level."""
    return max(1, math.ceil(SLACK * samples_to_level / responses_per_rollout))


def _weighted_terms(
    ratios: Sequence[Mapping[str, float]], start: float, level: float
) -> list[tuple[float, float]]:
    """(w, r) of each usable level: w = (level_i - start) / (level - start) > 0 and r a finite,
    positive ratio."""
    span = level - start
    if span == 0 or not math.isfinite(span):
        raise ValueError(f"level {level!r} must differ from start {start!r}, both finite")
    terms = []
    for item in ratios:
        lv, r = finite_or_none(item.get("level")), finite_or_none(item.get("ratio"))
        if lv is None or r is None or r <= 0:
            continue
        w = (lv - start) / span
        if w > 0:
            terms.append((w, r))
    return terms


def weighted_samples_ratio(
    ratios: Sequence[Mapping[str, float]], start: float, level: float
) -> float | None:
    """A curve's samples ratio (run / reference) with the takeoff weighted down: over the
    levels level_i both curves reached, each with its ratio r_i (`ratios`: an analysis row's
    `alignment_ratios`, each {"level", "ratio"}),

        w_i = (level_i - start) / (level - start)
        ratio = exp( sum_i w_i log r_i / sum_i w_i )

    a weighted geometric mean: a level near the start (the takeoff, where a few evaluations'
    noise moves the ratio most) counts little, the check's level counts 1. It works for a
    falling metric too (both differences negative). Levels at or behind the start (w <= 0) and
    ratios that are not finite and positive are left out; None when no level is left.
    ValueError when level equals start."""
    terms = _weighted_terms(ratios, start, level)
    if not terms:
        return None
    return math.exp(sum(w * math.log(r) for w, r in terms) / sum(w for w, _ in terms))


def verdict(
    row: Mapping, start: float, at: float, tolerance: float
) -> tuple[bool, str, float | None]:
    """(kept, reason, weighted ratio) of one candidate's analysis row against the reference at
    the check's level `at` (start: the reference's starting value). Rejected when it did not
    reach the level, when `weighted_samples_ratio` > 1 + tolerance, or when its samples ratio
    at the level alone > 1 + 2 x tolerance; a ratio below 1 never rejects."""
    ratios = row.get("alignment_ratios") or []
    curve = weighted_samples_ratio(ratios, start, at)
    if not row["reached"]:
        return (
            False,
            f"did not reach the level within {SLACK:g}x the reference's samples (best "
            f"{row['best_value']})",
            curve,
        )
    if curve is None:
        return (
            False,
            f"no level in common with the reference to compare: {row.get('alignment_reason')}",
            None,
        )
    n = len(_weighted_terms(ratios, start, at))
    at_level = finite_or_none(row.get("samples_ratio"))
    if curve > 1 + tolerance + _EPS:
        return (
            False,
            f"needs {curve:.2f}x the reference's samples (weighted; more than 1 + {tolerance:g})",
            curve,
        )
    if at_level is not None and at_level > 1 + 2 * tolerance + _EPS:
        return (
            False,
            f"needs {at_level:.2f}x the reference's samples at the level (more than "
            f"1 + 2 x {tolerance:g}; {curve:.2f}x weighted over {n} levels)",
            curve,
        )
    return (
        True,
        f"needs {curve:.2f}x the reference's samples (weighted over {n} levels; fewer is "
        "never rejected)",
        curve,
    )


def verdicts(analysis: Mapping, names: Mapping[str, int]) -> tuple[list[dict], int | None]:
    """(one row per candidate: mult, name, reached, aligned (the analysis's two-sided flag,
    informative only), samples and time ratios, the weighted samples ratio, verdict, reason),
    and the smallest rejected multiplier (every candidate from it up is rejected; None when
    all were kept). The verdict is `verdict`'s, at the analysis's target (the check's level),
    start value and tolerance."""
    start = float(analysis["start_value"])
    at = float(analysis["target"]["value"])
    tolerance = float(analysis["tolerance"])
    rows = []
    for r in analysis["runs"]:
        m = names.get(r["name"])
        if m is None or m == 1:
            continue
        ok, why, curve = verdict(r, start, at, tolerance)
        rows.append(
            {
                "mult": m,
                "name": r["name"],
                "reached": r["reached"],
                "aligned": r["aligned"],
                "samples_ratio": r["samples_ratio"],
                "weighted_samples_ratio": curve,
                "time_ratio": r["time_ratio"],
                "verdict": "kept" if ok else "rejected",
                "reason": why,
            }
        )
    rows.sort(key=lambda row: row["mult"])
    failing = [row["mult"] for row in rows if row["verdict"] == "rejected"]
    return rows, min(failing, default=None)


def run_align_check(plan: TunePlan, report: dict, pass1: Path, console) -> dict:
    """The check's runs: the reference to the level, then the recommendation and its larger
    neighbour, analysed against the reference at the level and judged one-sided
    (`verdicts`)."""
    metric, target = parse_target(str(plan.config["target"]))
    try:
        start = start_value(load_run(pass1).records, metric)
        at = level(start, target, plan.align_fraction)
    except AlignCheckError as err:
        raise TuneError(f"align check: {err}; allowed: --align-check off") from None
    out = plan.out / "align"
    out.mkdir(parents=True, exist_ok=True)
    rec = int(report["recommendation"]["mult"])
    checked = members(plan.mults, rec)
    planned = {m["mult"]: m for m in align_plan(plan, [1, *checked])}
    args = align_args(plan, at)
    ref = planned[1]
    ref_dir = run_member(
        plan, console, out, ref, args, f"align check: {ref['name']} to {metric} = {at:.4g}",
        "align check:",
    )  # fmt: skip
    reached = load_run(ref_dir).summary or {}
    s_half = reached.get("samples_to_target")
    if not reached.get("reached") or not s_half:
        raise TuneError(
            f"align check: the reference {ref['name']} did not reach {metric} = {at:.4g} "
            f"({plan.align_fraction:g} of the way from {start:.4g} to {target:g}) within the "
            f"recipe's --num-steps; see {ref_dir}; allowed: a larger `-- --num-steps`, a "
            "smaller --align-fraction, or --align-check off"
        )
    dirs = {1: ref_dir}
    for m in checked:
        member = dict(
            planned[m], num_steps=budget_steps(s_half, planned[m]["responses_per_rollout"])
        )
        dirs[m] = run_member(
            plan, console, out, member, args,
            f"align check: {member['name']} (at most {member['num_steps']} steps)", "align check:",
        )  # fmt: skip
    try:
        analysis = analyze(list(dirs.values()), (metric, at), reference=ref_dir.name)
    except AnalysisError as err:
        raise TuneError(f"align check: {err}") from None
    try:
        rows, rejected_from = verdicts(analysis, {d.name: m for m, d in dirs.items()})
    except ValueError as err:  # the reference's first evaluation already at the level
        raise TuneError(f"align check: {err}; allowed: --align-check off") from None
    return {
        "dir": str(out),
        "metric": metric,
        "start": start,
        "level": at,
        "fraction": plan.align_fraction,
        "reference_samples_to_level": s_half,
        "tolerance": analysis["tolerance"],
        "rows": rows,
        "rejected_from": rejected_from,
    }
