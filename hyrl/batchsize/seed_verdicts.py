"""The verdicts over seeds, from the bootstrapped statistics of `hyrl.batchsize.over_seeds`
(whose module docstring defines them): intervals of resampled quantities, `p_needs_more`, the
fastest member or the members the seeds cannot separate, the fixed-lr controls against their
lr rule, and the sentences that say them.

Pure: numpy and plain dicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _pct(p: float) -> str:
    return f"{p * 100:.0f}%"


def _batch(b) -> str:
    if b is None:
        return "?"
    return str(int(b)) if float(b).is_integer() else f"{b:g}"


def _ratio_text(x: float) -> str:
    if math.isnan(x):
        return "undefined"
    return "never" if math.isinf(x) else f"{x:.2f}"


def p_needs_more(
    samples_a: Sequence[float] | np.ndarray, samples_b: Sequence[float] | np.ndarray
) -> float:
    """Share of paired resamples in which a needs more samples than b: S_a > S_b, a censored
    (inf) S_a more than a finite S_b, inf against inf not more."""
    a, b = np.asarray(samples_a, dtype=float), np.asarray(samples_b, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(
            f"p_needs_more: two equal, non-empty shapes needed, got {a.shape}, {b.shape}"
        )
    return float(np.mean(a > b))


def interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central `confidence` interval of the defined (non-NaN) values: their (1 - c) / 2
    and (1 + c) / 2 quantiles (inverted CDF: actual resample values, inf kept); NaN, NaN when
    none is defined."""
    ranked = values[~np.isnan(values)]
    if ranked.size == 0:
        return math.nan, math.nan
    low, high = np.quantile(
        ranked, [(1 - confidence) / 2, (1 + confidence) / 2], method="inverted_cdf"
    )
    return float(low), float(high)


def estimate(point: float, boot: np.ndarray, confidence: float) -> dict:
    """{"value", "never" (the point is censored: +inf), "low", "high" (the interval; inf:
    unbounded), "share_never" (resamples censored), "share_undefined" (resamples that cannot
    rank)}."""
    low, high = interval(boot, confidence)
    return {
        "value": float(point),
        "never": bool(point == math.inf),
        "low": low,
        "high": high,
        "share_never": float(np.mean(np.isposinf(boot))) if boot.size else 0.0,
        "share_undefined": float(np.mean(np.isnan(boot))) if boot.size else 0.0,
    }


def fastest_shares(keys: dict[str, np.ndarray]) -> dict[str, float]:
    """{member: share of resamples in which it has the least key}: keys (one array per
    member, same length) are S-bar / R ratio, NaN and inf meaning "cannot be fastest"; members
    tied at the least key share the resample; a resample where every key is inf names none."""
    names = list(keys)
    if not names:
        return {}
    matrix = np.vstack([keys[n] for n in names])
    matrix = np.where(np.isnan(matrix), np.inf, matrix)
    least = matrix.min(axis=0)
    is_least = (matrix == least[None, :]) & np.isfinite(least)[None, :]
    ties = is_least.sum(axis=0)
    share = np.where(is_least, 1.0 / np.maximum(ties, 1)[None, :], 0.0)
    return {n: float(s) for n, s in zip(names, share.mean(axis=1))}


