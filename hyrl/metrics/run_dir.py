"""The run-directory format, written and read here only.

A run directory holds config.json (written once), metrics.jsonl (one flushed line per optimizer
step, opened for append and never rewritten) and summary.json (written at the end of every run);
a sweep directory holds sweep.json, whose members are run directories. Analysis tools read only
these files, through the readers below. The records may also be mirrored to wandb and to a
TensorBoard directory (--tensorboard-dir), which nothing here reads back.
"""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyrl.config.concerns.logs import LogView

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
SWEEP_FILE = "sweep.json"
# Optimizer steps skipped so far (hyrl.metrics.step_record): part of a record's key.
SKIPPED_KEY = "train/skipped_steps"


class RunFileError(ValueError):
    """A run-directory file that is not valid JSON; `path` and `error` say which and why."""

    def __init__(self, path: Path, error: json.JSONDecodeError):
        self.path, self.error = path, error
        super().__init__(f"{path}: not valid JSON ({error})")


def _is_nonfinite(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def record_line(record: dict) -> str:
    """One metrics.jsonl line. JSON has no NaN or infinity: a non-finite value (a loss that
    went NaN: measured, and wrong) is written as null and its key listed in the record's
    `nonfinite`, so it stays visible and every reader still parses the line. (A quantity not
    measured at a step is left out of that step's record by whoever makes it.)"""
    nonfinite = sorted(k for k, v in record.items() if _is_nonfinite(v))
    line = {k: (None if k in nonfinite else v) for k, v in record.items()}
    if nonfinite:
        line["nonfinite"] = nonfinite
    return json.dumps(line)


def number(value) -> float:
    """A float from a metrics/config value: numbers, or strings such as "nan" / "inf" (how
    metrics.jsonl kept non-finite values before they were written as null); else NaN (null
    included)."""
    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return math.nan
    return math.nan


def _write_atomic(path: Path, content: dict, sort_keys: bool) -> None:
    """Write a temporary file next to `path`, flush it to disk, rename: a reader sees the old
    file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(content, f, indent=2, sort_keys=sort_keys)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _scalars(record: dict) -> dict[str, float]:
    """A record's numeric values but `step` (strings, bools, None and containers skipped)."""
    return {
        k: float(v)
        for k, v in record.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class RunDirectory:
    """The trainer's writer: config.json once, then one metrics.jsonl line per optimizer step
    (mirrored to wandb when a run is given, and to TensorBoard when a SummaryWriter is given,
    see `start_tensorboard`)."""

    def __init__(self, path: str | os.PathLike, wandb_run=None, tensorboard=None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._metrics = open(self.path / METRICS_FILE, "a", encoding="utf-8")
        self._wandb = wandb_run
        self._tensorboard = tensorboard

    def write_config(self, config: dict) -> None:
        _write_atomic(self.path / CONFIG_FILE, config, sort_keys=True)

    def log(self, record: dict) -> None:
        self._metrics.write(record_line(record) + "\n")
        self._metrics.flush()
        os.fsync(self._metrics.fileno())
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])
        if self._tensorboard is not None:
            step = int(record["step"])
            for tag, value in _scalars(record).items():
                self._tensorboard.add_scalar(tag, value, global_step=step)
            self._tensorboard.flush()  # on disk per record, as metrics.jsonl

    def close(self) -> None:
        self._metrics.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._tensorboard is not None:
            self._tensorboard.close()


def is_run_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / METRICS_FILE).is_file()


def record_key(record: dict) -> tuple[float, float, float]:
    """What tells one metrics.jsonl record from another: (step, rollout_step,
    train/skipped_steps), -1 for one it lacks. `step` counts the actor's applied updates, so a
    skipped optimizer step keeps the step before it and differs in train/skipped_steps;
    rollout_step tells the critic-only warm-up rollouts (no actor step) from each other and
    from the evaluation before training (rollout step 0). A resume re-runs its rollout steps
    exactly, so a re-logged record has its old key."""
    rollout_step, skipped = number(record.get("rollout_step")), number(record.get(SKIPPED_KEY))
    return (
        number(record.get("step")),
        rollout_step if math.isfinite(rollout_step) else -1.0,
        skipped if math.isfinite(skipped) else -1.0,
    )


