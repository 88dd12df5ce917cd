"""`hyrl tune`'s model and command on synthetic run directories: a known noise scale and known
stage costs in, the recommendation and the predicted ratios out, each checked against the
arithmetic done by hand in the comments. No trainer runs here (tests/e2e/test_tune.py runs one).

The synthetic reference: P0 = 16 prompts x G = 8 = N0 = 128 responses per rollout step, one
optimizer step (B0 = 128), lr0 = 3e-4, --rollout-concurrency 256, responses of 2 tokens, noise
scale 384. Stage seconds per rollout step at B0: generation 0.2, reward 0.01, actor update 0.4,
weight sync 0.05, other 0.04 (total 0.70). Probes: x2 and x4, whose actor update costs 0.9 and
0.8 of the per-token cost at B0, reward per token unchanged, sync and other fixed per step. The
decode profile: 100 responses/s at C = 128, 160 at C = 256.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from hyrl.batchsize.sweep.plan import plan_members
from hyrl.batchsize.sweep.progress import StudyLog
from hyrl.batchsize.tune import prediction
from hyrl.batchsize.tune.cli import main as tune_main
from hyrl.batchsize.tune.members import (
    reporting,
    run_member,
    run_probes,
    run_profile,
    step_runs,
)
from hyrl.batchsize.tune.model import (
    StepCosts,
    TuneModelError,
    critic_batch,
    noise_estimate,
    predict,
    samples_ratio,
    seconds_per_token,
    step_costs,
    steps_ratio,
)
from hyrl.batchsize.tune.plan import TuneError, TunePlan, check_tune
from hyrl.batchsize.tune.prediction import predict_report
from hyrl.batchsize.tune.report import write_report
from hyrl.batchsize.tune.verify import neighbours, verify_rows
from hyrl.cli import COMMANDS

REF_STAGES = {
    "rollout": 0.2,
    "reward": 0.01,
    "actor_train": 0.4,
    "weight_sync": 0.05,
    "overhead": 0.04,
}
PROFILE = {"rows": [{"c": 128, "responses_per_s": 100.0}, {"c": 256, "responses_per_s": 160.0}]}


def _record(step: int, N: int, stages: dict, noise: float | None, length: float = 2.0) -> dict:
    rec = {
        "step": step,
        "rollout_step": step,
        "samples": N * step,
        "samples_generated": N * step,
        "train/response_len_mean": length,
        "elapsed_s": float(step),
        **{f"perf/{k}_s": v for k, v in stages.items()},
        "perf/step_s": sum(stages.values()),
    }
    if noise is not None:
        rec["actor/noise_scale"] = noise
    return rec


def _write_run(path: Path, mult: int, records: list[dict]) -> Path:
    path.mkdir(parents=True)
    config = {
        "rollout_batch_size": 16 * mult,
        "n_samples_per_prompt": 8,
        "global_batch_size": 128 * mult,
        "responses_per_rollout": 128 * mult,
        "lr": 3e-4,
    }
    (path / "config.json").write_text(json.dumps(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _pass1(tmp_path: Path, noise=lambda step: 384.0, steps: int = 8) -> Path:
    """Step 1 warms up (10x slower), steps 2-4 are 2x slower than the rest: the estimate takes
    the later half of steps 2..8, i.e. steps 5..8, at REF_STAGES."""
    recs = []
    for step in range(1, steps + 1):
        factor = 10.0 if step == 1 else 2.0 if step <= 4 else 1.0
        stages = {k: v * factor for k, v in REF_STAGES.items()}
        recs.append(_record(step, 128, stages, noise(step)))
    return _write_run(tmp_path / "pass1", 1, recs)


def _probe(
    tmp_path: Path, mult: int, actor_factor: float, slow: float = 1.0, name: str | None = None
) -> Path:
    """A probe at `mult` (in tmp_path / name, default probe{mult}): every stage x slow (the
    machine's load then)."""
    N = 128 * mult
    stages = {
        "rollout": 0.2 * mult,
        "reward": 0.01 * mult,
        "actor_train": 0.4 * mult * actor_factor,
        "weight_sync": 0.05,
        "overhead": 0.04,
    }
    stages = {k: v * slow for k, v in stages.items()}
    warm = {k: 5 * v for k, v in stages.items()}  # the first step: never counted
    recs = [_record(1, N, warm, None), _record(2, N, stages, None), _record(3, N, stages, None)]
    return _write_run(tmp_path / (name or f"probe{mult}"), mult, recs)


def _plan(tmp_path: Path, mults=(1, 2, 4), concurrency: int = 256) -> TunePlan:
    return TunePlan(
        recipe=tmp_path / "recipe.sh",
        out=tmp_path / "out",
        mults=list(mults),
        rule="sqrt",
        budget_samples=1024,
        probe_steps=3,
        verify=0,
        verify_samples=None,
        extra_args=[],
        env={},
        config={"rollout_concurrency": concurrency},
        base={"P0": 16, "G": 8, "B0": 128, "lr": 3e-4, "seed": 1234},
    )


def _report(tmp_path: Path, **kw) -> dict:
    probes = {2: _probe(tmp_path, 2, 0.9), 4: _probe(tmp_path, 4, 0.8)}
    return predict_report(_plan(tmp_path, **kw), _pass1(tmp_path), PROFILE, probes)


# --- the model, by hand --------------------------------------------------------------------


def test_stage_costs_are_medians_of_the_later_half_without_the_first_step(tmp_path):
    costs, _, _ = prediction._costs(_pass1(tmp_path), "pass 1", 0.5)
    assert costs.n_steps == 4  # steps 5..8 of 2..8
    assert costs.seconds == pytest.approx(REF_STAGES)
    assert costs.response_tokens == 2.0 and costs.responses_per_rollout == 128


def test_predicted_ratios_and_recommendation_match_the_hand_computation(tmp_path):
    report = _report(tmp_path)
    by_mult = {c["mult"]: c for c in report["candidates"]}
    # x1: 0.2 + 0.01 + 0.4 + 0.05 + 0.04 = 0.70 s per step, R = 128 / 0.7
    assert by_mult[1]["step_s"] == pytest.approx(0.70)
    assert by_mult[1]["responses_per_s"] == pytest.approx(128 / 0.7)
    # x2: generation 0.2 x 2 x (100 / 160) = 0.25; reward 0.02; actor 0.4 x 2 x 0.9 = 0.72;
    # sync 0.05 and other 0.04 (fixed: the probe's per-token cost halves) -> 1.08 s
    assert by_mult[2]["stage_s"] == pytest.approx(
        {"rollout": 0.25, "reward": 0.02, "actor_train": 0.72, "weight_sync": 0.05,
         "overhead": 0.04}
    )  # fmt: skip
    assert by_mult[2]["step_s"] == pytest.approx(1.08)
    r2 = (256 / 1.08) / (128 / 0.7)  # 1.2963
    s2 = (1 + 256 / 384) / (1 + 128 / 384)  # samples E(B) = E_min (1 + B/B_noise): 1.25
    assert by_mult[2]["throughput_ratio"] == pytest.approx(r2)
    assert by_mult[2]["samples_ratio"] == pytest.approx(1.25)
    assert by_mult[2]["time_ratio"] == pytest.approx(s2 / r2)  # 0.9643: R rises more than S
    # x4: 0.5 + 0.04 + 0.4 x 4 x 0.8 = 1.28 + 0.05 + 0.04 -> 1.91 s
    assert by_mult[4]["step_s"] == pytest.approx(1.91)
    r4 = (512 / 1.91) / (128 / 0.7)  # 1.4660
    s4 = (1 + 512 / 384) / (1 + 128 / 384)  # 1.75
    assert by_mult[4]["samples_ratio"] == pytest.approx(1.75)
    assert by_mult[4]["time_ratio"] == pytest.approx(s4 / r4)  # 1.1937: S rises more than R
    assert by_mult[4]["concurrency"] == 256 and by_mult[1]["concurrency"] == 128
    rec = report["recommendation"]
    assert rec["mult"] == 2 and rec["responses_per_step"] == 256 and rec["prompts_per_step"] == 32
    assert rec["lr"] == pytest.approx(3e-4 * math.sqrt(256 / 128))  # sqrt rule: 4.24e-4
    assert rec["concurrency"] == 256
    assert rec["time_ratio"] == pytest.approx(s2 / r2)
    # a constant noise scale has no spread: both ends give the same answer
    assert (rec["mult_low"], rec["mult_high"]) == (2, 2)
    # x2 stays the fastest from where x1 ties it, b = (B2 R1 - B1 R2) / (R2 - R1) in ratios
    # (256 x 1 - 128 x 1.2963) / (1.2963 - 1) = 303.9, to where x4 does, (256 x 1.4660 -
    # 512 x 1.2963) / (1.2963 - 1.4660) = 1699
    assert rec["holds_from_noise"] == pytest.approx((256 - 128 * r2) / (r2 - 1))
    assert rec["holds_to_noise"] == pytest.approx((256 * r4 - 512 * r2) / (r2 - r4))
    assert rec["holds_from_noise"] == pytest.approx(303.9, abs=0.1)
    assert rec["holds_to_noise"] == pytest.approx(1699, abs=1)
    assert rec["critic_batch"] is None


def test_the_spread_of_the_noise_scale_moves_the_recommendation(tmp_path):
    # later half of steps 1..8 with a finite value: steps 5..8 -> 20, 40, 3000, 5000;
    # quartiles (inclusive): 35, 1520, 3500
    values = {5: 20.0, 6: 40.0, 7: 3000.0, 8: 5000.0}
    pass1 = _pass1(tmp_path, noise=lambda step: values.get(step, 1e6))
    # x4's update costs 1.3x the per-token cost at B0: R peaks at x2
    probes = {2: _probe(tmp_path, 2, 1.0), 4: _probe(tmp_path, 4, 1.3)}
    report = predict_report(_plan(tmp_path), pass1, PROFILE, probes)
    noise = report["noise"]
    assert (noise["low"], noise["value"], noise["high"]) == pytest.approx((35, 1520, 3500))
    by_mult = {c["mult"]: c for c in report["candidates"]}
    # x2: 0.25 + 0.02 + 0.8 + 0.05 + 0.04 = 1.16 s; x4: 0.5 + 0.04 + 2.08 + 0.09 = 2.71 s
    r = {1: 1.0, 2: (256 / 1.16) / (128 / 0.7), 4: (512 / 2.71) / (128 / 0.7)}  # 1.207, 1.033
    for m in (2, 4):
        B = 128 * m
        for key, b in (("", 1520), ("_low", 35), ("_high", 3500)):
            s = (1 + B / b) / (1 + 128 / b)
            assert by_mult[m][f"time_ratio{key}"] == pytest.approx(s / r[m])
    # B_noise = 35: S ratios 1.785 (x2), 3.356 (x4): T = 1.479, 3.249 -> x1 (T = 1);
    # B_noise = 1520: S 1.0777, 1.2330: T = 0.893, 1.194 -> x2;
    # B_noise = 3500: S 1.0353, 1.1058: T = 0.858, 1.071 -> x2
    t_low = {m: (1 + 128 * m / 35) / (1 + 128 / 35) / r[m] for m in (1, 2, 4)}
    t_high = {m: (1 + 128 * m / 3500) / (1 + 128 / 3500) / r[m] for m in (1, 2, 4)}
    rec = report["recommendation"]
    assert rec["mult"] == 2
    assert rec["mult_low"] == min(t_low, key=t_low.__getitem__) == 1
    assert rec["mult_high"] == min(t_high, key=t_high.__getitem__) == 2
    # x2 stays the fastest above (256 - 128 x 1.207) / (1.207 - 1) = 491 (x1 below it; x4,
    # slower per response than x2, never overtakes): inside the spread 35 to 3500
    assert rec["holds_from_noise"] == pytest.approx((256 - 128 * r[2]) / (r[2] - 1))
    assert rec["holds_from_noise"] == pytest.approx(491, abs=2)
    assert rec["holds_to_noise"] is None  # unbounded (report.json writes inf as null)


def test_one_concurrency_for_every_candidate_needs_no_profile(tmp_path):
    # --rollout-concurrency 128 = N0: every candidate decodes at C = 128, generation ~ N
    probes = {2: _probe(tmp_path, 2, 1.0), 4: _probe(tmp_path, 4, 1.0)}
    report = predict_report(_plan(tmp_path, concurrency=128), _pass1(tmp_path), None, probes)
    by_mult = {c["mult"]: c for c in report["candidates"]}
    assert by_mult[4]["stage_s"]["rollout"] == pytest.approx(0.8)  # 0.2 x 4
    assert report["decode_responses_per_s"] is None


def test_a_profile_without_a_needed_concurrency_is_named(tmp_path):
    probes = {2: _probe(tmp_path, 2, 1.0), 4: _probe(tmp_path, 4, 1.0)}
    profile = {"rows": [{"c": 128, "responses_per_s": 100.0}]}
    with pytest.raises(TuneError, match="no row at concurrency 256"):
        predict_report(_plan(tmp_path), _pass1(tmp_path), profile, probes)


def test_samples_ratio_is_mccandlishs_examples_not_his_steps():
    """McCandlish et al. 2018, eq. 2.11: (S/S_min - 1)(E/E_min - 1) = 1 with S their optimizer
    steps and E their examples (hyrl's samples), and sec. 2.3: at B = B_noise training takes
    twice the minimum of both. Relative to B0 = B_noise, E(B)/E_min = 2 x samples_ratio and
    S(B)/S_min = 2 x steps_ratio."""
    b_noise = 1000.0
    assert samples_ratio(b_noise, b_noise, b_noise) == 1.0  # 2 E_min / 2 E_min
    for B in (10.0, 250.0, 1000.0, 4000.0, 1e6):
        examples = 2 * samples_ratio(B, b_noise, b_noise)  # E(B) / E_min
        steps = 2 * steps_ratio(B, b_noise, b_noise)  # S(B) / S_min
        assert (steps - 1) * (examples - 1) == pytest.approx(1.0)
        assert examples == pytest.approx(1 + B / b_noise)  # grows with B
        assert steps == pytest.approx(1 + b_noise / B)  # falls with B
    # far below B_noise samples barely grow (x8: 1.0078), far above they grow with B (x8: ~8)
    assert samples_ratio(1024, 128, 1e5) == pytest.approx((1 + 1024e-5) / (1 + 128e-5))
    assert samples_ratio(1024 * 1000, 128 * 1000, 1.0) == pytest.approx(8.0, rel=1e-4)


def test_samples_ratio_with_the_numbers_of_the_2026_12_04_sweep():
    """docs/batch-size.md: B_noise 1464 at B0 = 128; 2x, 4x, 8x need 1.08, 1.24, 1.56 the
    samples (the steps formula misread as samples gave 0.92, 0.80, 0.71 instead)."""
    assert samples_ratio(256, 128, 1464) == pytest.approx(1.0804, abs=1e-4)
    assert samples_ratio(512, 128, 1464) == pytest.approx(1.2412, abs=1e-4)
    assert samples_ratio(1024, 128, 1464) == pytest.approx(1.5628, abs=1e-4)


def test_samples_ratio_limits():
    assert samples_ratio(512, 128, math.inf) == 1.0  # unbounded B_noise: samples hardly grow
    assert samples_ratio(512, 128, 0.0) == 4.0  # no signal at all: samples grow with B
    assert samples_ratio(512, 128, -5) == 4.0  # a negative estimate counts as 0


def test_noise_estimate_skips_non_finite_values():
    recs = [{"samples": 128 * i, "actor/noise_scale": v} for i, v in enumerate(
        ["nan", 10.0, None, 30.0, 50.0, 70.0], start=1)]  # fmt: skip
    est = noise_estimate(recs)
    assert est is not None
    # finite: 10, 30, 50, 70 at samples 256, 512, 640, 768; later half: 50, 70
    assert (est.low, est.value, est.high) == pytest.approx((55, 60, 65))
    assert est.window_samples == (640, 768) and est.n_values == 2
    assert noise_estimate([{"samples": 1, "actor/noise_scale": "nan"}]) is None


def test_critic_batch_is_the_divisor_nearest_its_noise_scale():
    # divisors of 512 that are multiples of 32: 32, 64, 128, 256, 512; log-nearest to 200: 256
    assert critic_batch(200.0, 512, 32) == 256
    assert critic_batch(5000.0, 512, 32) == 512
    assert critic_batch(1.0, 512, 32) == 32


def test_ppo_records_give_the_critic_its_own_batch(tmp_path):
    pass1 = _pass1(tmp_path)
    config = json.loads((pass1 / "config.json").read_text())
    config.update(critic_global_batch_size=128, critic_lr=1e-3, critic_micro_batch_size=32)
    (pass1 / "config.json").write_text(json.dumps(config))
    recs = [json.loads(x) for x in (pass1 / "metrics.jsonl").read_text().splitlines()]
    for r in recs:
        r["critic/noise_scale"] = 70.0
    (pass1 / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    probes = {2: _probe(tmp_path, 2, 0.9), 4: _probe(tmp_path, 4, 0.8)}
    rec = predict_report(_plan(tmp_path), pass1, PROFILE, probes)["recommendation"]
    assert rec["mult"] == 2  # the actor's choice, as above: N = 256
    # divisors of 256 that are multiples of 32, log-nearest to 70: 64 (|ln 64/70| < |ln 128/70|)
    assert rec["critic_batch"] == 64
    assert rec["critic_lr"] == pytest.approx(1e-3 * math.sqrt(64 / 128))


def test_predict_needs_the_reference_and_every_probe():
    costs = StepCosts(128, 2.0, dict(REF_STAGES), 0.7, 4)
    per_token = {1: seconds_per_token(costs)}
    est = noise_estimate([{"samples": 128, "actor/noise_scale": 1.0}])
    assert est is not None
    with pytest.raises(TuneModelError, match="multiplier 1"):
        predict([2], 128, 3e-4, "sqrt", costs, per_token, None, 128, est)
    with pytest.raises(TuneModelError, match="no update probe at multiplier 2"):
        predict([1, 2], 128, 3e-4, "sqrt", costs, per_token, None, 128, est)


def test_step_costs_needs_the_generation_timer():
    with pytest.raises(TuneModelError, match="perf/rollout_s"):
        step_costs([{"step": 1, "perf/actor_train_s": 1.0}], 128)


def test_verify_rows_compare_predicted_with_measured(tmp_path):
    report = _report(tmp_path)
    analysis = {
        "runs": [
            {"name": "b128-ref-s1", "path": "/x/b128-ref-s1", "time_ratio": 1.0,
             "samples_ratio": 1.0, "throughput_ratio": 1.0, "reached": True},
            {"name": "b512-sqrt-s1", "path": "/x/b512-sqrt-s1", "time_ratio": 0.5,
             "samples_ratio": 0.6, "throughput_ratio": 1.2, "reached": True},
        ]
    }  # fmt: skip
    rows = verify_rows(report, analysis, {"b128-ref-s1": 1, "b512-sqrt-s1": 4})
    assert [r["mult"] for r in rows] == [1, 4]
    t4 = report["candidates"][2]["time_ratio"]
    assert rows[1]["predicted_time_ratio"] == t4
    assert rows[1]["time_ratio_error"] == pytest.approx(t4 / 0.5 - 1)


def test_neighbours_are_the_nearest_other_candidates():
    assert neighbours([1, 2, 4, 8, 16], 4, 2) == [2, 8]
    assert neighbours([1, 2, 4, 8, 16], 16, 2) == [8, 4]
    assert neighbours([1, 2, 4, 8, 16], 1, 1) == [2]


def test_report_files_are_written_and_agree(tmp_path):
    report = _report(tmp_path)
    files = write_report(report, tmp_path / "report")
    assert {p.name for p in files} == {
        "report.json",
        "report.md",
        "noise_scale.png",
        "prediction.png",
    }
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert saved["recommendation"] == report["recommendation"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "**B = 256**" in md and "lr = 0.0004243" in md
    # the B_noise interval where x2 stays the fastest (test above: 303.9 to 1699)
    assert "x2 stays the fastest for B_noise from 304 to 1700" in md
    assert "it holds over the whole spread" in md  # a constant noise scale: no spread


# --- the command: arguments refused before anything starts ----------------------------------


def test_tune_is_a_command():
    assert COMMANDS["tune"] == "hyrl.batchsize.tune.cli:main"


@pytest.fixture
def dummy_recipe(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.sh"
    path.write_text("#!/usr/bin/env bash\nexit 3\n")
    return path


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch-mults", "2,4"], "--batch-mults 2,4: must include 1"),
        (["--batch-mults", "1"], "--batch-mults 1: one candidate"),
        (["--batch-mults", "1,x"], "'x' is not an integer"),
        (["--verify", "5"], "--verify 5: allowed: an integer from 0"),
        (["--verify", "two"], "--verify 'two': not an integer >= 0"),
        (["--budget-samples", "0"], "--budget-samples 0"),
        (["--probe-steps", "1"], "--probe-steps 1"),
        (["--verify-samples", "-3"], "--verify-samples"),
    ],
)
def test_bad_arguments_are_named(dummy_recipe, tmp_path, capsys, flags, message):
    rc = tune_main([str(dummy_recipe), "--out", str(tmp_path / "out"), *flags])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_missing_recipe_and_a_file_as_out_are_named(tmp_path, capsys):
    assert tune_main([str(tmp_path / "nope.sh"), "--out", str(tmp_path / "o")]) == 2
    assert "RECIPE" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    recipe = tmp_path / "r.sh"
    recipe.write_text("exit 0\n")
    assert tune_main([str(recipe), "--out", str(tmp_path / "file")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def _echo_recipe(tmp_path: Path, **config) -> Path:
    resolved = {
        "rollout_batch_size": 16,
        "n_samples_per_prompt": 8,
        "global_batch_size": 128,
        "lr": 3e-4,
        "seed": 1234,
        "noise_scale_beta": 0.99,
        "rollout_engine": "hf",
        "rollout_concurrency": 128,
        "rollout_max_response_len": 2,
        "num_steps": 10,
        "target": None,
        "eval_interval": 0,
        **config,
    }
    path = tmp_path / "echo.sh"
    path.write_text(f"#!/usr/bin/env bash\ncat <<'EOF'\n{json.dumps(resolved)}\nEOF\n")
    return path


def test_a_recipe_without_the_noise_scale_is_refused(tmp_path):
    with pytest.raises(TuneError, match="--noise-scale-beta none"):
        check_tune(_echo_recipe(tmp_path, noise_scale_beta=None), tmp_path / "o")


def test_verify_without_a_target_is_refused(tmp_path):
    with pytest.raises(TuneError, match="--verify 1: RECIPE .* has no --target"):
        check_tune(_echo_recipe(tmp_path), tmp_path / "o", verify=1, align_check=False)


def test_the_default_alignment_check_needs_a_target_and_evaluations(tmp_path):
    with pytest.raises(TuneError, match="--align-check on: RECIPE .* has no --target.*"
                       "allowed: --align-check off"):  # fmt: skip
        check_tune(_echo_recipe(tmp_path), tmp_path / "o")
    recipe = _echo_recipe(tmp_path, target="eval/accuracy=0.9")
    with pytest.raises(TuneError, match="--align-check on: the target .* --eval-interval is 0"):
        check_tune(recipe, tmp_path / "o")
    for bad in ("0", "1", "x"):
        with pytest.raises(TuneError, match=f"--align-fraction {bad if bad != 'x' else 'nan'}"):
            check_tune(recipe, tmp_path / "o", align_fraction=bad)


def test_a_pass1_budget_under_four_steps_is_refused(tmp_path):
    with pytest.raises(TuneError, match="--budget-samples 256: under 4 rollout steps"):
        check_tune(_echo_recipe(tmp_path), tmp_path / "o", budget_samples=256)


def test_a_member_the_recipe_rejects_is_named_before_anything_runs(tmp_path):
    # the echo recipe ignores the appended flags, so each probe's dry run resolves B = 128
    with pytest.raises(TuneError, match="member b256-sqrt-s1234"):
        check_tune(_echo_recipe(tmp_path), tmp_path / "o", batch_mults="1,2", align_check=False)
    assert not (tmp_path / "o").exists()


def test_one_micro_batch_per_step_is_refused(tmp_path):
    recipe = _echo_recipe(tmp_path, micro_batch_size=128, data_parallel_size=1)
    with pytest.raises(TuneError, match="--micro-batch-size 128 holds the whole batch"):
        check_tune(recipe, tmp_path / "o")


def test_ppo_probes_time_the_actor_from_their_first_step(tmp_path):
    """The tiny PPO recipe trains only its critic for 5 rollout steps: a 3-step probe would be
    refused (and time no actor update), so the probes switch the warm-up off."""
    from testpaths import ROOT

    plan = check_tune(ROOT / "recipes" / "tiny" / "ppo.sh", tmp_path / "o", align_check=False)
    assert plan.config["num_critic_only_steps"] == 5
    args = plan.probe_args
    assert args[args.index("--num-critic-only-steps") + 1] == "0"
    assert args[args.index("--num-steps") + 1] == "3"


def test_an_async_step_overlaps_generation_with_the_trainer_by_hand():
    from hyrl.batchsize.tune.model import step_seconds

    # trainer-bound: max(gen 0.2 + reward 0.01, actor 0.4 + other 0.04) + sync 0.05
    assert step_seconds(REF_STAGES) == pytest.approx(0.70)
    assert step_seconds(REF_STAGES, overlapped=True) == pytest.approx(max(0.21, 0.44) + 0.05)
    generation_bound = {**REF_STAGES, "rollout": 0.8}
    assert step_seconds(generation_bound, overlapped=True) == pytest.approx(0.81 + 0.05)


def test_async_records_give_the_worker_generation_and_an_overlapped_prediction(tmp_path):
    """--async-rollout: pass 1 logs the worker's perf/worker_rollout_s / _reward_s (its
    perf/trainer_idle_s is the wait, not a stage); tune predicts max(worker, trainer) steps."""
    recs = []
    for step in range(1, 9):
        stages = {k: v for k, v in REF_STAGES.items() if k not in ("rollout", "reward")}
        rec = _record(step, 128, stages, 384.0)
        rec.update({"perf/worker_rollout_s": 0.2, "perf/worker_reward_s": 0.01})
        rec["perf/trainer_idle_s"] = 0.0
        recs.append(rec)
    pass1 = _write_run(tmp_path / "pass1", 1, recs)
    costs, _, _ = prediction._costs(pass1, "pass 1", 0.5)
    assert costs.seconds == pytest.approx(REF_STAGES)  # the worker's stages read as its own
    plan = _plan(tmp_path)
    plan.config.update(async_rollout=True, max_staleness=1)
    probes = {2: _probe(tmp_path, 2, 0.9), 4: _probe(tmp_path, 4, 0.8)}
    report = predict_report(plan, pass1, PROFILE, probes)
    assert report["overlapped"] is True
    ref = report["candidates"][0]
    assert ref["step_s"] == pytest.approx(0.44 + 0.05)  # trainer-bound at B0
    # x4: generation 0.2 x 4 x r(128)/r(256) = 0.8 x 100/160 = 0.5, reward 0.04; trainer
    # 0.4 x 4 x 0.8 = 1.28 + 0.04 overhead; sync 0.05: max(0.54, 1.32) + 0.05
    x4 = report["candidates"][2]
    assert x4["step_s"] == pytest.approx(1.32 + 0.05)
    from hyrl.batchsize.tune.report import render_markdown

    assert "overlap the trainer's stages" in render_markdown(report, [])


def _one_step_records(grad_sq: list[float], trace: list[float], ema: float = 7.0) -> list[dict]:
    """Records of a run that logged its one-step estimates (|G|^2_t, tr(Sigma)_t), and a
    moving average (`ema`) the estimate must not be taken from."""
    return [
        {
            "samples": 128 * step,
            "actor/noise_scale": ema,
            "actor/noise_grad_sq_step": g,
            "actor/noise_trace_sigma_step": t,
        }
        for step, (g, t) in enumerate(zip(grad_sq, trace), start=1)
    ]


def test_the_noise_scale_is_the_ratio_of_the_means_of_the_one_step_estimates():
    # steps 1..20; the later half (11..20) has |G|^2 = 1, 3, 1, 3, ... (mean 2) and
    # tr(Sigma) = 500 |G|^2 at every step (mean 1000): B_noise = 1000 / 2 = 500, and every
    # bootstrap resample gives 500 too (each step's ratio is 500)
    grad_sq = [100.0] * 10 + [1.0, 3.0] * 5
    est = noise_estimate(_one_step_records(grad_sq, [500.0 * g for g in grad_sq]))
    assert est is not None
    assert est.value == pytest.approx(500)
    assert (est.low, est.high) == pytest.approx((500, 500))
    assert est.n_values == 10 and est.window_samples == (128 * 11, 128 * 20)
    assert est.spread == "90% block-bootstrap interval"


def test_the_bootstrap_interval_holds_the_estimate_and_is_the_same_every_time():
    # later half: |G|^2 = -1, 2, 3, -2, 4, 1, 0.5, 2.5 (mean 1.25; one-step estimates may be
    # negative), tr(Sigma) = 100 throughout: B_noise = 100 / 1.25 = 80
    grad_sq = [9.0] * 8 + [-1.0, 2.0, 3.0, -2.0, 4.0, 1.0, 0.5, 2.5]
    records = _one_step_records(grad_sq, [100.0] * 16)
    est = noise_estimate(records)
    assert est is not None and est.value == pytest.approx(80)
    assert est.low < 80 < est.high
    again = noise_estimate(records)
    assert again is not None and (again.low, again.high) == (est.low, est.high)  # seeded


def test_an_unbounded_end_of_the_interval_predicts_the_all_noise_limit():
    # later half |G|^2 = 6, -5, -5, 6, 1, -2, 7, -6, 0, -1: mean 0.1, tr(Sigma) = 10: B_noise
    # = 10 / 0.1 = 100, but many resamples have a mean |G|^2 <= 0: no upper bound
    grad_sq = [9.0] * 10 + [6.0, -5.0, -5.0, 6.0, 1.0, -2.0, 7.0, -6.0, 0.0, -1.0]
    est = noise_estimate(_one_step_records(grad_sq, [10.0] * 20))
    assert est is not None and est.value == pytest.approx(100)
    assert math.isinf(est.high)
    # S(B)/S(B0) -> 1 as B_noise grows without bound: x4 needs hardly more samples
    assert samples_ratio(512, 128, math.inf) == 1.0
    assert samples_ratio(512, 128, 1e12) == pytest.approx(1.0)


def test_without_a_positive_mean_gradient_or_enough_steps_the_moving_average_is_used():
    # later half |G|^2 mean -0.5: no ratio of means; the logged moving average (7) stands in
    no_signal = _one_step_records([1.0] * 8 + [-1.0, 0.0] * 4, [10.0] * 16)
    est = noise_estimate(no_signal)
    assert est is not None and est.value == 7.0
    assert est.spread == "interquartile range of the moving average"
    few = _one_step_records([1.0] * 6, [10.0] * 6)  # 3 steps in the window, fewer than 8
    assert noise_estimate(few).value == 7.0  # type: ignore[union-attr]


def test_a_candidate_the_alignment_check_rejected_is_not_recommended(tmp_path):
    probes = {2: _probe(tmp_path, 2, 0.9), 4: _probe(tmp_path, 4, 0.8)}
    # unchecked, x2 is the least predicted T (0.9643x, the hand computation above)
    report = predict_report(_plan(tmp_path), _pass1(tmp_path), PROFILE, probes, rejected_from=2)
    # x2 and every larger candidate rejected: x1 is what is left
    assert report["recommendation"]["mult"] == 1
    assert report["recommendation"]["time_ratio"] == pytest.approx(1.0)
    assert len(report["candidates"]) == 3  # the table still predicts every candidate


def test_probe_rounds_cancel_a_load_that_changes_between_rounds(tmp_path):
    # round 2 ran on a machine twice as slow, every probe of it alike: u_m / u_1 per round is
    # the same, so the prediction is the single-round one (x2: 0.9, x4: 0.8 of x1's per-token
    # actor cost) and R's range over the rounds has no width
    probes = {
        m: [_probe(tmp_path, m, f, slow, f"x{m}r{r}") for r, slow in ((1, 1.0), (2, 2.0))]
        for m, f in ((1, 1.0), (2, 0.9), (4, 0.8))
    }
    pass1 = _pass1(tmp_path)
    report = predict_report(_plan(tmp_path), pass1, PROFILE, probes)
    by_mult = {c["mult"]: c for c in report["candidates"]}
    r2 = (256 / 1.08) / (128 / 0.7)  # the hand computation of the single-round test
    assert by_mult[2]["throughput_ratio"] == pytest.approx(r2)
    assert by_mult[2]["throughput_ratio_range"] == pytest.approx([r2, r2])
    assert report["probe_rounds"] == 2
    # without rounds (a probe each, against pass 1) the slow round would have counted: x2's
    # actor update 2 x 0.72 = 1.44 s, weight sync and other still fixed at pass 1's
    slow = predict_report(_plan(tmp_path), pass1, PROFILE, {2: probes[2][1], 4: probes[4][1]})
    assert {c["mult"]: c for c in slow["candidates"]}[2]["throughput_ratio"] < r2


def test_a_verdict_inside_the_spread_of_r_is_named(tmp_path):
    # round 1 as the hand computation (x2's R ratio 1.2963, T 0.9643); in round 2 x2's actor
    # update cost 1.2 per token of x1's (its step 0.25 + 0.02 + 0.96 + 0.09 = 1.32 s: R ratio
    # (256 / 1.32) / (128 / 0.7) = 1.0606, T = 1.25 / 1.0606 = 1.1786), so x2's T range
    # 0.9643-1.1786 holds 1, x1's T
    probes = {
        1: [_probe(tmp_path, 1, 1.0, name=f"x1r{r}") for r in (1, 2)],
        2: [_probe(tmp_path, 2, f, name=f"x2r{r}") for r, f in ((1, 0.9), (2, 1.2))],
        4: [_probe(tmp_path, 4, 0.8, name=f"x4r{r}") for r in (1, 2)],
    }
    report = predict_report(_plan(tmp_path), _pass1(tmp_path), PROFILE, probes)
    x2 = {c["mult"]: c for c in report["candidates"]}[2]
    low, high = (256 / 1.32) / (128 / 0.7), (256 / 1.08) / (128 / 0.7)
    assert x2["throughput_ratio_range"] == pytest.approx([low, high])
    assert x2["time_ratio_range"] == pytest.approx([1.25 / high, 1.25 / low])
    # the median of 0.9 and 1.2 is 1.05: x2's actor 0.4 x 2 x 1.05 = 0.84, step 1.2 s
    assert x2["throughput_ratio"] == pytest.approx((256 / 1.2) / (128 / 0.7))
    rec = report["recommendation"]
    assert rec["mult"] == 1 and rec["within_throughput_spread"] == [2]
    from hyrl.batchsize.tune.report import spread_text

    assert "the T ratio range of x2 overlaps x1's" in spread_text(report)


# --- progress: the lines off a terminal ------------------------------------------------------

# A recipe for single members: reads the flags tune appends, writes summary.json (P x 8 x
# --num-steps responses in 2 s), or exits 4 at B = $FAKE_FAIL_B.
MEMBER_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
steps=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-progress) shift ;;
    --rollout-batch-size) p="$2"; shift 2 ;;
    --global-batch-size) b="$2"; shift 2 ;;
    --num-steps) steps="$2"; shift 2 ;;
    --run-dir) dir="$2"; shift 2 ;;
    *) shift 2 ;;
  esac
