"""One rollout step's records for metrics.jsonl, built from plain values: the loop
(hyrl.train.trainer) hands in its counters, metrics and times, never itself.

A rollout step writes one record per actor optimizer step (a skipped one included; a
critic-only warm-up step writes one too):
  every record  step, samples, samples_generated, train/skipped_steps; an update's actor/*
                and train/loss (`update_record`); rollout_step, elapsed_s and perf/step_s when
                written (`RunLog.write_rollout_step`)
  the first     the rollout's own metrics (rollout/*, train/*, batch/*, autopilot/*,
                critic/*, mismatch/*); perf/setup_s on the run's first step
  the last      the stage times (perf/<stage>_s), perf/tokens_per_s_per_gpu and perf/mfu
                (rank 0, hyrl.metrics.flops), perf/overhead_s, the weight sync's metrics
                (`close_rollout_step`), and eval/* with perf/eval_s when an evaluation is due
                (`evaluation_metrics`)
Before the first step an evaluation writes the record of step 0 (`initial_evaluation_record`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hyrl.metrics import flops
from hyrl.models.qwen3_moe.config import Qwen3MoeArch


def update_record(
    step: int,
    samples: int,
    samples_generated: int,
    skipped_steps: int,
    actor_metrics: dict | None = None,
    time: float | None = None,
) -> dict:
    """The record of one actor optimizer step (actor_metrics: its actor/*; train/loss is its
    actor/loss), or of a critic-only warm-up rollout (None). step: the actor's optimizer
    steps so far; samples: responses consumed; skipped_steps: optimizer steps skipped, actor
    and critic; time: the perf_counter when it was taken (popped when written)."""
    record: dict = {"step": step, "samples": samples, "samples_generated": samples_generated}
    if time is not None:
        record["time"] = time
    if actor_metrics is not None:
        record.update(actor_metrics)
        record["train/loss"] = actor_metrics["actor/loss"]
    record["train/skipped_steps"] = skipped_steps
    return record


def batch_metrics(
    prompts_per_step: int, responses_per_step: int, autopilot_metrics: dict | None
) -> dict:
    """batch/* of the rollout step (P, B), and the autopilot's autopilot/* when it steers."""
    return {
        "batch/prompts_per_step": prompts_per_step,
        "batch/responses_per_step": responses_per_step,
        **(autopilot_metrics or {}),
    }


def critic_metrics(history: Sequence[dict]) -> dict:
    """The critic's optimizer steps of one rollout (their metrics, in order) as one set: each
    statistic averaged over the steps that have it (a skipped step has no noise metrics);
    critic/skipped a count; critic/optimizer_steps and critic/lr the last step's."""
    keys = dict.fromkeys(k for h in history for k in h)
    averaged = {
        k: sum(h[k] for h in history if k in h) / sum(k in h for h in history) for k in keys
    }
    averaged["critic/skipped"] = sum(h["critic/skipped"] for h in history)
    averaged["critic/optimizer_steps"] = history[-1]["critic/optimizer_steps"]
    averaged["critic/lr"] = history[-1]["critic/lr"]
    return averaged


@dataclass(frozen=True)
class StepWork:
    """The training work of a rollout step, for perf/tokens_per_s_per_gpu and perf/mfu:
    the model, the trained rows' lengths (flops.trained_sequence_lengths), the passes over
    them, the trainer's ranks and their GPU (None: peak unknown, no perf/mfu)."""

    arch: Qwen3MoeArch
    sequence_lengths: Sequence[int]
    passes: flops.StepPasses
    world_size: int
    gpu: flops.Gpu | None

    @classmethod
    def of_batch(cls, arch, batch, passes: flops.StepPasses, world_size: int, device) -> StepWork:
        """The work of training on batch's rows (a TokenBatch) on device's kind of GPU."""
        lengths = flops.trained_sequence_lengths(batch)
        return cls(arch, lengths, passes, world_size, flops.device_gpu(device))


def close_rollout_step(
    records: list[dict],
    rollout_metrics: dict,
    stage_times: dict[str, float],
    step_s: float,
    sync_metrics: dict,
    work: StepWork | None = None,
    setup_s: float | None = None,
) -> None:
    """Completes the step's records in place: the rollout's metrics on the first, the stage
    times (perf/<stage>_s of the whole rollout step), perf from work (rank 0; None: none),
    perf/overhead_s and the weight sync's metrics on the last. step_s: the rollout step's wall
    time (since the previous record); setup_s: the setup's seconds, on the run's first step."""
    records[0].update(rollout_metrics)
    last = records[-1]
    last.update(stage_times)
    if work is not None:
        last.update(
            flops.step_perf(
                work.arch, work.sequence_lengths, work.passes, step_s, work.world_size, work.gpu
            )
        )
    # the rollout step's wall time not spent in a timed stage (generation, reward,
    # log-probs/values, training, weight sync)
    last["perf/overhead_s"] = step_s - sum(stage_times.values())
    last.update(sync_metrics)
    if setup_s is not None:
        records[0]["perf/setup_s"] = setup_s


def evaluation_metrics(eval_metrics: dict, eval_s: float) -> dict:
    """An evaluation's eval/* and its seconds (perf/eval_s), for the record it closes."""
    return {**eval_metrics, "perf/eval_s": eval_s}


def initial_evaluation_record(eval_metrics: dict, eval_s: float) -> dict:
    """The record of step 0: the evaluation before any training, the start of every curve."""
    return {
        "step": 0,
        "rollout_step": 0,
        "samples": 0,
        "elapsed_s": 0.0,
        **evaluation_metrics(eval_metrics, eval_s),
    }
