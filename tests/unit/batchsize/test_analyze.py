"""hyrl.batchsize.analyze / report and `hyrl analyze`, on hand-made run directories.

The synthetic sweep: every run starts at accuracy 0.30 and rises linearly with cumulative
samples s as acc = 0.30 + 0.5 * s / (12800 * k), where k is how many times the reference's
samples the run needs at every level. Linear interpolation of a linear curve is exact, so:

  reference B=128, k=1,    R=10 resp/s: S = (0.77-0.30)/0.5 * 12800 = 12032, T = 1203.2 s
  B=256,           k=1.05, R=15:        S = 12633.6 (1.05x), T = 842.24 s (1.05/1.5 = 0.70x)
  B=512,           k=1.67, R=40:        S = 20093.44 (1.67x), T = 502.336 s: faster, not aligned
  B=1024,          k=2.5,  plateau 0.6: never reaches 0.77
"""

from __future__ import annotations

import json
import math

import pytest

from hyrl.batchsize.analyze import (
    AnalysisError,
    alignment,
    alignment_levels,
    analyze,
    load_run,
    metric_curve,
    parse_target,
    samples_to_reach,
    stage_shares,
)
from hyrl.cli import main

TARGET = ("eval/accuracy", 0.77)
S_REF = (0.77 - 0.30) / 0.5 * 12800  # 12032


