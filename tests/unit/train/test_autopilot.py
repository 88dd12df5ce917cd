"""The batch-size autopilot's controller (hyrl.train.autopilot) on scripted noise-scale
sequences: the B it picks, computed by hand."""

import json
import math

import pytest
from autopilots import run_autopilot

from hyrl.config import parse_args, resolve, validate
from hyrl.train.autopilot import (
    AutopilotSettings,
    BatchAutopilot,
    fit,
    measurement,
)

# Multiples of 16 from 32 to 256.
ALLOWED = list(range(32, 257, 16))


def test_fit_rounds_down_to_an_allowed_batch_and_clamps_to_the_range():
    assert fit(95, ALLOWED) == 80  # down, not to the nearer 96
    assert fit(96, ALLOWED) == 96
    assert fit(10, ALLOWED) == 32  # below the smallest: the smallest
    assert fit(1e9, ALLOWED) == 256  # above the largest: the largest
    with pytest.raises(ValueError):
        fit(64, [])


def test_a_scripted_noise_sequence_gives_the_hand_computed_batches():
    pilot = BatchAutopilot(AutopilotSettings(k=1.0, hysteresis=1.5, warmup=2), start=128)
    sequence = [
        # (noise scale, B after it, target after it)
        (None, 128, None),  # nothing measured: no target
        (300.0, 128, 256),  # one measurement of the two the warm-up asks for
        (290.0, 256, 256),  # warm: 256 / 128 = 2 > 1.5, the change
        (200.0, 256, 192),  # the change restarts the warm-up
        (200.0, 256, 192),  # warm, but 256 / 192 = 1.33 <= 1.5: hysteresis holds B
        (90.0, 80, 80),  # 256 / 80 = 3.2 > 1.5 (rounded down from 90)
        (10.0, 80, 32),  # below the range: the smallest; warm-up again
        (10.0, 32, 32),
        (math.nan, 32, 32),  # no measurement: the last one stands
        (-5.0, 32, 32),  # a negative estimate is no measurement either
    ]
    got = [(pilot.update(noise, ALLOWED), pilot.target) for noise, _, _ in sequence]
    assert got == [(b, target) for _, b, target in sequence]
    assert pilot.changes == 3
    assert pilot.noise_scale == 10.0


def test_a_step_with_a_zero_gradient_or_no_estimate_is_no_measurement():
    assert measurement({"actor/noise_scale": 500.0, "actor/grad_norm": 0.2}, "actor") == 500.0
    # all advantages 0: both EMAs shrink alike, the ratio is the last one, not a new one
    assert measurement({"actor/noise_scale": 500.0, "actor/grad_norm": 0.0}, "actor") is None
    assert measurement({"actor/grad_norm": 0.2}, "actor") is None  # a skipped step
    assert measurement({"critic/noise_scale": 3.0, "critic/grad_norm": 1.0}, "critic") == 3.0


def test_k_scales_the_target():
    pilot = BatchAutopilot(AutopilotSettings(k=2.0, hysteresis=1.0, warmup=1), start=128)
    assert pilot.update(100.0, ALLOWED) == 192  # 2 x 100 = 200, down to 192


def test_hysteresis_one_changes_on_any_difference():
    pilot = BatchAutopilot(AutopilotSettings(k=1.0, hysteresis=1.0, warmup=1), start=128)
    assert [pilot.update(n, ALLOWED) for n in (150.0, 130.0, 128.0)] == [144, 128, 128]
    assert pilot.changes == 2


def test_a_batch_the_allowed_sizes_no_longer_hold_moves_at_once_without_warm_up():
    pilot = BatchAutopilot(AutopilotSettings(k=1.0, hysteresis=1.5, warmup=5), start=64)
    # the critic's allowed batches move with the rollout: 64 no longer divides it
    assert pilot.update(None, [16, 32, 48]) == 48
    assert pilot.changes == 1 and pilot.target is None


def test_state_round_trips_through_json_and_continues_identically():
    settings = AutopilotSettings(k=1.0, hysteresis=1.5, warmup=2)
    one = BatchAutopilot(settings, start=128)
    for noise in (300.0, 290.0, 200.0):
        one.update(noise, ALLOWED)
    two = BatchAutopilot(settings, start=128)
    two.load_state_dict(json.loads(json.dumps(one.state_dict())))
    assert two.state_dict() == one.state_dict()
    assert [two.update(n, ALLOWED) for n in (90.0, 90.0)] == [
        one.update(n, ALLOWED) for n in (90.0, 90.0)
    ]


