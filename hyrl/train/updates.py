"""The optimizer steps of one rollout on this rank: for each step, the rows it trains on (this
data-parallel rank's share, hyrl.train.data_parallel), its learning rate (hyrl.train.step_plan),
its token count over the global batch and, for the actor, its --loss-agg-mode weights.

  critic  len(rollout) / B_critic steps; their statistics averaged (step_record.critic_metrics)
  actor   step k of P x G / B trains on rows [k B, (k + 1) B); exactly on policy (one step, no
          separate log-prob pass) the update's own forward pass gives the old log-probs, with
          --use-tis / --use-mis weights computed inside it per micro-batch
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.losses import loss_weights
from hyrl.algorithms.mismatch import Corrections
from hyrl.metrics import step_record
from hyrl.train.data_parallel import DataParallelRows
from hyrl.train.step_plan import StepPlan

if TYPE_CHECKING:
    from hyrl.backends.base import TrainBackend
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.rollout import RolloutView


class RolloutUpdates:
    """The actor's and the critic's optimizer steps on one rollout's batch, on this rank: the
    algorithm's --loss-agg-mode over responses of at most the rollout's
    --rollout-max-response-len tokens."""

    def __init__(
        self,
        backend: TrainBackend,
        rows: DataParallelRows,
        plan: StepPlan,
        corrections: Corrections,
        algorithm: AlgorithmView,
        rollout: RolloutView,
    ):
        self.backend, self.rows, self.plan, self.corrections = backend, rows, plan, corrections
        self.loss_agg_mode = algorithm.loss_agg_mode
        self.max_response_len = rollout.rollout_max_response_len

    def critic_steps(self, batch: TokenBatch) -> dict:
        """Every critic optimizer step of this rollout; their statistics averaged."""
        critic = self.backend.critic
        assert critic is not None, "called only when the backend built a critic"
        size = self.plan.critic_batch()
        steps = len(batch) // size
        history = []
        for j in range(steps):
            lr = self.plan.critic_lr(critic.optimizer_steps, size, steps)
            history.append(
                critic.train_step(
                    batch.select(self.rows.of_step(j, size)),
                    batch.loss_mask[j * size : (j + 1) * size].sum().item(),
                    lr,
                )
            )
        return step_record.critic_metrics(history)

    def actor_step(
        self, batch: TokenBatch, k: int, responses_per_step: int, on_policy: bool
    ) -> tuple[dict, object]:
        """Optimizer step k of the rollout: (its metrics, None), or on policy (metrics, every
        row's entropy) with batch.old_log_probs set from the update's forward pass."""
        actor = self.backend.actor
        lr = self.plan.actor_lr(actor.optimizer_steps, responses_per_step)
        global_rows = slice(k * responses_per_step, (k + 1) * responses_per_step)
        weights = loss_weights(  # --loss-agg-mode over this step's global batch; None: token-mean
            batch.loss_mask[global_rows], self.loss_agg_mode, self.max_response_len
        )
        if weights is not None:
            batch.loss_weights = batch.loss_mask.new_zeros(batch.loss_mask.shape)
            batch.loss_weights[global_rows] = weights
        local_batch = batch.select(self.rows.of_step(k, responses_per_step))
        total_tokens = batch.loss_mask[global_rows].sum().item()
        if not on_policy:
            return actor.train_step(local_batch, total_tokens, lr), None
        weigh = (  # a micro-batch's --use-tis / --use-mis weights, inside the update
            (lambda old, rollout, mask: self.corrections(old, rollout, mask, False)[1])
            if self.corrections.weighs
            else None
        )
        metrics, local_old = actor.train_step_on_policy(local_batch, total_tokens, lr, weigh)
        # one step per rollout: the step's rows are the rollout's, each DP rank's share
        batch.old_log_probs, entropy = self.backend.gather_rows(local_old)
        return metrics, entropy
