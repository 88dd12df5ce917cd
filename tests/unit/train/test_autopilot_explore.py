"""Exploration of the goodput autopilot without a profile (hyrl.train.explore, RunAutopilot) on
synthetic step timings, every number computed by hand in the comments.

A synthetic rollout step at B (one optimizer step per rollout, so N = B; responses of 10
tokens): generation 0.2 x B/128 s, the actor update `update_s` (a cost the same at any B, which
the one-B model cannot tell from a per-response one: it sits in a per-token stage) and overhead
0.1 s (a fixed stage). Two regimes:
    R rises: update 1.5 s, t(B) = 1.6 + 0.2 B/128: t(128) = 1.8 s (R 71.11/s), t(256) = 2.0 s
             (R 128/s);
    R flat:  update 1.5 x B/128 s, t(B) = 0.1 + 1.7 B/128: t(128) = 1.8 s, t(256) = 3.5 s
             (R 73.14/s).
From B = 128 alone both look the same to the model: 0.1 s fixed, 1.7 s per 1280 tokens, so
R(256) = 256 / 3.5 = 73.14/s and B never moves without exploring.
"""

from __future__ import annotations

import json

import pytest
from autopilots import run_autopilot

from hyrl.batchsize.goodput import Profile, ThroughputModel
from hyrl.config import ConfigError, parse_args, resolve, validate
from hyrl.train.autopilot import AutopilotSettings, RunAutopilot
from hyrl.train.explore import (
    PROBE_STEPS,
    Exploration,
    budget_allows,
    explore_target,
    neighbour,
    optimistic_gain,
)

ISSUE_GRID = list(range(128, 1025, 32))  # the issue's --autopilot-min 128 --autopilot-max 1024
THREE = [128, 256, 512]


def _record(B: int, rising: bool, noise: float = 1000.0) -> dict:
    """A rollout step's last record at B in the regime (module docstring), with its noise
    scale."""
    return {
        "perf/rollout_s": 0.2 * B / 128,
        "perf/actor_train_s": 1.5 if rising else 1.5 * B / 128,
        "perf/overhead_s": 0.1,
        "train/response_len_mean": 10.0,
        "actor/noise_scale": noise,
        "actor/grad_norm": 1.0,
    }


def _pilot(allowed: list[int], budget: float, warmup: int = 2, total: int | None = None):
    settings = AutopilotSettings(1.0, 1.5, warmup, "goodput", 1.05, budget)
    throughput = ThroughputModel(1, 10**6, None)
    return RunAutopilot(settings, 128, allowed, 1, 8, throughput=throughput, total_steps=total)


def _run(pilot: RunAutopilot, steps: int, rising: bool, noise: float = 1000.0):
    """`steps` rollout steps; (the B of each, the lines printed)."""
    sizes, lines = [], []
    for _ in range(steps):
        sizes.append(pilot.responses_per_step)
        lines += pilot.observe_step({}, _record(pilot.responses_per_step, rising, noise))
    return sizes, lines


# --- the decision function ------------------------------------------------------------------


def test_the_neighbour_is_the_nearest_batch_the_hysteresis_lets_it_move_to():
    assert neighbour(128, ISSUE_GRID, 1.5) == 224  # the smallest > 192
    assert neighbour(128, ISSUE_GRID, 1.0) == 160  # any difference: the next on the grid
    assert neighbour(1024, ISSUE_GRID, 1.5) == 672  # at the top: the largest < 682.7
    assert neighbour(128, [128], 1.5) is None


def test_the_optimistic_bound():
    # above: R x B'/B (all fixed), G ratio = (208/128) x (1 + 128/Bn) / (1 + 208/Bn)
    assert optimistic_gain(128, 208, 1000.0) == pytest.approx(1.625 * 1.128 / 1.208)  # 1.517
    assert optimistic_gain(128, 208, 10.0) == pytest.approx(1.625 * 13.8 / 21.8)  # 1.029
    # below: R held (all per response): (1 + 1024/1000) / (1 + 672/1000) = 1.211
    assert optimistic_gain(1024, 672, 1000.0) == pytest.approx(2.024 / 1.672)


