"""`hyrl tune --verify K`, step 5: the recommendation, the reference and the K candidates nearest
to the recommendation run as a `hyrl sweep` with equal sample budgets (`DIR/verify`), analysed
by `hyrl analyze`, and their predicted ratios set against the measured ones."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hyrl.batchsize.analyze import AnalysisError, analyze, parse_target
from hyrl.batchsize.tune.members import member_dirs, run_sweep_step
from hyrl.batchsize.tune.plan import TuneError, TunePlan


def neighbours(mults: Sequence[int], rec: int, k: int) -> list[int]:
    """The k candidates nearest to the recommendation in the list (not it, not 1), nearer
    first, the smaller first on a tie."""
    ordered = sorted(mults)
    i = ordered.index(rec)
    others = [m for m in ordered if m not in (rec, 1)]
    return sorted(others, key=lambda m: (abs(ordered.index(m) - i), m))[:k]


def verify_rows(report: dict, analysis: dict, mults_by_name: dict[str, int]) -> list[dict]:
    """Predicted against measured ratios, one row per verify member."""
    by_mult = {c["mult"]: c for c in report["candidates"]}
    rows = []
    for r in analysis["runs"]:
        m = mults_by_name.get(Path(r["path"]).name)
        if m is None or m not in by_mult:
            continue
        c = by_mult[m]
        measured = r.get("time_ratio")
        rows.append(
            {
                "name": r["name"],
                "mult": m,
                "responses_per_step": c["responses_per_step"],
                "predicted_samples_ratio": c["samples_ratio"],
                "measured_samples_ratio": r.get("samples_ratio"),
                "predicted_throughput_ratio": c["throughput_ratio"],
                "measured_throughput_ratio": r.get("throughput_ratio"),
                "predicted_time_ratio": c["time_ratio"],
                "predicted_time_ratio_range": sorted([c["time_ratio_low"], c["time_ratio_high"]]),
                "measured_time_ratio": measured,
                "time_ratio_error": (
                    c["time_ratio"] / measured - 1 if measured else None
                ),  # relative: predicted / measured - 1
                "reached": r.get("reached"),
            }
        )
    return sorted(rows, key=lambda r: r["mult"])


def run_verify(plan: TunePlan, report: dict, console, progress: bool) -> dict:
    """The verify sweep, analysed against the recipe's --target: report.json's "verify"."""
    rec = report["recommendation"]["mult"]
    mults = sorted({1, rec, *neighbours(plan.mults, rec, plan.verify)})
    out = run_sweep_step(
        plan, "verify", mults, plan.verify_samples, plan.extra_args, console, progress
    )
    try:
        analysis = analyze([out], parse_target(str(plan.config["target"])))
    except AnalysisError as err:
        raise TuneError(f"verify: {err}") from None
    names = {d.name: m for m, d in member_dirs(out).items()}
    return {
        "sweep_dir": str(out),
        "mults": mults,
        "verify_samples": plan.verify_samples,
        "target": plan.config["target"],
        "rows": verify_rows(report, analysis, names),
    }
