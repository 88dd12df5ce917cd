"""The goodput autopilot (hyrl.batchsize.goodput, RunAutopilot under --autopilot-objective
goodput) on synthetic step timings, every number computed by hand in the comments.

The synthetic step at B = 128 (one optimizer step per rollout, so N = B): generation 1.0 s,
actor update 0.5 s, weight sync 0.2 s, overhead 0.1 s, responses of 10 tokens. Fixed: 0.3 s;
per token: generation 1.0 / 1280, the rest 0.5 / 1280. So R(128) = 128 / 1.8 = 71.11/s.
B_noise = 1000 unless a test says otherwise.
"""

from __future__ import annotations

import json
import math

import pytest
from autopilots import run_autopilot

from hyrl.batchsize.goodput import (
    Profile,
    ProfileError,
    StepTiming,
    ThroughputModel,
    goodput,
    load_profile,
)
from hyrl.batchsize.tune.model import samples_ratio
from hyrl.config import ConfigError, parse_args, resolve, validate
from hyrl.train.autopilot import AutopilotSettings, RunAutopilot
from hyrl.train.preflight import preflight

STAGES = {"rollout": 1.0, "actor_train": 0.5, "weight_sync": 0.2, "overhead": 0.1}
ALLOWED = [128, 256, 512]
MEMORY_BOUND = Profile("decode", {128.0: 100.0, 256.0: 200.0, 512.0: 400.0}, "test")


def _record(scale: float = 1.0, tokens: float = 10.0, fixed: float = 1.0) -> dict:
    """A rollout step's last record: STAGES with the per-token stages x scale, the fixed x
    fixed, and the response length."""
    rec = {
        f"perf/{k}_s": v * (fixed if k in ("weight_sync", "overhead") else scale)
        for k, v in STAGES.items()
    }
    rec["train/response_len_mean"] = tokens
    rec["perf/step_s"] = 99.0  # not a stage: ignored
    rec["perf/eval_s"] = 99.0  # evaluation is off the clock: ignored
    return rec


def _model(profile: Profile | None = None, cap: int = 512) -> ThroughputModel:
    model = ThroughputModel(steps_per_rollout=1, concurrency_cap=cap, profile=profile)
    timing = StepTiming.from_record(128, _record())
    assert timing is not None
    model.observe(timing, counts=True)
    return model


def test_goodput_is_throughput_over_the_samples_factor():
    # G = R / (1 + B / B_noise): 100 / (1 + 256 / 256) = 50
    assert goodput(100.0, 256, 256.0) == pytest.approx(50.0)
    assert goodput(100.0, 256, math.inf) == 100.0  # every batch as efficient per sample
    assert goodput(100.0, 256, 0.0) == pytest.approx(100.0 / 256)  # pure noise: R / B


def test_the_goodput_ratio_is_the_inverse_of_tunes_time_ratio():
    # G(B)/G(B0) = (R/R0) x (1 + B0/b)/(1 + B/b) = 1 / T ratio, T ratio = S ratio / R ratio
    R0, R, B0, B, b = 70.0, 90.0, 128, 512, 1464.0
    t_ratio = samples_ratio(B, B0, b) / (R / R0)
    assert goodput(R, B, b) / goodput(R0, B0, b) == pytest.approx(1 / t_ratio)


def test_without_a_profile_only_the_fixed_costs_amortise():
    model = _model()
    # t(B) = 0.3 + 1.5 x B / 128: 1.8 s, 3.3 s, 6.3 s
    assert model.responses_per_s(128) == pytest.approx(128 / 1.8)  # 71.11
    assert model.responses_per_s(256) == pytest.approx(256 / 3.3)  # 77.58
    assert model.responses_per_s(512) == pytest.approx(512 / 6.3)  # 81.27
    # G at B_noise 1000: 71.11 / 1.128 = 63.04; 77.58 / 1.256 = 61.77; 81.27 / 1.512 = 53.75
    best, table = model.best(1000.0, ALLOWED)
    assert table[128] == pytest.approx(128 / 1.8 / 1.128)
    assert table[256] == pytest.approx(256 / 3.3 / 1.256)
    assert table[512] == pytest.approx(512 / 6.3 / 1.512)
    assert best == 128  # R barely rises with B: the smallest batch
    # with a gradient that is mostly signal (B_noise 1e6) the same R picks the largest
    assert model.best(1e6, ALLOWED)[0] == 512