def write_run(
    path, B, k, R, n_steps, eval_every, plateau=None, G=8, lr=1e-6, config=None, extra=None
):
    """A run directory: config.json + metrics.jsonl, one record per optimizer step."""
    path.mkdir(parents=True)
    cfg = (
        {"rollout_batch_size": B // G, "n_samples_per_prompt": G, "global_batch_size": B, "lr": lr}
        if config is None
        else config
    )
    (path / "config.json").write_text(json.dumps(cfg))
    lines = [{"step": 0, "samples": 0, "elapsed_s": 0.0, "eval/accuracy": 0.30}]
    dt = B / R
    for step in range(1, n_steps + 1):
        s = B * step
        rec = {
            "step": step,
            "samples": s,
            "elapsed_s": s / R,
            "perf/rollout_s": 0.6 * dt,
            "perf/actor_train_s": 0.3 * dt,
            "perf/step_s": dt,
            "perf/rollout_tokens_per_s": 1234.0,
        }
        if step % eval_every == 0:
            acc = 0.30 + 0.5 * s / (12800 * k)
            rec["eval/accuracy"] = min(acc, plateau) if plateau is not None else acc
        lines.append(rec)
    if extra:
        lines.extend(extra)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


@pytest.fixture
def sweep(tmp_path):
    d = tmp_path / "sweep"
    write_run(d / "b128", 128, 1.0, 10, 120, 10)
    write_run(d / "b256", 256, 1.05, 15, 70, 5)
    write_run(d / "b512", 512, 1.67, 40, 60, 3)
    write_run(d / "b1024", 1024, 2.5, 25, 20, 2, plateau=0.6)
    return d


def by_name(result):
    return {r["name"]: r for r in result["runs"]}


# --- curves and crossings --------------------------------------------------------------------


def test_samples_to_reach_interpolates_between_the_evaluations_around_the_crossing():
    xs, vs = [0, 100, 200], [0.1, 0.3, 0.5]
    assert samples_to_reach(xs, vs, 0.4) == pytest.approx(150.0)
    assert samples_to_reach(xs, vs, 0.3) == pytest.approx(100.0)
    assert samples_to_reach(xs, vs, 0.05) == 0  # the first evaluation already reaches it
    assert samples_to_reach(xs, vs, 0.6) is None
    # first crossing wins even if the curve dips later
    assert samples_to_reach([0, 100, 200, 300], [0.1, 0.5, 0.2, 0.6], 0.4) == pytest.approx(75.0)
    # lower is better (a loss)
    assert samples_to_reach([0, 100], [1.0, 0.5], 0.75, higher_is_better=False) == pytest.approx(50)


def test_metric_curve_skips_non_finite_values_and_fills_missing_samples(tmp_path):
    run_dir = write_run(
        tmp_path / "r",
        128,
        1.0,
        10,
        4,
        100,
        extra=[
            {"step": 5, "samples": 640, "elapsed_s": 64.0, "eval/accuracy": "nan"},
            {"step": 6, "samples": 768, "elapsed_s": 76.8},
            {"step": 6, "eval/accuracy": 0.5},  # eval logged on its own line for step 6
        ],
    )
    samples, elapsed, steps, values = metric_curve(load_run(run_dir), "eval/accuracy")
    assert samples == [0, 768]
    assert elapsed == [0.0, 76.8]
    assert steps == [0, 6]
    assert values == [0.30, 0.5]


def test_alignment_levels_start_clearly_above_the_start_value():
    levels = alignment_levels(0.77, 0.30, 10)
    assert levels[0] == pytest.approx(0.30 + 0.1 * 0.47)
    assert levels[-1] == 0.77
    assert len(levels) == 10
    assert levels[1] - levels[0] == pytest.approx((0.77 - 0.347) / 9)


def test_alignment_ratios_and_tolerance():
    ref = ([0, 1000], [0.0, 1.0])
    near = ([0, 1050], [0.0, 1.0])  # 1.05x everywhere
    far = ([0, 1670], [0.0, 1.0])  # 1.67x everywhere
    ok, ratios = alignment(near, ref, target=1.0, start_value=0.0, tolerance=0.2)
    assert ok is True
    assert [lv for lv, _ in ratios] == pytest.approx(alignment_levels(1.0, 0.0))
    assert all(r == pytest.approx(1.05) for _, r in ratios)
    ok, ratios = alignment(far, ref, target=1.0, start_value=0.0, tolerance=0.2)
    assert ok is False and ratios[0][1] == pytest.approx(1.67)
    assert alignment(far, ref, 1.0, 0.0, tolerance=0.7)[0] is True
    # only levels both reach are compared: a run stopping at 0.5 is judged on 0.1..0.5
    ok, ratios = alignment(([0, 525], [0.0, 0.5]), ref, 1.0, 0.0, 0.2)
    assert ok is True and max(lv for lv, _ in ratios) <= 0.5 + 1e-12 and len(ratios) == 5
    # no common level -> not aligned
    assert alignment(([0, 100], [0.0, 0.05]), ref, 1.0, 0.0, 0.2) == (False, [])


# --- the analysis ----------------------------------------------------------------------------


def test_analyze_measures_samples_throughput_time_and_alignment(sweep):
    result = analyze([sweep], TARGET)
    runs = by_name(result)
    assert result["reference"] == "b128"  # no sweep.json: the smallest B
    assert result["target"] == {"metric": "eval/accuracy", "value": 0.77}
    assert result["tolerance"] == 0.2

    ref = runs["b128"]
    assert ref["samples_to_target"] == pytest.approx(S_REF)
    assert ref["time_to_target_s"] == pytest.approx(S_REF / 10)
    assert ref["steps_to_target"] == pytest.approx(S_REF / 128)
    assert ref["throughput_responses_per_s"] == pytest.approx(10.0)
    assert ref["prompts_per_step"] == 16 and ref["responses_per_step"] == 128
    assert ref["aligned"] is True and ref["samples_ratio"] == pytest.approx(1.0)

    b256 = runs["b256"]
    assert b256["samples_to_target"] == pytest.approx(1.05 * S_REF)
    assert b256["samples_ratio"] == pytest.approx(1.05)
    assert b256["throughput_ratio"] == pytest.approx(1.5)
    assert b256["time_ratio"] == pytest.approx(0.7)
    assert b256["predicted_time_ratio"] == pytest.approx(0.7)
    assert b256["aligned"] is True
    assert len(b256["alignment_ratios"]) == 10
    assert all(x["ratio"] == pytest.approx(1.05) for x in b256["alignment_ratios"])

    b512 = runs["b512"]
    assert b512["samples_ratio"] == pytest.approx(1.67)
    assert b512["time_ratio"] == pytest.approx(1.67 / 4)
    assert b512["aligned"] is False and "outside" in b512["alignment_reason"]

    never = runs["b1024"]
    assert never["reached"] is False
    assert never["samples_to_target"] is None and never["time_to_target_s"] is None
    assert never["time_ratio"] is None and never["aligned"] is False
    assert result["unreached"] == ["b1024"]

    assert result["critical_batch_responses"] == 256
    assert result["fastest_valid"] == "b256"  # b512 is faster but not aligned
    json.dumps(result, allow_nan=False)  # JSON-safe


def test_stage_shares_sum_perf_stages_over_step_time_and_ignore_rates(sweep):
    shares = stage_shares(load_run(sweep / "b256"))
    assert shares == pytest.approx({"rollout": 0.6, "actor_train": 0.3, "other": 0.1})


def test_the_async_engine_idle_time_is_not_a_stage_and_the_trainer_wait_is(sweep):
    path = sweep / "b256" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:  # the worker's idle time overlaps the step; the trainer's wait is in it
        if "perf/step_s" in row:
            row.update({"perf/engine_idle_s": 0.7 * row["perf/step_s"]})
            row.update({"perf/trainer_idle_s": 0.05 * row["perf/step_s"]})
            row.update({"perf/worker_rollout_s": 0.2 * row["perf/step_s"]})  # the worker's busy
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shares = stage_shares(load_run(sweep / "b256"))
    assert shares == pytest.approx(
        {"rollout": 0.6, "actor_train": 0.3, "trainer_idle": 0.05, "other": 0.05}
    )


def test_tolerance_changes_the_verdict(sweep):
    result = analyze([sweep], TARGET, tolerance=0.8)
    assert by_name(result)["b512"]["aligned"] is True
    assert result["critical_batch_responses"] == 512
    assert result["fastest_valid"] == "b512"


def test_foreign_run_dir_without_batch_config(tmp_path):
    # No rollout_batch_size / global_batch_size: B comes from the median step of `samples`.
    foreign = tmp_path / "other-tool-run"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"lr": 2e-6, "model": "x"}))
    recs = [{"step": i, "samples": 96 * i, "elapsed_s": 9.6 * i} for i in range(0, 11)]
    for r in recs:
        if r["step"] % 2 == 0:
            r["eval/accuracy"] = 0.3 + 0.5 * r["samples"] / 1000
    recs[4]["eval/accuracy"] = "nan"
    (foreign / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in recs) + '{"step": 11, "samp'
    )  # half-written last line
    run = load_run(foreign)
    assert run.name == "other-tool-run"
    assert run.responses_per_step == 96 and run.prompts_per_step is None
    assert run.lr == 2e-6
    samples, _, _, values = metric_curve(run, "eval/accuracy")
    assert 384 not in samples and len(values) == 5  # the "nan" evaluation is skipped
    result = analyze([foreign], ("eval/accuracy", 0.6))
    row = result["runs"][0]
    assert row["samples_to_target"] == pytest.approx(600.0)
    assert row["time_to_target_s"] == pytest.approx(60.0)
    assert row["prompts_per_step"] is None and row["aligned"] is True


