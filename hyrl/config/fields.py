"""`RunConfig`, the flags of `hyrl train` as one flat dataclass: it inherits the fields each
concern declares (`hyrl.config.concerns`), in the order of docs/flags.md and `--help`, and adds
the values derived from several of them. `ResolvedConfig` is the same config after
`hyrl.config.resolve`, with the resolved fields' types. Also the groups (sections) the flags
are listed under.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hyrl.config.concerns import algorithm, critic
from hyrl.config.concerns.algorithm import AlgorithmFlags, AlgorithmView
from hyrl.config.concerns.autopilot import AutopilotFlags, AutopilotView
from hyrl.config.concerns.batch import (
    BatchFlags,
    BatchView,
    MicroBatchFlags,
    batch_view,
    optimizer_steps_per_rollout,
)
from hyrl.config.concerns.critic import CriticFlags, CriticView, critic_view
from hyrl.config.concerns.data import DataFlags, DataView
from hyrl.config.concerns.evaluation import EvalFlags, EvalView
from hyrl.config.concerns.logs import LogFlags, LogView
from hyrl.config.concerns.mismatch import MismatchFlags, MismatchView
from hyrl.config.concerns.model import ModelFlags, ModelView
from hyrl.config.concerns.optimizer import OptimizerFlags, OptimizerView, lr_schedule
from hyrl.config.concerns.parallel import ParallelFlags, ParallelView, virtual_pipeline_size
from hyrl.config.concerns.rollout import RolloutFlags, RolloutView
from hyrl.config.concerns.run import CheckpointFlags, CheckpointView, RunFlags, RunView
from hyrl.config.errors import not_resolved
from hyrl.config.kinds import view
from hyrl.config.rollout_layout import rollout_layout
from hyrl.config.schedules import LR_SCALING_EXPONENTS

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


# The field order is the order of the flags in docs/flags.md and --help. A dataclass takes its
# bases' fields from the last base to the first: read this list bottom-up (ModelFlags first).
@dataclass
class RunConfig(
    CheckpointFlags,
    LogFlags,
    RunFlags,
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
    """Every flag of `hyrl train`; flags not given are None until `hyrl.config.resolve`."""

    @property
    def virtual_pipeline_model_parallel_size(self) -> int | None:
        """V model chunks per pipeline rank (`parallel.virtual_pipeline_size`)."""
        return virtual_pipeline_size(self, self)

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
        out["optimizer_steps_per_rollout"] = optimizer_steps_per_rollout(self)
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
    types. Each concern's settings are one typed, frozen view (`batch`, `optimizer`,
    `rollout`, ...): a part takes the views it needs, not the whole config. The critic's view
    is None under grpo; --base-global-batch-size is filled with --base-lr only."""

    global_batch_size: int
    lr: float
    eval_temperature: float
    loss_agg_mode: str
    task: str

    # Each concern's settings, typed and frozen: a part takes the views it needs.
    @property
    def model(self) -> ModelView:
        return view(ModelView, self)

    @property
    def parallel(self) -> ParallelView:
        return view(ParallelView, self)

    @property
    def batch(self) -> BatchView:
        return batch_view(self, micro_batch=self)

    @property
    def autopilot(self) -> AutopilotView:
        return view(AutopilotView, self)

    @property
    def optimizer(self) -> OptimizerView:
        """The actor's optimizer; its `lr_schedule`: --lr at B (or --base-lr at
        --base-global-batch-size, scaled by --lr-scaling), warmup and decay."""
        return view(OptimizerView, self, lr_schedule=lr_schedule(self, ""))

    @property
    def rollout(self) -> RolloutView:
        return view(RolloutView, self)

    @property
    def algorithm(self) -> AlgorithmView:
        return view(AlgorithmView, self)

    @property
    def critic(self) -> CriticView | None:
        """The critic's settings under gae; None under grpo (no critic)."""
        return critic_view(self, algorithm=self)

    @property
    def evaluation(self) -> EvalView:
        return view(EvalView, self)

    @property
    def mismatch(self) -> MismatchView:
        return view(MismatchView, self)

    @property
    def data(self) -> DataView:
        return view(DataView, self)

    @property
    def run(self) -> RunView:
        return view(RunView, self)

    @property
    def checkpoint(self) -> CheckpointView:
        return view(CheckpointView, self)

    @property
    def logs(self) -> LogView:
        return view(LogView, self)


def old_log_probs_from_update(c: RunConfig) -> bool:
    """Whether the old log-probs come from the actor update's own forward pass: exactly
    on-policy (one optimizer step per rollout, so its first forward pass runs the weights that
    sampled), and nothing needs them before the update (the --kl-coef reward penalty does).
    Never under --async-rollout: older weights sampled the batch (it is off-policy). Derived
    from three concerns' flags: the algorithm's, the batch's and the rollout's."""
    return (
        not c.recompute_old_log_probs
        and optimizer_steps_per_rollout(c) == 1
        and c.kl_coef == 0
        and not c.async_rollout
    )


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
        raise not_resolved(names)


def _fields() -> tuple[dataclasses.Field, ...]:
    """RunConfig's fields, in the flags' order."""
    return dataclasses.fields(RunConfig)


# The flags that name the run's records and side outputs (`run_output`, beside each flag in its
# concern): checkpoints, wandb, TensorBoard and the target a run is timed to. `hyrl eval`
# writes none of them.
RUN_OUTPUTS = tuple(f.name for f in _fields() if f.metadata.get("run_output"))