def test_a_memory_bound_decode_profile_moves_the_best_batch_up():
    model = _model(MEMORY_BOUND)
    # generation at 256: 2 x 1.0 x r(128) / r(256) = 1.0 s; the rest 1.0 s; fixed 0.3 s
    assert model.responses_per_s(256) == pytest.approx(256 / 2.3)  # 111.3
    # at 512: 4 x 1.0 x 100 / 400 = 1.0 s, the rest 2.0 s: 512 / 3.3 = 155.2
    assert model.responses_per_s(512) == pytest.approx(512 / 3.3)
    # G: 63.04 (128), 111.3 / 1.256 = 88.6 (256), 155.2 / 1.512 = 102.6 (512)
    assert model.best(1000.0, ALLOWED)[0] == 512
    # the concurrency cap: at --rollout-concurrency 256 the 512 batch decodes at C = 256
    capped = _model(MEMORY_BOUND, cap=256)
    # generation 4 x 1.0 x 100 / 200 = 2.0 s, the rest 2.0 s: 512 / 4.3
    assert capped.responses_per_s(512) == pytest.approx(512 / 4.3)


def test_a_tune_report_scales_the_measured_throughput():
    profile = Profile("tune", {128.0: 100.0, 256.0: 150.0, 512.0: 160.0}, "test")
    model = _model(profile)
    r128 = 128 / 1.8
    assert model.responses_per_s(256) == pytest.approx(r128 * 1.5)  # 106.7
    assert model.responses_per_s(512) == pytest.approx(r128 * 1.6)  # 113.8
    # between the report's batches, linear in log B and log R: 1.5 ^ (log2(181 / 128))
    assert model.responses_per_s(181) == pytest.approx(r128 * 1.5 ** math.log2(181 / 128))
    # G: 63.04, 106.7 / 1.256 = 84.9, 113.8 / 1.512 = 75.3: the middle one
    assert model.best(1000.0, ALLOWED)[0] == 256


def test_a_measured_batch_overrides_the_prediction():
    model = _model(MEMORY_BOUND)
    assert model.best(1000.0, ALLOWED)[0] == 512
    # measured at 512: generation took 4.0 s, not the profile's 1.0 (the engine was not
    # memory-bound after all): 512 / (0.3 + 4.0 + 2.0) = 81.27, G = 53.75
    timing = StepTiming.from_record(512, _record(scale=4.0))
    assert timing is not None
    model.observe(timing, counts=True)
    assert model.responses_per_s(512) == pytest.approx(512 / 6.3)
    # 256 is now on the straight line of step seconds through the two measured batches,
    # (128, 1.8 s) and (512, 6.3 s): 1.8 + 4.5 x 128 / 384 = 3.3 s (the profile is no longer
    # needed between measurements)
    assert model.responses_per_s(256) == pytest.approx(256 / 3.3)
    # G(128) = 63.04 beats 77.58 / 1.256 = 61.8 (256) and 53.75 (512)
    assert model.best(1000.0, ALLOWED)[0] == 128


def test_the_first_step_at_a_batch_and_unusable_steps_do_not_count():
    model = ThroughputModel(1, 512, None)
    warm = StepTiming.from_record(128, _record(scale=10.0))
    assert warm is not None
    model.observe(warm, counts=False)
    assert model.responses_per_s(128) is None and model.best(1000.0, ALLOWED) == (128, {})
    assert StepTiming.from_record(128, {"perf/rollout_s": 1.0}) is None  # no length
    assert StepTiming.from_record(128, {"train/response_len_mean": 3.0}) is None  # no timers
    # a critic-only warm-up step (PPO) trains no actor: not a step at this B's full cost
    warmup = {k: v for k, v in _record().items() if k != "perf/actor_train_s"}
    assert StepTiming.from_record(128, warmup) is None


def test_today_s_response_length_judges_a_batch_measured_earlier():
    model = _model()
    # the responses doubled in length since (a later step's length, not counted)
    later = StepTiming.from_record(256, _record(tokens=20.0))
    assert later is not None
    model.observe(later, counts=False)
    # R(128) at 20 tokens: 0.3 + 1.5 x 2 = 3.3 s
    assert model.responses_per_s(128) == pytest.approx(128 / 3.3)


def _goodput_pilot(profile: Profile | None, warmup: int = 2) -> RunAutopilot:
    settings = AutopilotSettings(k=1.0, hysteresis=1.5, warmup=warmup, objective="goodput")
    return RunAutopilot(settings, 128, ALLOWED, 1, 8, throughput=ThroughputModel(1, 512, profile))