def read_metrics(path: str | os.PathLike, notes: list[str] | None = None) -> list[dict]:
    """A run directory's metrics.jsonl records, one per optimizer step (skipped ones included)
    and merged by `record_key` (a resumed run re-logs steps; the later line's values win),
    sorted by that key. A record without `step` joins the record before it. Unreadable lines
    (a live run's half-written last line) are skipped and counted in `notes` when given."""
    metrics = Path(path) / METRICS_FILE
    merged: dict[tuple[float, float, float], dict] = {}
    bad = 0
    last_key = (0.0, -1.0, -1.0)
    with open(metrics, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if not isinstance(rec, dict):
                bad += 1
                continue
            key = record_key(rec)
            key = key if math.isfinite(key[0]) else last_key
            last_key = key
            merged.setdefault(key, {}).update(rec)
            merged[key].setdefault("step", key[0])
    if bad and notes is not None:
        notes.append(f"{metrics}: skipped {bad} unreadable line(s)")
    return [merged[k] for k in sorted(merged)]


def _read_json(path: Path):
    """The JSON value in `path`, None when there is no such file; RunFileError when not JSON."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise RunFileError(path, err) from None


def read_config(run_dir: str | os.PathLike):
    """config.json's value (None without one); RunFileError when it is not JSON."""
    return _read_json(Path(run_dir) / CONFIG_FILE)


def write_summary(run_dir: str | os.PathLike, content: dict) -> None:
    _write_atomic(Path(run_dir) / SUMMARY_FILE, content, sort_keys=True)


def read_summary(run_dir: str | os.PathLike):
    """summary.json's value (None without one); RunFileError when it is not JSON."""
    return _read_json(Path(run_dir) / SUMMARY_FILE)


# summary.json's "ended": why the run stopped. "num_steps" (it ran them all) and "target"
# (--stop-at-target) are finished runs; "preempted" (SIGTERM/SIGUSR1: a checkpoint was written
# to resume from) and "error" (an exception) are not. Runs before the field: finished.
ENDED_FINISHED = ("num_steps", "target")
ENDED_UNFINISHED = ("preempted", "error")


def has_summary(run_dir: str | os.PathLike) -> bool:
    """A run that ended writes summary.json; without it the run was interrupted or failed."""
    return (Path(run_dir) / SUMMARY_FILE).is_file()


def finished(run_dir: str | os.PathLike) -> bool:
    """Whether the run ended by finishing (summary.json's "ended" not preempted or an error);
    RunFileError when summary.json is not JSON."""
    content = read_summary(run_dir)
    return isinstance(content, dict) and content.get("ended", "num_steps") in ENDED_FINISHED


def write_sweep(sweep_dir: str | os.PathLike, sweep: dict) -> None:
    """sweep.json, atomically, stamped with `updated_utc` (set in `sweep` too)."""
    sweep["updated_utc"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _write_atomic(Path(sweep_dir) / SWEEP_FILE, sweep, sort_keys=False)


def read_sweep(sweep_dir: str | os.PathLike):
    """sweep.json's value (None without one); RunFileError when it is not JSON, OSError when it
    cannot be read."""
    return _read_json(Path(sweep_dir) / SWEEP_FILE)


def start_wandb(logs: LogView, run_dir: Path, config: dict):
    """The wandb mirror of a run (--log-wandb). Its wandb run id is the run's own id
    (config.json's run_id, kept by every resume into the run directory), with resume="allow":
    a resumed or requeued run continues the same wandb run, and a fork starts its own. Mode:
    --wandb-mode, else WANDB_MODE, else offline (under RUN_DIR/wandb)."""
    import wandb

    mode = logs.wandb_mode or os.environ.get("WANDB_MODE") or "offline"
    return wandb.init(
        project=logs.wandb_project,
        entity=logs.wandb_entity,
        group=logs.wandb_group,
        tags=[t for t in (logs.wandb_tags or "").split(",") if t] or None,
        name=logs.wandb_exp_name or f"{run_dir.resolve().parent.name}/{run_dir.name}",
        id=config["run_id"],
        resume="allow",
        mode=mode,  # type: ignore[arg-type]  # validated: online, offline or disabled
        dir=str(run_dir),
        config=config,
    )


def start_tensorboard(log_dir: str | os.PathLike):
    """TensorBoard mirror: a SummaryWriter on `log_dir` (created when missing; a resumed run
    adds an event file next to the earlier ones). Imported here only, so the tensorboard
    package is needed only with --tensorboard-dir."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError(
            f"--tensorboard-dir {log_dir}: the TensorBoard mirror needs the tensorboard "
            f"package ({err}); pip install tensorboard==2.21.0, or drop --tensorboard-dir"
        ) from err

    return SummaryWriter(log_dir=str(log_dir))


def open_run_directory(logs: LogView, run_dir: Path, config: dict) -> RunDirectory:
    """Rank 0's writer of a run: its wandb (--log-wandb) and TensorBoard (--tensorboard-dir)
    mirrors started as the flags ask, config.json written; metrics.jsonl is appended to."""
    wandb_run = start_wandb(logs, run_dir, config) if logs.log_wandb else None
    tensorboard = start_tensorboard(logs.tensorboard_dir) if logs.tensorboard_dir else None
    directory = RunDirectory(run_dir, wandb_run, tensorboard)
    directory.write_config(config)
    return directory
