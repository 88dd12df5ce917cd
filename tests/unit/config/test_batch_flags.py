"""The batch sizes and their schedule (hyrl.config.concerns.batch): B must divide P x G and
split over the data-parallel ranks in whole micro-batches (saying when B is the P x G default),
--num-steps-per-rollout sets B and must divide the rollout and agree with a B given,
--noise-scale-beta lies in [0, 1) or is none, and --batch-ramp must start at the first B, end
on whole micro-batches and prompt groups, and is refused with PPO or when malformed.
--batch-schedule auto is in test_config_autopilot.py."""

from __future__ import annotations

import pytest
from config_errors import assert_names, assert_rejected

from hyrl.config import ConfigError, parse_args, resolve, validate


def test_global_batch_not_dividing_rollout_is_rejected_naming_the_flag(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "6",
        "--global-batch-size",
        "16",
        "--micro-batch-size",
        "4",
    )
    err = assert_rejected(cfg, "--global-batch-size", 16)
    assert "4 x 6 = 24" in str(err)
    assert "[1, 2, 3, 4, 6, 8, 12, 24]" in str(err)


def test_global_batch_not_dividing_over_data_parallel_is_rejected(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size",
        "3",
        "--n-samples-per-prompt",
        "2",
        "--global-batch-size",
        "3",
        "--micro-batch-size",
        "1",
    )
    assert_rejected(cfg, "--global-batch-size", 3, world_size=2)


def test_micro_batch_times_dp_not_dividing_global_batch_is_rejected(cfg_of):
    cfg = cfg_of("--micro-batch-size", "48")
    err = assert_rejected(cfg, "--micro-batch-size", 48, world_size=2)
    assert "= 96" in str(err) and "B=128" in str(err)
    assert "data-parallel size 2" in str(err)


def test_default_global_batch_not_splitting_over_data_parallel_says_where_it_came_from(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size", "3", "--n-samples-per-prompt", "2", "--micro-batch-size", "1"
    )
    err = assert_rejected(cfg, "--global-batch-size", 6, world_size=4)
    assert "P x G, the default" in str(err)


def test_num_steps_per_rollout_sets_the_global_batch(cfg_of):
    r = resolve(
        cfg_of(
            "--rollout-batch-size",
            "16",
            "--n-samples-per-prompt",
            "8",
            "--num-steps-per-rollout",
            "2",
        )
    )
    assert r.global_batch_size == 64 and r.batch.optimizer_steps_per_rollout == 2
    agreeing = cfg_of("--num-steps-per-rollout", "2", "--global-batch-size", "64")
    assert resolve(agreeing).global_batch_size == 64


def test_num_steps_per_rollout_not_dividing_the_rollout_is_rejected(cfg_of):
    with pytest.raises(ConfigError) as info:
        resolve(cfg_of("--num-steps-per-rollout", "3"))
    assert_names(info.value, "--num-steps-per-rollout", 3)
    assert "[1, 2, 4, 8, 16, 32, 64, 128]" in str(info.value)
    assert_rejected(cfg_of("--num-steps-per-rollout", "3"), "--num-steps-per-rollout", 3)


def test_num_steps_per_rollout_disagreeing_with_global_batch_is_rejected(cfg_of):
    cfg = cfg_of("--num-steps-per-rollout", "2", "--global-batch-size", "32")
    with pytest.raises(ConfigError) as info:
        resolve(cfg)
    err = info.value
    assert_names(err, "--num-steps-per-rollout", 2)
    assert "--global-batch-size=32" in str(err) and "--global-batch-size=64" in err.allowed
    assert_rejected(cfg, "--num-steps-per-rollout", 2)


def test_noise_scale_beta_outside_zero_one_is_rejected_and_none_switches_it_off(cfg_of):
    assert_rejected(cfg_of("--noise-scale-beta", "1.0"), "--noise-scale-beta", 1.0)
    validate(cfg_of("--noise-scale-beta", "none"), 1)
    assert parse_args(["--noise-scale-beta", "none"]).noise_scale_beta is None


def test_batch_ramp_start_must_equal_the_first_global_batch(cfg_of):
    err = assert_rejected(cfg_of("--batch-ramp", "64:512:10"), "--batch-ramp", "64:512:10")
    assert "B=128" in str(err)


def test_batch_ramp_end_must_keep_micro_batches_and_prompt_groups_whole(cfg_of):
    # micro batch 16 x DP 1 and groups of G=8: END must be a multiple of 16
    err = assert_rejected(cfg_of("--batch-ramp", "128:520:10"), "--batch-ramp", "128:520:10")
    assert "multiple of 16" in str(err)
    validate(cfg_of("--batch-ramp", "128:512:10"), 1)


def test_batch_ramp_is_refused_with_ppo_and_when_malformed(cfg_of):
    assert_rejected(
        cfg_of("--advantage-estimator", "gae", "--batch-ramp", "128:256:5"),
        "--batch-ramp",
        "128:256:5",
    )
    assert_rejected(cfg_of("--batch-ramp", "128-512"), "--batch-ramp", "128-512")
