"""Which advantage a rollout's responses get: GRPO's group-relative one or PPO's GAE over the
critic's values (with the KL reward penalty and whitening). Pure functions of the rollout's
tensors: every rank computes the same numbers from the same gathered rows."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from torch import Tensor

from hyrl.algorithms.grpo import group_advantages
from hyrl.algorithms.losses import kl_penalty
from hyrl.algorithms.ppo import explained_variance, gae, masked_whiten, token_rewards

if TYPE_CHECKING:
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.batch import BatchView


@dataclass(frozen=True)
class AdvantageSettings:
    estimator: str  # "grpo" (no critic) or "gae" (PPO: the critic's values)
    group_size: int  # G, responses per prompt (--n-samples-per-prompt)
    grpo_std_normalization: bool = True
    kl_coef: float = 0.0  # KL penalty in the reward (gae only)
    gamma: float = 1.0
    lambd: float = 1.0
    normalize_advantages: bool = True  # whiten GAE advantages over the rollout's tokens

    @classmethod
    def of(cls, algorithm: AlgorithmView, batch: BatchView) -> AdvantageSettings:
        """The algorithm's estimator and its settings (the KL penalty, gamma, lambda and
        whitening under gae only), over groups of --n-samples-per-prompt responses."""
        settings = cls(
            estimator=algorithm.advantage_estimator,
            group_size=batch.n_samples_per_prompt,
            grpo_std_normalization=algorithm.grpo_std_normalization,
        )
        if algorithm.advantage_estimator != "gae":
            return settings
        gamma, lambd, normalize = algorithm.gamma, algorithm.lambd, algorithm.normalize_advantages
        assert gamma is not None and lambd is not None, "resolve sets them under gae"
        assert normalize is not None, "resolve sets it under gae"
        return replace(
            settings,
            kl_coef=algorithm.kl_coef,
            gamma=gamma,
            lambd=lambd,
            normalize_advantages=normalize,
        )

    @property
    def needs_values(self) -> bool:
        """Whether the critic's values (and so a value pass) enter the advantages."""
        return self.estimator == "gae"


@dataclass
class Advantages:
    advantages: Tensor  # [N] (grpo: one per response) or [N, L] (gae: one per token)
    returns: Tensor | None = None  # gae: the value targets, [N, L]
    metrics: dict[str, float] = field(
        default_factory=dict
    )  # gae: train/kl_penalty (kl_coef > 0) and critic/* statistics


def compute_advantages(
    settings: AdvantageSettings,
    rewards: Tensor,
    mask: Tensor,
    old_log_probs: Tensor | None = None,
    ref_log_probs: Tensor | None = None,
    values: Tensor | None = None,
) -> Advantages:
    """The advantages of one rollout. rewards: [N] one score per response; mask: [N, L] the
    response tokens; values (gae): the critic's [N, L], already masked."""
    if settings.estimator == "grpo":
        return Advantages(
            group_advantages(
                rewards, settings.group_size, normalize_std=settings.grpo_std_normalization
            ),
            None,
            {},
        )
    assert values is not None, "gae needs the critic's values"
    metrics = {}
    kl = None
    if settings.kl_coef > 0:  # a k1 KL estimate per token, subtracted from the reward
        assert old_log_probs is not None and ref_log_probs is not None, "KL needs both"
        kl = kl_penalty(old_log_probs, ref_log_probs, "k1") * mask
        metrics["train/kl_penalty"] = float(kl.sum() / mask.sum().clamp(min=1))
    advantages, returns = gae(
        token_rewards(rewards, mask, kl, settings.kl_coef),
        values,
        mask,
        settings.gamma,
        settings.lambd,
    )
    if settings.normalize_advantages:
        advantages = masked_whiten(advantages, mask)
    tokens = mask.sum().clamp(min=1)
    metrics.update(
        {
            "critic/explained_variance": explained_variance(values, returns, mask),
            "critic/value_mean": float(values.sum() / tokens),
            "critic/return_mean": float(returns.sum() / tokens),
        }
    )
    return Advantages(advantages, returns, metrics)