def test_a_small_noise_scale_rules_out_any_gain_and_a_large_one_cannot():
    grid = list(range(128, 1025, 16))  # unit 16: 128's neighbour at h = 1.5 is 208
    # (a) B_noise 10: even R x 1.625 at 208 gives G x 1.029 < 1.05: nothing to explore
    assert explore_target(128, grid, 1.5, {128}, 10.0, 1.05) is None
    # (b) B_noise 1000: G up to x 1.517 cannot be ruled out: explore 208
    target = explore_target(128, grid, 1.5, {128}, 1000.0, 1.05)
    assert target is not None and target[0] == 208
    assert target[1] == pytest.approx(1.517, abs=1e-3)
    # ... unless 208 is measured already: the model knows its R
    assert explore_target(128, grid, 1.5, {128, 208}, 1000.0, 1.05) is None
    # a min gain above the bound rules it out too
    assert explore_target(128, grid, 1.5, {128}, 1000.0, 1.6) is None


def test_the_budget_counts_the_whole_probe_against_the_steps_so_far_and_the_run():
    # a probe of 3 at 5%: 0 + 3 <= 0.05 x (S + 3) from S = 57 on
    assert PROBE_STEPS == 3
    assert not budget_allows(0, 56, 0.05, None)
    assert budget_allows(0, 57, 0.05, None)
    assert not budget_allows(3, 60, 0.05, None)  # the second: 6 <= 0.05 (S + 3) from S = 117
    assert budget_allows(3, 117, 0.05, None)
    assert not budget_allows(0, 57, 0.05, 40)  # 3 > 0.05 x 40 = 2: --num-steps 40 holds none
    assert not budget_allows(0, 10**6, 0.0, None)  # 0: off


# --- the controller -------------------------------------------------------------------------


def test_a_large_noise_scale_with_rising_r_explores_once_and_moves_to_the_neighbour():
    # (b) B in {128, 256}, budget 0.5: a probe needs 3 <= 0.5 (S + 3), S >= 3. Steps 1-3 at
    # 128 (1 warms up; 2, 3 timed, warm after 2 measurements); steps 4-6 at 256 (4 warms up)
    pilot = _pilot([128, 256], budget=0.5)
    sizes, lines = _run(pilot, 3, rising=True)
    assert sizes == [128] * 3 and pilot.responses_per_step == 256
    assert lines == [
        "hyrl: autopilot: exploring B 256 for 3 rollout steps from B 128: R not measured "
        "there, and at B_noise 1000 an optimistic goodput gain of 1.8x cannot be ruled out "
        "(min gain 1.05; exploring steps so far 0 of 3)"
    ]  # 2 x 1.128 / 1.256 = 1.796
    assert pilot.metrics()["autopilot/explore_active"] == 1
    assert pilot.metrics()["autopilot/explore_target_batch"] == 256
    sizes, lines = _run(pilot, 3, rising=True)
    # measured: R(256) = 256 / 2.0 = 128/s, 1.8x R(128) = 71.11; G 101.9 / 63.04 = 1.617
    assert sizes == [256] * 3 and pilot.responses_per_step == 256
    assert lines == [
        "hyrl: autopilot: explored B 256: R 1.8x that of B 128, goodput 1.62x at B_noise "
        "1000; B 256 next",
        "hyrl: autopilot: the actor's B 128 -> 256 responses",
    ]
    metrics = pilot.metrics()
    assert metrics["autopilot/changes"] == 1  # the move is a decision; the probe's are not
    assert metrics["autopilot/explore_active"] == 0
    assert "autopilot/explore_target_batch" not in metrics
    assert metrics["autopilot/explore_steps"] == 3
    assert metrics["autopilot/explore_fraction"] == pytest.approx(3 / 7)  # the 7th counts
    # B stays at 256 (the B of the probe: no warm-up step, the next step is timed) and at
    # the top its neighbour 128 is measured: nothing more to explore
    sizes, _ = _run(pilot, 20, rising=True)
    assert sizes == [256] * 20 and pilot.metrics()["autopilot/explore_steps"] == 3
    assert pilot.throughput is not None and len(pilot.throughput.measured[256]) == 8  # all timed


def test_with_a_larger_range_the_measured_line_takes_it_further():
    # the same regime and probe in {128, 256, 512}: with (128, 1.8 s) and (256, 2.0 s)
    # measured, 512 lies on their line at 2.4 s: G 213.3 / 1.512 = 141.1 beats 101.9 (256)
    pilot = _pilot(THREE, budget=0.5)
    sizes, lines = _run(pilot, 6, rising=True)
    assert sizes == [128] * 3 + [256] * 3
    assert lines[-1] == "hyrl: autopilot: the actor's B 128 -> 512 responses"
    assert pilot.responses_per_step == 512


