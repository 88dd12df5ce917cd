"""`hyrl tune`'s alignment check (hyrl.batchsize.tune.align: the verdicts, run_align_check)
against a stand-in recipe whose curves are known in closed form, so every verdict is checkable
by hand.

The stand-in recipe (a Python script behind bash, as a recipe is) takes the flags `hyrl sweep`
appends; with --dry-run it prints the resolved configuration, otherwise it writes a run
directory: eval/accuracy = samples / (20,000 x k(B)) after every rollout step, k = 1 up to
B = 256 and k = 2 above (the larger batch needs twice the samples at every level; the
`faster_recipe` fixture has k = 0.75 above, a larger batch that learns faster per sample), 1 s
per rollout step, stopping at --target when --stop-at-target is given.

The verdict is one-sided (issue 44): a candidate is rejected when it did not reach the level,
when its per-level samples ratios, weighted by w = (level_i - start) / (level - start), have a
geometric mean above 1 + tolerance, or when its ratio at the level alone is above
1 + 2 x tolerance; needing fewer samples never rejects. The hand-built analyses below have
start 0, level 1 and the analysis's 10 levels 0.1, 0.2, ..., 1.0: weights 0.1, ..., 1.0, which
sum to 5.5.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from hyrl.batchsize.tune.align import (
    SLACK,
    AlignCheckError,
    budget_steps,
    level,
    members,
    run_align_check,
    start_value,
    verdict,
    verdicts,
    weighted_samples_ratio,
)
from hyrl.batchsize.tune.plan import TunePlan

FAKE = r"""
import json, math, sys
from pathlib import Path

args = sys.argv[1:]
def flag(name, default=None):
    value = default
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
    return value

P = int(flag("--rollout-batch-size", "16")); G = 8; B = int(flag("--global-batch-size", "128"))
B0 = int(flag("--base-global-batch-size", "128")); lr0 = float(flag("--base-lr", "0.001"))
lr = lr0 * (B / B0) ** (0.5 if flag("--lr-scaling") == "sqrt" else 0.0)
config = {
    "rollout_batch_size": P, "n_samples_per_prompt": G, "global_batch_size": B, "lr": lr,
    "seed": int(flag("--seed", "1234")), "num_steps": int(flag("--num-steps", "1000")),
    "target": flag("--target", "eval/accuracy=0.9"), "eval_interval": 1,
    "noise_scale_beta": 0.99, "rollout_engine": "hf", "rollout_concurrency": 4096,
    "rollout_max_response_len": 2,
}
if "--dry-run" in args:
    print(json.dumps(config)); sys.exit(0)
run = Path(flag("--run-dir")); run.mkdir(parents=True)
(run / "config.json").write_text(json.dumps(config))
metric, value = config["target"].split("=")
value = float(value); k = 1.0 if B <= 256 else 2.0
records = [{"step": 0, "samples": 0, "elapsed_s": 0.0, metric: 0.0}]
reached = None
for step in range(1, config["num_steps"] + 1):
    samples = step * P * G
    acc = samples / (20000 * k)
    records.append({"step": step, "samples": samples, "elapsed_s": float(step), metric: acc})
    if acc >= value and reached is None:
        reached = records[-1]
        if "--stop-at-target" in args:
            break
