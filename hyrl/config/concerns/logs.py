"""How a run reports: the wandb mirror, the TensorBoard mirror of metrics.jsonl, and rank 0's
progress lines (the records themselves are `hyrl.metrics.run_dir`'s)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hyrl.config.errors import _fail
from hyrl.config.kinds import AppliesOnlyWith, _changed, _opt


@dataclass
class LogFlags:
    log_wandb: bool = _opt(
        False,
        "also log metrics to Weights & Biases (on/off)",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    wandb_project: str = _opt(
        "hyrl", "Weights & Biases project (name)", "run", resume_may_change=True, run_output=True
    )
    wandb_exp_name: str | None = _opt(
        None,
        "the wandb run's name (Megatron-LM's name for it); none = the run directory's parent "
        "and name, e.g. sweep/b256-sqrt-s1234 (name)",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    wandb_entity: str | None = _opt(
        None,
        "the wandb team or user the run belongs to (slime's --wandb-team is accepted too); none "
        "= wandb's default entity (name)",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    wandb_group: str | None = _opt(
        None,
        "the wandb group, e.g. one sweep's members (name); none = no group",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    wandb_mode: str | None = _opt(
        None,
        "online, offline (written under RUN_DIR/wandb, synced later with `wandb sync`) or "
        "disabled; none = WANDB_MODE if set, else offline",
        "run",
        choices=("online", "offline", "disabled"),
        resume_may_change=True,
        run_output=True,
    )
    wandb_tags: str | None = _opt(
        None,
        "the wandb run's tags, comma-separated (names); none = no tags",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    tensorboard_dir: str | None = _opt(
        None,
        "also write every metrics.jsonl record as TensorBoard scalars into this directory "
        "(path; tag = the key, step = the record's step); none = no TensorBoard mirror",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    progress: bool = _opt(
        True,
        "show rank 0's progress: on a terminal a bar with the ETA, elsewhere (a job's log file) "
        "plain lines every --log-interval rollout steps (on/off)",
        "run",
        resume_may_change=True,
    )
    log_interval: int = _opt(
        1,
        "without a terminal, one flushed line every N rollout steps: step/total, samples, "
        "reward, the latest eval, step time, responses/s, ETA (count; Megatron's name)",
        "run",
        resume_may_change=True,
    )
    log_interval_s: float | None = _opt(
        60.0,
        "without a terminal, a heartbeat line at least this often while a rollout step runs "
        "with no step line: the stage in progress and for how long (seconds); none = none",
        "run",
        resume_may_change=True,
    )


@dataclass(frozen=True)
class LogView:
    """The logs concern's settings, resolved (`ResolvedConfig.logs`)."""

    log_wandb: bool
    wandb_project: str
    wandb_exp_name: str | None
    wandb_entity: str | None
    wandb_group: str | None
    wandb_mode: str | None
    wandb_tags: str | None
    tensorboard_dir: str | None
    progress: bool
    log_interval: int
    log_interval_s: float | None


POSITIVE_COUNTS = ("log_interval",)

# Flags that apply only under a condition (see hyrl.config.conditional_flags): the wandb mirror's
# settings, only with --log-wandb.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[LogFlags], ...] = (
    AppliesOnlyWith(
        ("wandb_exp_name", "wandb_entity", "wandb_group", "wandb_mode", "wandb_tags"),
        "--log-wandb",
        lambda c: c.log_wandb,
        "sets up the wandb mirror, which is off",
        "add --log-wandb, or remove it",
    ),
    AppliesOnlyWith(  # Megatron-LM turns wandb on by --wandb-project alone; hyrl does not
        ("wandb_project",),
        "--log-wandb",
        lambda c: c.log_wandb,
        "names a wandb project, but the wandb mirror is off (in hyrl, unlike Megatron-LM, a "
        "project alone does not turn it on)",
        "add --log-wandb, or remove it",
        given=_changed,
    ),
)


def check_given(c: LogFlags) -> None:
    """The heartbeat interval."""
    if c.log_interval_s is not None and not c.log_interval_s > 0:
        _fail("log_interval_s", c.log_interval_s, "must be positive", "seconds > 0, or none")


def check_tensorboard_dir(c: LogFlags) -> None:
    """--tensorboard-dir names a directory."""
    if c.tensorboard_dir is not None:
        if not c.tensorboard_dir:
            _fail("tensorboard_dir", "", "an empty path", "a directory path, or none")
        if os.path.exists(c.tensorboard_dir) and not os.path.isdir(c.tensorboard_dir):
            _fail(
                "tensorboard_dir",
                c.tensorboard_dir,
                "exists and is not a directory",
                "a directory (created when missing), or none",
            )
