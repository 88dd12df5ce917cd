"""The algorithm (hyrl.config.concerns.algorithm): GRPO needs two responses or more per prompt, the
old log-probs come from the update only when the step is exactly on policy (one optimizer step,
no KL penalty in the reward, no asynchronous rollout), and DAPO's over-long buffer must fit in
the response length with a positive penalty. PPO's flags are in test_critic_flags.py."""

from __future__ import annotations

from config_errors import assert_rejected


def test_grpo_with_one_sample_per_prompt_is_rejected(cfg_of):
    cfg = cfg_of("--n-samples-per-prompt", "1", "--global-batch-size", "16")
    err = assert_rejected(cfg, "--n-samples-per-prompt", 1)
    assert "GRPO" in str(err)


def test_old_log_probs_come_from_the_update_only_when_exactly_on_policy(cfg_of):
    from hyrl.config import old_log_probs_from_update, resolve

    def old_log_probs_from_update_of(*argv):
        return old_log_probs_from_update(resolve(cfg_of(*argv)))

    batch = ("--rollout-batch-size", "4", "--n-samples-per-prompt", "2")
    assert old_log_probs_from_update_of(*batch, "--global-batch-size", "8")  # 1 step
    assert not old_log_probs_from_update_of(*batch, "--global-batch-size", "4")  # 2 steps
    assert not old_log_probs_from_update_of(
        *batch, "--global-batch-size", "8", "--recompute-old-log-probs"
    )
    # the reward's KL penalty needs the old log-probs before the update
    gae = ("--advantage-estimator", "gae", "--global-batch-size", "8")
    assert old_log_probs_from_update_of(*batch, *gae)
    assert not old_log_probs_from_update_of(*batch, *gae, "--kl-coef", "0.1")
    # generated ahead by older weights: off-policy, the separate pass gives the old log-probs
    assert not old_log_probs_from_update_of(*batch, "--global-batch-size", "8", "--async-rollout")
    assert not old_log_probs_from_update_of(
        *batch, "--global-batch-size", "8", "--async-rollout", "--max-staleness", "0"
    )


def test_an_overlong_buffer_must_fit_in_the_response_length(cfg_of):
    flags = ("--rollout-max-response-len", "4", "--overlong-buffer-len")
    err = assert_rejected(cfg_of(*flags, "5"), "--overlong-buffer-len", 5)
    assert "[1, 4]" in err.allowed
    assert_rejected(cfg_of(*flags, "0"), "--overlong-buffer-len", 0)
    assert_rejected(
        cfg_of(*flags, "2", "--overlong-penalty-factor", "0"), "--overlong-penalty-factor", 0.0
    )
