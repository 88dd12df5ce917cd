"""The algorithm: the advantage estimator (GRPO's groups, or GAE with a critic: `critic`),
the policy loss and its clipping, KL and entropy terms, DAPO's dynamic sampling and over-long
shaping, and where the old log-probs come from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hyrl.config.errors import _fail
from hyrl.config.kinds import AppliesOnlyWith, _changed, _on, _opt


@dataclass
class AlgorithmFlags:
    advantage_estimator: str = _opt(
        "grpo",
        "advantage estimator (name): grpo = group-relative, no critic; gae = PPO with a critic",
        "algorithm",
        choices=("grpo", "gae"),
    )
    grpo_std_normalization: bool = _opt(
        True, "divide group-relative advantages by the group's reward std (on/off)", "algorithm"
    )
    eps_clip: float = _opt(
        0.2,
        "PPO-style ratio clip, lower side (ratio offset); --policy-loss ppo (gspo clips its "
        "sequence ratio by --gspo-eps-clip)",
        "algorithm",
    )
    eps_clip_high: float | None = _opt(
        None,
        "ratio clip, upper side (ratio offset); 'none' = same as --eps-clip; --policy-loss ppo",
        "algorithm",
    )
    policy_loss: str = _opt(
        "ppo",
        "policy-gradient objective (name): ppo = PPO-clip on each token's ratio; gspo = GSPO "
        "(Zheng et al. 2025) on each response's length-normalised sequence ratio",
        "algorithm",
        choices=("ppo", "gspo"),
    )
    gspo_eps_clip: float = _opt(
        3e-4, "GSPO's sequence-ratio clip, lower side (ratio offset; the paper's 3e-4)", "algorithm"
    )
    gspo_eps_clip_high: float = _opt(
        4e-4, "GSPO's sequence-ratio clip, upper side (ratio offset; the paper's 4e-4)", "algorithm"
    )
    loss_agg_mode: str | None = _opt(
        None,
        "how per-token terms become the actor's loss (name): token-mean over the global batch "
        "(DAPO), seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm (token sums "
        "over --rollout-max-response-len, Dr.GRPO's constant); none = token-mean, "
        "seq-mean-token-mean with --policy-loss gspo (the paper's)",
        "algorithm",
        choices=(
            "token-mean",
            "seq-mean-token-mean",
            "seq-mean-token-sum",
            "seq-mean-token-sum-norm",
        ),
    )
    kl_loss_coef: float = _opt(
        0.0, "weight of the KL-to-reference loss term (coefficient)", "algorithm"
    )
    kl_loss_type: str = _opt(
        "low_var_kl",
        "KL estimator for the KL loss (name)",
        "algorithm",
        choices=("low_var_kl", "k1"),
    )
    entropy_coef: float = _opt(0.0, "weight of the entropy bonus (coefficient)", "algorithm")
    gamma: float | None = _opt(
        None,
        "discount per token (dimensionless, in [0, 1]); PPO only; none = 1.0 under gae",
        "algorithm",
    )
    lambd: float | None = _opt(
        None, "GAE lambda (dimensionless, in [0, 1]); PPO only; none = 1.0 under gae", "algorithm"
    )
    normalize_advantages: bool | None = _opt(
        None,
        "whiten advantages over the global rollout batch (on/off); PPO only; none = on under gae",
        "algorithm",
    )
    kl_coef: float = _opt(
        0.0,
        "KL-to-reference penalty subtracted from the per-token reward, PPO-style "
        "(coefficient); PPO only; --kl-loss-coef is the loss-term form",
        "algorithm",
    )
    num_steps_per_rollout: int | None = _opt(
        None, "actor optimizer steps per rollout (steps); when given, B = P x G / this", "algorithm"
    )
    dynamic_sampling: bool = _opt(
        False,
        "DAPO's dynamic sampling: drop prompt groups whose G rewards are all equal (zero "
        "group advantage) and generate more prompts until P groups with a learning signal are "
        "collected; GRPO only (on/off)",
        "algorithm",
    )
    dynamic_sampling_max_rounds: int = _opt(
        8,
        "most generation rounds of P prompts per rollout step under --dynamic-sampling "
        "(rounds); still short after them, the step fills P with filtered groups (zero "
        "advantage: no gradient), counts them (train/dynamic_sampling_filled_groups) and says so",
        "algorithm",
    )
    dynamic_sampling_filter_path: str | None = _opt(
        None,
        "your group filter for --dynamic-sampling as module:function, called per prompt "
        "group as f(rewards, finish_reasons) -> bool, True keeping the group (import path); "
        "none = keep groups whose rewards are not all equal",
        "algorithm",
    )
    overlong_buffer_len: int | None = _opt(
        None,
        "DAPO's soft over-long penalty: responses longer than --rollout-max-response-len - L "
        "lose up to --overlong-penalty-factor of reward, linearly over the last L tokens "
        "(tokens, 1..--rollout-max-response-len); none = no penalty",
        "algorithm",
    )
    overlong_penalty_factor: float = _opt(
        1.0,
        "reward lost at the length limit under --overlong-buffer-len (reward units, > 0)",
        "algorithm",
    )
    overlong_filtering: bool = _opt(
        False,
        "mask responses cut at --rollout-max-response-len out of the actor's loss (DAPO's "
        "over-long filtering); their rewards still count in their group's baseline (on/off)",
        "algorithm",
    )
    # a resume may change it: the same old log-probs, from another pass
    recompute_old_log_probs: bool = _opt(
        False,
        "run the separate old-log-prob pass also when the batch is exactly on-policy (one actor "
        "optimizer step per rollout, no --kl-coef reward penalty); by default the old log-probs "
        "are then the update's own first forward pass, detached: the same weights (on/off)",
        "algorithm",
        resume_may_change=True,
    )


@dataclass(frozen=True)
class AlgorithmView:
    """The algorithm concern's settings, resolved (`ResolvedConfig.algorithm`); --gamma,
    --lambd and --normalize-advantages are set under gae only (None under grpo)."""

    advantage_estimator: str
    grpo_std_normalization: bool
    eps_clip: float
    eps_clip_high: float | None
    policy_loss: str
    gspo_eps_clip: float
    gspo_eps_clip_high: float
    loss_agg_mode: str
    kl_loss_coef: float
    kl_loss_type: str
    entropy_coef: float
    gamma: float | None
    lambd: float | None
    normalize_advantages: bool | None
    kl_coef: float
    num_steps_per_rollout: int | None
    dynamic_sampling: bool
    dynamic_sampling_max_rounds: int
    dynamic_sampling_filter_path: str | None
    overlong_buffer_len: int | None
    overlong_penalty_factor: float
    overlong_filtering: bool
    recompute_old_log_probs: bool

    @property
    def resolved_eps_clip_high(self) -> float:
        """Upper ratio clip: --eps-clip-high when set, else --eps-clip."""
        return self.eps_clip if self.eps_clip_high is None else self.eps_clip_high


POSITIVE_COUNTS = ("num_steps_per_rollout", "dynamic_sampling_max_rounds")
# Under gae these take a fixed value when not given.
GAE_DEFAULTS = {"gamma": 1.0, "lambd": 1.0, "normalize_advantages": True}

# Flags that apply only under a condition (see hyrl.config.conditional_flags): the settings of
# over-long shaping, GSPO and dynamic sampling, each only with it on; --dynamic-sampling, only
# under grpo. The PPO-only flags (--gamma, --lambd, --normalize-advantages, --kl-coef) are refused
# under grpo by the critic's row.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[AlgorithmFlags], ...] = (
    AppliesOnlyWith(
        ("overlong_penalty_factor",),
        "--overlong-buffer-len L",
        lambda c: c.overlong_buffer_len is not None,
        "only used with --overlong-buffer-len, which is not given",
        "add --overlong-buffer-len L, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("gspo_eps_clip", "gspo_eps_clip_high"),
        "--policy-loss gspo",
        lambda c: c.policy_loss == "gspo",
        "only used with --policy-loss gspo (the sequence ratio's clip); it is {policy_loss}",
        "--policy-loss gspo, or --eps-clip / --eps-clip-high for ppo",
        _changed,
    ),
    AppliesOnlyWith(
        ("dynamic_sampling_max_rounds", "dynamic_sampling_filter_path"),
        "--dynamic-sampling",
        lambda c: c.dynamic_sampling,
        "only used with --dynamic-sampling, which is off",
        "add --dynamic-sampling, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("dynamic_sampling",),
        "--advantage-estimator grpo",
        lambda c: c.advantage_estimator == "grpo",
        "drops groups of equal rewards as carrying no advantage, which holds for GRPO's group "
        "baseline, not for PPO's values",
        "remove it, or use --advantage-estimator grpo",
        _on,
    ),
)


def check_given(c: AlgorithmFlags, *, rollout_max_response_len: int) -> None:
    """Clip ranges, over-long shaping (within `rollout_max_response_len`, the rollout
    concern's --rollout-max-response-len), loss coefficients, gamma and lambda."""
    if not c.eps_clip > 0:
        _fail("eps_clip", c.eps_clip, "the clip range must be positive", "a number > 0")
    if c.overlong_buffer_len is not None and not (
        1 <= c.overlong_buffer_len <= rollout_max_response_len
    ):
        _fail(
            "overlong_buffer_len",
            c.overlong_buffer_len,
            f"must fit in --rollout-max-response-len={rollout_max_response_len}",
            f"an integer in [1, {rollout_max_response_len}], or none",
        )
    if not c.overlong_penalty_factor > 0:
        _fail(
            "overlong_penalty_factor",
            c.overlong_penalty_factor,
            "must be positive",
            "a number > 0 (the reward lost at the limit)",
        )
    for name in ("gspo_eps_clip", "gspo_eps_clip_high"):
        if not getattr(c, name) > 0:
            _fail(name, getattr(c, name), "the clip range must be positive", "a number > 0")
    if c.eps_clip_high is not None and not c.eps_clip_high > 0:
        _fail(
            "eps_clip_high",
            c.eps_clip_high,
            "the clip range must be positive",
            "a number > 0, or none (= --eps-clip)",
        )
    if not c.kl_loss_coef >= 0:
        _fail("kl_loss_coef", c.kl_loss_coef, "must not be negative", "a number >= 0")
    if not c.entropy_coef >= 0:
        _fail("entropy_coef", c.entropy_coef, "must not be negative", "a number >= 0")
    for name, what in (("gamma", "a discount"), ("lambd", "GAE lambda")):
        value = getattr(c, name)
        if value is not None and not 0 <= value <= 1:
            _fail(name, value, f"{what} must lie in [0, 1]", "0 <= value <= 1")
    if not c.kl_coef >= 0:
        _fail("kl_coef", c.kl_coef, "must not be negative", "a number >= 0")


def resolve(cfg: AlgorithmFlags) -> dict[str, Any]:
    """--loss-agg-mode <- token-mean, seq-mean-token-mean under --policy-loss gspo; under
    --advantage-estimator gae --gamma and --lambd <- 1.0, --normalize-advantages <- on
    (GAE_DEFAULTS; under grpo they stay None)."""
    updates: dict[str, Any] = {}
    if cfg.loss_agg_mode is None:
        updates["loss_agg_mode"] = (
            "seq-mean-token-mean" if cfg.policy_loss == "gspo" else "token-mean"
        )
    if cfg.advantage_estimator == "gae":
        updates.update({k: v for k, v in GAE_DEFAULTS.items() if getattr(cfg, k) is None})
    return updates


def check_group_size(c: AlgorithmFlags, *, n_samples_per_prompt: int) -> None:
    """GRPO's groups hold two responses or more (`n_samples_per_prompt`, the batch concern's
    G)."""
    if c.advantage_estimator == "grpo" and n_samples_per_prompt < 2:
        _fail(
            "n_samples_per_prompt",
            n_samples_per_prompt,
            "GRPO compares responses within a group, so it needs at least 2 per prompt",
            "an integer >= 2",
        )


def check_group_filter(c: AlgorithmFlags) -> None:
    """--dynamic-sampling-filter-path is an import path, module:function."""
    if c.dynamic_sampling_filter_path is not None:
        module, sep, function = c.dynamic_sampling_filter_path.partition(":")
        if not (sep and module.strip() and function.strip()):
            _fail(
                "dynamic_sampling_filter_path",
                c.dynamic_sampling_filter_path,
                "not module:function",
                "an import path like my_filters:keep_group",
            )
