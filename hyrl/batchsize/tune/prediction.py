"""`hyrl tune`'s step 3: the model (`hyrl.batchsize.tune.model`) applied to what was measured,
pass 1's run (the noise scale, each stage's cost at the reference batch), the decode profile and
the update probes' rounds, as report.json's prediction (without timings and verification)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from hyrl.batchsize.analyze import json_safe
from hyrl.batchsize.runs import load_run
from hyrl.batchsize.tune.model import (
    LATER_FRACTION,
    NoiseEstimate,
    StepCosts,
    TuneModelError,
    decode_rates,
    noise_estimate,
    predict,
    recommend,
    seconds_per_token,
    step_costs,
)
from hyrl.batchsize.tune.plan import TuneError, TunePlan


def _costs(run_dir: Path, what: str, later_fraction: float) -> tuple[StepCosts, list, dict]:
    run = load_run(run_dir)
    N = run.config.get("responses_per_rollout") or (
        run.config["rollout_batch_size"] * run.config["n_samples_per_prompt"]
    )
    try:
        return step_costs(run.records, int(N), later_fraction), run.records, run.config
    except TuneModelError as err:
        raise TuneError(f"{what} {run_dir}: {err}") from None


def predict_report(
    plan: TunePlan,
    pass1: Path,
    profile: dict | None,
    probes: Mapping[int, Path | Sequence[Path]],
    rejected_from: int | None = None,
) -> dict:
    """Step 3 as a JSON-safe dict (report.json without timings and verification). `probes`:
    each multiplier's probe runs, one per round, x1 included (else every probe is taken
    relative to pass 1, a single round); `rejected_from`: the alignment check rejected this
    candidate and every larger one, so the recommendation is chosen among the others."""
    ref_costs, records, config = _costs(pass1, "pass 1", LATER_FRACTION)
    noise = noise_estimate(records, "actor/noise_scale")
    if noise is None:
        raise TuneError(
            f"pass 1 {pass1}: no finite actor/noise_scale in metrics.jsonl (a step whose "
            "rewards are all equal has no gradient to measure); allowed: a larger "
            f"--budget-samples than {plan.budget_samples}, with a new --out"
        )
    # a probe is short: every step after the first counts
    runs = {m: [d] if isinstance(d, Path) else list(d) for m, d in probes.items()}
    probe_costs = {m: [_costs(d, "probe", 1.0)[0] for d in ds] for m, ds in runs.items()}
    rounds = probe_rounds(seconds_per_token(ref_costs), probe_costs)
    try:
        rates = decode_rates(profile) if profile is not None else None

        def predicted(per_token: dict) -> list:
            return predict(
                plan.mults,
                plan.base["B0"],
                plan.base["lr"],
                plan.rule,
                ref_costs,
                per_token,
                rates,
                int(plan.config["rollout_concurrency"]),
                noise,
                overlapped=_overlapped(plan.config),
            )

        per_token = per_token_over_rounds(seconds_per_token(ref_costs), rounds)
        candidates = predicted(per_token)
        by_round = [predicted(r) for r in rounds]
    except TuneModelError as err:
        raise TuneError(f"model: {err}") from None
    for i, cand in enumerate(candidates):  # R's spread over the rounds, and T's from it
        ratios = [r[i].throughput_ratio for r in by_round]
        cand.throughput_ratio_range = [min(ratios), max(ratios)]
        cand.time_ratio_range = [cand.samples_ratio / max(ratios), cand.samples_ratio / min(ratios)]
    critic = None
    critic_noise = noise_estimate(records, "critic/noise_scale")
    if config.get("critic_global_batch_size") and critic_noise is not None:
        critic = {
            "noise": critic_noise,
            "B0": int(config["critic_global_batch_size"]),
            "lr0": float(config["critic_lr"]),
            "rule": plan.rule,
            "unit": int(config.get("critic_micro_batch_size") or 1)
            * int(config.get("data_parallel_size") or 1),
        }
    kept = [c for c in candidates if rejected_from is None or c.mult < rejected_from]
    rec = recommend(kept, plan.base["P0"], critic)
    best = next(c for c in kept if c.mult == rec.mult)
    rec.within_throughput_spread = [
        c.mult
        for c in kept
        if c is not best and overlaps(c.time_ratio_range, best.time_ratio_range)
    ]
    return json_safe(
        {
            "recipe": str(plan.recipe),
            "extra_args": plan.extra_args,
            "lr_scaling": plan.rule,
            "batch_mults": plan.mults,
            "budget_samples": plan.budget_samples,
            "probe_steps": plan.probe_steps,
            "base": plan.base,
            "rollout_concurrency": plan.config["rollout_concurrency"],
            "pass1_run": str(pass1),
            "noise": _noise_dict(noise),
            "critic_noise": _noise_dict(critic_noise) if critic_noise else None,
            "reference_costs": asdict(ref_costs),
            "probe_rounds": len(rounds),
            "probe_costs": {str(m): [asdict(c) for c in cs] for m, cs in probe_costs.items()},
            "s_per_token": {str(m): v for m, v in sorted(per_token.items())},
            "decode_responses_per_s": (
                {str(c): r for c, r in sorted(rates.items())} if rates is not None else None
            ),
            "overlapped": _overlapped(plan.config),
            "candidates": [asdict(c) for c in candidates],
            "recommendation": rec.as_dict(),
        }
    )


def probe_rounds(ref: dict[str, float], costs: Mapping[int, Sequence[StepCosts]]) -> list[dict]:
    """Per round, every multiplier's seconds per response token by stage, x1 the round's own x1
    probe; without x1 probes one round whose x1 is pass 1 (`ref`)."""
    n = len(costs.get(1, []))
    if not n:
        return [{1: ref, **{m: seconds_per_token(cs[0]) for m, cs in costs.items()}}]
    short = [m for m, cs in costs.items() if len(cs) != n]
    if short:
        raise TuneError(f"pass 2: candidate x{short[0]} has not one probe per round ({n})")
    return [{m: seconds_per_token(cs[r]) for m, cs in costs.items()} for r in range(n)]


def per_token_over_rounds(ref: dict[str, float], rounds: Sequence[dict]) -> dict[int, dict]:
    """Every multiplier's seconds per token, x1 pass 1's own (`ref`), the others pass 1's times
    the median over the rounds of u_m / u_1 of that round (tune.model, step 3, takes only
    u_m / u_1 from the probes)."""
    out: dict[int, dict] = {1: dict(ref)}
    for m in sorted(rounds[0]):
        if m == 1:
            continue
        out[m] = {}
        for stage, u in ref.items():
            ratios = [
                r[m][stage] / r[1][stage] for r in rounds if r[1].get(stage) and stage in r[m]
            ]
            if ratios:
                out[m][stage] = u * statistics.median(ratios)
    return out


def overlaps(a: Sequence[float], b: Sequence[float]) -> bool:
    """Do the ranges [a0, a1] and [b0, b1] overlap?"""
    return a[0] <= b[1] and b[0] <= a[1]


def _overlapped(config: dict) -> bool:
    """--async-rollout with K >= 1: generation overlaps the trainer (tune.model.step_seconds)."""
    return bool(config.get("async_rollout")) and int(config.get("max_staleness") or 0) >= 1


def _noise_dict(noise: NoiseEstimate) -> dict:
    d = asdict(noise)
    d["series"] = [list(p) for p in noise.series]
    return d
