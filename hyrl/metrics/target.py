"""Samples-to-target and time-to-target accounting, and what the run's summary.json holds
(hyrl.metrics.run_dir writes it).

T = S / R (docs/batch-size.md): S = cumulative responses consumed before the metric first
reaches the target, R = end-to-end responses per second of the whole loop. Both are measured here.
"""

from __future__ import annotations

import math


class TargetTracker:
    """Remembers the first record at which `metric` >= `value`."""

    def __init__(self, metric: str, value: float):
        self.metric, self.value = metric, value
        self.reached_at: dict | None = None

    def update(self, record: dict) -> bool:
        """Feed one metrics record; True when this record is the first to reach the target."""
        if self.reached_at is not None or self.metric not in record:
            return False
        observed = record[self.metric]
        if not isinstance(observed, (int, float)) or not math.isfinite(observed):
            return False
        if observed >= self.value:
            self.reached_at = {key: record[key] for key in ("step", "samples", "elapsed_s")}
            return True
        return False

    def state_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value, "reached_at": self.reached_at}

    def load_state_dict(self, state: dict) -> None:
        """Resume: only a tracker of the same target takes the state (another target starts
        over)."""
        if (state["metric"], state["value"]) == (self.metric, self.value):
            self.reached_at = state["reached_at"]


class RunTotals:
    """Sums of the stage timers and the last record, for end-to-end throughput and shares."""

    # Not stages of the training loop: the step total, start-up, and evaluation (which the
    # trainer keeps off the elapsed_s clock).
    NOT_STAGES = ("perf/step_s", "perf/setup_s", "perf/eval_s")

    def __init__(self) -> None:
        self.stage_seconds: dict[str, float] = {}
        self.eval_seconds = 0.0
        self.last: dict = {}

    def update(self, record: dict) -> None:
        for key, value in record.items():
            if (
                key.startswith("perf/")
                and key.endswith("_s")
                and not key.endswith("_per_s")
                and key not in self.NOT_STAGES
            ):
                self.stage_seconds[key] = self.stage_seconds.get(key, 0.0) + float(value)
        self.eval_seconds += float(record.get("perf/eval_s", 0.0))
        if "step" in record:
            self.last = record

    def state_dict(self) -> dict:
        return {
            "stage_seconds": dict(self.stage_seconds),
            "eval_seconds": self.eval_seconds,
            "last": dict(self.last),
        }

    def load_state_dict(self, state: dict) -> None:
        self.stage_seconds = dict(state["stage_seconds"])
        self.eval_seconds = float(state["eval_seconds"])
        self.last = dict(state["last"])


def summary(tracker: TargetTracker | None, totals: RunTotals) -> dict:
    """What summary.json holds: the target outcome, throughput and each stage's share of time."""
    samples = totals.last.get("samples", 0)
    elapsed = totals.last.get("elapsed_s", 0.0)
    reached_at = None if tracker is None else tracker.reached_at
    reached = reached_at is not None
    out = {
        "target": None if tracker is None else {"metric": tracker.metric, "value": tracker.value},
        "reached": reached,
        "samples_to_target": reached_at["samples"] if reached_at is not None else None,
        "time_to_target_s": reached_at["elapsed_s"] if reached_at is not None else None,
        "steps_to_target": reached_at["step"] if reached_at is not None else None,
        "samples": samples,
        "steps": totals.last.get("step", 0),
        "elapsed_s": elapsed,
        "throughput_responses_per_s": samples / elapsed if elapsed > 0 else None,
        "eval_s": totals.eval_seconds,
        "stage_share": (
            {
                key[len("perf/") : -len("_s")]: seconds / elapsed
                for key, seconds in sorted(totals.stage_seconds.items())
            }
            if elapsed > 0
            else {}
        ),
    }
    return out