def test_prompts_from_global_batch_over_group_size(tmp_path):
    d = write_run(
        tmp_path / "g",
        256,
        1.0,
        10,
        10,
        5,
        config={"global_batch_size": 256, "n_samples_per_prompt": 8},
    )
    run = load_run(d)
    assert run.prompts_per_step == 32 and run.responses_per_step == 256 and run.lr is None


def test_sweep_json_names_the_reference_and_the_members(sweep):
    (sweep / "sweep.json").write_text(
        json.dumps(
            {
                "reference": "b256",
                "members": [
                    {"name": "b128"},
                    {"name": "b256"},
                    {"name": "b512"},
                    {"name": "b2048"},
                ],
            }
        )
    )
    result = analyze([sweep], TARGET)
    assert result["reference"] == "b256"
    assert [r["name"] for r in result["runs"]] == ["b128", "b256", "b512"]  # b1024 not a member
    assert by_name(result)["b128"]["samples_ratio"] == pytest.approx(1 / 1.05)
    assert any("b2048" in n for n in result["notes"])  # member without a run directory


def test_reference_flag_and_unknown_reference(sweep):
    assert analyze([sweep], TARGET, reference="b512")["reference"] == "b512"
    with pytest.raises(AnalysisError, match=r"--reference 'nope'") as err:
        analyze([sweep], TARGET, reference="nope")
    assert all(name in str(err.value) for name in ("b128", "b256", "b512", "b1024"))