# the tiny GRPO recipe's defaults (P=16, G=8, B=128, micro batch 16 on one rank: unit 16) under
# the autopilot, B in [64, 256], moving after one measurement to the critical batch
GRPO_AUTOPILOT = (
    "--batch-schedule", "auto", "--autopilot-min", "64", "--autopilot-max", "256",
    "--autopilot-warmup", "1", "--base-lr", "3e-4", "--autopilot-objective", "critical",
)  # fmt: skip
# PPO with two actor steps per rollout of 256 (B=128), the critic's micro batch 32 on one rank,
# the critic's B in [64, 512]
PPO_AUTOPILOT = (
    "--advantage-estimator", "gae", "--rollout-batch-size", "32",
    "--global-batch-size", "128", "--critic-global-batch-size", "128",
    "--critic-micro-batch-size", "32", "--critic-base-lr", "1e-3",
    "--batch-schedule", "auto", "--autopilot-min", "64", "--autopilot-max", "256",
    "--critic-autopilot-min", "64", "--critic-autopilot-max", "512",
    "--autopilot-warmup", "1", "--autopilot-hysteresis", "1.2", "--base-lr", "3e-4",
    "--autopilot-objective", "critical",
)  # fmt: skip


def _resolved(*argv: str):
    cfg = parse_args(["--run-dir", "/nonexistent/run", *argv])
    validate(cfg, 1)
    return resolve(cfg)


def test_grpo_autopilot_of_the_flags_moves_p_with_b_and_logs_its_state():
    # P=16, G=8, one optimizer step: B=128; micro batch 16 on one rank: unit 16
    cfg = _resolved(*GRPO_AUTOPILOT)
    pilot = run_autopilot(cfg, 1)
    assert (pilot.prompts_per_step, pilot.responses_per_step) == (16, 128)
    assert pilot.metrics() == {"autopilot/changes": 0}
    assert pilot.observe(1000.0, None) == [("actor", 128, 256)]
    assert (pilot.prompts_per_step, pilot.responses_per_step) == (32, 256)
    assert pilot.metrics() == {
        "autopilot/changes": 1,
        "autopilot/target_b": 256,
        "autopilot/noise_scale_used": 1000.0,
    }
    assert pilot.critic_responses_per_step is None


def test_ppo_critic_follows_its_own_noise_scale_within_divisors_of_the_rollout():
    # two actor steps per rollout of 256 (B=128); critic micro batch 32 on one rank
    cfg = _resolved(*PPO_AUTOPILOT)
    pilot = run_autopilot(cfg, 1)
    assert (pilot.responses_per_step, pilot.critic_responses_per_step) == (128, 128)
    # actor noise 100 -> 96 (P = 96 x 2 / 8 = 24): a rollout of 192; critic noise 500 -> the
    # largest of its multiples of 32 dividing 192, within [64, 512]: 192 (64, 96, 192)
    assert pilot.observe(100.0, 500.0) == [("actor", 128, 96), ("critic", 128, 192)]
    assert pilot.prompts_per_step == 24
    # the actor back to 256 (a rollout of 512): 192 divides it no more, forced down to 128
    assert pilot.observe(300.0, None) == [("actor", 96, 256), ("critic", 192, 128)]
    metrics = pilot.metrics()
    assert metrics["batch/critic_responses_per_step"] == 128
    assert metrics["autopilot/critic_changes"] == 2
    assert metrics["autopilot/critic_noise_scale_used"] == 500.0
    # the critic's target from its last measurement, within the new rollout's sizes
    assert metrics["autopilot/critic_target_b"] == 256


def test_a_rollout_steps_records_feed_the_actor_and_critic_noise_scales():
    # the same PPO autopilot: the actor's noise scale is on the step's last record, the
    # critic's with the rollout's metrics (a zero gradient norm: no measurement)
    cfg = _resolved(*PPO_AUTOPILOT)
    pilot = run_autopilot(cfg, 1)
    rollout_metrics = {"critic/noise_scale": 500.0, "critic/grad_norm": 1.0}
    last_record = {"actor/noise_scale": 100.0, "actor/grad_norm": 0.5}
    assert pilot.observe_step(rollout_metrics, last_record) == [
        "hyrl: autopilot: the actor's B 128 -> 96 responses",
        "hyrl: autopilot: the critic's B 128 -> 192 responses",
    ]
    assert pilot.observe_step({"critic/noise_scale": 9.0, "critic/grad_norm": 0.0}, {}) == []


def test_steer_observes_on_rank_0_and_every_rank_takes_rank_0s_state(capsys):
    # the GRPO autopilot of above on two ranks, the broadcast faked: rank 0 moves B and prints
    # it; rank 1 sees nothing itself and ends with rank 0's B
    rank0, rank1 = (run_autopilot(_resolved(*GRPO_AUTOPILOT), 1) for _ in range(2))
    sent = []
    last_record = {"actor/noise_scale": 1000.0, "actor/grad_norm": 0.5}
    rank0.steer({}, last_record, 0, lambda state: sent.append(state) or state)
    assert capsys.readouterr().out == "hyrl: autopilot: the actor's B 128 -> 256 responses\n"
    rank1.steer({}, {"actor/noise_scale": 1.0, "actor/grad_norm": 0.5}, 1, lambda _: sent[0])
    assert capsys.readouterr().out == ""
    assert rank0.responses_per_step == rank1.responses_per_step == 256
