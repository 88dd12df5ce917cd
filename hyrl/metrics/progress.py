"""What rank 0 shows while it trains: on a terminal a progress bar with an ETA; elsewhere (a
job's log file under sbatch, a pipe) one plain, flushed line every --log-interval rollout steps,
so a log shows a run's progress while it runs, not only at its end.

    hyrl: step 3/8 | samples 384 | reward 0.42 | eval 0.50 @ step 2 | step 1.21 s |
          105.8 resp/s | ETA 0:00:06          (one line)
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta
from typing import Any, TextIO


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS, rounded to the second (negative: 0:00:00); also the studies' clock
    (hyrl.batchsize.sweep.progress)."""
    return str(timedelta(seconds=round(max(0.0, seconds))))


class ProgressReport:
    """Rank 0's report of the rollout steps first_step..num_steps (use as a context manager;
    ``step`` after each rollout step). ``tty``: whether ``out`` is a terminal (None: ask it)."""

    def __init__(
        self,
        num_steps: int,
        first_step: int,
        log_interval: int,
        samples: int = 0,
        out: TextIO | None = None,
        tty: bool | None = None,
    ):
        """samples: the responses consumed before first_step (a resumed run's)."""
        self.num_steps, self.first_step, self.log_interval = num_steps, first_step, log_interval
        self.out = out if out is not None else sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self._bar: Any = None  # rich's Progress on a terminal
        self._task: Any = None
        self._began = self._last = time.perf_counter()
        self._last_samples = samples
        self._eval: tuple[float, int] | None = None  # (eval/accuracy, its step)
        self._heartbeat: tuple | None = None  # (timers, seconds) without a terminal
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_line = time.perf_counter()  # when a line was last printed
        self._step_running = first_step

    def heartbeat(self, timers, every_s: float | None, generation=None) -> None:
        """Without a terminal: a line at least every `every_s` seconds while a step runs and
        no step line came, naming the stage in progress and for how long (the trainer's
        StageTimers `timers`) and, while an engine call runs, its responses done of its
        total (`generation`: an object whose snapshot() is (done, total) or None, the
        rollout's GENERATION_PROGRESS); every_s None: none. Call before entering."""
        self._heartbeat = (timers, every_s, generation) if every_s and not self.tty else None

    def _beat(self, timers, every_s: float, generation) -> None:
        while not self._stop.wait(every_s):
            now = time.perf_counter()
            if now - self._last_line < every_s:
                continue
            current = timers.current
            stage = (
                f"{current[0]} for {now - current[1]:.1f} s"
                if current is not None
                else "between stages"
            )
            counted = generation.snapshot() if generation is not None else None
            if counted is not None:
                stage += f", {counted[0]}/{counted[1]} responses generated"
            step = self._step_running
            print(
                f"hyrl: ... rollout step {step}/{self.num_steps}: {stage} "
                f"({now - self._last:.1f} s into the step)",
                file=self.out,
                flush=True,
            )
            self._last_line = now

    def __enter__(self) -> ProgressReport:
        self._last_line = time.perf_counter()
        if self._heartbeat is not None:
            self._thread = threading.Thread(target=self._beat, args=self._heartbeat, daemon=True)
            self._thread.start()
        if self.tty:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(
                "training", total=self.num_steps, completed=self.first_step - 1
            )
        self._began = self._last = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def step(self, rollout_step: int, rollout_metrics: dict, record: dict) -> None:
        """After a rollout step: its rollout's metrics and its last record."""
        now = time.perf_counter()
        step_s, self._last = now - self._last, now
        self._step_running = rollout_step + 1
        samples = int(record.get("samples", 0))
        made, self._last_samples = samples - self._last_samples, samples
        if "eval/accuracy" in record:
            self._eval = (float(record["eval/accuracy"]), rollout_step)
        reward = rollout_metrics.get("train/reward_mean")
        if self._bar is not None:
            text = "" if reward is None else f"reward {reward:.2f}"
            if self._eval is not None:
                text += f" eval {self._eval[0]:.2f}"
            self._bar.update(self._task, advance=1, description=text or "training")
            return
        if (rollout_step - self.first_step + 1) % self.log_interval and (
            rollout_step != self.num_steps
        ):
            return
        done = rollout_step - self.first_step + 1
        eta = (now - self._began) / done * (self.num_steps - rollout_step)
        parts = [f"step {rollout_step}/{self.num_steps}", f"samples {samples}"]
        if reward is not None:
            parts.append(f"reward {reward:.2f}")
        if self._eval is not None:
            parts.append(f"eval {self._eval[0]:.2f} @ step {self._eval[1]}")
        parts.append(f"step {step_s:.2f} s")
        if step_s > 0:
            parts.append(f"{made / step_s:.1f} resp/s")
        parts.append(f"ETA {clock(eta)}")
        print("hyrl: " + " | ".join(parts), file=self.out, flush=True)
        self._last_line = time.perf_counter()
