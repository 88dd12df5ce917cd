"""When the loop stops early, every rank alike, at a rollout-step boundary:
- a preemption signal (SIGTERM, SIGUSR1: Slurm's notice before the time limit) on any rank:
  the step finishes, a checkpoint is written under --save, and the run exits 0 (`Preemption`);
- --max-skipped-steps optimizer steps in a row of the actor or the critic skipped for a
  non-finite loss or gradient norm: the run exits 1 (`check_skipped_steps`, `TrainingStopped`);
- --target reached under --stop-at-target: a checkpoint under --save, exit 0 (`target_reached`).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable

from hyrl.backends.base import TrainedModel


class TrainingStopped(RuntimeError):
    """Every rank stops the run (after the metrics of the last step are written): exit 1."""


PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preemption:
    """A handler of the preemption signals on this rank, from construction to `close`; the
    signal is acted on at the next rollout-step boundary (the loop all-reduces `received`)."""

    def __init__(self) -> None:
        self.signal_name: str | None = None  # the signal received, if any
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in PREEMPTION_SIGNALS}

    def _on_signal(self, signum, frame) -> None:
        self.signal_name = signal.Signals(signum).name

    @property
    def received(self) -> bool:
        return self.signal_name is not None

    def message(self, rollout_step: int, save_dir: str | None) -> str:
        """What rank 0 says when it stops for a preemption after this rollout step (save_dir:
        --save, where that step's checkpoint was written, or None)."""
        saved = (
            f"checkpoint {save_dir}/step_{rollout_step} written; resume with --load {save_dir}"
            if save_dir
            else "no checkpoint written (no --save)"
        )
        return (
            f"hyrl: {self.signal_name or 'a preemption signal'} received: "
            f"stopping after rollout step {rollout_step}; {saved}"
        )

    def close(self) -> None:
        """The handlers in place before this one, back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def target_reached(target: str | None, rollout_step: int) -> str:
    """What rank 0 says when --stop-at-target ends the run after this rollout step."""
    return (
        f"hyrl: --target {target} reached at rollout step {rollout_step}; "
        "--stop-at-target ends the run"
    )


def skipped_steps(parts: Iterable[TrainedModel]) -> int:
    """Optimizer steps skipped for a non-finite loss or gradient norm, of every part in all
    (a record's train/skipped_steps)."""
    return sum(part.skipped_steps for part in parts)


def check_skipped_steps(
    parts: Iterable[TrainedModel], max_skipped_steps: int, rollout_step: int
) -> None:
    """TrainingStopped after --max-skipped-steps skipped optimizer steps in a row of any part
    (every rank decides alike: the skip decision is all-reduced)."""
    for part in parts:
        if part.consecutive_skips >= max_skipped_steps:
            raise TrainingStopped(
                f"the {part.metric_prefix} skipped {part.consecutive_skips} optimizer steps "
                f"in a row (up to rollout step {rollout_step}) for a non-finite loss or "
                f"gradient norm (--max-skipped-steps={max_skipped_steps}); "
                "metrics.jsonl holds their records (actor/skipped, critic/skipped, "
                "train/skipped_steps)"
            )
