"""The run directory: config.json once, metrics.jsonl one flushed line per optimizer step.

Analysis tools read only these files. metrics.jsonl is opened for append and never rewritten.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible rather than dropping the key
    return value


class RunDirectory:
    def __init__(self, path: str | os.PathLike, wandb_run=None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._metrics = open(self.path / "metrics.jsonl", "a", encoding="utf-8")
        self._wandb = wandb_run

    def write_config(self, config: dict) -> None:
        tmp = self.path / "config.json.tmp"
        tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(self.path / "config.json")

    def log(self, record: dict) -> None:
        self._metrics.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
        self._metrics.flush()
        os.fsync(self._metrics.fileno())
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def close(self) -> None:
        self._metrics.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All records of a run directory's metrics.jsonl."""
    with open(Path(path) / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def start_wandb(project: str, run_dir: Path, config: dict):
    """wandb mirror; offline unless the user set WANDB_MODE."""
    import wandb

    os.environ.setdefault("WANDB_MODE", "offline")
    return wandb.init(project=project, dir=str(run_dir), config=config, name=run_dir.name)
