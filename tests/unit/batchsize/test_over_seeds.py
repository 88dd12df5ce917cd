"""hyrl.batchsize.over_seeds: seed-mean curves, bootstrapped verdicts, and their report.

Synthetic runs: every run starts at accuracy 0.30 and rises linearly with cumulative samples s,
acc = 0.30 + 0.5 * s / (12800 * k), so a run with factor k reaches a level l after
(l - 0.30) / 0.5 * 12800 * k samples (the target 0.77: 12032 k). The mean over seeds of such
curves is linear with slope 0.5 / 12800 * mean(1 / k), so a member's seed-mean S-bar is
12032 * HM(k), HM the harmonic mean of its seeds' k. Every run evaluates every 1280 samples,
and linear interpolation of linear curves is exact.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hyrl.batchsize.analyze import analyze
from hyrl.batchsize.curves import samples_to_reach
from hyrl.batchsize.over_seeds import p_needs_more
from hyrl.batchsize.report import render_markdown
from hyrl.batchsize.report_seeds import SINGLE_SEED
from hyrl.batchsize.runs import Run
from hyrl.batchsize.seed_curves import first_crossings, seed_curves
from hyrl.cli import main

TARGET = ("eval/accuracy", 0.77)
S_TARGET = (0.77 - 0.30) / 0.5 * 12800  # 12032 samples at k = 1
BUDGET = 25600  # samples every run consumes (evaluations every 1280)
SEEDS = (1, 2, 3, 4, 5)
# the reference's seeds: per-seed S spread max / min = 1.14 / 0.88 = 1.295, about 1.3x
REF_K = (0.88, 0.94, 1.00, 1.06, 1.14)


def hm(ks) -> float:
    return len(ks) / sum(1 / k for k in ks)


def make_run(
    member: str,
    seed: int,
    B: int,
    k: float,
    R: float = 10.0,
    plateau: float | None = None,
    samples: int = BUDGET,
    ended: str | None = None,
    lr_scaling: str = "sqrt",
) -> Run:
    """A run of `member` at seed `seed`: B responses per step, samples factor k, throughput R
    responses/s, evaluations every 1280 samples up to `samples`, capped at `plateau`."""
    records: list[dict] = [{"step": 0, "samples": 0, "elapsed_s": 0.0, "eval/accuracy": 0.30}]
    for step in range(1, samples // B + 1):
        s = B * step
        rec: dict = {"step": step, "samples": s, "elapsed_s": s / R}
        if s % 1280 == 0:
            acc = 0.30 + 0.5 * s / (12800 * k)
            rec["eval/accuracy"] = min(acc, plateau) if plateau is not None else acc
        records.append(rec)
    config = {
        "rollout_batch_size": B // 8, "n_samples_per_prompt": 8, "global_batch_size": B,
        "lr": 1e-6, "seed": seed, "lr_scaling": lr_scaling,
    }  # fmt: skip
    name = f"{member}-s{seed}"
    return Run(
        name=name,
        path=Path("/synthetic") / name,
        config=config,
        records=records,
        prompts_per_step=B / 8,
        responses_per_step=float(B),
        lr=1e-6,
        summary={"ended": ended} if ended else None,
    )


def member_runs(member: str, B: int, ks, R=10.0, **kw) -> list[Run]:
    rates = R if isinstance(R, (list, tuple)) else [R] * len(ks)
    return [make_run(member, seed, B, k, r, **kw) for seed, k, r in zip(SEEDS, ks, rates)]


def reference() -> list[Run]:
    return member_runs("b128-ref", 128, REF_K)


def members_of(result: dict) -> dict[str, dict]:
    return {m["member"]: m for m in result["over_seeds"]["members"]}


def run_analysis(runs, **kw) -> dict:
    return analyze(runs, TARGET, reference="b128-ref-s1", **kw)


# --- building blocks ------------------------------------------------------------------------


def test_p_needs_more_counts_censored_as_more_but_not_against_censored():
    inf = math.inf
    # a > b in resamples 1 (inf > finite) and 3; inf vs inf (0) and 2 < 3 (2) are not more
    assert p_needs_more([inf, inf, 2.0, 5.0], [inf, 9.0, 3.0, 4.0]) == 0.5
    with pytest.raises(ValueError):
        p_needs_more([1.0], [1.0, 2.0])


def test_vectorised_crossings_follow_samples_to_reach():
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.uniform(50, 150, size=30))
    means = np.cumsum(rng.normal(0.02, 0.03, size=(40, 30)), axis=1)
    means[5, 20:] = np.nan  # a resample whose mean stops early
    for level in (0.05, 0.2, 0.4):
        got = first_crossings(x, means, level)
        for row, value in zip(means, got):
            end = int(np.sum(np.isfinite(row)))
            want = samples_to_reach(x[:end], row[:end], level)
            assert (value == math.inf) if want is None else value == pytest.approx(want)


def test_a_run_that_stopped_at_the_target_carries_its_last_value_and_others_stop_the_mean():
    """Seed 1 (k = 1) stops at 12800 samples with accuracy 0.80; seed 2 (k = 1.2) runs on. At
    12800: mean (0.80 + 0.30 + 0.5 * 12800 / 15360) / 2 = 0.758333; at 14080 with seed 1
    carried: (0.80 + 0.758333) / 2 = 0.779167, so S-bar = 12800 + 0.011667 / 0.020833 * 1280
    = 13516.8. Without "ended": "target" the mean stops at 12800, short of 0.77."""
    stopped = make_run("b128-ref", 1, 128, 1.0, samples=12800, ended="target")
    on = make_run("b128-ref", 2, 128, 1.2)
    curves = seed_curves([stopped, on], "eval/accuracy", "samples")
    assert curves is not None and curves.end() == len(curves.x) == BUDGET // 1280 + 1
    mean = curves.mean()
    assert mean[10] == pytest.approx(0.758333, abs=1e-6)
    assert mean[11] == pytest.approx(0.779167, abs=1e-6)
    assert samples_to_reach(curves.x, mean, 0.77) == pytest.approx(13516.8)

    not_at_target = make_run("b128-ref", 1, 128, 1.0, samples=12800)
    cut = seed_curves([not_at_target, on], "eval/accuracy", "samples")
    assert cut is not None and cut.x[cut.end() - 1] == 12800
    assert samples_to_reach(cut.x[: cut.end()], cut.mean()[: cut.end()], 0.77) is None


# --- the verdicts ----------------------------------------------------------------------------


def test_a_two_members_from_one_distribution_are_not_rejected_and_not_separated():
    """b256-sqrt draws its seeds' k from the reference's distribution (another assignment, k
    within +/-14% of 1) at the same throughput: S-bar 12032 * HM(k) for both, equal, and no
    member is the fastest in 90% of the bootstraps."""
    runs = reference() + member_runs("b256-sqrt", 256, (1.06, 0.88, 1.14, 0.94, 1.00))
    result = run_analysis(runs)
    seeded = result["over_seeds"]
    members = members_of(result)
    same = members["b256-sqrt"]
    assert same["samples_to_target"]["value"] == pytest.approx(S_TARGET * hm(REF_K))
    assert same["samples_ratio"]["value"] == pytest.approx(1.0)
    assert not same["validity"].startswith("rejected")
    assert seeded["fastest"] is None
    assert max(m["p_fastest"] for m in members.values()) < 0.9
    text = render_markdown(result, [])
    assert "the seeds cannot separate: " in text
    assert (
        "b256-sqrt (" in seeded["fastest_sentence"] and "b128-ref (" in seeded["fastest_sentence"]
    )


def test_b_a_one_point_three_times_shift_is_detected_with_five_seeds():
    """Reference k = 0.88..1.14 (its per-seed S spread 1.295x); b256-sqrt drawn from the same
    distribution; b256-fixed needs 1.3x: k = 1.3 * (1.06, 0.88, 1.14, 0.94, 1.00). S-bar of
    b256-fixed / S-bar of the reference = 1.3 exactly (the same k, reassigned). The reference's
    seed band (95th percentile of its bootstrapped S-bar / S-bar - 1) is about 0.07, so with
    --tolerance 0.1 the margin tau is the floor 0.1; the paired bootstraps put the curve ratio
    above 1.1 in at least 90% of them: rejected, and b256-fixed needs more samples than
    b256-sqrt in at least 90% of them."""
    shifted = tuple(1.3 * k for k in (1.06, 0.88, 1.14, 0.94, 1.00))
    runs = (
        reference()
        + member_runs("b256-sqrt", 256, (0.94, 1.14, 0.88, 1.00, 1.06))
        + member_runs("b256-fixed", 256, shifted, lr_scaling="none")
    )
    result = run_analysis(runs, tolerance=0.1)
    seeded = result["over_seeds"]
    assert 0.0 < seeded["reference_band"] < 0.1
    assert (seeded["tau"], seeded["tau_source"]) == (0.1, "tolerance")
    fixed = members_of(result)["b256-fixed"]
    assert fixed["fixed_lr"] is True
    assert fixed["samples_ratio"]["value"] == pytest.approx(1.3)
    assert fixed["curve_ratio"]["value"] == pytest.approx(1.3)
    assert fixed["p_more"] >= 0.9
    assert fixed["validity"] == "rejected: needs materially more samples"
    assert fixed["p_fastest"] is None  # rejected: not a candidate
    (pair,) = seeded["pairwise"]
    assert (pair["member"], pair["against"]) == ("b256-fixed", "b256-sqrt")
    assert pair["p_needs_more"] >= 0.9 and pair["holds"] is True
    assert pair["samples_ratio"]["value"] == pytest.approx(1.3)
    assert pair["sentence"].startswith("b256-fixed needs more samples than b256-sqrt in ")
    assert pair["sentence"].endswith(": holds")
    assert pair["sentence"] in render_markdown(result, [])


def test_c_censored_seeds_enter_the_mean_curve_not_a_median_of_infinities():
    """b256-sqrt: seeds 1-3 plateau at 0.74 (below the target), seeds 4-5 rise (k = 1). The
    seed-mean (3 * 0.74 + 2 * acc) / 5 is 0.764 at 12800 samples and 0.784 at 14080: S-bar =
    12800 + 0.3 * 1280 = 13184, finite, where the median over seeds (3 of 5 never) is never.
    b512-sqrt: seeds 1-4 plateau at 0.6, seed 5 rises to 1.3 at 25600 samples: its mean ends
    at (4 * 0.6 + 1.3) / 5 = 0.74, never the target, so it is never the fastest."""
    runs = (
        reference()
        + [make_run("b256-sqrt", s, 256, 1.0, plateau=0.74 if s <= 3 else None) for s in SEEDS]
        + [make_run("b512-sqrt", s, 512, 1.0, plateau=0.6 if s <= 4 else None) for s in SEEDS]
    )
    result = run_analysis(runs)
    members = members_of(result)
    partly = members["b256-sqrt"]
    assert partly["n_reached"] == 2
    assert partly["samples_to_target"]["value"] == pytest.approx(13184.0)
    assert partly["samples_to_target"]["never"] is False
    old = next(g for g in result["groups"] if g["group"] == "b256-sqrt")
    assert old["samples_ratio_median"] is None  # the single-run median: never

    never = members["b512-sqrt"]
    assert never["samples_to_target"]["value"] is None and never["samples_to_target"]["never"]
    assert never["curve_end_samples"] == BUDGET
    assert never["samples_ratio"]["never"] and never["time_ratio"]["never"]
    # a bootstrap that draws seed 5 five times reaches the target: rare, never named
    assert never["p_fastest"] is None or never["p_fastest"] < 0.05
    assert result["over_seeds"]["fastest"] != "b512-sqrt"
    assert all(c["member"] != "b512-sqrt" for c in result["over_seeds"]["candidates"])
    text = render_markdown(result, [])
    row = next(line for line in text.splitlines() if line.startswith("| b512-sqrt |"))
    assert "never within 25,600" in row


def test_d_a_member_that_needs_fewer_samples_is_valid():
    """b256-sqrt needs 0.7x: k = 0.7 * (1.06, 0.88, 1.14, 0.94, 1.00); its curve ratio is 0.7,
    never above 1 + tau, so p_more = 0 and it is valid."""
    fewer = tuple(0.7 * k for k in (1.06, 0.88, 1.14, 0.94, 1.00))
    result = run_analysis(reference() + member_runs("b256-sqrt", 256, fewer))
    member = members_of(result)["b256-sqrt"]
    assert member["curve_ratio"]["value"] == pytest.approx(0.7)
    assert member["p_more"] == 0.0 and member["validity"] == "valid"
    # same throughput, 0.7x the samples: the fastest in every bootstrap
    assert result["over_seeds"]["fastest"] == "b256-sqrt"
    assert result["over_seeds"]["fastest_sentence"] == (
        "B = 256 (b256-sqrt) is the fastest valid member in 100% of seed bootstraps"
    )


def test_e_one_seed_per_member_keeps_the_single_run_path_and_says_so():
    runs = [make_run("b128-ref", 1, 128, 1.0), make_run("b256-sqrt", 1, 256, 1.05, R=15.0)]
    result = run_analysis(runs)
    assert "over_seeds" not in result and "groups" not in result
    assert result["fastest_valid"] == "b256-sqrt-s1"  # the single-run verdict stays
    text = render_markdown(result, [])
    assert SINGLE_SEED in text
    assert SINGLE_SEED == (
        "one seed per member: no spread and no confidence; run with --seeds for verdicts"
    )
    assert "## Over seeds" not in text


def test_f_the_same_runs_give_the_same_report():
    def runs():
        return reference() + member_runs("b256-sqrt", 256, (1.06, 0.88, 1.14, 0.94, 1.00))

    first = json.dumps(run_analysis(runs()), allow_nan=False, sort_keys=True)
    assert first == json.dumps(run_analysis(runs()), allow_nan=False, sort_keys=True)
    other = json.dumps(run_analysis(runs(), n_boot=500), allow_nan=False, sort_keys=True)
    assert other != first  # the resamples count, and only they change it


def test_g_a_seed_whose_throughput_ratio_is_an_outlier_is_flagged_load_affected():
    """b256-sqrt runs at R = 15 (ratio 1.5 to its seed's reference at 10) except seed 4, at 45
    (ratio 4.5): the quartiles of (1.5, 1.5, 1.5, 4.5, 1.5) are 1.5 and 1.5, so 4.5 lies
    outside [Q1 - 1.5 IQR, Q3 + 1.5 IQR] = [1.5, 1.5]; the R ratio left is 1.5."""
    ks = (1.06, 0.88, 1.14, 0.94, 1.00)
    result = run_analysis(reference() + member_runs("b256-sqrt", 256, ks, R=[15, 15, 15, 45, 15]))
    r = members_of(result)["b256-sqrt"]["throughput_ratio"]
    assert [s["seed"] for s in r["load_affected"]] == [4]
    assert r["load_affected"][0]["ratio"] == pytest.approx(4.5)
    assert r["value"] == pytest.approx(1.5) and r["high"] == pytest.approx(1.5)
    assert r["unpaired_seeds"] == []
    text = render_markdown(result, [])
    assert "seed 4 load-affected? (R ratio 4.50)" in text
    assert "b256-sqrt seed 4 (b256-sqrt-s4): load-affected? (R ratio 4.50)" in text


def test_an_unpaired_member_says_so_and_resamples_independently():
    """Seeds 6 and 7 have no reference run: their R ratios are against the reference run."""
    runs = reference() + [make_run("b256-sqrt", seed, 256, 1.0, R=15.0) for seed in (6, 7)]
    result = run_analysis(runs)
    member = members_of(result)["b256-sqrt"]
    assert member["paired_with_reference"] is False
    assert member["throughput_ratio"]["unpaired_seeds"] == [6, 7]
    assert any("R ratio unpaired for seed(s) 6, 7" in v for v in result["over_seeds"]["verdicts"])


def test_the_over_seeds_schema_and_the_report_section():
    runs = reference() + member_runs("b256-sqrt", 256, (1.06, 0.88, 1.14, 0.94, 1.00), R=15.0)
    result = run_analysis(runs)
    json.dumps(result, allow_nan=False)
    seeded = result["over_seeds"]
    assert {
        "seeds", "n_seeds", "n_boot", "confidence", "bootstrap_seed", "reference_member",
        "levels", "level_weights", "tau", "tau_source", "tolerance", "reference_band",
        "members", "fastest", "fastest_p", "fastest_sentence", "candidates", "pairwise",
        "verdicts", "notes",
    } <= set(seeded)  # fmt: skip
    assert seeded["seeds"] == [1, 2, 3, 4, 5] and seeded["n_boot"] == 2000
    assert seeded["level_weights"][0] == pytest.approx(0.1)
    assert seeded["level_weights"][-1] == pytest.approx(1.0)
    member = members_of(result)["b256-sqrt"]
    for key in ("samples_to_target", "samples_ratio", "curve_ratio", "time_ratio"):
        assert {"value", "never", "low", "high", "share_never", "share_undefined"} <= set(
            member[key]
        )
    # T ratio = samples ratio / R ratio = 1.0 / 1.5
    assert member["time_ratio"]["value"] == pytest.approx(1 / 1.5)
    curve = member["curve_vs_samples"]
    assert curve["x"][0] == 0 and curve["x"][-1] == BUDGET
    assert all(lo <= m <= hi for lo, m, hi in zip(curve["min"], curve["mean"], curve["max"]))
    assert members_of(result)["b128-ref"]["validity"] == "valid"
    text = render_markdown(result, [])
    assert "## Over seeds (5 seeds, 2000 bootstraps, confidence 90%)" in text
    ref_row = next(line for line in text.splitlines() if line.startswith("| **b128-ref** (ref)"))
    assert f"{S_TARGET * hm(REF_K):,.0f}" in ref_row
    assert "material margin tau = 0.20: the --tolerance floor" in text


def test_cli_writes_the_seed_mean_plots_and_validates_its_flags(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for run in reference() + member_runs("b256-sqrt", 256, (1.06, 0.88, 1.14, 0.94, 1.00)):
        d = sweep / run.name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(run.config))
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in run.records))
    out = tmp_path / "report"
    args = ["analyze", str(sweep), "--target", "eval/accuracy=0.77", "--out", str(out)]
    assert main([*args, "--bootstrap", "300", "--confidence", "0.8"]) == 0
    for name in ("eval_accuracy_mean_vs_samples.png", "eval_accuracy_mean_vs_time.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG", name
    report = json.loads((out / "report.json").read_text())
    assert (report["over_seeds"]["n_boot"], report["over_seeds"]["confidence"]) == (300, 0.8)
    assert "over seeds: " in capsys.readouterr().out
    for flag, bad, allowed in (
        ("--bootstrap", "5", "from 100 to 100000"),
        ("--confidence", "0.5", "above 0.5 and below 1"),
        ("--confidence", "1.0", "above 0.5 and below 1"),
    ):
        assert main([*args, flag, bad]) == 2
        err = capsys.readouterr().err
        assert f"{flag} {bad}" in err and allowed in err
    assert main([*args, "--bootstrap", "many"]) == 2
    assert "--bootstrap" in capsys.readouterr().err


def test_a_lower_is_better_metric_mirrors_the_higher_is_better_one():
    """eval/loss = 1.3 - accuracy and the target 1.3 - 0.77 = 0.53: the same S-bar and ratios."""

    def as_loss(run: Run) -> Run:
        for rec in run.records:
            if "eval/accuracy" in rec:
                rec["eval/loss"] = 1.3 - rec.pop("eval/accuracy")
        return run

    fewer = tuple(0.7 * k for k in (1.06, 0.88, 1.14, 0.94, 1.00))
    runs = [as_loss(r) for r in reference() + member_runs("b256-sqrt", 256, fewer)]
    result = analyze(runs, ("eval/loss", 0.53), reference="b128-ref-s1")
    assert result["higher_is_better"] is False
    ref, member = members_of(result)["b128-ref"], members_of(result)["b256-sqrt"]
    assert ref["samples_to_target"]["value"] == pytest.approx(S_TARGET * hm(REF_K))
    assert member["curve_ratio"]["value"] == pytest.approx(0.7)
    assert member["validity"] == "valid"


def test_the_testbed_numbers_seed_spread_and_smoothness_by_hand():
    from hyrl.batchsize.over_seeds import max_eval_step_fraction, seed_spread

    rows = [{"samples_to_target": s} for s in (100.0, 130.0, 120.0)]
    assert seed_spread(rows) == {"n": 3, "reached": 3, "max_over_min": pytest.approx(1.3)}
    # a run that never reached makes the spread unbounded ("1.0x to never"), not a number
    rows.append({"samples_to_target": None})
    assert seed_spread(rows) == {"n": 4, "reached": 3, "max_over_min": None}
    # start 0.2, target 0.8: moves 0.1, 0.2, 0.3 up to the first mean at the target (0.8);
    # the move after it (0.1) does not count: 0.3 / 0.6 = 0.5 of the way
    curve = {"mean": [0.2, 0.3, 0.5, 0.8, 0.9]}
    assert max_eval_step_fraction(curve, 0.2, 0.8) == pytest.approx(0.5)
    # a falling metric (a loss) from 2.0 to 1.0: moves 0.25, 0.5 -> 0.5 of the way
    assert max_eval_step_fraction({"mean": [2.0, 1.75, 1.25, 0.9]}, 2.0, 1.0) == pytest.approx(0.5)
    assert max_eval_step_fraction(None, 0.2, 0.8) is None