def test_the_autopilot_moves_up_only_when_throughput_pays_for_the_samples():
    # no profile: R barely rises with B, so B stays at 128 through every step
    flat = _goodput_pilot(None)
    for _ in range(6):
        assert flat.observe(1000.0, None, _record()) == []
    assert flat.metrics()["autopilot/target_b"] == 128
    assert flat.metrics()["autopilot/responses_per_s"] == pytest.approx(128 / 1.8)
    # a memory-bound decode: step 1 warms up (not timed), step 2 is the first timing and the
    # second measurement of the warm-up: to 512 (G 102.6 against 63.04)
    steep = _goodput_pilot(MEMORY_BOUND)
    assert steep.observe(1000.0, None, _record(scale=10.0)) == []  # warm-up step: no timing
    assert steep.metrics()["autopilot/target_b"] == 128  # nothing timed: the B in use
    assert steep.observe(1000.0, None, _record()) == [("actor", 128, 512)]
    assert steep.prompts_per_step == 512 // 8
    # at 512 the first step warms up; the next timing shows a slow decode (81.27/s, G 53.75),
    # and after the warm-up of 2 measurements the autopilot goes back to 128
    assert steep.observe(1000.0, None, _record(scale=40.0)) == []
    assert steep.observe(1000.0, None, _record(scale=4.0)) == [("actor", 512, 128)]
    assert steep.metrics()["autopilot/changes"] == 2


def test_goodput_gain_and_the_state_round_trip():
    one = _goodput_pilot(MEMORY_BOUND, warmup=5)
    one.observe(1000.0, None, _record(scale=10.0))
    one.observe(1000.0, None, _record())
    metrics = one.metrics()
    # the target 512 against the B in use: 102.6 / 63.04
    assert metrics["autopilot/goodput_gain"] == pytest.approx(
        (512 / 3.3 / 1.512) / (128 / 1.8 / 1.128)
    )
    two = _goodput_pilot(MEMORY_BOUND, warmup=5)
    two.load_state_dict(json.loads(json.dumps(one.state_dict())))
    assert two.state_dict() == one.state_dict()
    assert two.throughput is not None and two.throughput.responses_per_s(128) == pytest.approx(
        128 / 1.8
    )
    # a resumed run's first step runs in a new process: it warms up, its time does not count
    two.resumed()
    two.observe(1000.0, None, _record(scale=100.0))
    assert two.throughput.responses_per_s(128) == pytest.approx(128 / 1.8)


def test_the_critical_objective_needs_no_throughput_and_goodput_needs_one():
    with pytest.raises(ValueError):
        RunAutopilot(AutopilotSettings(1.0, 1.5, 2, "goodput"), 128, ALLOWED, 1, 8)
    with pytest.raises(ValueError):
        RunAutopilot(
            AutopilotSettings(1.0, 1.5, 2, "critical"), 128, ALLOWED, 1, 8,
            throughput=ThroughputModel(1, 512, None),
        )  # fmt: skip


# --- the profile file -----------------------------------------------------------------------


def test_a_tune_report_and_a_decode_profile_load(tmp_path):
    tune_dir = tmp_path / "tune"
    tune_dir.mkdir()
    report = {
        "candidates": [
            {"responses_per_step": 128, "responses_per_s": 70.0},
            {"responses_per_step": 256, "responses_per_s": 90.0},
        ]
    }
    (tune_dir / "report.json").write_text(json.dumps(report))
    loaded = load_profile(tune_dir)
    assert loaded.kind == "tune" and loaded.points == {128.0: 70.0, 256.0: 90.0}
    prof_dir = tmp_path / "prof"
    prof_dir.mkdir()
    rows = {"rows": [{"c": 64, "responses_per_s": 10.0}, {"c": 128, "responses_per_s": 15.0}]}
    (prof_dir / "profile.json").write_text(json.dumps(rows))
    loaded = load_profile(prof_dir)
    assert loaded.kind == "decode" and loaded.decode_factor(64, 128) == pytest.approx(10 / 15)
    assert load_profile(prof_dir / "profile.json").kind == "decode"  # the file itself


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no report.json"),
        ("not json", "not readable JSON"),
        ({"candidates": [{"responses_per_step": 128, "responses_per_s": 1.0}]}, "fewer than two"),
        ({"rows": []}, "no rows"),
    ],
)
def test_an_unusable_profile_is_named(tmp_path, content, message):
    if content is not None:
        tune_report = isinstance(content, dict) and "candidates" in content
        name = "report.json" if tune_report else "profile.json"
        text = content if isinstance(content, str) else json.dumps(content)
        (tmp_path / name).write_text(text)
    with pytest.raises(ProfileError, match=message):
        load_profile(tmp_path)


