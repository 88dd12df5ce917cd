"""The learning rate (hyrl.config.concerns.optimizer): --lr fixed (3e-4 when not given) or scaled
from a base recipe's --base-lr at --base-global-batch-size to the resolved B by --lr-scaling,
recorded in the resolved config; the two ways exclude each other, even on one command line
where they agree; --min-lr is checked against the rate resolved. The same for the critic's
--critic-lr, --critic-base-lr and --critic-lr-scaling under PPO, which take the actor's
resolved rate when not given."""

from __future__ import annotations

import json

import pytest
from config_errors import assert_names, assert_rejected, parse_rejected

from hyrl.config import ConfigError, resolve, validate


def test_lr_scaling_flags_are_parsed_and_default_to_no_scaling(cfg_of):
    cfg = cfg_of()
    assert (cfg.lr, cfg.lr_scaling, cfg.base_lr, cfg.base_global_batch_size) == (
        None,
        "none",
        None,
        None,
    )
    cfg = cfg_of("--base-lr", "3e-4", "--base-global-batch-size", "32", "--lr-scaling", "sqrt")
    assert cfg.base_lr == pytest.approx(3e-4) and cfg.base_global_batch_size == 32
    assert cfg.lr_scaling == "sqrt" and cfg.lr is None
    err = parse_rejected(["--lr-scaling", "cubic"])
    assert_names(err, "--lr-scaling", "cubic")
    assert "none, sqrt, linear" in str(err)


def test_resolve_records_the_scaled_lr(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size",
        "16",
        "--n-samples-per-prompt",
        "8",
        "--base-lr",
        "3e-4",
        "--base-global-batch-size",
        "32",
        "--lr-scaling",
        "sqrt",
    )
    r = resolve(cfg)
    assert r.global_batch_size == 128
    assert r.lr == pytest.approx(6e-4, rel=1e-12)
    assert (r.base_lr, r.base_global_batch_size, r.lr_scaling) == (3e-4, 32, "sqrt")
    assert resolve(r) == r
    validate(r, 1)  # a resolved config (lr equal to the scaled rate) validates
    d = r.to_dict(1)
    assert d["lr"] == r.lr and d["lr_scaling_exponent"] == 0.5
    assert json.loads(json.dumps(d)) == d


def test_scaling_uses_the_resolved_global_batch(cfg_of):
    # B = P x G / --num-steps-per-rollout = 64; linear from B0 = 256: a quarter of LR0
    r = resolve(
        cfg_of(
            "--num-steps-per-rollout",
            "2",
            "--base-lr",
            "4e-4",
            "--base-global-batch-size",
            "256",
            "--lr-scaling",
            "linear",
        )
    )
    assert r.global_batch_size == 64 and r.lr == pytest.approx(1e-4, rel=1e-12)
    assert r.to_dict(1)["lr_scaling_exponent"] == 1.0
    # no --lr-scaling (none): LR0 at every B
    assert resolve(cfg_of("--base-lr", "4e-4", "--base-global-batch-size", "256")).lr == 4e-4


def test_ref_global_batch_size_defaults_to_the_global_batch(cfg_of):
    r = resolve(cfg_of("--base-lr", "5e-4", "--lr-scaling", "sqrt", "--global-batch-size", "64"))
    assert r.base_global_batch_size == 64 and r.lr == 5e-4
    assert resolve(r) == r


def test_lr_given_alone_is_kept_and_default_is_3e_4(cfg_of):
    assert resolve(cfg_of("--lr", "1e-3")).lr == 1e-3
    r = resolve(cfg_of())
    assert r.lr == 3e-4 and r.base_global_batch_size is None
    assert r.to_dict(1)["lr"] == 3e-4 and r.to_dict(1)["lr_scaling_exponent"] == 0.0


def test_lr_together_with_ref_lr_is_rejected(cfg_of):
    cfg = cfg_of("--lr", "1e-3", "--base-lr", "3e-4", "--base-global-batch-size", "32")
    err = assert_rejected(cfg, "--lr", 1e-3)
    assert "--base-lr" in str(err)
    assert err.allowed == "one of them: --lr for a fixed rate, or --base-lr with --lr-scaling"
    with pytest.raises(ConfigError) as info:
        resolve(cfg)
    assert info.value.flag == "--lr"


def test_lr_scaling_without_ref_lr_is_rejected(cfg_of):
    for rule in ("sqrt", "linear"):
        err = assert_rejected(cfg_of("--lr-scaling", rule), "--lr-scaling", rule)
        assert err.allowed == (
            "add --base-lr LR0 and --base-global-batch-size B0, or --lr-scaling none"
        )
    validate(cfg_of("--lr-scaling", "none", "--lr", "1e-3"), 1)


def test_ref_global_batch_size_without_ref_lr_is_rejected(cfg_of):
    err = assert_rejected(cfg_of("--base-global-batch-size", "32"), "--base-global-batch-size", 32)
    assert "--base-lr" in str(err) and "--base-lr" in err.allowed