done
if [[ "$b" == "${FAKE_FAIL_B:-}" ]]; then echo boom >&2; exit 4; fi
mkdir -p "$dir"
echo "{\"samples\": $((p * 8 * steps)), \"elapsed_s\": 2.0}" > "$dir/summary.json"
"""


def test_off_a_terminal_each_probe_prints_a_line_as_it_starts_and_ends(tmp_path):
    plan = _plan(tmp_path, mults=(1, 2))  # --probe-steps 3, one round
    plan.recipe.write_text(MEMBER_RECIPE)
    plan.env = {"PATH": os.environ["PATH"]}
    out, console = io.StringIO(), Console(file=io.StringIO())
    log = StudyLog("hyrl tune", out=out, tty=False, scope="tune")
    with reporting(log):
        run_probes(plan, console)
    lines = out.getvalue().splitlines()
    # budgets: 3 steps x 128 and x 256 responses
    assert lines[0] == (
        "hyrl tune: probe [1/2] b128-ref-s1234-r1 started (B=128, lr 3.00e-04, 384 samples)"
    )
    assert re.fullmatch(
        r"hyrl tune: probe \[1/2\] b128-ref-s1234-r1 done in \S+ s: 384 samples in 2\.0 s "
        r"\(192\.0 resp/s\) \| 1 done, 0 failed, 1 to go \| tune 0:00:\d\d elapsed, "
        r"probes ETA 0:00:\d\d",
        lines[1],
    )
    assert lines[2].startswith("hyrl tune: probe [2/2] b256-sqrt-s1234-r1 started (B=256,")
    assert "768 samples in 2.0 s" in lines[3] and "2 done, 0 failed, 0 to go" in lines[3]
    assert len(lines) == 4

    # again: both kept; then a probe that fails is named with its exit code and log
    out.truncate(0)
    out.seek(0)
    (tmp_path / "out" / "probes" / "b256-sqrt-s1234-r1" / "summary.json").unlink()
    plan.env = {"FAKE_FAIL_B": "256", "PATH": os.environ["PATH"]}
    with reporting(log), pytest.raises(TuneError, match="exited 4"):
        run_probes(plan, console)
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "hyrl tune: probe [1/2] b128-ref-s1234-r1 skipped: finished earlier (384 samples in "
        "2.0 s (192.0 resp/s))"
    )
    log_path = tmp_path / "out" / "probes" / "b256-sqrt-s1234-r1.log"
    assert "ended in " in lines[2] and f": failed (exit 4, log: {log_path}) |" in lines[2]

    # a step whose runs stop at a level (the alignment check's): no ETA, the tune's time only
    plan.env = {"PATH": os.environ["PATH"]}
    member = {**plan_members(plan.base, [1], "sqrt", seeds=[1234])[0], "num_steps": 2}
    out.truncate(0)
    out.seek(0)
    (tmp_path / "align").mkdir()
    (tmp_path / "align2").mkdir()
    with reporting(log), step_runs("align check", [(member["name"], None)], eta=False):
        run_member(plan, console, tmp_path / "align", member, [], "status", "align check:")
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "hyrl tune: align check [1/1] b128-ref-s1234 started (B=128, lr 3.00e-04, 256 samples)"
    )
    assert re.search(r": 256 samples in 2\.0 s .* \| tune 0:00:\d\d elapsed$", lines[1])
    # outside `reporting` (not from run_tune): nothing printed
    out.truncate(0)
    out.seek(0)
    run_member(plan, console, tmp_path / "align2", member, [], "status", "align check:")
    assert out.getvalue() == ""


def test_a_profile_every_candidate_shares_is_skipped_with_a_line(tmp_path):
    plan = _plan(tmp_path, mults=(1, 2), concurrency=64)  # C = min(128 m, 64) = 64 for both
    out = io.StringIO()
    with reporting(StudyLog("hyrl tune", out=out, tty=False)):
        assert run_profile(plan, Console(file=io.StringIO())) is None
    assert out.getvalue() == "hyrl tune: profile skipped: every candidate decodes at C = 64\n"
