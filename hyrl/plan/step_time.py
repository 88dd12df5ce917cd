"""The predicted time of one rollout step and of one checkpoint save: estimates from assumed
throughputs (`Throughput`, each overridable on `hyrl plan`'s command line), not measurements
(pure arithmetic, no torch). The preemption lead time a run needs follows from them.

For the longest step the flags allow (every response at --rollout-max-response-len, every
prompt at its longest), one after the other as hyrl's loop runs them (hyrl.train.trainer):

    rollout   = responses x longest response / (engine GPUs x decode tokens/s per GPU)
    training  = model FLOPs of the step's passes / (training GPUs x peak FLOP/s x MFU)
                (hyrl.metrics.flops.step_flops: the convention perf/mfu logs, after PaLM's
                appendix B: forward + backward = 3 forwards, causal attention's n^2 term,
                recomputation not counted; the passes: the actor's update, its no-grad
                old-log-prob pass unless the update gives them, the reference's under a KL
                term, the critic's values and update under gae)
    sync      = one weight sync (hyrl.plan.sync's model)
    step      = rollout + training + sync
    save      = one save's bytes (hyrl.plan.disk) / (training nodes x file-system write GB/s
                per node): every training node writes its ranks' shards at once
    lead      = (step + save) x (1 + LEAD_MARGIN), rounded up to a second

A preemption signal (Slurm's --signal=B:USR1@LEAD) may come just after a step began: the run
finishes that step, then saves (hyrl.train.stopping), so the lead must hold a whole step and
a save.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from hyrl.config import schedules
from hyrl.config.concerns.algorithm import AlgorithmView
from hyrl.config.concerns.batch import BatchView
from hyrl.config.concerns.critic import CriticView
from hyrl.config.concerns.model import ModelView
from hyrl.config.rollout_layout import RolloutLayout
from hyrl.metrics.flops import GPUS, StepPasses, step_flops
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

GB = 1e9
H100_SXM = next(g for g in GPUS if g.product == "H100 SXM")
# For what the model leaves out (prefill, an evaluation falling in the step, offload and
# restore, the save's own start, process exit): a fraction on top, not a measured one.
LEAD_MARGIN = 0.25


@dataclass(frozen=True)
class Throughput:
    """What the step-time and save-time estimates assume; `hyrl plan --mfu 0.3 ...`."""

    # SGLang decode, all sequences of an engine together, per GPU of the engine: assumed, not
    # measured (hyrl has no 30B run yet); `hyrl profile-rollout` at the recipe's concurrency,
    # or a run's generated tokens / perf/rollout_s / engine GPUs, gives the cluster's own
    decode_tokens_per_s_per_gpu: float = 1000.0
    # dense bf16 tensor peak of one training GPU: hyrl.metrics.flops.GPUS' H100 SXM
    peak_tflops: float = H100_SXM.peak_bf16_flops_per_s / 1e12
    # model FLOPs utilisation of the training passes alone: assumed, not measured (a run's
    # perf/mfu is over the whole step, generation included, and reads lower)
    mfu: float = 0.20
    # checkpoint write per training node to the file system (GB/s): assumed, not measured
    fs_write_gb_s: float = 2.0


THROUGHPUT_FLAGS = {
    "--decode-tokens-per-s-per-gpu": (
        "decode_tokens_per_s_per_gpu",
        "SGLang decode tokens/s per engine GPU (all sequences together), assumed",
    ),
    "--peak-tflops": ("peak_tflops", f"dense bf16 TFLOP/s of a training GPU ({H100_SXM.product})"),
    "--mfu": ("mfu", "model FLOPs utilisation of the training passes (0-1], assumed"),
    "--fs-write-gb-s": ("fs_write_gb_s", "checkpoint write GB/s per training node, assumed"),
}

NOT_MODELLED = (
    "prefill (prompt tokens), and decode slowing as the KV cache fills or when fewer sequences "
    "than --rollout-concurrency remain",
    "rewards, evaluation, --offload-train's copies, the data-parallel gather of the rollout",
    "more responses than P x G (--dynamic-sampling, --batch-schedule auto)",
)


def responses_per_step(batch: BatchView) -> int:
    """Responses generated in the largest rollout step: P x G, or under --batch-ramp the
    larger of its ends x optimizer steps per rollout (hyrl.train.step_plan)."""
    if batch.batch_ramp:
        start, end, _ = schedules.parse_batch_ramp(batch.batch_ramp)
        return max(start, end) * batch.optimizer_steps_per_rollout
    return batch.responses_per_rollout


def step_passes(
    algorithm: AlgorithmView, critic: CriticView | None, old_log_probs_from_update: bool
) -> StepPasses:
    """The passes an actor-training step runs over its rows (hyrl.train.prepare.passes):
    `old_log_probs_from_update` is hyrl.config.old_log_probs_from_update of the run (no
    old-log-prob pass when true); a KL term adds the reference's pass, a critic (gae) its
    values and update."""
    gae = critic is not None
    return StepPasses(
        actor_update=True,
        actor_forwards=int(not old_log_probs_from_update)
        + int(algorithm.kl_loss_coef > 0 or algorithm.kl_coef > 0),
        critic_update=gae,
        critic_forwards=int(gae),
    )


def _passes_text(passes: StepPasses) -> str:
    parts = ["actor update (x3)"]
    if passes.actor_forwards:
        parts.append(f"{passes.actor_forwards} actor forward(s)")
    if passes.critic_update:
        parts.append("critic update (x3)")
    if passes.critic_forwards:
        parts.append("critic values")
    return " + ".join(parts)


def step_time_plan(
    model: ModelView,
    batch: BatchView,
    passes: StepPasses,
    sequence: tuple[int, int],
    world_size: int,
    rollout: RolloutLayout,
    weight_sync: dict,
    save_bytes: float,
    training_nodes: int,
    throughput: Throughput,
) -> dict:
    """The plan's "step_time" entry: each term's seconds and its basis, the step, the save and
    the lead time they need (None where a term is not modelled, with "why"). `passes`: what a
    step runs (step_passes); `sequence`: (longest prompt, longest response) in tokens
    (hyrl.plan.memory.sequence_length)."""
    responses = responses_per_step(batch)
    prompt_len, response_len = sequence
    seq_len = prompt_len + response_len
    t = throughput
    out: dict = {"kind": "estimate", "throughput": asdict(t), "margin": LEAD_MARGIN}
    out["not_modelled"] = list(NOT_MODELLED)
    engine_gpus = rollout.num_engines * max(rollout.gpus_per_engine, 1)
    decode_tokens = responses * response_len
    if engine_gpus == 0:
        out["why"] = "the engines behind --sglang-router-url are not hyrl's: their GPUs unknown"
        return out
    rollout_s = decode_tokens / (engine_gpus * t.decode_tokens_per_s_per_gpu)
    on_cpu = rollout.gpus_per_engine == 0
    flops = step_flops(Qwen3MoeArch.of(model), [seq_len] * responses, passes)
    training_s = flops / (world_size * t.peak_tflops * 1e12 * t.mfu)
    sync_s = weight_sync["seconds"] if weight_sync.get("modelled") else 0.0
    save_s = save_bytes / (training_nodes * t.fs_write_gb_s * GB)
    step_s = rollout_s + training_s + sync_s
    lead_s = math.ceil((step_s + save_s) * (1 + LEAD_MARGIN))
    sync_text = (
        "weight sync: hyrl.plan.sync's model above"
        if weight_sync.get("modelled")
        else f"weight sync: not modelled ({weight_sync.get('why', 'no engine')}), counted 0"
    )
    out.update(
        rollout_s=rollout_s,
        training_s=training_s,
        sync_s=sync_s,
        step_s=step_s,
        save_s=save_s,
        lead_s=lead_s,
        decode_tokens=decode_tokens,
        model_flops=flops,
        lines=[
            {
                "term": "rollout",
                "seconds": rollout_s,
                "text": f"rollout: {responses} responses x {response_len} tokens (each at "
                f"--rollout-max-response-len) = {decode_tokens:,} decode tokens / "
                f"({engine_gpus} engine {'device' if on_cpu else 'GPU'}(s) x "
                f"{t.decode_tokens_per_s_per_gpu:g} tokens/s each, assumed)",
            },
            {
                "term": "training",
                "seconds": training_s,
                "text": f"training: {flops:.3g} model FLOPs ({_passes_text(passes)} over "
                f"{responses} x {seq_len} tokens) / ({world_size} GPU(s) x "
                f"{t.peak_tflops:g} TFLOP/s peak x MFU {t.mfu:g}, assumed)",
            },
            {"term": "sync", "seconds": sync_s, "text": sync_text},
        ],
        save_text=f"{save_bytes / GB:.3g} GB / ({training_nodes} training node(s) x "
        f"{t.fs_write_gb_s:g} GB/s file-system write a node, assumed)",
    )
    return out


def format_seconds(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:.3g} s"


def format_step_time(plan: dict | None) -> list[str]:
    """The plan table's step-time and save-time lines."""
    if not plan:
        return []
    if "step_s" not in plan:
        return [f"  step time (estimate): not modelled: {plan['why']}"]
    out = [
        f"  step time: {format_seconds(plan['step_s'])} predicted for the longest rollout step (an "
        "estimate from assumed throughputs, not a measurement)"
    ]
    for line in plan["lines"]:
        out.append(f"    {format_seconds(line['seconds']):>9}  {line['text']}")
    out.append(
        f"  save time: {format_seconds(plan['save_s'])} predicted for one checkpoint (an "
        f"estimate) = {plan['save_text']}"
    )
    out.append("    not modelled: " + "; ".join(plan["not_modelled"]))
    return out
