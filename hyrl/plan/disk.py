"""The checkpoints' disk: the size of one save and what the run keeps on disk at once (pure).

One save (hyrl.checkpoint.trainer_state, megatron-core's fully reshardable distributed
checkpoints) holds, for each trained model (the actor; the critic too under PPO), every
parameter's weight and its optimizer state, each once (sharded over the ranks, not repeated):

    bytes per parameter = weight (2 under --bf16, else 4) + optimizer (bf16: fp32 main params
                          4 + Adam m 4 + v 4 = 12; fp32: m + v = 8)     (memory.bytes_per_param)

so 14 B per parameter under --bf16: 30.5B parameters give 0.43 TB for GRPO, twice that for PPO
(the critic is the same model with a value head). The rank files, RNG states and loop state are
a few MB; the frozen reference model is not saved (it is rebuilt from its source).

The saves: every --save-interval rollout steps and the last step (a preemption adds one). On
disk at once, at most: the steps --keep-last-checkpoints and --keep-checkpoint-every keep
(hyrl.checkpoint.retention.to_prune, simulated over the run's saves), plus the one being
written (pruning follows a complete save), plus the step --load came from when it lies in
--save and would otherwise be pruned.
"""

from __future__ import annotations

from hyrl.checkpoint.retention import to_prune
from hyrl.config.concerns.critic import CriticView
from hyrl.config.concerns.parallel import ParallelView
from hyrl.config.concerns.run import CheckpointView, RunView
from hyrl.plan.memory import bytes_per_param

TB = 1e12


def save_steps(num_steps: int, save_interval: int | None) -> list[int]:
    """The rollout steps a run without preemption saves at."""
    steps = list(range(save_interval, num_steps + 1, save_interval)) if save_interval else []
    return steps if steps and steps[-1] == num_steps else [*steps, num_steps]


def peak_kept(steps: list[int], keep_last: int, keep_every: int | None) -> int:
    """The most complete checkpoints on disk at once, the one being written included."""
    kept: list[int] = []
    peak = 0
    for s in steps:
        peak = max(peak, len(kept) + 1)  # the new save is written before anything is pruned
        kept.append(s)
        gone = set(to_prune(kept, keep_last, keep_every))
        kept = [k for k in kept if k not in gone]
    return peak


def checkpoint_plan(
    parallel: ParallelView,
    checkpoint: CheckpointView,
    run: RunView,
    critic: CriticView | None,
    counts: dict,
) -> dict:
    """{"save_bytes", "per_param_bytes", "models", "formula", and with --save "saves",
    "peak_saves", "disk_bytes", "cadence", "retention"}: the precision from the parallel
    settings, a critic saved beside the actor when there is one (gae)."""
    b = bytes_per_param(parallel)
    per_param = b["weight"] + b["optimizer"]
    models = ["actor"] + (["critic"] if critic is not None else [])
    if parallel.bf16:
        dtype = "bf16 weights 2 + fp32 main params, Adam m and v 12"
    else:
        dtype = "fp32 weights 4 + Adam m and v 8"
    save_bytes = per_param * counts["total"] * len(models)
    one = {
        "save_bytes": save_bytes,
        "per_param_bytes": per_param,
        "models": models,
        "formula": f"{len(models)} model(s) x {counts['total'] / 1e9:.3g}B params x "
        f"{per_param} B ({dtype})",
    }
    if checkpoint.save is None:
        return one
    num_steps = run.num_steps
    steps = save_steps(num_steps, checkpoint.save_interval)
    peak = peak_kept(steps, checkpoint.keep_last_checkpoints, checkpoint.keep_checkpoint_every)
    if checkpoint.keep_last_checkpoints == 0:
        retention = "all kept: --keep-last-checkpoints 0"
    else:
        retention = f"--keep-last-checkpoints {checkpoint.keep_last_checkpoints}"
        if checkpoint.keep_checkpoint_every:
            retention += f", --keep-checkpoint-every {checkpoint.keep_checkpoint_every}"
    if checkpoint.save_interval:
        cadence = f"every {checkpoint.save_interval} of {num_steps} rollout steps and the last"
    else:
        cadence = f"the last of {num_steps} rollout steps only"
    return {
        **one,
        "saves": len(steps),
        "peak_saves": peak,
        "disk_bytes": save_bytes * peak,
        "cadence": cadence,
        "retention": retention,
    }


def format_checkpoints(plan: dict | None) -> list[str]:
    """The plan's checkpoint lines."""
    if plan is None:
        return []
    if "saves" not in plan:
        return [
            f"  checkpoints  none (no --save; launch/sbatch.template adds --save RUN_DIR/"
            f"checkpoints --save-interval 50); one save would be {_size(plan['save_bytes'])} = "
            f"{plan['formula']}"
        ]
    return [
        f"  checkpoints  one save {_size(plan['save_bytes'])} = {plan['formula']}; "
        f"{plan['saves']} saves ({plan['cadence']}; a preemption adds one)",
        f"    disk for the run {_size(plan['disk_bytes'])} = {plan['peak_saves']} saves at once "
        f"at most ({plan['retention']}; the one being written included), plus the step --load "
        "came from if it lies in --save",
    ]


def _size(n_bytes: float) -> str:
    return f"{n_bytes / TB:.3g} TB" if n_bytes >= 1e11 else f"{n_bytes / 1e9:.3g} GB"
