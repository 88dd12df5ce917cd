"""What every row of a rollout needs before training, on this rank: the rewards shaped, the
forward-only passes (old and reference log-probs, the critic's values), each DP rank over its
share of the rows and gathered to all (hyrl.train.data_parallel.all_rows), then the advantages.

  rewards         the engine's scores, DAPO's over-long shaping applied
                  (hyrl.algorithms.overlong.OverlongShaping)
  old log-probs   the actor's pass, unless exactly on policy (then the update's own forward
                  pass gives them: RolloutUpdates.actor_step); their metrics and --use-tis /
                  --use-mis weights (hyrl.algorithms.mismatch.Corrections)
  reference       the reference model's pass, when there is one (a KL term)
  values          the critic's pass under --advantage-estimator gae
  advantages      hyrl.algorithms.advantages.compute_advantages on the shaped rewards
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyrl.algorithms.advantages import AdvantageSettings, compute_advantages
from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.mismatch import Corrections
from hyrl.algorithms.overlong import OverlongShaping
from hyrl.metrics import flops
from hyrl.metrics.timers import StageTimers
from hyrl.rollout.base import RolloutBatch
from hyrl.train.data_parallel import DataParallelRows, all_rows

if TYPE_CHECKING:
    from hyrl.backends.base import TrainBackend


class RolloutPreparation:
    """The shaped rewards, the no-grad passes over one rollout's rows and its advantages, on
    this rank."""

    def __init__(
        self,
        backend: TrainBackend,
        rows: DataParallelRows,
        overlong: OverlongShaping,
        advantages: AdvantageSettings,
        corrections: Corrections,
        routing_metrics: bool,
    ):
        self.backend, self.rows = backend, rows
        self.overlong, self.advantages, self.corrections = overlong, advantages, corrections
        self.routing_metrics = routing_metrics  # the engine returns routing ids

    def prepare(
        self, rollout: RolloutBatch, batch: TokenBatch, on_policy: bool, timers: StageTimers
    ) -> dict:
        """Sets batch's (rollout's rows, packed) old and reference log-probs, advantages and
        (gae) returns and old values, and under --overlong-filtering zeroes the truncated
        rows' loss mask; their metrics. On policy the old log-probs are left to the update."""
        rewards, metrics = self.overlong(  # the rewards the advantages take
            rollout.rewards_tensor(),
            rollout.model_lengths,  # an environment's tokens do not make a response over-long
            rollout.finish_reasons,
            batch.loss_mask,
        )
        actor = self.backend.actor
        with timers("logprob"):
            if not on_policy:
                batch.old_log_probs, entropy = all_rows(
                    actor.log_probs, batch, self.rows, self.backend
                )
            if actor.ref_chunks is not None:
                batch.ref_log_probs = all_rows(
                    lambda b: actor.log_probs(b, reference=True)[0], batch, self.rows, self.backend
                )
        if not on_policy:
            metrics.update(self.old_log_prob_metrics(batch, entropy))
        values = None
        if self.advantages.needs_values:
            critic = self.backend.critic
            assert critic is not None, "gae's values come from the critic the backend built"
            with timers("value"):
                values = all_rows(critic.values, batch, self.rows, self.backend) * batch.loss_mask
        result = compute_advantages(
            self.advantages,
            rewards,
            batch.loss_mask,
            batch.old_log_probs,
            batch.ref_log_probs,
            values,
        )
        batch.advantages = result.advantages
        if values is not None:
            batch.returns, batch.old_values = result.returns, values
        metrics.update(result.metrics)
        return metrics

    def old_log_prob_metrics(self, batch: TokenBatch, entropy) -> dict:
        """train/entropy and mismatch/* of the old log-probs (sets batch.pg_weights for
        --use-tis / --use-mis), and the routing metrics when the engine returns routing."""
        metrics = self.corrections.of_old_log_probs(batch, entropy)
        if self.routing_metrics:  # collective
            metrics.update(self.backend.actor.routing_metrics())
        return metrics

    def passes(self, trains_actor: bool, on_policy: bool) -> flops.StepPasses:
        """The model passes a rollout step ran over its rows, for perf/mfu."""
        return flops.StepPasses(
            actor_update=trains_actor,
            actor_forwards=int(not on_policy) + int(self.backend.actor.ref_chunks is not None),
            critic_update=self.backend.critic is not None,
            critic_forwards=int(self.advantages.needs_values),
        )
