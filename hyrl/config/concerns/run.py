"""The run: how long (--num-steps), where its records go (--run-dir), its seed, its checkpoints
(--save, --save-interval, the retention --keep-last-checkpoints and --keep-checkpoint-every),
the checkpoint it resumes (--load), and how many non-finite steps in
a row it survives. Resuming into a --run-dir that holds a run is checked by
`hyrl.config.resume`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hyrl.config.errors import _fail
from hyrl.config.kinds import AppliesOnlyWith, _changed, _opt


@dataclass
class RunFlags:
    num_steps: int = _opt(1000, "training length (rollout steps)", "run", resume_may_change=True)
    # a resume may change it: a run directory moved or copied elsewhere is the same run
    run_dir: str = _opt(
        "runs/latest",
        "directory for config.json and metrics.jsonl (path)",
        "run",
        resume_may_change=True,
    )
    seed: int = _opt(1234, "random seed for weights, prompts and sampling (integer >= 0)", "run")


@dataclass
class CheckpointFlags:
    """Checkpoints, resuming, and the stop after non-finite steps; after `LogFlags` in the
    flags' order."""

    save: str | None = _opt(
        None,
        "checkpoint directory: DIR/step_N/ holds the actor, reference, critic, optimizer, "
        "RNG and loop state, written atomically, and DIR/latest names the newest (path); none = "
        "no checkpoints",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    save_interval: int | None = _opt(
        None,
        "rollout steps between checkpoints (rollout steps); none = only at the end and on "
        "preemption (SIGTERM/SIGUSR1); needs --save",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    keep_last_checkpoints: int = _opt(
        3,
        "complete checkpoints kept in --save, the newest (count >= 0; 0 = keep all): after "
        "each save is complete and its manifest checks, older steps beyond these are deleted, "
        "except --keep-checkpoint-every's milestones, the step --load came from and any step "
        "another run forked from; needs --save",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    keep_checkpoint_every: int | None = _opt(
        None,
        "also keep every checkpoint whose rollout step is a multiple of K, whatever "
        "--keep-last-checkpoints says (rollout steps); none = no milestones; needs --save",
        "run",
        resume_may_change=True,
        run_output=True,
    )
    load: str | None = _opt(
        None,
        "resume from this --save directory (its 'latest') or one of its step_N directories "
        "(path); a --run-dir holding a run is then appended to, if its config.json matches",
        "run",
        resume_may_change=True,
    )
    max_skipped_steps: int = _opt(
        3,
        "optimizer steps in a row that may be skipped for a non-finite loss or gradient norm; "
        "the run stops (exit 1) when that many are skipped in a row (count >= 1)",
        "run",
        resume_may_change=True,
    )


@dataclass(frozen=True)
class RunView:
    """The run's settings, resolved (`ResolvedConfig.run`)."""

    num_steps: int
    run_dir: str
    seed: int


@dataclass(frozen=True)
class CheckpointView:
    """The checkpoint settings, resolved (`ResolvedConfig.checkpoint`)."""

    save: str | None
    save_interval: int | None
    keep_last_checkpoints: int
    keep_checkpoint_every: int | None
    load: str | None
    max_skipped_steps: int


POSITIVE_COUNTS = ("num_steps", "save_interval", "keep_checkpoint_every", "max_skipped_steps")

# Flags that apply only under a condition (see hyrl.config.conditional_flags): the checkpoints'
# settings, only with --save.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[CheckpointFlags], ...] = (
    AppliesOnlyWith(
        ("save_interval", "keep_checkpoint_every"),
        "--save DIR",
        lambda c: c.save is not None,
        "given without --save (no checkpoint would be written)",
        "--save DIR with it, or none",
    ),
    AppliesOnlyWith(
        ("keep_last_checkpoints",),
        "--save DIR",
        lambda c: c.save is not None,
        "given without --save (no checkpoint would be written)",
        "--save DIR with it, or none",
        given=_changed,
    ),
)


def check_given(c: RunFlags) -> None:
    """The seed."""
    if c.seed < 0:
        _fail("seed", c.seed, "must not be negative", "an integer >= 0")


def check_run_dir(c: RunFlags) -> None:
    """--run-dir names a directory, new or existing (one holding a run: `hyrl.config.resume`)."""
    if not c.run_dir:
        _fail("run_dir", c.run_dir, "the run directory must be named", "a path")
    if os.path.exists(c.run_dir) and not os.path.isdir(c.run_dir):
        _fail(
            "run_dir", c.run_dir, "exists and is not a directory", "a new directory or an empty one"
        )


def check_save_load(c: CheckpointFlags) -> None:
    """--save and --load name directories; --keep-last-checkpoints is a count."""
    for name in ("save", "load"):
        if getattr(c, name) == "":
            _fail(name, "", "an empty path", "a directory path, or none")
    if c.keep_last_checkpoints < 0:
        _fail(
            "keep_last_checkpoints",
            c.keep_last_checkpoints,
            "must not be negative",
            "an integer >= 1, or 0 to keep every checkpoint",
        )