def test_bad_inputs_raise_naming_what_is_allowed(sweep, tmp_path):
    with pytest.raises(AnalysisError, match="--tolerance"):
        analyze([sweep], TARGET, tolerance=0)
    with pytest.raises(AnalysisError, match="no run has finite values of 'eval/acc'"):
        analyze([sweep], ("eval/acc", 0.5))
    (tmp_path / "empty").mkdir()
    with pytest.raises(AnalysisError, match="metrics.jsonl"):
        analyze([tmp_path / "empty"], TARGET)
    assert parse_target("eval/accuracy=0.77") == ("eval/accuracy", 0.77)
    # Foreign run directories name their own metrics: no eval/ or train/ prefix required.
    assert parse_target("val_acc=0.5") == ("val_acc", 0.5)
    for bad in ("eval/accuracy", "=0.7", "eval/accuracy=high", "eval/accuracy=nan"):
        with pytest.raises(AnalysisError, match="METRIC=VALUE"):
            parse_target(bad)


# --- the report and the CLI ------------------------------------------------------------------


def test_cli_writes_report_and_plots(sweep, tmp_path, capsys):
    out = tmp_path / "report"
    rc = main(["analyze", str(sweep), "--target", "eval/accuracy=0.77", "--out", str(out)])
    assert rc == 0
    for name in (
        "report.json",
        "report.md",
        "eval_accuracy_vs_samples.png",
        "eval_accuracy_vs_time.png",
        "eval_accuracy_vs_steps.png",
        "stage_shares.png",
    ):
        assert (out / name).stat().st_size > 0, name
    assert (out / "eval_accuracy_vs_samples.png").read_bytes()[:4] == b"\x89PNG"
    report = json.loads((out / "report.json").read_text())
    assert {
        "reference",
        "target",
        "tolerance",
        "fastest_valid",
        "critical_batch_responses",
        "runs",
    } <= set(report)
    assert {
        "name",
        "prompts_per_step",
        "responses_per_step",
        "lr",
        "reached",
        "samples_to_target",
        "time_to_target_s",
        "throughput_responses_per_s",
        "samples_ratio",
        "throughput_ratio",
        "time_ratio",
        "aligned",
    } <= set(report["runs"][0])
    assert report["fastest_valid"] == "b256"
    md = (out / "report.md").read_text()
    assert (
        "B=256 (b256) reaches the target with 1.05x the samples at 1.50x the throughput: "
        "0.70x the time" in md
    )
    assert "b1024 (never reached)" in md
    assert "B=1024 (b1024) never reaches the target" in md
    printed = capsys.readouterr().out
    assert "report.md" in printed and "b256" in printed


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--target", "eval/accuracy"], "--target"),
        (["--target", "eval/accuracy=0.77", "--tolerance", "0"], "--tolerance"),
        (["--target", "eval/accuracy=0.77", "--tolerance", "wide"], "--tolerance"),
        (["--target", "eval/nope=0.77"], "eval/accuracy"),  # lists the metrics that exist
        (["--target", "eval/accuracy=0.77", "--reference", "b3"], "--reference"),
        (["--target", "eval/accuracy=0.77", "--reference"], "--reference"),
    ],
)
def test_cli_errors_exit_2_naming_the_flag(sweep, tmp_path, capsys, args, flag):
    rc = main(["analyze", str(sweep), *args, "--out", str(tmp_path / "o")])
    assert rc == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "o" / "report.json").exists()


