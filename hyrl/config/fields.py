"""The flags of `hyrl train` as the fields of `RunConfig`: type, default, help text and group
(each declared with `hyrl.config.kinds._opt`), and what a flag not given ("none") stands for
(see `hyrl.config.resolve`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hyrl.config.concerns import algorithm, critic
from hyrl.config.concerns.algorithm import AlgorithmFlags, old_log_probs_from_update
from hyrl.config.concerns.autopilot import AutopilotFlags
from hyrl.config.concerns.batch import BatchFlags, MicroBatchFlags
from hyrl.config.concerns.critic import CriticFlags
from hyrl.config.concerns.data import DataFlags
from hyrl.config.concerns.evaluation import EvalFlags
from hyrl.config.concerns.mismatch import MismatchFlags
from hyrl.config.concerns.model import ModelFlags
from hyrl.config.concerns.optimizer import OptimizerFlags
from hyrl.config.concerns.parallel import ParallelFlags
from hyrl.config.concerns.rollout import RolloutFlags
from hyrl.config.errors import flag_name
from hyrl.config.kinds import _opt
from hyrl.config.rollout_layout import rollout_layout
from hyrl.schedules import LR_SCALING_EXPONENTS

GROUPS = (
    "model",
    "parallelism",
    "batch",
    "optimizer",
    "rollout",
    "algorithm",
    "critic",
    "eval",
    "mismatch",
    "task",
    "run",
)
GROUP_TITLES = {
    "model": "model architecture",
    "parallelism": "parallelism (Megatron layout)",
    "batch": "batch sizes (the batch-size question: P prompts x G samples, B per optimizer step)",
    "optimizer": "optimizer and learning-rate schedule",
    "rollout": "rollout (generation)",
    "algorithm": "algorithm (GRPO, PPO)",
    "mismatch": "MoE stability: train-inference mismatch (importance sampling, routing replay)",
    "critic": "critic (PPO value model, --advantage-estimator gae; 'none' = the actor's value)",
    "eval": "evaluation on held-out prompts, and the target a run is timed to",
    "task": "task",
    "run": "run",
}


@dataclass
class RunConfig(
    DataFlags,
    MismatchFlags,
    EvalFlags,
    CriticFlags,
    AlgorithmFlags,
    RolloutFlags,
    OptimizerFlags,
    MicroBatchFlags,
    AutopilotFlags,
    BatchFlags,
    ParallelFlags,
    ModelFlags,
):
    # --- run -----------------------------------------------------------------------------
    num_steps: int = _opt(1000, "training length (rollout steps)", "run")
    run_dir: str = _opt("runs/latest", "directory for config.json and metrics.jsonl (path)", "run")
    seed: int = _opt(1234, "random seed for weights, prompts and sampling (integer >= 0)", "run")
    log_wandb: bool = _opt(False, "also log metrics to Weights & Biases (on/off)", "run")
    wandb_project: str = _opt("hyrl", "Weights & Biases project (name)", "run")
    wandb_exp_name: str | None = _opt(
        None,
        "the wandb run's name (Megatron-LM's name for it); none = the run directory's parent "
        "and name, e.g. sweep/b256-sqrt-s1234 (name)",
        "run",
    )
    wandb_entity: str | None = _opt(
        None,
        "the wandb team or user the run belongs to (slime's --wandb-team is accepted too); none "
        "= wandb's default entity (name)",
        "run",
    )
    wandb_group: str | None = _opt(
        None, "the wandb group, e.g. one sweep's members (name); none = no group", "run"
    )
    wandb_mode: str | None = _opt(
        None,
        "online, offline (written under RUN_DIR/wandb, synced later with `wandb sync`) or "
        "disabled; none = WANDB_MODE if set, else offline",
        "run",
        choices=("online", "offline", "disabled"),
    )
    wandb_tags: str | None = _opt(
        None, "the wandb run's tags, comma-separated (names); none = no tags", "run"
    )
    tensorboard_dir: str | None = _opt(
        None,
        "also write every metrics.jsonl record as TensorBoard scalars into this directory "
        "(path; tag = the key, step = the record's step); none = no TensorBoard mirror",
        "run",
    )
    progress: bool = _opt(
        True,
        "show rank 0's progress: on a terminal a bar with the ETA, elsewhere (a job's log file) "
        "plain lines every --log-interval rollout steps (on/off)",
        "run",
    )
    log_interval: int = _opt(
        1,
        "without a terminal, one flushed line every N rollout steps: step/total, samples, "
        "reward, the latest eval, step time, responses/s, ETA (count; Megatron's name)",
        "run",
    )
    log_interval_s: float | None = _opt(
        60.0,
        "without a terminal, a heartbeat line at least this often while a rollout step runs "
        "with no step line: the stage in progress and for how long (seconds); none = none",
        "run",
    )
    save: str | None = _opt(
        None,
        "checkpoint directory: DIR/step_N/ holds the actor, reference, critic, optimizer, "
        "RNG and loop state, written atomically, and DIR/latest names the newest (path); none = "
        "no checkpoints",
        "run",
    )
    save_interval: int | None = _opt(
        None,
        "rollout steps between checkpoints (rollout steps); none = only at the end and on "
        "preemption (SIGTERM/SIGUSR1); needs --save",
        "run",
    )
    load: str | None = _opt(
        None,
        "resume from this --save directory (its 'latest') or one of its step_N directories "
        "(path); a --run-dir holding a run is then appended to, if its config.json matches",
        "run",
    )
    max_skipped_steps: int = _opt(
        3,
        "optimizer steps in a row that may be skipped for a non-finite loss or gradient norm; "
        "the run stops (exit 1) when that many are skipped in a row (count >= 1)",
        "run",
    )

    # --- derived values (not flags) ------------------------------------------------------
    @property
    def virtual_pipeline_model_parallel_size(self) -> int | None:
        """V model chunks per pipeline rank (megatron's virtual_pipeline_model_parallel_size),
        from either virtual-stage flag; None without them (one chunk)."""
        if self.num_virtual_stages_per_pipeline_rank is not None:
            return self.num_virtual_stages_per_pipeline_rank
        if self.num_layers_per_virtual_pipeline_stage is None:
            return None
        layers_per_rank = self.num_layers // self.pipeline_model_parallel_size
        return layers_per_rank // self.num_layers_per_virtual_pipeline_stage

    @property
    def optimizer_steps_per_rollout(self) -> int:
        """(P x G) // B: actor optimizer steps on each rollout's responses (resolved B)."""
        _require_resolved(self, _BATCH_FIELDS)
        assert self.global_batch_size is not None, "_require_resolved raised otherwise"
        return self.responses_per_rollout // self.global_batch_size

    @property
    def critic_steps_per_rollout(self) -> int | None:
        """(P x G) // critic B under PPO (resolved batches); None without a critic."""
        _require_resolved(self, _BATCH_FIELDS)
        if self.critic_global_batch_size is None:
            return None
        return self.responses_per_rollout // self.critic_global_batch_size

    def to_dict(self, world_size: int) -> dict:
        """Every field plus the derived values; JSON-serialisable (for config.json and wandb).

        Needs a resolved config (see `resolve`); raises ValueError otherwise.
        """
        _require_resolved(self)
        out = dataclasses.asdict(self)
        out["world_size"] = world_size
        out["data_parallel_size"] = self.data_parallel_size(world_size)
        out["responses_per_rollout"] = self.responses_per_rollout
        out["optimizer_steps_per_rollout"] = self.optimizer_steps_per_rollout
        out["old_log_probs_from_update"] = old_log_probs_from_update(self)
        out["lr_scaling_exponent"] = LR_SCALING_EXPONENTS[self.lr_scaling]
        if self.critic_global_batch_size is not None:
            assert self.critic_lr_scaling is not None, "resolved with the critic's batch (gae)"
            out["critic_steps_per_rollout"] = self.critic_steps_per_rollout
            out["critic_lr_scaling_exponent"] = LR_SCALING_EXPONENTS[self.critic_lr_scaling]
        out["rollout_layout"] = dataclasses.asdict(rollout_layout(self, world_size))
        return out


class ResolvedConfig(RunConfig):
    """A RunConfig as `hyrl.config.resolve` returns it (and `hyrl.config.load`, to the loop):
    every flag not given holds the value it stands for, so these fields have their resolved
    types. The critic's settings and the PPO-only flags are filled under gae only, and
    --base-global-batch-size with --base-lr only: they keep their optional types."""

    global_batch_size: int
    lr: float
    eval_temperature: float
    loss_agg_mode: str
    task: str


# ------------------------------------------------------------------------------------------
# What a flag not given stands for (filled in by hyrl.config.resolve)
# ------------------------------------------------------------------------------------------

# The step counts per rollout need only these resolved.
_BATCH_FIELDS = ("global_batch_size", "critic_global_batch_size")


def _unresolved(cfg: RunConfig) -> list[str]:
    """Fields still None that `resolve` would fill in."""
    names = [n for n in ("global_batch_size", "lr", "eval_temperature") if getattr(cfg, n) is None]
    if cfg.base_lr is not None and cfg.base_global_batch_size is None:
        names.append("base_global_batch_size")
    if cfg.advantage_estimator == "gae":
        names += [
            n
            for n in (
                *critic.CRITIC_FROM_ACTOR,
                *algorithm.GAE_DEFAULTS,
                *critic.GAE_DEFAULTS,
                "critic_lr_scaling",
            )
            if getattr(cfg, n) is None
        ]
        if cfg.critic_base_lr is not None and cfg.critic_base_global_batch_size is None:
            names.append("critic_base_global_batch_size")
    return names


def _require_resolved(cfg: RunConfig, only: tuple[str, ...] | None = None) -> None:
    """Raise ValueError unless `cfg` is resolved (in the fields `only`, when given)."""
    names = [n for n in _unresolved(cfg) if only is None or n in only]
    if names:
        raise ValueError(
            f"RunConfig is not resolved ({', '.join(flag_name(n) for n in names)} "
            "still none): call hyrl.config.resolve(cfg) or "
            "hyrl.config.load(argv, world_size) first"
        )


def _fields() -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(RunConfig)
