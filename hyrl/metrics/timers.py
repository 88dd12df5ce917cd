"""Stage timers: `with timers("rollout"): ...` accumulates wall-clock seconds per stage."""

from __future__ import annotations

import time
from contextlib import contextmanager


class StageTimers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        # the stage being timed and since when (perf_counter), or None: what a heartbeat reads
        self.current: tuple[str, float] | None = None

    @contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        outer, self.current = self.current, (stage, start)
        try:
            yield
        finally:
            self.current = outer
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def pop(self) -> dict[str, float]:
        """`perf/<stage>_s` for everything timed since the last pop, then reset."""
        out = {f"perf/{stage}_s": s for stage, s in self.seconds.items()}
        self.seconds = {}
        return out
