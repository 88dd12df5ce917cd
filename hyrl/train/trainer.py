"""The RL loop. Every rank runs `Trainer.run`; rank 0 also owns the rollout manager (the engines,
the task, the rewards). hyrl.train.cli validates the flags, makes the Trainer and the run's
records (RunLog) and runs the loop.

One rollout step (`Trainer.rollout_step`):
  prepare  prompts -> responses (engine) -> rewards (rank 0, hyrl.rollout.manager), broadcast;
           shaped rewards -> old log-probs -> advantages (every rank, hyrl.train.prepare)
  critic   (PPO) its optimizer steps on the rollout (hyrl.train.updates)
  actor    optimizer steps (global batch B each, split over DP ranks and micro-batches); when
           exactly on-policy the old log-probs are the update's own forward pass instead
  sync     the new weights to the engines (hyrl.train.sync_and_offload)
  log      one record per actor optimizer step (hyrl.metrics.step_record, RunLog)
Under --async-rollout rank 0's rollout manager takes the rollout from a queue generated ahead by
a worker thread and tops it up (RolloutManager.step_rollout); the weight sync holds the rollout
manager's engine lock, so it never lands in the middle of an engine call (with
--inflight-weight-updates it lands between the segments of one generation).
Between rollout steps: the autopilot steers B (hyrl.train.autopilot), the run stops early on a
preemption, skipped steps or --stop-at-target (hyrl.train.stopping), and a checkpoint is
written when due (hyrl.train.checkpointing).
The trainer is reached through hyrl.backends.base.TrainBackend, the engines through
hyrl.rollout.base.RolloutEngine: nothing here names megatron or SGLang.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path

from hyrl import config
from hyrl.algorithms import mismatch
from hyrl.algorithms.advantages import AdvantageSettings
from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.overlong import OverlongShaping
from hyrl.backends.factory import build_backend
from hyrl.config import ResolvedConfig
from hyrl.config.rollout_layout import rollout_layout
from hyrl.metrics import step_record
from hyrl.metrics.progress import ProgressReport
from hyrl.metrics.run_dir import open_run_directory
from hyrl.metrics.run_log import RunLog
from hyrl.metrics.timers import StageTimers
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout.base import GENERATION_PROGRESS, RolloutBatch
from hyrl.rollout.manager import RolloutManager
from hyrl.train import checkpointing
from hyrl.train.autopilot import RunAutopilot
from hyrl.train.data_parallel import DataParallelRows, scatter_routing
from hyrl.train.heldout import eval_schedule, evaluate
from hyrl.train.prepare import RolloutPreparation
from hyrl.train.step_plan import StepPlan
from hyrl.train.stopping import Preemption, check_skipped_steps, skipped_steps, target_reached
from hyrl.train.sync_and_offload import sync_and_offload_for
from hyrl.train.updates import RolloutUpdates
from hyrl.weight_sync import weight_sync_for


class Trainer:
    """The loop on one rank: the backend's actor (and critic), rank 0's rollout manager, the
    weight sync between them, and the records of the run."""

    def __init__(self, cfg: ResolvedConfig, world_size: int):
        self.cfg, self.world_size = cfg, world_size
        setup_start = time.perf_counter()
        self.arch = Qwen3MoeArch.of(cfg.model)
        backend = self.backend = build_backend(cfg, world_size, self.arch)
        self.rank = self.backend.rank
        self.actor, self.critic = self.backend.actor, self.backend.critic
        self.rows = DataParallelRows(
            self.backend.dp_rank, self.backend.dp_size, cfg.batch.optimizer_steps_per_rollout
        )
        self.pad_multiple = cfg.tensor_model_parallel_size  # sequence parallel splits the sequence
        self.old_log_probs_from_update = config.old_log_probs_from_update(cfg)
        corrections = mismatch.Corrections.of(cfg.mismatch)  # train-inference mismatch
        self.preparation = RolloutPreparation(  # shaped rewards, no-grad passes, advantages
            self.backend,
            self.rows,
            OverlongShaping.of(cfg.algorithm, cfg.rollout),  # DAPO's over-long reward shaping
            AdvantageSettings.of(cfg.algorithm, cfg.batch),
            corrections,
            cfg.mismatch.engine_returns_routing,
        )
        self.autopilot: RunAutopilot | None = None
        if cfg.batch.batch_schedule == "auto":  # B (and the critic's) follow the noise (steer)
            # the B the actor may take
            allowed = config.autopilot_batches(cfg, world_size, batch=cfg, parallel=cfg)
            critic_allowed = partial(
                config.critic_autopilot_batches, cfg, world_size, parallel=cfg, critic=cfg
            )
            self.autopilot = RunAutopilot.of(
                cfg.autopilot, cfg.batch, cfg.critic, cfg.rollout, cfg.run, allowed, critic_allowed
            )
        # every B of a --batch-ramp is a multiple
        unit = config.batch_ramp_unit(cfg, world_size, parallel=cfg)
        self.plan = StepPlan(cfg.batch, cfg.optimizer, cfg.critic, cfg.run, unit, self.autopilot)
        self.updates = RolloutUpdates(
            self.backend, self.rows, self.plan, corrections, cfg.algorithm, cfg.rollout
        )
        # --load: weights, optimizer states, counters, the task's and RunLog's state (or None)
        self.resumed = checkpointing.resume(
            cfg.load, self.arch, cfg.parallel, cfg.algorithm, cfg.rollout, backend, self.autopilot
        )
        self.resume_state = self.resumed.state if self.resumed is not None else None
        self.run_dir = Path(cfg.run_dir)
        layout = rollout_layout(cfg, world_size)  # the engines and how weights reach them
        self.logger = None
        self.rollout_manager: RolloutManager | None = None  # rank 0's: engines, task, rewards
        if self.rank == 0:
            print(f"hyrl: {self.backend.describe()}; run directory {self.run_dir}", flush=True)
            self.rollout_manager = RolloutManager(
                rollout=cfg.rollout,
                data=cfg.data,
                model=cfg.model,
                batch=cfg.batch,
                algorithm=cfg.algorithm,
                evaluation=cfg.evaluation,
                mismatch=cfg.mismatch,
                run=cfg.run,
                checkpoint=cfg.checkpoint,
                layout=layout,
                arch=self.arch,
                device=self.backend.device(),
            )
            # what the weights began from: a resume keeps its run's own statement
            run_config = {
                **cfg.to_dict(world_size),
                "initial_model": self.backend.initial_model(),
                **checkpointing.run_identity(cfg.run_dir, self.resumed),
            }
            self.run_id = run_config["run_id"]
            self.logger = open_run_directory(cfg.logs, self.run_dir, run_config)
            if self.resume_state is not None:
                self.rollout_manager.task.load_state_dict(self.resume_state["task"])
        weight_sync = weight_sync_for(cfg.rollout, layout, backend, self.run_dir)
        self.sync_and_offload = sync_and_offload_for(
            cfg.rollout, config.offloads_train(cfg), weight_sync, backend, self.rollout_manager
        )
        self.backend.wait_for_rank_0()  # rank 0 started the engines (minutes at 30B)
        steps_done = self.resume_state["rollout_step"] if self.resume_state is not None else 0
        # with --offload-train: the trainer offloaded for generation
        self._sync(version=self.plan.policy_version(steps_done))
        checkpointing.restore_rng(self.backend, self.resumed)  # last: before the loop draws
        self.preemption = Preemption()  # every rank has a handler
        self.setup_s = time.perf_counter() - setup_start

    def _trainables(self) -> list:
        return [self.actor, *([self.critic] if self.critic is not None else [])]

    def _sync(self, timers: StageTimers | None = None, version: int | None = None) -> None:
        """The weights to the engines (hyrl.train.sync_and_offload); version: the policy
        version they then hold (None: unchanged)."""
        self.sync_and_offload.sync_engines(self.actor, self.critic, timers, version)

    # -- one rollout step ---------------------------------------------------------------------
    def rollout_step(self, rollout_step: int, timers: StageTimers) -> tuple[dict, dict]:
        """prepare -> critic -> actor -> sync -> log; (the rollout's metrics, its last record).
        One record per actor optimizer step (a skipped one included); a critic-only warm-up
        rollout gets one too. The rollout's own metrics go on the first."""
        prompts_per_step, responses_per_step = self.plan.actor_batch(rollout_step)
        trains_actor = self.plan.trains_actor(rollout_step)  # not in the critic's warm-up
        on_policy = trains_actor and self.old_log_probs_from_update  # no separate pass
        batch, rollout_metrics = self._prepare(timers, on_policy, rollout_step)
        autopilot_metrics = self.autopilot.metrics() if self.autopilot is not None else None
        rollout_metrics.update(
            step_record.batch_metrics(prompts_per_step, responses_per_step, autopilot_metrics)
        )
        if self.critic is not None:
            with timers("critic_train"):
                rollout_metrics.update(self.updates.critic_steps(batch))
        if trains_actor:
            records, old_metrics = self._actor_updates(batch, timers, responses_per_step, on_policy)
            rollout_metrics.update(old_metrics)
        else:
            records = [self._update_record()]
        if trains_actor or self.cfg.colocate:  # released engines get even unchanged weights back
            self._sync(timers, version=self.plan.policy_version(rollout_step))
        records[-1]["time"] = time.perf_counter()  # the last one carries the weight sync
        work = None  # the rows trained and the passes over them, for perf/mfu
        if self.rank == 0:
            passes = self.preparation.passes(trains_actor, on_policy)
            device = self.backend.device()
            work = step_record.StepWork.of_batch(self.arch, batch, passes, self.world_size, device)
        self._log(rollout_step, records, rollout_metrics, timers, work)
        return rollout_metrics, records[-1]

    def _prepare(self, timers: StageTimers, on_policy: bool, step: int) -> tuple[TokenBatch, dict]:
        """The rollout packed; shaped rewards, old/reference log-probs, values, advantages for
        every row (hyrl.train.prepare). On policy the old log-probs (and their metrics) come
        with the actor's update instead."""
        rollout, queue_metrics = self._rollout(timers, step)
        # the engines released their memory in _rollout
        self.sync_and_offload.restore(self._trainables(), timers)
        batch = rollout.to_token_batch(self.pad_multiple)
        metrics = rollout.metrics(timers.seconds.get("rollout", 0.0))
        metrics.update(queue_metrics)
        self.run_log.samples_generated += rollout.responses_generated
        metrics.update(self.preparation.prepare(rollout, batch, on_policy, timers))
        return batch, metrics

    def _rollout(self, timers: StageTimers, rollout_step: int) -> tuple[RolloutBatch, dict]:
        """Rank 0 generates and scores (or takes it from --async-rollout's queue); the result
        is broadcast to every rank (routing ids, --use-rollout-routing-replay,
        --measure-routing-mismatch, go to each rank for its own rows). The other ranks wait in
        the backend's wait group, where no NCCL timeout fires. With it: rank 0's queue
        metrics (rollout/staleness_*, perf/engine_idle_s; {} without the queue)."""
        prompts_per_step, responses_per_step = self.plan.actor_batch(rollout_step)
        rollout, routed, queue_metrics = None, None, {}
        if self.rank == 0:
            assert self.rollout_manager is not None, "rank 0 built the rollout manager in __init__"
            step = self.rollout_manager.step_rollout(timers, prompts_per_step, rollout_step)
            self.run_log.samples_generated += step.dropped_responses  # never trained on
            rollout, routed, queue_metrics = step.batch, step.routed, step.metrics
        rollout = self.backend.broadcast_from_rank_0(rollout)
        rollout.routed_experts = (
            scatter_routing(routed, len(rollout), responses_per_step, self.rows, self.backend)
            if self.preparation.routing_metrics  # the engines return their routing
            else None
        )
        return rollout, queue_metrics

    def _actor_updates(
        self, batch: TokenBatch, timers: StageTimers, responses_per_step: int, on_policy: bool
    ) -> tuple[list[dict], dict]:
        """The actor's optimizer steps of this rollout, a record each; samples counts the
        responses the updates consumed (a skipped one consumes none). On policy (one step) the
        update gives the old log-probs too: their metrics come back second ({} otherwise)."""
        records, old_metrics = [], {}
        for k in range(self.rows.optimizer_steps_per_rollout):
            with timers("actor_train"):
                metrics, entropy = self.updates.actor_step(batch, k, responses_per_step, on_policy)
            if entropy is not None:
                old_metrics = self.preparation.old_log_prob_metrics(batch, entropy)
            if not metrics["actor/skipped"]:
                self.run_log.samples += responses_per_step
            records.append(self._update_record(metrics, time.perf_counter()))
        return records, old_metrics

    def _update_record(self, actor_metrics: dict | None = None, at: float | None = None) -> dict:
        run_log = self.run_log
        return step_record.update_record(
            self.actor.optimizer_steps,
            run_log.samples,
            run_log.samples_generated,
            skipped_steps(self._trainables()),
            actor_metrics,
            at,
        )

    # -- the loop -------------------------------------------------------------------------------
    def run(self, run_log: RunLog) -> str:
        """The rollout steps from run_log's first to --num-steps, their records written to
        run_log (made by hyrl.train.cli once the setup is done); why the run stopped,
        summary.json's "ended": "num_steps", or early "preempted" or "target"."""
        cfg = self.cfg
        timers = StageTimers()
        self.run_log = run_log
        first_step = run_log.first_step
        if cfg.async_rollout and self.rollout_manager is not None:  # rank 0
            self.rollout_manager.start_queue(
                self.plan.actor_batch(first_step)[0], checkpointing.queued_rollouts(self.resumed)
            )
        self.eval_due = eval_schedule(cfg.evaluation, cfg.run) if self.rank == 0 else set()
        if 0 in self.eval_due and first_step == 1:  # the starting point of every curve
            eval_metrics, eval_s = self._evaluate()
            run_log.pause(eval_s)
            run_log.write(step_record.initial_evaluation_record(eval_metrics, eval_s))
        # rank 0: a bar on a terminal, else a plain line every --log-interval steps
        report: ProgressReport | nullcontext = nullcontext()
        if self.rank == 0 and cfg.progress:
            report = ProgressReport(cfg.num_steps, first_step, cfg.log_interval, run_log.samples)
            report.heartbeat(timers, cfg.log_interval_s, GENERATION_PROGRESS)
        with report as progress:
            for rollout_step in range(first_step, cfg.num_steps + 1):
                rollout_metrics, last_record = self.rollout_step(rollout_step, timers)
                if self.autopilot is not None:  # B of the next step; before a save
                    broadcast = self.backend.broadcast_from_rank_0
                    self.autopilot.steer(rollout_metrics, last_record, self.rank, broadcast)
                if progress is not None:
                    progress.step(rollout_step, rollout_metrics, last_record)
                check_skipped_steps(self._trainables(), cfg.max_skipped_steps, rollout_step)
                preempted = self.backend.any_rank(self.preemption.received)
                reached = cfg.stop_at_target and self.backend.any_rank(run_log.reached)
                if checkpointing.due(cfg.checkpoint, cfg.run, rollout_step, preempted or reached):
                    # checkpoints stay off the elapsed_s clock, as evaluation
                    run_log.pause(self._save(rollout_step))
                if preempted or reached:
                    if self.rank == 0 and preempted:
                        print(self.preemption.message(rollout_step, cfg.save), flush=True)
                    elif self.rank == 0:
                        print(target_reached(cfg.target, rollout_step), flush=True)
                    return "preempted" if preempted else "target"
        return "num_steps"

    def _log(
        self,
        rollout_step: int,
        records: list[dict],
        rollout_metrics: dict,
        timers: StageTimers,
        work: step_record.StepWork | None,
    ) -> None:
        """The step's records completed (hyrl.metrics.step_record) and written; an evaluation
        due now closes the last one and stays off the elapsed_s clock."""
        run_log = self.run_log
        step_record.close_rollout_step(
            records,
            rollout_metrics,
            timers.pop(),  # stage timers of the whole rollout step
            records[-1]["time"] - run_log.last_record_time,
            self.sync_and_offload.metrics,
            work,
            self.setup_s if rollout_step == run_log.first_step else None,
        )
        eval_s = 0.0
        if rollout_step in self.eval_due:  # their times were taken before the evaluation
            eval_metrics, eval_s = self._evaluate()
            records[-1].update(step_record.evaluation_metrics(eval_metrics, eval_s))
        run_log.write_rollout_step(rollout_step, records)
        run_log.pause(eval_s)  # the clock resumes after the evaluation

    def _evaluate(self) -> tuple[dict, float]:
        assert self.rollout_manager is not None, "evaluations are due on rank 0 only"
        self.rollout_manager.wait_for_queue()  # the worker idle: one thread uses the rewards
        cfg, manager, where = self.cfg, self.rollout_manager, self.backend.device()
        n, ks = config.eval_max_response_len(cfg, rollout=cfg), config.eval_pass_ks(cfg)
        return evaluate(cfg.evaluation, cfg.rollout, manager, where, max_response_len=n, pass_ks=ks)

    def _save(self, rollout_step: int) -> float:
        """--save's checkpoint after this rollout step, older ones pruned (collective); seconds"""
        began = time.perf_counter()
        state = {}
        if self.rank == 0:
            assert self.rollout_manager is not None, "rank 0 built the rollout manager in __init__"
            run_config = self.cfg.to_dict(self.world_size)  # whose run, under which flags
            state = checkpointing.loop_state(
                run_config, self.run_id, self.run_log, self.rollout_manager, self.autopilot
            )
        parts = self._trainables()
        keep = checkpointing.Retention.of(self.cfg.checkpoint, self.resumed)
        checkpointing.save(
            self.backend, self.sync_and_offload, parts, keep, rollout_step, state, self._sync
        )
        return time.perf_counter() - began

    def close(self) -> None:
        """Stop the rollout manager (its --async-rollout worker, engines, reward workers, Ray
        if it started it)."""
        if self.rollout_manager is not None:
            self.rollout_manager.close()
        self.preemption.close()
