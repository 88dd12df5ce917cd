"""The sweep's record on disk: sweep.json (through `hyrl.metrics.run_dir`), the check that a
re-run repeats the arguments, and the member directories: done, or moved aside to rerun
(steps 4 and 5 of `hyrl.batchsize.sweep.run`)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from hyrl.batchsize.sweep.plan import SweepError
from hyrl.metrics.run_dir import (
    SWEEP_FILE,
    RunFileError,
    finished,
    has_summary,
    read_sweep,
    write_sweep,
)

# The arguments that define a sweep; a re-run into the same --out must repeat them.
ARGUMENT_KEYS = (
    "recipe",
    "extra_args",
    "batch_mults",
    "lr_rule",
    "fixed_lr_control",
    "seeds",
    "max_samples",
    "eval_every_samples",
)
STATUSES = ("pending", "running", "done", "failed")


def write_sweep_json(out_dir: Path, sweep: dict) -> None:
    """Atomically: write a temporary file next to sweep.json, flush it to disk, rename."""
    write_sweep(out_dir, sweep)


def read_sweep_json(out_dir) -> dict | None:
    """The sweep recorded in `out_dir` (None when there is none); SweepError when sweep.json
    is unreadable or holds no sweep."""
    path = Path(out_dir) / SWEEP_FILE
    try:
        data = read_sweep(out_dir)
    except (OSError, RunFileError) as err:
        why = err.error if isinstance(err, RunFileError) else err
        raise SweepError(
            f"--out {out_dir}: {path} is unreadable ({why}); allowed: a new directory"
        ) from None
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("members"), list):
        raise SweepError(
            f"--out {out_dir}: {path} holds no sweep (no 'members' list); allowed: a new directory"
        )
    return data


def check_same_sweep(old: dict, new: dict, out_dir: Path) -> None:
    """SweepError unless a re-run into `out_dir` repeats the arguments (and the recipe still
    resolves the same reference numbers)."""
    diffs = [
        f"{k}: {old.get(k)!r} there, {new[k]!r} now" for k in ARGUMENT_KEYS if old.get(k) != new[k]
    ]
    if not diffs and old.get("base") != new["base"]:
        diffs = [f"base: the recipe resolved {old.get('base')!r} then, {new['base']!r} now"]
    if diffs:
        raise SweepError(
            f"--out {out_dir}: holds a sweep with other arguments ("
            + "; ".join(diffs)
            + "); allowed: a new directory, or the same "
            "arguments to resume it"
        )


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def move_aside(out_dir: Path, member: dict) -> list[str]:
    """Rename an unfinished member directory (and its log) to NAME.incomplete-<UTC time>[.log];
    returns the new names. Nothing is deleted. An empty directory is left where it is."""
    name = member["name"]
    run_dir, log = out_dir / member["run_dir"], out_dir / f"{name}.log"
    moved: list[str] = []
    has_data = (
        run_dir.is_symlink() or run_dir.is_file() or (run_dir.is_dir() and any(run_dir.iterdir()))
    )
    if not has_data and not log.exists():
        return moved
    stamp = _utc_stamp()
    i = 0
    while True:
        tag = f"{name}.incomplete-{stamp}" + (f"-{i}" if i else "")
        aside, aside_log = out_dir / tag, out_dir / f"{tag}.log"
        if not aside.exists() and not aside_log.exists():
            break
        i += 1
    if has_data:
        os.rename(run_dir, aside)
        moved.append(aside.name)
    if log.exists():
        os.rename(log, aside_log)
        moved.append(aside_log.name)
    return moved


def is_done(out_dir: Path, member: dict) -> bool:
    """A member whose run finished is done: summary.json (every run writes it when it ends)
    says it ended at --num-steps or its target, not preempted or by an error."""
    run_dir = out_dir / member["run_dir"]
    return has_summary(run_dir) and finished(run_dir)
