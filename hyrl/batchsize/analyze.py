"""Samples, throughput and time to a validation target, and curve alignment, from run directories.

The quantities (docs/batch-size.md, "The science it encodes"):

- S, samples to target: cumulative responses (`samples`) at which the validation metric first
  reaches the target, linearly interpolated between the two evaluations around the crossing.
- S_generated: the same with `samples_generated`, every response decoded. They differ under
  --dynamic-sampling, which drops groups of equal rewards and generates more (the update
  consumes S, the engines decode S_generated); without filtering they are equal.
- R, throughput: end-to-end responses decoded per second of the whole loop = final
  `samples_generated` (`samples` for a run that does not log it) / final `elapsed_s`.
- T, time to target: `elapsed_s` at the same crossing, interpolated the same way. T =
  S_generated / R when the throughput is steady, so relative to a reference T/T_ref is
  predicted by (S_generated/S_generated_ref) / (R/R_ref); both the measured and the predicted
  ratio are reported.
- Staleness (--async-rollout): the median of `rollout/staleness_mean`, policy versions between
  the weights that generated a batch and the trainer's; R is end-to-end either way.
- Alignment: at evenly spaced levels of the metric, from the first level *clearly* above the
  reference's starting value up to the target, compare the samples the run and the reference
  needed. "Clearly above" means start + 10% of (target - start) (`CLEAR_FRACTION`). Only levels
  both curves reach are compared. The run is aligned when every ratio run/reference lies within
  1 +/- tolerance; with no common level it is not aligned, and the reason says so. The reference
  is aligned with itself by definition.
- Critical batch: the largest responses per optimizer step among aligned runs, claimed only
  when some run reached the target. Fastest valid: the aligned run that reached the target in
  the least wall-clock time.

A metric is "higher is better" when the target lies at or above the reference's first evaluation
(accuracy, reward) and "lower is better" otherwise (a loss); "reaches a level" follows that
direction.

Reading runs is `hyrl.batchsize.runs`, curves and alignment `hyrl.batchsize.curves`; this module
measures each run and gives the verdicts. Only the run directory is read (config.json,
metrics.jsonl, optional summary.json, and sweep.json of a parent sweep directory), so this
module imports neither torch nor any training code.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from hyrl.batchsize.curves import (
    CLEAR_FRACTION,
    DEFAULT_LEVELS,
    alignment,
    alignment_detail,
    alignment_levels,
    generated_curve,
    metric_curve,
    samples_to_reach,
)
from hyrl.batchsize.over_seeds import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_CONFIDENCE,
    Settings,
    over_seeds,
)
from hyrl.batchsize.runs import AnalysisError, Run, collect_runs, finite_or_none, load_run
from hyrl.batchsize.seeds import group_name, run_seed, seed_groups, seed_references
from hyrl.batchsize.throughput_ratios import sweep_probes
from hyrl.config.target import TargetSyntaxError
from hyrl.config.target import parse_target as _parse_target
from hyrl.metrics.run_dir import number as _num

__all__ = [
    "AnalysisError",
    "Run",
    "alignment",
    "alignment_levels",
    "analyze",
    "collect_runs",
    "json_safe",
    "load_run",
    "metric_curve",
    "parse_target",
    "samples_to_reach",
    "stage_shares",
    "throughput",
]

DEFAULT_TOLERANCE = 0.2
BOOTSTRAP_RANGE = (100, 100_000)  # --bootstrap: fewer resamples make 5% quantiles coarse


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _ratio(a, b) -> float | None:
    if a is None or b is None or not _finite(a) or not _finite(b) or b == 0:
        return None
    return a / b


def json_safe(obj):
    """Recursively: non-finite floats -> None, tuples -> lists, paths -> str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


# --- per-run quantities ----------------------------------------------------------------------


def _final(run: Run) -> tuple[float | None, float | None, float | None]:
    """(samples, elapsed_s, step) of the last record holding both samples and elapsed_s."""
    for rec in reversed(run.records):
        s, e = _num(rec.get("samples")), _num(rec.get("elapsed_s"))
        if math.isfinite(s) and math.isfinite(e):
            return s, e, finite_or_none(rec.get("step"))
    return None, None, None