def test_flat_r_measured_at_the_neighbour_returns_and_does_not_explore_it_again():
    # (c) R flat: at 256 t = 3.5 s, R 73.14/s (1.03x); G 58.23 / 63.04 = 0.924: back to 128
    pilot = _pilot(THREE, budget=0.5)
    sizes, lines = _run(pilot, 6, rising=False)
    assert sizes == [128] * 3 + [256] * 3 and pilot.responses_per_step == 128
    assert lines[-1] == (
        "hyrl: autopilot: explored B 256: R 1.03x that of B 128, goodput 0.924x at B_noise "
        "1000; back to B 128"
    )
    assert pilot.metrics()["autopilot/changes"] == 0
    # 128's neighbour 256 is measured now (and 512 on their line: 6.9 s, G 49.1): B stays at
    # 128, no second probe though the budget (0.5) would allow many
    sizes, lines = _run(pilot, 40, rising=False)
    assert sizes == [128] * 40 and lines == []
    assert pilot.metrics()["autopilot/explore_steps"] == 3


def test_a_small_noise_scale_never_explores():
    # (a) B_noise 10: 128's neighbour 256 can gain at most 2 x 13.8 / 26.6 = 1.04 < 1.05
    pilot = _pilot(THREE, budget=0.5)
    sizes, lines = _run(pilot, 100, rising=True, noise=10.0)
    assert sizes == [128] * 100 and lines == []
    assert pilot.metrics()["autopilot/explore_steps"] == 0


def test_the_issue_run_leaves_its_first_batch_and_without_a_budget_does_not():
    # --autopilot-min 128 --autopilot-max 1024 (unit 32), the default warm-up 5, hysteresis
    # 1.5, min gain 1.05 and budget 0.05, 400 steps in the R-rising regime at B_noise 1000
    sizes, lines = _run(_pilot(ISSUE_GRID, budget=0.0, warmup=5, total=400), 400, rising=True)
    assert set(sizes) == {128}  # the issue: B = 128 for all 400 steps
    pilot = _pilot(ISSUE_GRID, budget=0.05, warmup=5, total=400)
    sizes, lines = _run(pilot, 400, rising=True)
    # the first probe when 3 <= 0.05 (S + 3): after step 57, steps 58-60 at 224 (R 1.62x);
    # the line through (128, 1.8 s) and (224, 1.95 s), t = 1.6 + B/640, puts the largest G
    # at 1024 (320/s, G 158.1); there 1024's neighbour 672 (the largest < 1024 / 1.5) is
    # explored after 117 steps (6 <= 0.05 x 120), measured 0.79x R, 0.96x G: back to 1024
    assert sizes[:57] == [128] * 57 and sizes[57:60] == [224] * 3
    assert sizes[60:117] == [1024] * 57 and sizes[117:120] == [672] * 3
    assert sizes[120:] == [1024] * 280
    assert [line.split(":")[2] for line in lines] == [
        " exploring B 224 for 3 rollout steps from B 128",
        " explored B 224",
        " the actor's B 128 -> 1024 responses",
        " exploring B 672 for 3 rollout steps from B 1024",
        " explored B 672",
    ]
    metrics = pilot.metrics()
    assert metrics["autopilot/explore_steps"] == 6 and metrics["autopilot/changes"] == 1


