"""hyrl.train.step_plan.StepPlan: P, B and the learning rate of every optimizer step, for a fixed B,
a --batch-ramp and the autopilot, actor and critic."""

from types import SimpleNamespace

import pytest

from hyrl.config import batch_ramp_unit, parse_args, resolve
from hyrl.config.concerns.critic import critic_view
from hyrl.config.concerns.optimizer import lr_schedule
from hyrl.train.step_plan import StepPlan


def plan_of(*flags, autopilot=None, world_size=1):
    cfg = resolve(parse_args(list(flags)))
    unit = batch_ramp_unit(cfg, world_size, parallel=cfg)  # as the Trainer hands it over
    return StepPlan(cfg.batch, cfg.optimizer, cfg.critic, cfg.run, unit, autopilot)


def test_a_fixed_batch_is_p_and_b_and_the_lr_is_lr():
    plan = plan_of("--rollout-batch-size", "16", "--n-samples-per-prompt", "8",
                   "--global-batch-size", "64", "--lr", "1e-3")  # fmt: skip
    assert plan.actor_batch(1) == plan.actor_batch(50) == (16, 64)
    assert plan.actor_lr(0, 64) == plan.actor_lr(99, 64) == 1e-3


def test_a_ramp_moves_b_and_the_base_rate_follows_it_by_the_rule():
    plan = plan_of("--rollout-batch-size", "64", "--n-samples-per-prompt", "8",
                   "--global-batch-size", "512", "--batch-ramp", "128:512:4",
                   "--base-lr", "3e-4", "--base-global-batch-size", "128",
                   "--lr-scaling", "sqrt")  # fmt: skip
    # P x G = 512 = one optimizer step per rollout: P = B / G
    assert [plan.actor_batch(t) for t in (1, 3, 5, 9)] == [(16, 128), (40, 320), (64, 512)] + [
        (64, 512)
    ]
    assert plan.actor_lr(0, 128) == pytest.approx(3e-4)
    assert plan.actor_lr(0, 512) == pytest.approx(6e-4)  # 3e-4 x (512 / 128)^(1/2)


def test_warmup_and_decay_apply_to_the_peak_of_todays_b():
    plan = plan_of("--global-batch-size", "128", "--lr", "1e-3", "--lr-warmup-steps", "4",
                   "--lr-decay-style", "linear", "--min-lr", "0", "--num-steps", "10")  # fmt: skip
    assert plan.actor_lr(0, 128) == pytest.approx(2.5e-4)
    assert plan.actor_lr(3, 128) == pytest.approx(1e-3)
    assert plan.actor_lr(9, 128) == pytest.approx(1e-3 * (1 - 5 / 6))


def test_the_autopilots_choice_is_the_batch_and_rates_follow_it():
    gae = ["--advantage-estimator", "gae", "--critic-base-lr", "1e-4",
           "--critic-base-global-batch-size", "64", "--critic-lr-scaling", "linear",
           "--base-lr", "3e-4", "--base-global-batch-size", "128",
           "--lr-scaling", "sqrt"]  # fmt: skip
    chosen = SimpleNamespace(prompts_per_step=32, responses_per_step=256,
                             critic_responses_per_step=128)  # fmt: skip
    plan = plan_of(*gae, autopilot=chosen)
    assert plan.actor_batch(7) == (32, 256)
    assert plan.actor_lr(0, 256) == pytest.approx(3e-4 * 2**0.5)
    assert plan.critic_batch() == 128
    assert plan.critic_lr(0, 128, steps_per_rollout=1) == pytest.approx(2e-4)  # 1e-4 x 128/64


def test_without_the_autopilot_the_critic_trains_at_its_own_flags():
    plan = plan_of("--advantage-estimator", "gae", "--critic-global-batch-size", "32",
                   "--critic-lr", "5e-5")  # fmt: skip
    assert plan.critic_batch() == 32
    assert plan.critic_lr(0, 32, steps_per_rollout=4) == 5e-5


def test_the_critic_only_warm_up_trains_no_actor_and_holds_the_policy_version_at_zero():
    plan = plan_of("--advantage-estimator", "gae", "--num-critic-only-steps", "2",
                   "--num-steps", "5")  # fmt: skip
    assert [plan.trains_actor(t) for t in (1, 2, 3, 5)] == [False, False, True, True]
    # a weight sync of trained weights is a version: none after steps 1 and 2, one per step after
    assert [plan.policy_version(done) for done in (0, 1, 2, 3, 5)] == [0, 0, 0, 1, 3]
    grpo = plan_of()
    assert grpo.trains_actor(1) and grpo.policy_version(4) == 4


# -- the typed settings the plan reads (hyrl.config.ResolvedConfig) ------------------------------
def test_the_resolved_schedules_carry_the_base_recipe_and_the_critics_settings_typed():
    cfg = resolve(parse_args(["--rollout-batch-size", "16", "--n-samples-per-prompt", "8",
                              "--global-batch-size", "64", "--base-lr", "1e-6",
                              "--base-global-batch-size", "1024", "--lr-scaling", "sqrt",
                              "--advantage-estimator", "gae", "--critic-global-batch-size", "32",
                              "--critic-lr", "2e-3", "--lr-warmup-steps", "3",
                              "--micro-batch-size", "4"]))  # fmt: skip
    actor = cfg.optimizer.lr_schedule
    assert actor.base == (1e-6, 1024) and actor.scaling == "sqrt"
    assert actor.lr == pytest.approx(2.5e-7)  # 1e-6 x (64 / 1024)^(1/2)
    assert actor.peak_at(4096) == pytest.approx(2e-6)  # scaled_lr's docstring example
    critic = cfg.critic
    assert critic is not None
    # B as given, the micro batch the actor's
    assert (critic.responses_per_step, critic.micro_batch_size) == (32, 4)
    # the critic's rate was given (no base), its warmup taken from the actor's
    assert critic.lr_schedule.base is None and critic.lr_schedule.peak_at(4096) == 2e-3
    assert critic.lr_schedule.warmup_steps == 3


def test_grpo_has_no_critic_and_an_unresolved_config_is_refused_by_name():
    given = parse_args(["--advantage-estimator", "gae"])
    assert resolve(parse_args([])).critic is None
    with pytest.raises(ValueError, match="--critic-global-batch-size"):
        critic_view(given, algorithm=given)
    with pytest.raises(ValueError, match="--lr still none"):
        lr_schedule(given, "")
    with pytest.raises(ValueError, match="no critic"):
        plan_of().critic_batch()