(run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
summary = {"reached": reached is not None,
           "samples_to_target": reached["samples"] if reached else None}
(run / "summary.json").write_text(json.dumps(summary))
"""


def _recipe(tmp_path: Path, source: str) -> Path:
    script = tmp_path / "fake_recipe.py"
    script.write_text(source)
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "{script}" "$@"\n')
    return recipe


@pytest.fixture
def fake_recipe(tmp_path: Path) -> Path:
    return _recipe(tmp_path, FAKE)


@pytest.fixture
def faster_recipe(tmp_path: Path) -> Path:
    """The stand-in with k = 0.75 above B = 256: 0.75x the reference's samples at every
    level."""
    slow = "k = 1.0 if B <= 256 else 2.0"
    assert slow in FAKE
    return _recipe(tmp_path, FAKE.replace(slow, "k = 1.0 if B <= 256 else 0.75"))


def _plan(tmp_path: Path, recipe: Path) -> TunePlan:
    return TunePlan(
        recipe=recipe,
        out=tmp_path / "out",
        mults=[1, 2, 4, 8],
        rule="sqrt",
        budget_samples=1024,
        probe_steps=3,
        verify=0,
        verify_samples=None,
        extra_args=[],
        env={"PATH": "/usr/bin:/bin"},
        config={"target": "eval/accuracy=0.9", "eval_interval": 1, "rollout_concurrency": 4096},
        base={"P0": 16, "G": 8, "B0": 128, "lr": 1e-3, "seed": 1234},
        align_check=True,
        align_fraction=0.5,
    )


def _pass1(tmp_path: Path) -> Path:
    run = tmp_path / "pass1"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps({"rollout_batch_size": 16, "n_samples_per_prompt": 8, "global_batch_size": 128})
    )
    recs = [{"step": 0, "samples": 0, "elapsed_s": 0.0, "eval/accuracy": 0.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def test_the_check_keeps_the_aligned_recommendation_and_rejects_the_departing_neighbour(
    tmp_path, fake_recipe
):
    plan = _plan(tmp_path, fake_recipe)
    report = {"recommendation": {"mult": 2}}
    check = run_align_check(plan, report, _pass1(tmp_path), Console(file=open("/dev/null", "w")))
    # level = 0 + 0.5 x (0.9 - 0) = 0.45; the reference (N = 128 a step) reaches it at
    # 0.45 x 20,000 = 9,000 samples: step ceil(9000 / 128) = 71, 9,088 samples
    assert check["level"] == pytest.approx(0.45)
    assert check["reference_samples_to_level"] == 71 * 128
    rows = {r["mult"]: r for r in check["rows"]}
    assert set(rows) == {2, 4}  # the recommendation and its larger neighbour
    # x2 (N = 256, k = 1): the same accuracy per sample: kept
    assert rows[2]["verdict"] == "kept" and rows[2]["aligned"]
    assert rows[2]["weighted_samples_ratio"] == pytest.approx(1.0)
    assert rows[2]["reason"] == (
        "needs 1.00x the reference's samples (weighted over 10 levels; fewer is never rejected)"
    )
    # x4 (B = 512, k = 2): at most 1.5 x 9,088 = 13,632 responses, ceil(13632 / 512) = 27
    # steps (13,824), where its accuracy is 13,824 / 40,000 = 0.35 < 0.45: never reached
    assert rows[4]["verdict"] == "rejected" and not rows[4]["reached"]
    assert "did not reach the level within 1.5x" in rows[4]["reason"]
    assert check["rejected_from"] == 4
    x4 = json.loads((tmp_path / "out" / "align" / "b512-sqrt-s1234" / "config.json").read_text())
    assert x4["num_steps"] == 27 and x4["target"] == "eval/accuracy=0.45"


def test_a_rejected_recommendation_says_why(tmp_path, fake_recipe):
    plan = _plan(tmp_path, fake_recipe)
    check = run_align_check(
        plan, {"recommendation": {"mult": 4}}, _pass1(tmp_path),
        Console(file=open("/dev/null", "w")),
    )  # fmt: skip
    rows = {r["mult"]: r for r in check["rows"]}
    assert set(rows) == {4, 8} and check["rejected_from"] == 4
    assert all(r["verdict"] == "rejected" for r in rows.values())


def test_the_pure_parts_by_hand():
    assert members([1, 2, 4, 8, 16], 1) == [2]  # x1: only its larger neighbour
    assert members([1, 2, 4, 8, 16], 4) == [4, 8]
    assert members([1, 2, 4], 4) == [4]  # the largest: no neighbour above
    assert level(0.1, 0.9, 0.5) == pytest.approx(0.5)
    with pytest.raises(AlignCheckError, match="not above"):
        level(0.9, 0.5, 0.5)
    assert budget_steps(9088, 512) == 27 and SLACK == 1.5
    assert start_value([{"step": 0}, {"eval/accuracy": 0.25}], "eval/accuracy") == 0.25
    with pytest.raises(AlignCheckError, match="logged no eval/accuracy"):
        start_value([{"step": 0}], "eval/accuracy")


def test_a_candidate_that_learns_faster_per_sample_is_kept(tmp_path, faster_recipe):
    # x4 (B = 512) and x8 (B = 1,024) need 0.75 x the reference's samples at every level (the
    # curves are linear in samples, so the interpolated crossings are exact): 0.75 lies outside
    # 1 +/- 0.2, so the analysis's two-sided flag says not aligned, and the check kept neither
    # before issue 44; needing fewer samples costs no time, so both are kept now
    plan = _plan(tmp_path, faster_recipe)
    check = run_align_check(
        plan, {"recommendation": {"mult": 4}}, _pass1(tmp_path),
        Console(file=open("/dev/null", "w")),
    )  # fmt: skip
    rows = {r["mult"]: r for r in check["rows"]}
    assert set(rows) == {4, 8} and check["rejected_from"] is None
    for r in rows.values():
        assert r["reached"] and not r["aligned"]  # the old rule's flag: rejected
        assert r["verdict"] == "kept"
        assert r["weighted_samples_ratio"] == pytest.approx(0.75)
        assert r["samples_ratio"] == pytest.approx(0.75)
        assert r["reason"] == (
            "needs 0.75x the reference's samples (weighted over 10 levels; fewer is never rejected)"
        )


LEVELS = [round(0.1 * i, 10) for i in range(1, 11)]  # start 0, level 1: w_i = level_i


def _row(name: str, ratios: list[float], reached: bool = True) -> dict:
    """An analysis row with one samples ratio per level (the last at the check's level)."""
    return {
        "name": name,
        "reached": reached,
        "aligned": all(0.8 <= r <= 1.2 for r in ratios),  # the analysis's two-sided flag
        "samples_ratio": ratios[-1] if reached else None,
        "time_ratio": ratios[-1] if reached else None,
        "best_value": 1.0 if reached else 0.6,
        "alignment_reason": "",
        "alignment_ratios": [{"level": lv, "ratio": r} for lv, r in zip(LEVELS, ratios)],
    }


def _analysis(*rows: dict) -> dict:
    ref = dict(_row("ref", [1.0] * 10), is_reference=True)
    return {
        "start_value": 0.0,
        "target": {"metric": "eval/accuracy", "value": 1.0},
        "tolerance": 0.2,
        "runs": [ref, *rows],
    }


def _judge(ratios: list[float], reached: bool = True) -> tuple[bool, str, float | None]:
    return verdict(_row("x", ratios, reached), 0.0, 1.0, 0.2)


def test_the_weighted_samples_ratio_by_hand():
    # 0.64 on the five lower levels (weights 0.1 + ... + 0.5 = 1.5), 0.85 on the five upper ones
    # (0.6 + ... + 1.0 = 4.0): exp((1.5 ln 0.64 + 4.0 ln 0.85) / 5.5)
    # = exp((1.5 x -0.446287 + 4.0 x -0.162519) / 5.5) = exp(-0.239910) = 0.78670
    measured = [0.64] * 5 + [0.85] * 5
    ratios = [{"level": lv, "ratio": r} for lv, r in zip(LEVELS, measured)]
    assert weighted_samples_ratio(ratios, 0.0, 1.0) == pytest.approx(0.78670, abs=1e-5)
    # a constant ratio is itself, whatever the weights
    const = [{"level": lv, "ratio": 1.5} for lv in LEVELS]
    assert weighted_samples_ratio(const, 0.0, 1.0) == pytest.approx(1.5)
    # a falling metric (a loss from 2.0 down to 1.0): the weights are the same fractions
    loss = [{"level": 2.0 - lv, "ratio": r} for lv, r in zip(LEVELS, measured)]
    assert weighted_samples_ratio(loss, 2.0, 1.0) == pytest.approx(0.78670, abs=1e-5)
    # levels at or behind the start (w <= 0) and unusable ratios are left out
    mixed = [
        {"level": 0.0, "ratio": 9.0},  # w = 0
        {"level": -0.5, "ratio": 9.0},  # w < 0
        {"level": 0.5, "ratio": 0.0},  # not positive
        {"level": 0.5, "ratio": float("nan")},
        {"level": 1.0, "ratio": 1.1},
    ]
    assert weighted_samples_ratio(mixed, 0.0, 1.0) == pytest.approx(1.1)
    assert weighted_samples_ratio([], 0.0, 1.0) is None
    with pytest.raises(ValueError, match="must differ from start"):
        weighted_samples_ratio(const, 1.0, 1.0)


def test_a_candidate_that_needs_fewer_samples_is_kept_however_much_fewer():
    # the measured case of issue 44: x2 at 0.64-0.85x on every level. The old two-sided rule
    # (every ratio within 1 +/- 0.2) rejected it; one-sided, 0.787x is kept
    measured = [0.64] * 5 + [0.85] * 5
    assert not _row("x", measured)["aligned"]
    kept, why, curve = _judge(measured)
    assert kept and curve == pytest.approx(0.78670, abs=1e-5)
    assert why == (
        "needs 0.79x the reference's samples (weighted over 10 levels; fewer is never rejected)"
    )
    # a tenth of the samples everywhere: still kept (a ratio below 1 never rejects)
    assert _judge([0.1] * 10)[0]


def test_a_candidate_that_needs_materially_more_samples_is_rejected():
    # 1.5x everywhere: weighted 1.5 > 1 + 0.2
    kept, why, curve = _judge([1.5] * 10)
    assert not kept and curve == pytest.approx(1.5)
    assert why == "needs 1.50x the reference's samples (weighted; more than 1 + 0.2)"
    # the other branch: 1.2x everywhere is at the tolerance, not above it
    assert _judge([1.2] * 10)[0]


def test_the_takeoff_is_weighted_down():
    # 2.0x on the first level (w = 0.1) and 1.05x on the nine above (w = 0.2 ... 1.0, sum 5.4):
    # exp((0.1 ln 2 + 5.4 ln 1.05) / 5.5) = exp((0.069315 + 5.4 x 0.048790) / 5.5)
    # = exp(0.060506) = 1.06237 <= 1.2: kept, though the two-sided rule rejected it (2.0)
    takeoff = [2.0] + [1.05] * 9
    assert not _row("x", takeoff)["aligned"]
    kept, why, curve = _judge(takeoff)
    assert kept and curve == pytest.approx(1.06237, abs=1e-5)
    assert "needs 1.06x the reference's samples (weighted over 10 levels" in why
    # the same 2.0x at the level itself (w = 1) and 1.05x below (sum 4.5):
    # exp((4.5 ln 1.05 + ln 2) / 5.5) = exp((0.219556 + 0.693147) / 5.5) = exp(0.165946) = 1.1805
    # <= 1.2 weighted, but 2.0 at the level alone > 1 + 2 x 0.2: rejected
    late = [1.05] * 9 + [2.0]
    kept, why, curve = _judge(late)
    assert not kept and curve == pytest.approx(1.1805, abs=1e-4)
    assert why.startswith("needs 2.00x the reference's samples at the level (more than 1 + 2 x")


def test_a_curve_that_ends_far_behind_is_rejected():
    # 1.0x below the level, 1.5x at it: weighted exp(ln 1.5 / 5.5) = exp(0.073721) = 1.0765
    # <= 1.2, but 1.5 > 1 + 2 x 0.2 = 1.4 at the level: rejected
    kept, why, curve = _judge([1.0] * 9 + [1.5])
    assert not kept and curve == pytest.approx(1.0765, abs=1e-4)
    assert why == (
        "needs 1.50x the reference's samples at the level (more than 1 + 2 x 0.2; 1.08x "
        "weighted over 10 levels)"
    )
    # the other branch: 1.3x at the level (<= 1.4), weighted exp(ln 1.3 / 5.5) = 1.0489: kept
    kept, _, curve = _judge([1.0] * 9 + [1.3])
    assert kept and curve == pytest.approx(1.0489, abs=1e-4)


def test_a_candidate_that_did_not_reach_the_level_is_rejected():
    # aligned on the levels it reached (1.0x on the first six), but never at the level
    kept, why, curve = _judge([1.0] * 6, reached=False)
    assert not kept and curve == pytest.approx(1.0)
    assert why == "did not reach the level within 1.5x the reference's samples (best 0.6)"
    # reached with no level in common (no ratios): nothing to compare, rejected
    row = dict(_row("x", [1.0] * 10), alignment_ratios=[], alignment_reason="no common level")
    kept, why, curve = verdict(row, 0.0, 1.0, 0.2)
    assert not kept and curve is None and "no common level" in why


def test_a_rejected_candidate_takes_every_larger_one_with_it():
    analysis = _analysis(_row("x2", [1.5] * 10), _row("x4", [1.0] * 10))
    rows, first = verdicts(analysis, {"ref": 1, "x2": 2, "x4": 4})
    # x2 needs more: it and everything larger is rejected (first = 2), x4 included though its
    # own verdict is kept
    assert first == 2 and [r["verdict"] for r in rows] == ["rejected", "kept"]
    assert [r["mult"] for r in rows] == [2, 4]  # the reference (x1) is no candidate
    analysis = _analysis(_row("x4", [2.0] * 10), _row("x2", [0.64] * 5 + [0.85] * 5))
    rows, first = verdicts(analysis, {"ref": 1, "x2": 2, "x4": 4})
    assert first == 4 and [r["verdict"] for r in rows] == ["kept", "rejected"]
    assert rows[0]["weighted_samples_ratio"] == pytest.approx(0.78670, abs=1e-5)
    rows, first = verdicts(_analysis(_row("x2", [0.9] * 10)), {"ref": 1, "x2": 2})
    assert first is None and rows[0]["verdict"] == "kept"


def test_the_report_section_shows_the_one_sided_verdicts():
    from hyrl.batchsize.tune.report import align_lines

    analysis = _analysis(_row("x2", [0.64] * 5 + [0.85] * 5), _row("x4", [1.5] * 10))
    rows, first = verdicts(analysis, {"ref": 1, "x2": 2, "x4": 4})
    check = {
        "metric": "eval/accuracy", "level": 1.0, "fraction": 0.5, "start": 0.0,
        "reference_samples_to_level": 9088, "tolerance": 0.2, "rows": rows, "rejected_from": first,
    }  # fmt: skip
    report = {
        "align_check": check,
        "predicted_recommendation": {"mult": 4, "time_ratio": 0.8},
        "recommendation": {"mult": 2},
    }
    text = "\n".join(align_lines(report))
    assert "one-sided" in text and "more than 1 + 0.2 times" in text and "1 + 0.4 at" in text
    assert (
        "| x2 (x2) | kept | 0.787x | 0.85x | 0.85x | kept: needs 0.79x the reference's samples "
        "(weighted over 10 levels; fewer is never rejected) |"
    ) in text
    assert (
        "| x4 (x4) | rejected | 1.5x | 1.5x | 1.5x | rejected: needs 1.50x the reference's "
        "samples (weighted; more than 1 + 0.2) |"
    ) in text
    assert "x4 and every larger candidate rejected, so the recommendation is x2" in text
