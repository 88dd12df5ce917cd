"""The actor's loss of a run: its clip range, KL and entropy terms (`ActorLoss.of`, by
--policy-loss), and how a micro-batch's tensors feed `losses.grpo_loss` (calling an
`ActorLoss`). A backend computes the log-probs (and the entropy when `needs_entropy`) and calls
it; a loss that needs a new per-token input changes this package, not the backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.losses import grpo_loss

if TYPE_CHECKING:
    from hyrl.config.concerns.algorithm import AlgorithmView


@dataclass(frozen=True)
class ActorLoss:
    eps_clip: float = 0.2  # the ratio's clip range: the token ratio's (ppo), the sequence's (gspo)
    eps_clip_high: float = 0.2
    policy_loss: str = "ppo"  # or "gspo" (hyrl.algorithms.losses)
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "low_var_kl"
    entropy_coef: float = 0.0

    @classmethod
    def of(cls, algorithm: AlgorithmView) -> ActorLoss:
        """The run's actor loss: the clip range of --gspo-eps-clip* under --policy-loss gspo, of
        --eps-clip* (the upper one resolved) under ppo; the KL loss and entropy terms."""
        gspo = algorithm.policy_loss == "gspo"
        return cls(
            eps_clip=algorithm.gspo_eps_clip if gspo else algorithm.eps_clip,
            eps_clip_high=(
                algorithm.gspo_eps_clip_high if gspo else algorithm.resolved_eps_clip_high
            ),
            policy_loss=algorithm.policy_loss,
            kl_loss_coef=algorithm.kl_loss_coef,
            kl_loss_type=algorithm.kl_loss_type,
            entropy_coef=algorithm.entropy_coef,
        )

    @property
    def needs_entropy(self) -> bool:
        """Whether the loss takes the policy's entropy (an entropy bonus)."""
        return self.entropy_coef > 0

    def __call__(
        self,
        mb: TokenBatch,
        log_probs: Tensor,
        old_log_probs: Tensor,
        entropy: Tensor | None,
        total_tokens: float,
        pg_weights: Tensor | None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss of micro-batch `mb` (its advantages, loss mask, reference log-probs and
        loss weights) at the actor's `log_probs`, against `old_log_probs`; `entropy` is used
        only with an entropy bonus and the reference only with a KL loss; `pg_weights`: the
        --use-tis/--use-mis weights (None: none). See `losses.grpo_loss`."""
        return grpo_loss(
            log_probs,
            old_log_probs,
            mb.advantages,
            mb.loss_mask,
            eps_clip=self.eps_clip,
            eps_clip_high=self.eps_clip_high,
            ref_log_probs=mb.ref_log_probs if self.kl_loss_coef > 0 else None,
            kl_loss_coef=self.kl_loss_coef,
            kl_loss_type=self.kl_loss_type,
            entropy=entropy if self.needs_entropy else None,
            entropy_coef=self.entropy_coef,
            total_tokens=total_tokens,
            pg_weights=pg_weights,
            policy_loss_kind=self.policy_loss,
            weights=mb.loss_weights,
        )
