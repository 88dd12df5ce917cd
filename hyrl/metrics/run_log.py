"""The loop's record keeping across rollout steps (`RunLog`): samples consumed, the run's
clock, the target tracker and the totals, written to the run directory (hyrl.metrics.run_dir)."""

from __future__ import annotations

import time
from pathlib import Path

from hyrl.config.target import parse_target
from hyrl.metrics.run_dir import RunDirectory, write_summary
from hyrl.metrics.target import RunTotals, TargetTracker, summary


class RunLog:
    """What the records of a run carry across rollout steps: the samples consumed, the clock
    (elapsed_s continues across a resume; evaluations and checkpoints stay off it), the
    target tracker and the run totals. Rank 0 writes them (logger: None elsewhere)."""

    def __init__(
        self,
        target: str | None,
        logger: RunDirectory | None,
        run_dir: Path,
        resume_state: dict | None,
    ):
        """target: --target (validated); resume_state: the loop state of the checkpoint the
        run resumes from, or None."""
        self.logger, self.run_dir = logger, run_dir
        self.tracker = TargetTracker(*parse_target(target)) if target else None
        self.totals = RunTotals()
        self.samples, self.first_step, elapsed_s = 0, 1, 0.0  # samples: responses consumed
        self.samples_generated = 0  # every response decoded (--dynamic-sampling filters some)
        if resume_state is not None:  # the loop where the checkpoint left it
            self.samples, elapsed_s = resume_state["samples"], resume_state["elapsed_s"]
            # a checkpoint from before samples_generated was counted: every rollout was kept
            self.samples_generated = resume_state.get("samples_generated", self.samples)
            self.first_step = resume_state["rollout_step"] + 1
            self.totals.load_state_dict(resume_state["totals"])
            if self.tracker is not None and resume_state["tracker"] is not None:
                self.tracker.load_state_dict(resume_state["tracker"])
        self.start = time.perf_counter() - elapsed_s  # elapsed_s = now - start
        self.last_record_time = time.perf_counter()  # a record's perf/step_s: since this

    def pause(self, seconds: float) -> None:
        """Take seconds (an evaluation, a checkpoint) off the clock."""
        self.start += seconds
        self.last_record_time += seconds

    def write(self, record: dict) -> None:
        if self.logger is None:
            return
        self.logger.log(record)
        self.totals.update(record)
        if self.tracker is not None and self.tracker.update(record):
            write_summary(self.run_dir, summary(self.tracker, self.totals))

    def write_rollout_step(self, rollout_step: int, records: list[dict]) -> None:
        """A rollout step's records (hyrl.metrics.step_record), each stamped with rollout_step,
        elapsed_s and perf/step_s (since the previous record) from the time it was taken
        ("time", a perf_counter, popped), then written."""
        for record in records:
            now = record.pop("time")
            record.update(rollout_step=rollout_step, elapsed_s=now - self.start)
            record["perf/step_s"] = now - self.last_record_time
            self.last_record_time = now
            self.write(record)

    @property
    def reached(self) -> bool:
        """Whether a record has reached --target (rank 0 knows; False without a target)."""
        return self.tracker is not None and self.tracker.reached_at is not None

    def state_dict(self) -> dict:
        """The loop's part of a checkpoint (the task's is added by its owner)."""
        return {
            "samples": self.samples,
            "samples_generated": self.samples_generated,
            "elapsed_s": time.perf_counter() - self.start,
            "tracker": None if self.tracker is None else self.tracker.state_dict(),
            "totals": self.totals.state_dict(),
        }

    def close(self, ended: str) -> None:
        """ended: why the run stopped, summary.json's "ended" (run_dir.ENDED_FINISHED or
        ENDED_UNFINISHED)."""
        if self.logger is not None:
            write_summary(self.run_dir, {**summary(self.tracker, self.totals), "ended": ended})
            self.logger.close()
