"""Which checkpoints a run keeps in --save (--keep-last-checkpoints N, --keep-checkpoint-every K).

A 30B GRPO save (bf16 weights and float32 Adam states, reshardable) is about 0.43 TB; saving
every 50 of 3,000 rollout steps without pruning fills tens of TB. After each save, rank 0:

1. checks the new step: complete (renamed into place, `latest` names it) and whole by its
   manifest (`hyrl.checkpoint.manifest.damage`, sizes, the distributed checkpoints' indexes and
   the files its trainer_state.json names). A step that does not check prunes nothing: the
   older steps are what a resume would need.
2. keeps the newest N complete steps (N = 0: all), every step whose rollout step is a
   multiple of K (milestones), the step --load came from, and every step another run forked
   from (a fork writes FORKS_FILE into the step it starts from, `mark_fork`);
3. deletes the rest, oldest first: each is renamed to `.pruned-step_N` (one atomic rename, so
   no reader ever sees a half-deleted step_N) and then removed; a rename or removal that fails
   is reported and the run goes on. `begin_save` clears `.pruned-` leftovers of a crash.

Only complete step directories (step_N with trainer_state.json) count; `.tmp-` saves and
anything else in --save are left alone. Pure but for `prune` and `mark_fork` (files only, no
torch, no process group).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from hyrl.checkpoint.manifest import damage
from hyrl.checkpoint.step_files import STATE_FILE

FORKS_FILE = "forked_by.json"  # in a step directory: the runs that forked from it
PRUNED_PREFIX = ".pruned-"
_STEP = re.compile(r"step_(\d+)")


def complete_steps(save_dir: Path) -> dict[int, Path]:
    """{rollout step: its directory} of the complete checkpoints in save_dir."""
    steps = {}
    for path in Path(save_dir).iterdir() if Path(save_dir).is_dir() else ():
        match = _STEP.fullmatch(path.name)
        if match and path.is_dir() and (path / STATE_FILE).is_file():
            steps[int(match.group(1))] = path
    return steps


def to_prune(
    steps: Iterable[int], keep_last: int, keep_every: int | None, protected: Iterable[int] = ()
) -> list[int]:
    """The rollout steps to delete, oldest first: all but the newest `keep_last` (0: none
    deleted), the multiples of `keep_every` and the `protected` ones."""
    ordered = sorted(set(steps))
    if keep_last <= 0 or len(ordered) <= keep_last:
        return []
    keep = set(ordered[-keep_last:]) | set(protected)
    if keep_every:
        keep |= {s for s in ordered if s % keep_every == 0}
    return [s for s in ordered if s not in keep]


def forked_from(step_dir: Path) -> bool:
    """Whether another run started from this step (a fork's mark is in it)."""
    return (Path(step_dir) / FORKS_FILE).is_file()


def prune(
    save_dir: str | os.PathLike,
    newest: Path,
    keep_last: int,
    keep_every: int | None,
    load_dir: Path | None = None,
) -> tuple[list[Path], list[str]]:
    """Rank 0, after the save of `newest` completed: (the step directories deleted, messages
    about what was not done). `load_dir`: the step --load came from (never deleted)."""
    if keep_last <= 0:
        return [], []
    problems = damage(newest)
    if problems:
        return [], [
            f"{newest} does not check ({'; '.join(problems[:3])}): no older checkpoint pruned "
            "(--keep-last-checkpoints)"
        ]
    steps = complete_steps(Path(save_dir))
    resolved_load = load_dir.resolve() if load_dir is not None else None
    protected = {
        s
        for s, path in steps.items()
        if forked_from(path) or (resolved_load is not None and path.resolve() == resolved_load)
    }
    deleted, notes = [], []
    for s in to_prune(steps, keep_last, keep_every, protected):
        path = steps[s]
        aside = path.with_name(PRUNED_PREFIX + path.name)
        try:
            if aside.exists():
                shutil.rmtree(aside)
            path.rename(aside)
        except OSError as err:
            notes.append(f"could not prune {path}: {err}")
            continue
        deleted.append(path)
        shutil.rmtree(aside, onerror=lambda *a: notes.append(f"could not remove {a[1]}: {a[2][1]}"))
    return deleted, notes


def clear_pruned(save_dir: Path) -> None:
    """Remove what a crash left of a deletion (`.pruned-step_N`): rank 0, before a save."""
    for stale in Path(save_dir).glob(PRUNED_PREFIX + "step_*"):
        shutil.rmtree(stale, ignore_errors=True)


def mark_fork(step_dir: Path, run_id: str, run_dir: str) -> str | None:
    """A fork (a new run resumed from `step_dir`) records itself there, so the run that owns
    it never prunes it. None, or why it could not (a read-only checkpoint: then say so)."""
    path = Path(step_dir) / FORKS_FILE
    try:
        forks = json.loads(path.read_text()) if path.is_file() else []
        if not isinstance(forks, list):
            forks = []
        forks.append({"run_id": run_id, "run_dir": str(run_dir)})
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(forks, indent=1) + "\n")
        tmp.replace(path)
    except (OSError, ValueError) as err:
        return (
            f"could not mark {step_dir} as forked from ({err}): its run may prune it under "
            "--keep-last-checkpoints; copy it if it must stay"
        )
    return None