def test_the_budget_is_never_exceeded_over_a_long_run():
    # (d) a noise scale stepping through 10, 100, 1000, 10000 every 12 steps on a fine grid
    # (unit 32 up to 2048, h = 1.2, warm-up 1), the regime alternating, keeps moving B to
    # batches not yet measured, whose neighbours are worth a probe: 400 steps, budget 0.05
    settings = AutopilotSettings(1.0, 1.2, 1, "goodput", 1.05, 0.05)
    grid = list(range(128, 2049, 32))
    pilot = RunAutopilot(
        settings, 128, grid, 1, 8, throughput=ThroughputModel(1, 10**6, None), total_steps=400
    )
    fractions = []
    for step in range(1, 401):
        noise = 10.0 ** (1 + step // 12 % 4)
        pilot.observe_step({}, _record(pilot.responses_per_step, rising=step % 3 > 0, noise=noise))
        explore = pilot.exploration
        assert explore is not None and explore.rollout_steps == step
        assert explore.steps <= 0.05 * step and explore.steps <= 0.05 * 400
        fractions.append(explore.steps / step)
    assert explore.probes >= 5 and explore.steps == PROBE_STEPS * explore.probes
    assert max(fractions) == pytest.approx(0.05)  # the budget binds: it explored up to it


def test_budget_zero_or_a_profile_turn_exploration_off():
    # (e) no explore_* metrics and no exploration
    pilot = _pilot(THREE, budget=0.0)
    sizes, lines = _run(pilot, 30, rising=True)
    assert sizes == [128] * 30 and lines == []
    assert pilot.exploration is None
    assert not any(k.startswith("autopilot/explore") for k in pilot.metrics())
    assert pilot.state_dict()["exploration"] is None
    # a profile predicts R where the run has not measured it: nothing to explore
    settings = AutopilotSettings(1.0, 1.5, 2, "goodput", 1.05, 0.05)
    profile = Profile("decode", {128.0: 100.0, 256.0: 100.0}, "test")
    throughput = ThroughputModel(1, 10**6, profile)
    assert RunAutopilot(settings, 128, THREE, 1, 8, throughput=throughput).exploration is None


def test_a_probe_survives_a_resume_and_continues_identically():
    one = _pilot(THREE, budget=0.5)
    _run(one, 4, rising=True)  # mid-probe: step 4 ran at 256
    two = _pilot(THREE, budget=0.5)
    two.load_state_dict(json.loads(json.dumps(one.state_dict())))
    assert two.state_dict() == one.state_dict()
    exploration = two.exploration
    assert exploration is not None and (exploration.home, exploration.left) == (128, 2)
    assert _run(two, 10, rising=True) == _run(one, 10, rising=True)


def test_exploration_counts_and_metrics_by_hand():
    explore = Exploration(0.05)
    assert explore.metrics() == {
        "autopilot/explore_active": 0,
        "autopilot/explore_steps": 0,
        "autopilot/explore_fraction": 0.0,
    }
    for _ in range(57):
        explore.step()
    explore.start(128, 224)
    # the 58th step runs at 224: 1 exploring step of 58
    assert explore.metrics() == {
        "autopilot/explore_active": 1,
        "autopilot/explore_steps": 1,
        "autopilot/explore_fraction": 1 / 58,
        "autopilot/explore_target_batch": 224,
    }
    assert [explore.step() for _ in range(3)] == [False, False, True]
    explore.end()
    assert (explore.steps, explore.rollout_steps, explore.active) == (3, 60, False)


AUTO = ("--batch-schedule", "auto", "--autopilot-min", "64", "--autopilot-max", "256",
        "--base-lr", "3e-4")  # fmt: skip


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan"])
def test_a_budget_outside_0_1_is_refused(value):
    with pytest.raises(ConfigError, match="--autopilot-explore-budget") as err:
        argv = [*AUTO, "--autopilot-explore-budget", value]
        validate(parse_args(["--run-dir", "/nonexistent/run", *argv]), 1)
    # nan is refused by the parser (not a finite number), the others by the range check
    assert value in str(err.value) and ("[0, 1]" in str(err.value) or value == "nan")


def test_the_autopilot_of_the_flags_reads_the_budget_and_the_runs_steps():
    argv = ["--run-dir", "/nonexistent/run", *AUTO, "--num-steps", "400"]
    cfg = parse_args(argv)
    validate(cfg, 1)
    pilot = run_autopilot(resolve(cfg), 1)
    assert pilot.exploration is not None
    assert (pilot.exploration.budget, pilot.exploration.total_steps) == (0.05, 400)
    cfg = parse_args([*argv, "--autopilot-explore-budget", "0"])
    validate(cfg, 1)
    assert run_autopilot(resolve(cfg), 1).exploration is None
    # only under --batch-schedule auto
    cfg = parse_args(["--run-dir", "/nonexistent/run", "--autopilot-explore-budget", "0.1"])
    with pytest.raises(ConfigError, match="batch-schedule auto"):
        validate(cfg, 1)
