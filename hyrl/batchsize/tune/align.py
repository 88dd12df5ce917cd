"""`hyrl tune`'s alignment check (pure: which members, their budgets and the verdicts; the runs
are `hyrl.batchsize.tune.run.run_align_check`).

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
3. `hyrl analyze` of the three against the level: a candidate is kept when it reached the level
   and its curve is aligned with the reference's (the analysis's tolerance); otherwise it is
   rejected with the analysis's reason, and so is every larger candidate (a larger batch under
   the same rule departs further). The recommendation is then the least predicted time among
   the candidates left: predicted, then measured.

Cost: the reference to halfway, and two candidates to at most SLACK x that: about a third of one
sweep member's budget each on a task whose target takes the whole budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from hyrl.batchsize.runs import finite_or_none

SLACK = 1.5  # a candidate may use this many times the reference's samples to the level


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


def verdicts(analysis: Mapping, names: Mapping[str, int]) -> tuple[list[dict], int | None]:
    """(one row per candidate: mult, name, reached, aligned, samples and time ratios, verdict,
    reason), and the smallest rejected multiplier (every candidate from it up is rejected;
    None when both were kept)."""
    rows = []
    for r in analysis["runs"]:
        m = names.get(r["name"])
        if m is None or m == 1:
            continue
        ok = bool(r["reached"]) and bool(r["aligned"])
        if not r["reached"]:
            why = (
                f"did not reach the level within {SLACK:g}x the reference's samples (best "
                f"{r['best_value']})"
            )
        elif not r["aligned"]:
            why = f"its curve departs from the reference's: {r['alignment_reason']}"
        else:
            why = "aligned and reached the level"
        rows.append(
            {
                "mult": m,
                "name": r["name"],
                "reached": r["reached"],
                "aligned": r["aligned"],
                "samples_ratio": r["samples_ratio"],
                "time_ratio": r["time_ratio"],
                "verdict": "kept" if ok else "rejected",
                "reason": why,
            }
        )
    rows.sort(key=lambda row: row["mult"])
    failing = [row["mult"] for row in rows if row["verdict"] == "rejected"]
    return rows, min(failing, default=None)