def test_min_lr_is_checked_against_the_scaled_lr(cfg_of):
    scaling = ("--base-lr", "3e-4", "--base-global-batch-size", "512", "--lr-scaling", "linear")
    # B = 128: 3e-4 x 128 / 512 = 7.5e-5, below --min-lr 1e-4 (which the unscaled 3e-4 allows)
    err = assert_rejected(cfg_of(*scaling, "--min-lr", "1e-4"), "--min-lr", 1e-4)
    assert "--base-lr" in str(err) and "7.5e-05" in err.allowed
    validate(cfg_of(*scaling, "--min-lr", "7.5e-5"), 1)
    # scaling up admits a min_lr above the reference rate
    validate(
        cfg_of(
            "--base-lr",
            "3e-4",
            "--base-global-batch-size",
            "32",
            "--lr-scaling",
            "sqrt",
            "--min-lr",
            "5e-4",
        ),
        1,
    )


def test_min_lr_above_the_default_lr_is_rejected_after_resolution(cfg_of):
    err = assert_rejected(cfg_of("--min-lr", "4e-4"), "--min-lr", 4e-4)
    assert "0.0003 (the default --lr)" in str(err) and err.allowed == "0 <= min_lr <= 0.0003"


def test_lr_and_ref_lr_on_one_command_line_are_refused_even_when_they_agree():
    from hyrl.config import load

    with pytest.raises(ConfigError) as info:
        load(["--lr", "3e-4", "--base-lr", "3e-4", "--run-dir", "/nonexistent/never"], 1)
    assert info.value.flag == "--lr" and "--base-lr=0.0003" in str(info.value)
    assert "allowed" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load(
            [
                "--advantage-estimator",
                "gae",
                "--critic-lr",
                "1e-3",
                "--critic-base-lr",
                "1e-3",
                "--run-dir",
                "/nonexistent/never",
            ],
            1,
        )
    assert info.value.flag == "--critic-lr"


GAE = ("--advantage-estimator", "gae")


def test_critic_lr_scaling_under_gae(cfg_of):
    r = resolve(
        cfg_of(
            *GAE,
            "--critic-global-batch-size",
            "32",
            "--critic-base-lr",
            "1e-5",
            "--critic-base-global-batch-size",
            "128",
            "--critic-lr-scaling",
            "sqrt",
        )
    )
    assert r.critic_global_batch_size == 32
    assert r.critic_lr == pytest.approx(5e-6, rel=1e-12)  # 1e-5 x (32 / 128)^(1/2)
    assert (r.critic_base_lr, r.critic_base_global_batch_size, r.critic_lr_scaling) == (
        1e-5,
        128,
        "sqrt",
    )
    assert r.lr == 3e-4  # the actor is not scaled
    assert resolve(r) == r
    validate(r, 1)
    d = r.to_dict(1)
    assert d["critic_lr"] == r.critic_lr and d["critic_lr_scaling_exponent"] == 0.5
    assert json.loads(json.dumps(d)) == d


def test_critic_lr_takes_the_resolved_actor_lr_when_not_given(cfg_of):
    r = resolve(
        cfg_of(*GAE, "--base-lr", "3e-4", "--base-global-batch-size", "32", "--lr-scaling", "sqrt")
    )
    assert r.critic_lr == r.lr == pytest.approx(6e-4, rel=1e-12)
    assert r.critic_lr_scaling == "none" and r.critic_base_global_batch_size is None
    assert r.to_dict(1)["critic_lr_scaling_exponent"] == 0.0
    # critic B0 defaults to the critic batch: the critic rate is LR0
    r = resolve(cfg_of(*GAE, "--critic-base-lr", "2e-5", "--critic-lr-scaling", "linear"))
    assert r.critic_lr == 2e-5 and r.critic_base_global_batch_size == 128


def test_critic_lr_together_with_critic_ref_lr_is_rejected(cfg_of):
    err = assert_rejected(
        cfg_of(*GAE, "--critic-lr", "1e-5", "--critic-base-lr", "2e-5"), "--critic-lr", 1e-5
    )
    assert "--critic-base-lr" in str(err)
    assert err.allowed == (
        "one of them: --critic-lr for a fixed rate, or --critic-base-lr with --critic-lr-scaling"
    )


def test_critic_lr_scaling_without_critic_ref_lr_is_rejected(cfg_of):
    err = assert_rejected(
        cfg_of(*GAE, "--critic-lr-scaling", "linear"), "--critic-lr-scaling", "linear"
    )
    assert err.allowed == (
        "add --critic-base-lr LR0 and --critic-base-global-batch-size B0, "
        "or --critic-lr-scaling none"
    )
    err = assert_rejected(
        cfg_of(*GAE, "--critic-base-global-batch-size", "32"), "--critic-base-global-batch-size", 32
    )
    assert "--critic-base-lr" in err.allowed


def test_critic_min_lr_is_checked_against_the_scaled_critic_lr(cfg_of):
    scaling = (
        "--critic-global-batch-size",
        "32",
        "--critic-base-lr",
        "1e-5",
        "--critic-base-global-batch-size",
        "128",
        "--critic-lr-scaling",
        "linear",
    )
    # critic lr = 1e-5 x 32 / 128 = 2.5e-6
    err = assert_rejected(
        cfg_of(*GAE, *scaling, "--critic-min-lr", "5e-6"), "--critic-min-lr", 5e-6
    )
    assert "--critic-base-lr" in str(err)
    err = assert_rejected(cfg_of(*GAE, *scaling, "--min-lr", "5e-6"), "--critic-base-lr", 1e-5)
    assert "--min-lr" in str(err) and "--critic-min-lr" in err.allowed
    validate(cfg_of(*GAE, *scaling, "--min-lr", "5e-6", "--critic-min-lr", "2.5e-6"), 1)
