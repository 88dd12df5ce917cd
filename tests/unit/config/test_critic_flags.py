"""PPO (--advantage-estimator gae) and its critic (hyrl.config.concerns.critic, with GAE's flags
of hyrl.config.concerns.algorithm): the critic group and the PPO flags are declared and parse,
with none for the values not given; resolution leaves them None under GRPO and takes the
actor's values (batch, micro batch, optimizer) under GAE unless given; under GRPO the PPO-only
flags are refused unless at their defaults; and their ranges, the critic's min lr, its batch
over the rollout and the data-parallel ranks and --critic-load are checked. The critic's
learning-rate scaling is in test_optimizer_flags.py."""

from __future__ import annotations

import pytest
from config_errors import assert_rejected, rejected

from hyrl.config import GROUPS, build_parser, resolve, validate


def test_ppo_group_and_flags_are_declared(cfg_of):
    titles = [g.title for g in build_parser()._action_groups]
    assert "algorithm (GRPO, PPO)" in titles
    assert any(t.startswith("critic") for t in titles)
    assert GROUPS.index("critic") == GROUPS.index("algorithm") + 1
    cfg = cfg_of()
    for name in (
        "gamma",
        "lambd",
        "normalize_advantages",
        "num_steps_per_rollout",
        "critic_global_batch_size",
        "critic_micro_batch_size",
        "critic_lr",
        "critic_min_lr",
        "critic_lr_warmup_steps",
        "critic_lr_decay_style",
        "critic_weight_decay",
        "critic_clip_grad",
        "value_clip",
        "critic_load",
        "critic_lr_scaling",
        "critic_base_lr",
        "critic_base_global_batch_size",
    ):
        assert getattr(cfg, name) is None, name
    assert cfg.kl_coef == 0.0 and cfg.num_critic_only_steps == 0


def test_ppo_values_are_parsed_and_optional_flags_take_none(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--gamma",
        "0.99",
        "--lambd=0.95",
        "--critic-global-batch-size",
        "32",
        "--critic-lr",
        "1e-5",
        "--critic-lr-decay-style",
        "cosine",
        "--critic-load",
        "/some/dir",
        "--num-steps-per-rollout",
        "4",
        "--value-clip",
        "0",
    )
    assert cfg.advantage_estimator == "gae"
    assert (cfg.gamma, cfg.lambd, cfg.critic_lr) == pytest.approx((0.99, 0.95, 1e-5))
    assert cfg.critic_global_batch_size == 32 and isinstance(cfg.critic_global_batch_size, int)
    assert cfg.critic_lr_decay_style == "cosine" and cfg.critic_load == "/some/dir"
    assert cfg.num_steps_per_rollout == 4 and cfg.value_clip == 0.0
    back = cfg_of(
        "--critic-global-batch-size",
        "32",
        "--critic-global-batch-size",
        "none",
        "--critic-lr-decay-style",
        "linear",
        "--critic-lr-decay-style=None",
        "--critic-load",
        "x",
        "--critic-load",
        "none",
        "--global-batch-size",
        "none",
    )
    assert back.critic_global_batch_size is None and back.critic_lr_decay_style is None
    assert back.critic_load is None and back.global_batch_size is None


def test_resolve_under_grpo_leaves_the_critic_and_ppo_values_none(cfg_of):
    cfg = cfg_of()
    r = resolve(cfg)
    assert r is not cfg and cfg.global_batch_size is None  # a new config; the input unchanged
    assert r.global_batch_size == 128
    for name in (
        "critic_global_batch_size",
        "critic_micro_batch_size",
        "critic_lr",
        "critic_min_lr",
        "critic_lr_warmup_steps",
        "critic_lr_decay_style",
        "critic_weight_decay",
        "critic_clip_grad",
        "value_clip",
        "critic_load",
        "gamma",
        "lambd",
        "normalize_advantages",
        "critic_lr_scaling",
        "critic_base_lr",
        "critic_base_global_batch_size",
    ):
        assert getattr(r, name) is None, name
    assert r.critic_steps_per_rollout is None
    assert resolve(r) == r