def test_cli_path_that_is_not_a_run_or_sweep_dir(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    rc = main(
        [
            "analyze",
            str(tmp_path / "notes"),
            "--target",
            "eval/accuracy=0.7",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "notes" in err and "metrics.jsonl" in err and "sweep.json" in err
    rc = main(
        [
            "analyze",
            str(tmp_path / "missing"),
            "--target",
            "eval/accuracy=0.7",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert rc == 2 and "does not exist" in capsys.readouterr().err


def test_json_result_has_no_nan(tmp_path):
    d = write_run(
        tmp_path / "r",
        128,
        1.0,
        10,
        5,
        1,
        extra=[{"step": 6, "samples": 768, "elapsed_s": "inf", "eval/accuracy": 0.2}],
    )
    result = analyze([d], ("eval/accuracy", 0.99))
    text = json.dumps(result, allow_nan=False)
    assert "NaN" not in text and result["runs"][0]["reached"] is False
    assert not any(
        isinstance(v, float) and not math.isfinite(v) for v in result["runs"][0].values()
    )


def test_filtered_groups_count_in_throughput_and_in_samples_generated(tmp_path):
    """--dynamic-sampling: the reference decodes what it consumes; the filtered run decodes 2x
    what it consumes (half its groups dropped) at R = 20 decoded/s, so 10 consumed/s.
    S (consumed) is the reference's 12032 for both; S_generated 12032 and 24064; R 10 and 20;
    predicted T ratio = (24064 / 12032) / (20 / 10) = 1.0, and the measured one too."""
    d = tmp_path / "sweep"
    write_run(d / "plain", 128, 1.0, 10, 120, 10)
    filtered = write_run(d / "filtered", 256, 2.0, 10, 60, 5)  # consumes 256/step at 10/s
    rows = [json.loads(line) for line in (filtered / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row["samples_generated"] = 2 * row["samples"]
    # the curve against consumed samples: the same as the reference's
    for row in rows:
        if "eval/accuracy" in row and row["step"]:
            row["eval/accuracy"] = 0.30 + 0.5 * row["samples"] / 12800
    (filtered / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    runs = by_name(analyze([d], TARGET, reference="plain"))
    plain, dyn = runs["plain"], runs["filtered"]
    assert plain["samples_generated_to_target"] == pytest.approx(S_REF)  # none logged: = S
    assert dyn["samples_to_target"] == pytest.approx(S_REF)
    assert dyn["samples_generated_to_target"] == pytest.approx(2 * S_REF)
    assert dyn["throughput_responses_per_s"] == pytest.approx(20.0)  # decoded per second
    assert dyn["samples_ratio"] == pytest.approx(1.0)
    assert dyn["samples_generated_ratio"] == pytest.approx(2.0)
    assert dyn["predicted_time_ratio"] == pytest.approx(1.0)
    assert dyn["time_ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize("varying", [{"batch_schedule": "auto"}, {"batch_ramp": "128:512:2"}])
def test_a_run_whose_batch_varied_reports_its_mean_batch_over_optimizer_steps(tmp_path, varying):
    run_dir = tmp_path / "auto"
    run_dir.mkdir()
    config = {"rollout_batch_size": 16, "n_samples_per_prompt": 8, "global_batch_size": 128}
    (run_dir / "config.json").write_text(json.dumps({**config, **varying}))
    # B = 128, 256, 512: 896 responses over 3 optimizer steps
    rows = [(1, 128), (2, 384), (3, 896)]
    (run_dir / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": step, "samples": samples, "elapsed_s": float(step)}) + "\n"
            for step, samples in rows
        )
    )
    run = load_run(run_dir)
    assert run.responses_per_step == pytest.approx(896 / 3)
    assert run.responses_per_step_source == "samples / optimizer steps (B varied during the run)"
    assert any("B varied during the run" in note for note in run.notes)
    (run_dir / "config.json").write_text(json.dumps(config))  # a fixed B: config.json's
    assert load_run(run_dir).responses_per_step == 128


def test_an_async_run_reports_its_median_staleness_next_to_s_r_t(sweep, tmp_path):
    """--async-rollout logs rollout/staleness_mean per rollout step; the row and the report's
    table carry their median, a synchronous run none."""
    path = sweep / "b256" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(r for r in rows if r["step"] > 0):
        row["rollout/staleness_mean"] = [0.0, 1.0, 1.0, 2.0][i % 4]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "report"
    rc = main(["analyze", str(sweep), "--target", "eval/accuracy=0.77", "--out", str(out)])
    assert rc == 0
    runs = by_name(json.loads((out / "report.json").read_text()))
    assert runs["b256"]["staleness_median"] == 1.0
    assert runs["b128"]["staleness_median"] is None
    md = (out / "report.md").read_text()
    assert "| T | staleness | S ratio |" in md
    b256_line = next(line for line in md.splitlines() if line.startswith("| b256 "))
    assert b256_line.split(" | ")[7] == "1"


# --- over seeds -------------------------------------------------------------------------------


def _seeded(path, name, seed, B, k, R, n_steps, eval_every, plateau=None, lr=1e-6):
    cfg = {
        "rollout_batch_size": B // 8, "n_samples_per_prompt": 8, "global_batch_size": B,
        "lr": lr, "seed": seed,
    }  # fmt: skip
    return write_run(path / f"{name}-s{seed}", B, k, R, n_steps, eval_every, plateau, config=cfg)


@pytest.fixture
def seeded_sweep(tmp_path):
    """Three seeds of a reference (B=128) and a B=256 member. The machine was twice as fast
    during seed 2 (every R doubled, both members), and B=256 needs 1.05x, 1.05x and 2.5x (seed
    3: plateau 0.6, never) the samples of its seed's reference."""
    d = tmp_path / "sweep"
    members = []
    for seed, speed in ((1, 1.0), (2, 2.0), (3, 1.0)):
        _seeded(d, "b128-ref", seed, 128, 1.0, 10 * speed, 120, 10)
        plateau = 0.6 if seed == 3 else None
        _seeded(d, "b256-sqrt", seed, 256, 1.05, 15 * speed, 70, 5, plateau=plateau, lr=2e-6)
        members += [{"name": f"b128-ref-s{seed}"}, {"name": f"b256-sqrt-s{seed}"}]
    (d / "sweep.json").write_text(json.dumps({"reference": "b128-ref-s1", "members": members}))
    return d


def test_each_seed_is_compared_with_its_own_reference_and_verdicts_are_over_seeds(seeded_sweep):
    result = analyze([seeded_sweep], TARGET)
    rows = {r["name"]: r for r in result["runs"]}
    # seed 2 ran on a machine twice as fast: against seed 1's reference its R ratio would be
    # 3.0x; against its own seed's reference (also doubled) it is 15 / 10 = 1.5x, as seed 1's
    assert rows["b256-sqrt-s2"]["paired_with"] == "b128-ref-s2"
    assert rows["b256-sqrt-s2"]["throughput_ratio"] == pytest.approx(1.5)
    assert rows["b256-sqrt-s1"]["throughput_ratio"] == pytest.approx(1.5)
    assert rows["b128-ref-s2"]["time_ratio"] == pytest.approx(1.0)
    # T ratio = 1.05 / 1.5 = 0.70 on seeds 1 and 2; seed 3 never reaches 0.77
    assert rows["b256-sqrt-s2"]["time_ratio"] == pytest.approx(0.70)
    assert not rows["b256-sqrt-s3"]["reached"]
    groups = {g["group"]: g for g in result["groups"]}
    assert set(groups) == {"b128-ref", "b256-sqrt"}
    g = groups["b256-sqrt"]
    assert g["seeds"] == [1, 2, 3] and (g["n_reached"], g["reached"]) == (2, True)
    # median over (0.70, 0.70, never) = 0.70; its range 0.70 to never (None)
    assert g["time_ratio_median"] == pytest.approx(0.70)
    assert g["time_ratio_range"][0] == pytest.approx(0.70) and g["time_ratio_range"][1] is None
    assert g["throughput_ratio_range"] == pytest.approx([1.5, 1.5])
    # median T over seeds: seed 1 842.24 s, seed 2 421.12 s, seed 3 never -> 842.24 s
    assert g["time_to_target_s_median"] == pytest.approx(842.24)
    ref = groups["b128-ref"]
    assert ref["time_to_target_s_median"] == pytest.approx(1203.2)  # 1203.2, 601.6, 1203.2
    # seed 3's B=256 stops at 0.6 but is aligned on the levels it reached (analyze's rule)
    assert (g["n_aligned"], g["aligned"]) == (3, True)
    assert result["fastest_valid_group"] == "b256-sqrt"
    assert result["fastest_reached_group"] == "b256-sqrt"
    # the reference's T ratio, 1.0 on every seed, lies inside b256's range 0.70 to never
    assert result["within_spread"] == ["b128-ref"]


def test_the_fastest_run_that_reached_the_target_is_named_even_unaligned(sweep, tmp_path):
    result = analyze([sweep], TARGET)
    # b512 (T 502.3 s) is faster than the fastest valid b256 (842.2 s) but not aligned
    assert result["fastest_valid"] == "b256"
    assert (result["fastest_reached"], result["fastest_reached_aligned"]) == ("b512", False)
    assert "groups" not in result  # one run per member: no verdict over seeds
    from hyrl.batchsize.report import render_markdown

    text = render_markdown(result, [])
    assert "aligned or not: b512 (not aligned)" in text


def test_the_report_has_a_table_over_seeds(seeded_sweep):
    from hyrl.batchsize.report import render_markdown

    text = render_markdown(analyze([seeded_sweep], TARGET), [])
    assert "## Over seeds" in text
    assert "| b256-sqrt | 256 | 2e-06 | 1,2,3 | 2/3 | 3/3 | 1.05x (1.05 to never) | 1.50x " in text
    # the verdict over seeds is the seed-mean bootstrap's (test_over_seeds.py), not the old
    # overlap of T ratio ranges: with 3 seeds, one of which never reaches, none is named
    assert "## Over seeds (3 seeds, 2000 bootstraps, confidence 90%)" in text
    assert (
        "- **over seeds** (3 seeds, confidence 90%): the seeds cannot separate: b256-sqrt (" in text
    )
    # the single runs' verdicts follow, labelled as one draw each, after the seed-aware ones
    single = text.index("- single runs (each against its seed's reference; one draw each")
    assert text.index("- **over seeds**") < single
    assert "fastest valid run: b256-sqrt-s2" in text[single:]
    assert "within the seed spread" not in text
    # another seed's reference is not read as a batch compared with the reference
    assert "B=128 (b128-ref-s2) is the reference of seed 2, which the runs of that seed" in text
    # the fastest valid run, seed 2's B=256 (421.1 s, the machine twice as fast), is named
    # with its own seed's reference, not as a change against seed 1's
    assert (
        "The fastest valid run is b256-sqrt-s2 (B=256): 7.0 min against 10.0 min for "
        "b128-ref-s2, the reference of its seed, 30% less time" in text
    )


def test_no_critical_batch_is_claimed_when_no_run_reached_the_target(sweep):
    result = analyze([sweep], ("eval/accuracy", 5.0))  # above every curve
    assert result["unreached"] and all(not r["reached"] for r in result["runs"])
    assert any(r["aligned"] for r in result["runs"])  # the reference, at least
    assert result["critical_batch_responses"] is None and result["critical_batch_run"] is None
    assert result["fastest_valid"] is None
    assert any("no run reached the target" in note for note in result["notes"])