AUTO = ["--batch-schedule", "auto", "--autopilot-min", "64", "--autopilot-max", "256",
        "--base-lr", "3e-4"]  # fmt: skip


def test_the_profile_is_refused_before_anything_starts(tmp_path):
    cfg = parse_args(["--run-dir", str(tmp_path / "run"), *AUTO,
                      "--autopilot-profile", str(tmp_path / "missing")])  # fmt: skip
    validate(cfg, 1)
    with pytest.raises(ConfigError, match="--autopilot-profile") as err:
        preflight(resolve(cfg))
    assert "no report.json" in str(err.value)
    cfg = parse_args(["--run-dir", str(tmp_path / "run"), *AUTO, "--autopilot-objective",
                      "critical", "--autopilot-profile", str(tmp_path)])  # fmt: skip
    with pytest.raises(ConfigError, match="only the goodput objective"):
        validate(cfg, 1)
    cfg = parse_args(["--run-dir", str(tmp_path / "run"), "--autopilot-objective", "critical"])
    with pytest.raises(ConfigError, match="batch-schedule auto"):
        validate(cfg, 1)


def test_the_flags_build_the_goodput_autopilot_with_the_recipes_concurrency(tmp_path):
    cfg = parse_args(["--run-dir", str(tmp_path / "run"), *AUTO])
    validate(cfg, 1)
    pilot = run_autopilot(resolve(cfg), 1)
    assert pilot.throughput is not None and pilot.throughput.profile is None
    assert pilot.throughput.concurrency_cap == resolve(cfg).rollout_concurrency


def test_a_gain_below_min_gain_moves_nothing():
    # no profile, B_noise 1e6: G(512) / G(128) = (81.27 / 71.11) x (1 + 128e-6) / (1 + 512e-6)
    # = 1.1424 x 0.99962 = 1.142 (G(256) / G(128) = 1.091): 512 at min_gain 1.05, not at 1.2
    gain = (512 / 6.3) / (128 / 1.8) * (1 + 128e-6) / (1 + 512e-6)
    assert gain == pytest.approx(1.142, abs=1e-3)
    for min_gain, moved in ((1.05, [("actor", 128, 512)]), (1.2, [])):
        settings = AutopilotSettings(1.0, 1.5, 2, "goodput", min_gain)
        pilot = RunAutopilot(settings, 128, ALLOWED, 1, 8, throughput=ThroughputModel(1, 512, None))
        pilot.observe(1e6, None, _record(scale=10.0))  # warms up: not timed
        assert pilot.observe(1e6, None, _record()) == moved
        assert pilot.metrics()["autopilot/target_b"] == (512 if moved else 128)


def test_min_gain_below_one_is_refused(tmp_path):
    cfg = parse_args(["--run-dir", str(tmp_path / "run"), *AUTO, "--autopilot-min-gain", "0.9"])
    with pytest.raises(ConfigError, match="--autopilot-min-gain"):
        validate(cfg, 1)


def test_two_measured_batches_give_a_straight_line_of_step_time():
    model = _model()  # 128: 1.8 s
    # measured at 256: 2.0 s a step (the update costs the same at any B: mostly fixed)
    timing = StepTiming.from_record(256, _record(scale=(2.0 - 0.3) / 1.5))
    assert timing is not None
    model.observe(timing, counts=True)
    assert model.responses_per_s(256) == pytest.approx(256 / 2.0)
    # 512 on the line through (128, 1.8 s) and (256, 2.0 s): 2.0 + 0.2 x 256 / 128 = 2.4 s
    assert model.responses_per_s(512) == pytest.approx(512 / 2.4)
    # (one measured B alone would have scaled 1.7 s of the step with the tokens: 512 / 3.7)
    # between the two: 192 at 1.9 s
    assert model.responses_per_s(192) == pytest.approx(192 / 1.9)
    # a line that falls (256 faster than 128) is held flat: 512 at 256's time
    fast = _model()
    timing = StepTiming.from_record(256, _record(scale=(1.5 - 0.3) / 1.5))
    assert timing is not None
    fast.observe(timing, counts=True)
    assert fast.responses_per_s(512) == pytest.approx(512 / 1.5)
