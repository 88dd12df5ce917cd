"""--batch-schedule and the autopilot's flags: refused with errors that name the flag, the value
and what is allowed, before anything starts."""

import pytest

from hyrl.config import (
    ConfigError,
    autopilot_batches,
    batch_schedule,
    critic_autopilot_batches,
    parse_args,
    resolve,
    validate,
)

# The defaults: P=16, G=8, B=128, micro batch 16 on one rank (batch unit 16).
AUTO = ("--batch-schedule", "auto", "--autopilot-min", "64", "--autopilot-max", "256")
AUTO_LR = (*AUTO, "--base-lr", "3e-4")
PPO = ("--advantage-estimator", "gae", "--critic-base-lr", "1e-3")


def cfg(*argv: str):
    return parse_args(["--run-dir", "/nonexistent/run", *argv])


def refused(*argv: str, world_size: int = 1) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(cfg(*argv), world_size)
    err, text = info.value, str(info.value)
    assert err.flag in text and "allowed" in text
    return err


def test_the_schedule_defaults_to_ramp_with_a_batch_ramp_and_fixed_without():
    assert batch_schedule(cfg()) == "fixed"
    assert batch_schedule(cfg("--batch-ramp", "128:256:4")) == "ramp"
    assert batch_schedule(cfg(*AUTO)) == "auto"
    validate(cfg("--batch-schedule", "ramp", "--batch-ramp", "128:256:4"), 1)
    validate(cfg(*AUTO_LR), 1)


def test_a_ramp_needs_its_batch_ramp_and_auto_or_fixed_refuse_one():
    err = refused("--batch-schedule", "ramp")
    assert err.flag == "--batch-schedule" and "--batch-ramp" in str(err)
    for schedule in ("fixed", "auto"):
        err = refused("--batch-schedule", schedule, "--batch-ramp", "128:256:4")
        assert err.flag == "--batch-ramp" and schedule in str(err)
    assert refused("--batch-schedule", "sometimes").flag == "--batch-schedule"


def test_autopilot_flags_apply_only_with_auto():
    for flag, value in (
        ("--autopilot-k", "2"),
        ("--autopilot-min", "64"),
        ("--autopilot-hysteresis", "2"),
        ("--autopilot-warmup", "3"),
    ):
        err = refused(flag, value)
        assert err.flag == flag and "--batch-schedule auto" in str(err)
    # the critic's range is PPO's, and auto's
    assert refused(*AUTO_LR, "--critic-autopilot-min", "64").flag == "--critic-autopilot-min"
    err = refused(*PPO, "--critic-autopilot-max", "256")
    assert err.flag == "--critic-autopilot-max" and "--batch-schedule auto" in str(err)


def test_auto_needs_a_range_that_holds_the_starting_batch_in_whole_units():
    assert refused("--batch-schedule", "auto", "--base-lr", "3e-4").flag == "--autopilot-min"
    base = ("--batch-schedule", "auto", "--base-lr", "3e-4")
    err = refused(*base, "--autopilot-min", "64")
    assert err.flag == "--autopilot-max" and "required" in str(err)
    err = refused(*base, "--autopilot-min", "64", "--autopilot-max", "40")
    assert err.flag == "--autopilot-max"
    err = refused(*base, "--autopilot-min", "64", "--autopilot-max", "250")
    assert err.flag == "--autopilot-max" and "multiple of 16" in str(err)
    err = refused(*base, "--autopilot-min", "256", "--autopilot-max", "512")
    assert err.flag == "--autopilot-min" and "B=128" in str(err)
    err = refused(*base, "--autopilot-min", "32", "--autopilot-max", "64")
    assert err.flag == "--autopilot-max" and "B=128" in str(err)


def test_auto_settings_out_of_range_are_refused():
    assert refused(*AUTO_LR, "--autopilot-k", "0").flag == "--autopilot-k"
    assert refused(*AUTO_LR, "--autopilot-hysteresis", "0.9").flag == "--autopilot-hysteresis"
    assert refused(*AUTO_LR, "--autopilot-warmup", "0").flag == "--autopilot-warmup"


def test_auto_needs_ref_lr_to_rederive_the_lr_and_the_noise_scale_on():
    err = refused(*AUTO)
    assert err.flag == "--batch-schedule" and "--base-lr" in str(err)
    err = refused(*AUTO_LR, "--noise-scale-beta", "none")
    assert err.flag == "--noise-scale-beta"
    # PPO: the critic's rate too
    err = refused(*AUTO_LR, "--advantage-estimator", "gae")
    assert err.flag == "--batch-schedule" and "--critic-base-lr" in str(err)
    validate(cfg(*AUTO_LR, *PPO), 1)


def test_one_rank_needs_two_micro_batches_at_the_smallest_batch():
    # micro batch 16: B=16 is one micro-batch, nothing to compare
    err = refused(*AUTO_LR[:2], "--autopilot-min", "16", "--autopilot-max", "256", *AUTO_LR[-2:])
    assert err.flag == "--autopilot-min" and "32" in str(err)
    validate(cfg(*AUTO_LR[:2], "--autopilot-min", "32", "--autopilot-max", "256",
                 *AUTO_LR[-2:]), 1)  # fmt: skip
    err = refused(*AUTO_LR, "--use-dynamic-batch-size", "--max-tokens-per-gpu", "64")
    assert err.flag == "--batch-schedule" and "dynamic" in str(err)


def test_the_critic_range_must_hold_its_start_and_a_divisor_of_every_rollout():
    err = refused(*AUTO_LR, *PPO, "--critic-autopilot-min", "256", "--critic-autopilot-max", "512")
    assert err.flag == "--critic-autopilot-min" and "B=128" in str(err)
    # critic micro batch 48 on one rank: multiples of 48 that divide 128 (B=128, one step):
    # none, already refused by the critic's own check; with micro batch 32, critic B in
    # [96, 96] cannot divide a rollout of 128
    err = refused(
        *AUTO_LR, *PPO, "--critic-global-batch-size", "96", "--rollout-batch-size", "12",
        "--global-batch-size", "96", "--critic-micro-batch-size", "32",
        "--critic-autopilot-min", "96", "--critic-autopilot-max", "96",
        "--autopilot-min", "96", "--autopilot-max", "128",
    )  # fmt: skip
    assert err.flag == "--critic-autopilot-min" and "B=112" in str(err)


def test_the_allowed_batches_are_whole_units_and_divisors_for_the_critic():
    c = resolve(cfg(*AUTO_LR, *PPO, "--critic-micro-batch-size", "32"))
    assert autopilot_batches(c, 1, batch=c, parallel=c) == list(range(64, 257, 16))
    # multiples of 32 dividing 192, within [64, 256]
    assert critic_autopilot_batches(c, 1, 192, parallel=c, critic=c) == [64, 96, 192]
    # multiples of 32 x DP 2
    assert critic_autopilot_batches(c, 2, 192, parallel=c, critic=c) == [64, 192]