def test_resolve_under_gae_takes_the_actors_values(cfg_of):
    r = resolve(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--global-batch-size",
            "64",
            "--micro-batch-size",
            "8",
            "--lr",
            "1e-4",
            "--min-lr",
            "1e-5",
            "--lr-warmup-steps",
            "3",
            "--lr-decay-style",
            "linear",
            "--weight-decay",
            "0.01",
            "--clip-grad",
            "0.5",
        )
    )
    assert (r.critic_global_batch_size, r.critic_micro_batch_size) == (64, 8)
    assert (r.critic_lr, r.critic_min_lr, r.critic_lr_warmup_steps) == (1e-4, 1e-5, 3)
    assert (r.critic_lr_decay_style, r.critic_weight_decay, r.critic_clip_grad) == (
        "linear",
        0.01,
        0.5,
    )
    assert (r.gamma, r.lambd, r.value_clip, r.normalize_advantages) == (1.0, 1.0, 0.2, True)
    assert r.critic_load is None
    assert resolve(r) == r


def test_resolve_under_gae_keeps_the_values_given(cfg_of):
    r = resolve(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--critic-global-batch-size",
            "32",
            "--critic-micro-batch-size",
            "4",
            "--critic-lr",
            "1e-5",
            "--critic-min-lr",
            "0",
            "--critic-lr-warmup-steps",
            "5",
            "--critic-lr-decay-style",
            "cosine",
            "--critic-weight-decay",
            "0.1",
            "--critic-clip-grad",
            "2",
            "--gamma",
            "0.9",
            "--lambd",
            "0.8",
            "--value-clip",
            "0",
            "--no-normalize-advantages",
        )
    )
    assert (r.critic_global_batch_size, r.critic_micro_batch_size) == (32, 4)
    assert (r.critic_lr, r.critic_min_lr, r.critic_lr_warmup_steps) == (1e-5, 0.0, 5)
    assert (r.critic_lr_decay_style, r.critic_weight_decay, r.critic_clip_grad) == (
        "cosine",
        0.1,
        2.0,
    )
    assert (r.gamma, r.lambd, r.value_clip, r.normalize_advantages) == (0.9, 0.8, 0.0, False)
    assert r.global_batch_size == 128


def test_critic_batch_resolves_from_the_resolved_actor_batch(cfg_of):
    r = resolve(cfg_of("--advantage-estimator", "gae", "--num-steps-per-rollout", "4"))
    assert r.global_batch_size == 32 and r.critic_global_batch_size == 32


def test_gae_defaults_validate_and_allow_one_sample_per_prompt(cfg_of):
    validate(cfg_of("--advantage-estimator", "gae"), 1)
    validate(resolve(cfg_of("--advantage-estimator", "gae")), 1)  # resolved input is fine too
    validate(cfg_of("--advantage-estimator", "gae", "--n-samples-per-prompt", "1"), 1)
    validate(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--value-clip",
            "0",
            "--gamma",
            "0",
            "--lambd",
            "1",
            "--num-critic-only-steps",
            "999",
        ),
        1,
    )


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--critic-global-batch-size", "64"),
        ("--critic-micro-batch-size", "8"),
        ("--critic-lr", "1e-5"),
        ("--critic-min-lr", "0"),
        ("--critic-lr-warmup-steps", "2"),
        ("--critic-lr-decay-style", "cosine"),
        ("--critic-weight-decay", "0.1"),
        ("--critic-clip-grad", "1"),
        ("--num-critic-only-steps", "3"),
        ("--value-clip", "0.2"),
        ("--critic-load", "/some/model"),
        ("--gamma", "0.99"),
        ("--lambd", "0.95"),
        ("--kl-coef", "0.01"),
        ("--critic-lr-scaling", "sqrt"),
        ("--critic-base-lr", "1e-5"),
        ("--critic-base-global-batch-size", "32"),
    ],
)
def test_ppo_only_flags_under_grpo_are_rejected(cfg_of, flag, value):
    cfg = cfg_of(f"{flag}={value}")
    err = rejected(cfg)
    assert err.flag == flag
    assert f"{flag}={getattr(cfg, flag[2:].replace('-', '_'))}" in str(err)
    assert "only used by PPO (--advantage-estimator gae)" in str(err)
    assert err.allowed == "remove it, or use --advantage-estimator gae"


def test_normalize_advantages_under_grpo_is_rejected(cfg_of):
    for argv, value in ((["--normalize-advantages"], True), (["--no-normalize-advantages"], False)):
        err = assert_rejected(cfg_of(*argv), "--normalize-advantages", value)
        assert "only used by PPO" in str(err)


