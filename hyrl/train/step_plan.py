"""What one rollout step trains with: P prompts, B responses per optimizer step and the learning
rate of every optimizer step, for the actor and the critic, in one place for the three ways B is
set (--global-batch-size fixed, --batch-ramp, --batch-schedule auto); and whether the step
trains the actor at all (--num-critic-only-steps) with the policy version that follows.

    plan = StepPlan(batch, optimizer, critic, run, ramp_unit, autopilot)  # autopilot: or None
    plan.trains_actor(rollout_step), plan.policy_version(rollout_steps_done)
    P, B = plan.actor_batch(rollout_step)
    lr = plan.actor_lr(optimizer_step, B)            # warmup/decay of the peak at B
    critic_B = plan.critic_batch()
    critic_lr = plan.critic_lr(critic_optimizer_step, critic_B, critic_steps_per_rollout)

The peak rate is --lr (--critic-lr) unless B moves during the run and the rate was given as a
base recipe's (--base-lr at --base-global-batch-size, and the critic's): then it is re-derived
for today's B by the --lr-scaling rule (`schedules.scaled_lr`). The autopilot decides B for
the next step between rollout steps; this plan only reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from hyrl.config import CriticView, schedules

if TYPE_CHECKING:
    from hyrl.config.concerns.batch import BatchView
    from hyrl.config.concerns.optimizer import OptimizerView
    from hyrl.config.concerns.run import RunView


class BatchSource(Protocol):
    """The autopilot as the plan reads it: the batch sizes it chose for the next step."""

    @property
    def prompts_per_step(self) -> int: ...

    @property
    def responses_per_step(self) -> int: ...

    @property
    def critic_responses_per_step(self) -> int | None: ...


class StepPlan:
    """The plan of a run's batch (P, B, --batch-ramp), the actor's optimizer (its lr_schedule),
    the critic (None under grpo) and --num-steps; ramp_unit: the multiple every B of a ramp is
    (`hyrl.config.batch_ramp_unit`); autopilot: the run's, or None."""

    def __init__(
        self,
        batch: BatchView,
        optimizer: OptimizerView,
        critic: CriticView | None,
        run: RunView,
        ramp_unit: int,
        autopilot: BatchSource | None,
    ):
        self.batch, self.autopilot = batch, autopilot
        self.actor_schedule = optimizer.lr_schedule
        self.critic = critic  # None under grpo
        self.num_steps = run.num_steps
        # --num-critic-only-steps warm up the critic alone (none without a critic)
        self.critic_only_steps = critic.num_critic_only_steps if critic is not None else 0
        self.ramp: dict | None = None
        if batch.batch_ramp:
            start, end, steps = schedules.parse_batch_ramp(batch.batch_ramp)
            self.ramp = dict(start=start, end=end, steps=steps, unit=ramp_unit)

    # -- the actor -----------------------------------------------------------------------------
    def trains_actor(self, rollout_step: int) -> bool:
        """Whether this rollout step trains the actor: the first --num-critic-only-steps warm
        up the critic alone."""
        return rollout_step > self.critic_only_steps

    def policy_version(self, rollout_steps_done: int) -> int:
        """The policy version after this many rollout steps: weight syncs of trained weights
        (a critic-only warm-up step trains no actor)."""
        return max(0, rollout_steps_done - self.critic_only_steps)

    def actor_batch(self, rollout_step: int) -> tuple[int, int]:
        """(P prompts, B responses per optimizer step) for this rollout step."""
        batch = self.batch
        if self.autopilot is not None:
            return self.autopilot.prompts_per_step, self.autopilot.responses_per_step
        if self.ramp is None:
            return batch.rollout_batch_size, batch.responses_per_step
        responses = schedules.batch_at(rollout_step, **self.ramp)
        steps = batch.optimizer_steps_per_rollout
        return responses * steps // batch.n_samples_per_prompt, responses

    def actor_peak_lr(self, responses_per_step: int) -> float:
        """--lr, or under a ramp or the autopilot with --base-lr the rate re-derived for B."""
        if self.ramp is None and self.autopilot is None:
            return self.actor_schedule.lr
        return self.actor_schedule.peak_at(responses_per_step)

    def actor_lr(self, optimizer_step: int, responses_per_step: int) -> float:
        """The actor's rate at its optimizer step (0-based) when B = responses_per_step."""
        return self.actor_schedule.at(
            optimizer_step,
            peak=self.actor_peak_lr(responses_per_step),
            total_steps=self.num_steps * self.batch.optimizer_steps_per_rollout,
        )

    # -- the critic (gae) ----------------------------------------------------------------------
    def _critic(self) -> CriticView:
        if self.critic is None:
            raise ValueError("no critic: the run's --advantage-estimator is not gae")
        return self.critic

    def critic_batch(self) -> int:
        """The critic's responses per optimizer step: --critic-global-batch-size, or the
        autopilot's."""
        critic = self._critic()
        if self.autopilot is None:
            return critic.responses_per_step
        size = self.autopilot.critic_responses_per_step
        assert size is not None, "the autopilot of a run with a critic chooses its B too"
        return size

    def critic_peak_lr(self, responses_per_step: int) -> float:
        """--critic-lr, or under the autopilot the rate re-derived for its B from
        --critic-base-lr."""
        schedule = self._critic().lr_schedule
        if self.autopilot is None:
            return schedule.lr
        return schedule.peak_at(responses_per_step)

    def critic_lr(self, optimizer_step: int, responses_per_step: int, steps_per_rollout: int):
        """The critic's rate at its optimizer step (0-based) when its B = responses_per_step
        and a rollout holds steps_per_rollout of its steps."""
        return self._critic().lr_schedule.at(
            optimizer_step,
            peak=self.critic_peak_lr(responses_per_step),
            total_steps=self.num_steps * steps_per_rollout,
        )
