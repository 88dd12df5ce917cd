"""Which run a checkpoint belongs to: no run overwrites another run's checkpoints, and no
resume mixes two runs.

A run has an id (`run_id` in its run directory's config.json), made when the run directory
is new and kept by every resume into it. Its checkpoints carry it:

- the --save directory's `run.json` ({"run_id", "run_dir"}), written at its first save: the
  directory belongs to that run from then on;
- every step's trainer_state.json (`run_id`, `run_dir`, and `config`: the resolved config the
  step was saved under).

Before any process group (hyrl.train.preflight):

- ``check_save_dir``: --save DIR that belongs to another run is refused (naming --save),
  unless this run is that run (resumed into its own run directory). A --save directory with
  checkpoints but no run.json (written before runs had ids) is refused unless this run
  resumes from it.
- ``check_load_owner``: --load's checkpoint must belong to the run in --run-dir; a new
  --run-dir makes the resume a fork (a new run id, config.json's `forked_from` names the
  checkpoint, and the trainer says so). Either way every flag but RESUME_MAY_CHANGE must equal
  the one the checkpoint was saved under (its `config`).

Checkpoints written before runs had ids carry none: their owner and flags are not compared
(the architecture, algorithm and optimizer kind still are: trainer_state.check_resumable).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hyrl.config import ConfigError, resume_allowed

if TYPE_CHECKING:
    from hyrl.config.concerns.run import CheckpointView

OWNER_FILE = "run.json"  # in a --save directory: the run it belongs to


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def run_record(run_dir: str | os.PathLike) -> dict | None:
    """The config.json of the run that --run-dir holds (None: a new run directory)."""
    path = Path(run_dir)
    if not (path / "metrics.jsonl").is_file():
        return None
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}  # validation names an unreadable config.json (--run-dir)


def owner_of(save_dir: str | os.PathLike) -> dict | None:
    """The --save directory's run.json, None without one."""
    path = Path(save_dir) / OWNER_FILE
    if not path.is_file():
        return None
    try:
        owner = json.loads(path.read_text())
    except ValueError as err:
        raise ConfigError(
            "--save", str(save_dir), f"{OWNER_FILE} is not valid JSON ({err})", "a --save directory"
        ) from None
    return owner if isinstance(owner, dict) else {}


def claim(save_dir: Path, run_id: str, run_dir: str) -> None:
    """Write save_dir's run.json at its first save (rank 0; atomically)."""
    if (save_dir / OWNER_FILE).is_file():
        return
    tmp = save_dir / f".tmp-{OWNER_FILE}"
    tmp.write_text(json.dumps({"run_id": run_id, "run_dir": str(run_dir)}, indent=2) + "\n")
    tmp.replace(save_dir / OWNER_FILE)


def _has_checkpoints(save_dir: Path) -> bool:
    return (save_dir / "latest").is_file() or any(save_dir.glob("step_*"))


def _resumes_from(load: str | None, save_dir: Path) -> bool:
    """Whether --load is save_dir or one of its step directories."""
    if not load:
        return False
    loaded = Path(load).resolve()
    return loaded == save_dir.resolve() or loaded.parent == save_dir.resolve()


def check_save_dir(checkpoint: CheckpointView, run_dir: str) -> None:
    """--save must be new, empty, or this run's own (module doc); run_dir: --run-dir."""
    if not checkpoint.save:
        return
    save_dir = Path(checkpoint.save)
    if not save_dir.is_dir():
        return
    owner = owner_of(save_dir)
    mine = run_record(run_dir)
    if owner is None:
        if _has_checkpoints(save_dir) and not _resumes_from(checkpoint.load, save_dir):
            raise ConfigError(
                "--save",
                checkpoint.save,
                f"holds checkpoints of a run without an id (no {OWNER_FILE}: written before "
                "runs had ids), which this run would overwrite",
                "a new or empty directory, or resume from it with --load " + checkpoint.save,
            )
        return
    my_id = None if mine is None else mine.get("run_id")
    if my_id is not None and my_id == owner.get("run_id"):
        return
    whose = f"run {owner.get('run_id')} (run directory {owner.get('run_dir')})"
    this = "a new run" if mine is None else f"the run in --run-dir {run_dir} ({my_id})"
    raise ConfigError(
        "--save",
        checkpoint.save,
        f"holds the checkpoints of {whose}; {this} would overwrite them",
        f"a new or empty directory, or resume that run: --load {checkpoint.save} --run-dir "
        f"{owner.get('run_dir')}",
    )


def check_load_owner(
    run_dir: str, state: dict, step_dir: Path, differences: Callable[[dict], list[str]]
) -> str:
    """--load's checkpoint (its trainer_state.json `state`) against --run-dir and the flags
    (`differences`: what differs between the config the checkpoint was saved under and this
    run's, hyrl.config.resume_differences); "resume" (the run in --run-dir), "fork" (a new
    --run-dir) or "unknown" (a checkpoint without a run id). ConfigError naming --load
    otherwise."""
    ck_id = state.get("run_id")
    if ck_id is None:
        return "unknown"
    mine = run_record(run_dir)
    if mine is not None and mine.get("run_id") not in (None, ck_id):
        raise ConfigError(
            "--load",
            str(step_dir),
            f"belongs to run {ck_id} (run directory {state.get('run_dir')}); --run-dir "
            f"{run_dir} holds run {mine.get('run_id')}, whose records it would continue "
            "from another run's weights",
            f"that run's own checkpoints, or --run-dir {state.get('run_dir')} (resume), or a "
            "new --run-dir (a fork)",
        )
    saved = state.get("config")
    if isinstance(saved, dict):
        differs = differences(saved)
        if differs:
            raise ConfigError(
                "--load",
                str(step_dir),
                "was saved under another configuration (" + "; ".join(differs[:6]) + ")",
                resume_allowed().replace("or a new --run-dir", "to start anew: no --load"),
            )
    return "resume" if mine is not None else "fork"