def throughput(run: Run) -> float | None:
    """End-to-end responses per second: final samples_generated (every response decoded,
    --dynamic-sampling's filtered ones too; samples for a run without them) / final
    elapsed_s."""
    s, e, _ = _final(run)
    for rec in reversed(run.records):
        g = _num(rec.get("samples_generated"))
        if math.isfinite(g) and math.isfinite(_num(rec.get("elapsed_s"))):
            s, e = g, _num(rec["elapsed_s"])
            break
    return s / e if s is not None and e else None


def staleness(run: Run) -> float | None:
    """--async-rollout: the median over records of rollout/staleness_mean (policy versions
    between the weights that sampled a batch and the trainer's); None for a synchronous run."""
    values = [_num(r.get("rollout/staleness_mean")) for r in run.records]
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else None


def stage_shares(run: Run) -> dict[str, float]:
    """Share of each stage: sum of perf/<stage>_s over records / the sum of perf/step_s (or the
    final elapsed_s when no step times are logged). `other` is what the stages leave over
    (idle, unaccounted). perf/setup_s (start-up), rates (*_per_s) and --async-rollout's
    perf/engine_idle_s and perf/worker_*_s (the generation worker's idle and busy time, which
    overlap the step) are not stages; its perf/trainer_idle_s (rank 0 waiting for a queued
    rollout) is one."""
    totals: dict[str, float] = {}
    step_total = 0.0
    for rec in run.records:
        for key, value in rec.items():
            if not (key.startswith("perf/") and key.endswith("_s")) or key.endswith("_per_s"):
                continue
            x = _num(value)
            if not math.isfinite(x):
                continue
            stage = key[len("perf/") : -len("_s")]
            if stage == "step":
                step_total += x
            elif stage not in ("setup", "engine_idle") and not stage.startswith("worker_"):
                totals[stage] = totals.get(stage, 0.0) + x
    denom = step_total if step_total > 0 else (_final(run)[1] or 0.0)
    if denom <= 0 or not totals:
        return {}
    shares = {k: v / denom for k, v in totals.items()}
    other = 1.0 - sum(shares.values())
    if other > 1e-6:
        shares["other"] = other
    return shares


def parse_target(text: str) -> tuple[str, float]:
    """'eval/accuracy=0.77' -> ('eval/accuracy', 0.77): `hyrl.config.target.parse_target`'s
    rules with any metric name (foreign run directories log their own)."""
    try:
        return _parse_target(text, prefixes=None)
    except TargetSyntaxError as err:
        raise AnalysisError(
            f"--target {text!r}: {err.problem}; expected METRIC=VALUE with a "
            "finite number, e.g. --target eval/accuracy=0.77"
        ) from None


def _metric_names(runs: list[Run]) -> list[str]:
    names = sorted({k for r in runs for rec in r.records for k in rec})
    evals = [k for k in names if k.startswith("eval/")]
    return evals or names