def test_ppo_flags_at_their_defaults_under_grpo_are_accepted(cfg_of):
    validate(cfg_of("--kl-coef", "0", "--num-critic-only-steps", "0", "--gamma", "none"), 1)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--value-clip", "-0.1"),
        ("--gamma", "1.5"),
        ("--gamma", "-0.1"),
        ("--lambd", "1.01"),
        ("--kl-coef", "-0.01"),
        ("--critic-lr", "0"),
        ("--critic-min-lr", "-1e-6"),
        ("--critic-min-lr", "1.0"),
        ("--critic-clip-grad", "-1"),
        ("--critic-weight-decay", "-0.1"),
        ("--num-critic-only-steps", "-1"),
        ("--num-critic-only-steps", "1000"),
        ("--critic-lr-warmup-steps", "-1"),
        ("--critic-global-batch-size", "0"),
        ("--critic-micro-batch-size", "0"),
        ("--num-steps-per-rollout", "0"),
        ("--critic-base-lr", "0"),
        ("--critic-base-global-batch-size", "0"),
    ],
)
def test_ppo_out_of_range_values_are_rejected_naming_the_flag(cfg_of, flag, value):
    cfg = cfg_of("--advantage-estimator", "gae", f"{flag}={value}")
    err = rejected(cfg)
    assert err.flag == flag
    assert f"{flag}={getattr(cfg, flag[2:].replace('-', '_'))}" in str(err)
    assert "allowed" in str(err)


def test_value_clip_error_says_zero_disables(cfg_of):
    err = assert_rejected(
        cfg_of("--advantage-estimator", "gae", "--value-clip", "-1"), "--value-clip", -1.0
    )
    assert err.allowed == ">= 0; 0 disables clipping"


def test_critic_min_lr_is_checked_against_the_critic_lr(cfg_of):
    gae = ("--advantage-estimator", "gae")
    err = assert_rejected(
        cfg_of(*gae, "--critic-lr", "1e-5", "--critic-min-lr", "1e-4"), "--critic-min-lr", 1e-4
    )
    assert "--critic-lr" in str(err)
    validate(cfg_of(*gae, "--critic-lr", "1e-5", "--critic-min-lr", "1e-5"), 1)
    # --critic-min-lr not given takes --min-lr, which must not exceed --critic-lr
    err = assert_rejected(
        cfg_of(*gae, "--min-lr", "1e-4", "--critic-lr", "1e-5"), "--critic-lr", 1e-5
    )
    assert "--min-lr" in str(err) and "--critic-min-lr" in err.allowed


def test_critic_batch_not_dividing_the_rollout_is_rejected(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--critic-global-batch-size",
        "48",
        "--critic-micro-batch-size",
        "8",
    )
    err = assert_rejected(cfg, "--critic-global-batch-size", 48)
    assert "16 x 8 = 128" in str(err) and "[1, 2, 4, 8, 16, 32, 64, 128]" in str(err)


def test_critic_batch_not_dividing_over_data_parallel_is_rejected(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--rollout-batch-size",
        "3",
        "--n-samples-per-prompt",
        "2",
        "--micro-batch-size",
        "1",
        "--global-batch-size",
        "6",
        "--critic-global-batch-size",
        "3",
    )
    err = assert_rejected(cfg, "--critic-global-batch-size", 3, world_size=2)
    assert "data-parallel size 2" in str(err)


def test_critic_micro_batch_times_dp_not_dividing_critic_batch_is_rejected(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--critic-global-batch-size",
        "32",
        "--critic-micro-batch-size",
        "32",
    )
    err = assert_rejected(cfg, "--critic-micro-batch-size", 32, world_size=2)
    assert "= 64" in str(err) and "critic batch 32" in str(err)
    # not given, the critic micro batch comes from --micro-batch-size (16): 16 x 4 > 32
    err = assert_rejected(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--micro-batch-size",
            "8",
            "--critic-global-batch-size",
            "16",
            "--critic-micro-batch-size",
            "none",
        ),
        "--critic-micro-batch-size",
        8,
        world_size=4,
    )
    assert "from --micro-batch-size" in str(err)


def test_critic_load_must_be_a_model_directory(cfg_of, tmp_path):
    gae = ("--advantage-estimator", "gae")
    missing = str(tmp_path / "missing")
    err = assert_rejected(cfg_of(*gae, "--critic-load", missing), "--critic-load", missing)
    assert "a local Hugging Face model directory" in err.allowed
    model = tmp_path / "model"
    model.mkdir()
    err = assert_rejected(cfg_of(*gae, "--critic-load", str(model)), "--critic-load", str(model))
    assert "config.json" in str(err)
    (model / "config.json").write_text("{}")
    validate(cfg_of(*gae, "--critic-load", str(model)), 1)