def fastest_and_pairwise(
    members: list[dict],
    sbar_over_r: dict[str, np.ndarray],
    sbar_boot: dict[str, np.ndarray],
    confidence: float,
    list_share: float,
) -> dict:
    """{"fastest", "fastest_p", "fastest_sentence", "candidates", "pairwise"}; sets each
    member's "p_fastest" (None for a rejected member, not a candidate)."""
    candidates = [m for m in members if not m["validity"].startswith("rejected")]
    shares = fastest_shares({m["member"]: sbar_over_r[m["member"]] for m in candidates})
    by_name = {m["member"]: m for m in members}
    for name, p in shares.items():
        by_name[name]["p_fastest"] = p
    ranked = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))
    fastest: str | None = None
    fastest_p: float | None = None
    if ranked and ranked[0][1] >= confidence:
        fastest, fastest_p = ranked[0]
        member = by_name[fastest]
        what = (
            "the fastest valid member"
            if member["validity"] == "valid"
            else f"the fastest member not rejected (validity: {member['validity']})"
        )
        sentence = (
            f"B = {_batch(member['responses_per_step'])} ({fastest}) is {what} in "
            f"{_pct(fastest_p)} of seed bootstraps"
        )
    elif not ranked or ranked[0][1] == 0:
        sentence = (
            "no member's seed-mean curve reaches the target in any bootstrap: no fastest member"
        )
    else:
        listed = [f"{n} ({_pct(p)})" for n, p in ranked if p >= list_share]
        sentence = "the seeds cannot separate: " + ", ".join(listed)

    pairwise = []
    for fixed in (m for m in members if m["fixed_lr"]):
        partners = [
            m
            for m in members
            if not m["fixed_lr"]
            and m["responses_per_step"] is not None
            and m["responses_per_step"] == fixed["responses_per_step"]
        ]
        if not partners:
            pairwise.append(
                {
                    "member": fixed["member"],
                    "against": None,
                    "sentence": f"{fixed['member']}: no member with an lr rule at "
                    f"B = {_batch(fixed['responses_per_step'])} to compare with",
                }
            )
        for other in partners:
            a, b = sbar_boot[fixed["member"]], sbar_boot[other["member"]]
            p = p_needs_more(a, b)
            point_a = fixed["samples_to_target"]["value"]
            point_b = other["samples_to_target"]["value"]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = estimate(float(np.float64(point_a) / point_b), a / b, confidence)
            holds = p >= confidence
            pairwise.append(
                {
                    "member": fixed["member"],
                    "against": other["member"],
                    "p_needs_more": p,
                    "samples_ratio": ratio,
                    "holds": holds,
                    "sentence": (
                        f"{fixed['member']} needs more samples than {other['member']} in "
                        f"{_pct(p)} of bootstraps (ratio {_ratio_text(ratio['value'])}x, "
                        f"{_pct(confidence)} interval {_ratio_text(ratio['low'])}-"
                        f"{_ratio_text(ratio['high'])}): " + ("holds" if holds else "cannot tell")
                    ),
                }
            )
    return {
        "fastest": fastest,
        "fastest_p": fastest_p,
        "fastest_sentence": sentence,
        "candidates": [{"member": n, "p_fastest": p} for n, p in ranked if p >= list_share],
        "pairwise": pairwise,
    }


def tau_sentence(tau: float, source: str, band: float, tolerance: float, confidence: float) -> str:
    """The material margin and where it came from, in words."""
    q = f"{(1 + confidence) / 2 * 100:.0f}th percentile"
    if math.isinf(tau):
        return (
            "material margin tau: unbounded, the reference's seed-mean misses the target in "
            f"more than {_pct((1 - confidence) / 2)} of bootstraps, so no member is rejected or "
            "called valid"
        )
    if source == "tolerance":
        why = (
            f"the reference's own seed band, the {q} of its bootstrapped samples to target "
            f"over its samples to target - 1, is {band:.2f}"
            if not math.isnan(band)
            else "the reference's seed-mean never reaches the target, so it has no band"
        )
        return f"material margin tau = {tau:.2f}: the --tolerance floor ({why})"
    return (
        f"material margin tau = {tau:.2f}: the reference's own seed band, the {q} of its "
        "bootstrapped samples to target over its samples to target - 1, above the --tolerance "
        f"floor {tolerance:g}"
    )


def verdict_lines(result: dict) -> list[str]:
    """The verdict sentences of an over_seeds result: fastest, pairwise, tau, load-affected
    seeds, unpaired R ratios."""
    lines = [result["fastest_sentence"], *(p["sentence"] for p in result["pairwise"])]
    lines.append(result["tau_sentence"])
    testbed = result.get("testbed")
    if testbed:
        spread = testbed["reference_seed_spread"]
        step = testbed["reference_max_eval_step_fraction"]
        lines.append(
            "the reference's own seeds: samples to target "
            + (
                f"{spread['max_over_min']:.2f}x apart (max over min of {spread['n']} runs)"
                if spread["max_over_min"] is not None
                else f"reached by {spread['reached']} of {spread['n']} runs (spread unbounded)"
            )
            + (
                f"; its seed-mean metric moves at most {step:.2f} of the way from start to "
                "target between two evaluations"
                if step is not None
                else ""
            )
        )
    probed = [
        m for m in result["members"] if m["throughput_ratio"].get("source") == "throughput probes"
    ]
    if probed:
        r = probed[0]["throughput_ratio"]
        lines.append(
            f"R ratios of {', '.join(m['member'] for m in probed)} from the sweep's throughput "
            f"probes: {len(r['rounds'])} rounds of about {r.get('probe_samples')} responses "
            "each, every member alone, the reference first in odd rounds and last in even ones "
            "(the runs' own ratios, measured side by side, are not used)"
        )
    for m in result["members"]:
        r = m["throughput_ratio"]
        if r.get("source") == "throughput probes":
            continue
        for s in r["load_affected"]:
            lines.append(
                f"{m['member']} seed {s['seed']} ({s['run']}): load-affected? (R ratio "
                f"{s['ratio']:.2f}): left out of its R and T ratios, its curve kept"
            )
        if r["unpaired_seeds"] and not m["is_reference"]:
            lines.append(
                f"{m['member']}: R ratio unpaired for seed(s) "
                f"{', '.join(str(s) for s in r['unpaired_seeds'])} (no reference run of that "
                "seed; compared with the reference run)"
            )
    return lines