def analyze(
    paths,
    target: tuple[str, float],
    reference: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    n_levels: int = DEFAULT_LEVELS,
    n_boot: int = DEFAULT_BOOTSTRAP,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict:
    """Analyse runs against `target` = (metric, value). `paths`: run directories, sweep
    directories or `Run`s. The reference defaults to sweep.json's, else the run with the fewest
    responses per optimizer step. Returns a JSON-safe dict (see the module docstring); with
    more than one seed of some member, its "over_seeds" holds the seed-aware statistics and
    verdicts of `hyrl.batchsize.over_seeds` (`n_boot` resamples, `confidence`)."""
    metric, value = target
    value = _num(value)
    if not isinstance(metric, str) or not metric or not math.isfinite(value):
        raise AnalysisError(f"--target {target!r}: expected METRIC=VALUE with a finite number")
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise AnalysisError(
            f"--tolerance {tolerance!r}: must be a number > 0 (relative, e.g. 0.2 for 1 +/- 20%)"
        )
    if not isinstance(n_levels, int) or n_levels < 1:
        raise AnalysisError(f"n_levels {n_levels!r}: must be an integer >= 1")
    low, high = BOOTSTRAP_RANGE
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or not low <= n_boot <= high:
        raise AnalysisError(
            f"--bootstrap {n_boot!r}: must be an integer from {low} to {high} (resamples of "
            "the seeds)"
        )
    if not (
        isinstance(confidence, (int, float))
        and not isinstance(confidence, bool)
        and 0.5 < confidence < 1
    ):
        raise AnalysisError(
            f"--confidence {confidence!r}: must be a number above 0.5 and below 1 (e.g. 0.9)"
        )
    runs, sweep_reference, notes = collect_runs(paths)
    if not runs:
        raise AnalysisError("PATH: no run directories given")
    notes += [n for r in runs for n in r.notes]
    names = [r.name for r in runs]
    curves = {r.name: metric_curve(r, metric) for r in runs}
    if not any(c[3] for c in curves.values()):
        raise AnalysisError(
            f"--target {metric}={value:g}: no run has finite values of "
            f"{metric!r}; metrics present: {', '.join(_metric_names(runs)) or 'none'}"
        )

    if reference is not None:
        if reference not in names:
            raise AnalysisError(
                f"--reference {reference!r}: no run by that name; allowed: {', '.join(names)}"
            )
        ref_name = reference
    elif sweep_reference is not None:
        ref_name = sweep_reference
    else:
        with_b = [(r.responses_per_step, r.name) for r in runs if r.responses_per_step is not None]
        ref_name = min(with_b, key=lambda b_name: b_name[0])[1] if with_b else runs[0].name
    ref_curve = curves[ref_name]
    if not ref_curve[3]:
        raise AnalysisError(
            f"--reference {ref_name!r}: the reference has no finite values of "
            f"{metric!r}; choose another, allowed: "
            f"{', '.join(n for n in names if curves[n][3])}"
        )
    start_value = ref_curve[3][0]
    higher = value >= start_value
    if value == start_value:
        notes.append(f"the reference's first evaluation already equals the target {value:g}")
    levels = alignment_levels(value, start_value, n_levels)
    # every run is compared with the reference member of its own seed where the sweep has one
    # (run close to it in time: a change of the machine's load falls on both), else with the
    # reference
    seed_refs = seed_references(runs, ref_name)

    rows: list[dict[str, Any]] = []  # one per run: the report's JSON row
    for run in runs:
        pair = seed_refs.get(run.name, ref_name)
        samples, elapsed, steps, values = curves[run.name]
        S = samples_to_reach(samples, values, value, higher)
        generated = generated_curve(run, metric)
        S_generated = (
            samples_to_reach(generated[0], generated[1], value, higher)
            if generated is not None
            else S  # a run without samples_generated decoded what it consumed
        )
        T = samples_to_reach(elapsed, values, value, higher) if S is not None else None
        K = samples_to_reach(steps, values, value, higher) if S is not None else None
        final_samples, final_elapsed, final_step = _final(run)
        best = (max(values) if higher else min(values)) if values else None
        if run.name == pair:
            aligned = True
            ratios = [
                (lv, 1.0)
                for lv in levels
                if (samples_to_reach(samples, values, lv, higher) or 0) > 0
            ]
            reason = "the reference (aligned with itself by definition)"
            if run.name != ref_name:
                reason = f"the reference of seed {run_seed(run)} (aligned with itself)"
        else:
            aligned, ratios, reason = alignment_detail(
                curves[run.name], curves[pair], value, start_value, tolerance, n_levels, higher
            )
            if pair != ref_name:
                reason += f" (against {pair}, the same seed's reference)"
        rows.append(
            {
                "name": run.name,
                "path": str(run.path),
                "is_reference": run.name == ref_name,
                "seed": run_seed(run),
                "group": group_name(run),
                "paired_with": pair,
                "prompts_per_step": run.prompts_per_step,
                "n_samples_per_prompt": finite_or_none(run.config.get("n_samples_per_prompt")),
                "responses_per_step": run.responses_per_step,
                "responses_per_step_source": run.responses_per_step_source,
                "lr": run.lr,
                "reached": S is not None,
                "samples_to_target": S,
                "samples_generated_to_target": S_generated,
                "time_to_target_s": T,
                "steps_to_target": K,
                "throughput_responses_per_s": throughput(run),
                "staleness_median": staleness(run),
                "final_samples": final_samples,
                "final_elapsed_s": final_elapsed,
                "final_step": final_step,
                "n_evals": len(values),
                "first_value": values[0] if values else None,
                "best_value": best,
                "aligned": aligned,
                "alignment_reason": reason,
                "alignment_ratios": [{"level": lv, "ratio": r} for lv, r in ratios],
                "stage_shares": stage_shares(run),
            }
        )
    rows.sort(key=lambda r: (r["responses_per_step"] is None, r["responses_per_step"] or 0))
    by_name = {r["name"]: r for r in rows}
    for row in rows:
        ref_row = by_name[row["paired_with"]]
        row["samples_ratio"] = _ratio(row["samples_to_target"], ref_row["samples_to_target"])
        row["throughput_ratio"] = _ratio(
            row["throughput_responses_per_s"], ref_row["throughput_responses_per_s"]
        )
        row["time_ratio"] = _ratio(row["time_to_target_s"], ref_row["time_to_target_s"])
        row["samples_generated_ratio"] = _ratio(
            row["samples_generated_to_target"], ref_row["samples_generated_to_target"]
        )
        # T = S / R in one unit: responses decoded (R counts them; equal to S without filtering)
        row["predicted_time_ratio"] = _ratio(
            row["samples_generated_ratio"], row["throughput_ratio"]
        )

    reached = [r for r in rows if r["reached"] and r["time_to_target_s"] is not None]
    aligned_rows = [r for r in rows if r["aligned"] and r["responses_per_step"] is not None]
    # with no run at the target, alignment on the early levels claims no critical batch
    critical = (
        max(aligned_rows, key=lambda r: r["responses_per_step"], default=None) if reached else None
    )
    if not reached:
        notes.append(
            "no run reached the target: no critical batch and no fastest batch are claimed "
            "(run longer, or analyze with a target the runs reach)"
        )
    valid = [r for r in rows if r["aligned"] and r["reached"] and r["time_to_target_s"] is not None]
    fastest = min(valid, key=lambda r: r["time_to_target_s"], default=None)
    fastest_reached = min(reached, key=lambda r: r["time_to_target_s"], default=None)
    groups = seed_groups(rows, by_name[ref_name]["group"])
    unreached = [r["name"] for r in rows if not r["reached"]]
    for r in rows:
        if r["aligned"] and not r["reached"] and not r["is_reference"]:
            notes.append(
                f"{r['name']} is aligned on the levels it reached but never reached "
                f"the target (best {r['best_value']})"
            )
    seeded = over_seeds(
        runs,
        rows,
        ref_name,
        Settings(
            metric=metric,
            target=value,
            start_value=start_value,
            higher_is_better=higher,
            levels=tuple(levels),
            tolerance=tolerance,
            n_boot=n_boot,
            confidence=confidence,
        ),
        sweep_probes(runs, notes),
    )
    return json_safe(
        {
            "reference": ref_name,
            "target": {"metric": metric, "value": value},
            "tolerance": tolerance,
            "higher_is_better": higher,
            "start_value": start_value,
            "clear_fraction": CLEAR_FRACTION,
            "levels": levels,
            "fastest_valid": fastest["name"] if fastest else None,
            "fastest_valid_time_ratio": fastest["time_ratio"] if fastest else None,
            # the fastest to reach the target whether its curve is aligned or not
            "fastest_reached": fastest_reached["name"] if fastest_reached else None,
            "fastest_reached_aligned": fastest_reached["aligned"] if fastest_reached else None,
            **groups,
            "critical_batch_responses": critical["responses_per_step"] if critical else None,
            "critical_batch_run": critical["name"] if critical else None,
            "unreached": unreached,
            "runs": rows,
            **({"over_seeds": seeded} if seeded is not None else {}),
            "notes": notes,
        }
    )
