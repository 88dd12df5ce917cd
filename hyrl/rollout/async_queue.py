"""--async-rollout: rank 0's queue of rollouts generated ahead of the trainer.

One background worker (a ThreadPoolExecutor of one thread) runs the rollout manager's generation
and scoring of one rollout step per job, in submission order, so prompts leave the task in
order. The engines are guarded by the rollout manager's `EngineLock`, which the worker holds for
each generation call and the trainer for each weight sync, and which a waiting sync takes
before the worker's next call. Without --inflight-weight-updates a generation call is a whole round
of responses, so no weights change in the middle of one; with it (hyrl.rollout.partial) a call
is one segment of a few tokens and a sync lands between segments. Each rollout carries the
policy version (weight syncs of trained weights) of each generation call, and its batch the
version that sampled each response token.

At rollout step t the rollout manager `take`s the oldest rollout for the trainer (waiting for
it: perf/trainer_idle_s) and `top_up`s the queue to K = --max-staleness jobs in flight, fewer
near the end of a run that saves no checkpoint (`rollouts_in_flight`). K = 0 keeps no queue:
generate, wait, train, the synchronous order. A response's staleness is the trainer's version -
the OLDEST version among its tokens; a batch whose oldest token is staler than K is dropped and
counted (drop) or its prompts generated again with the current weights (regenerate). The queue
holds no torch distributed and no engine: `produce` and `regenerate` are what it calls, so a
fake generator tests it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hyrl.rollout.partial import version_metrics

STALE_POLICIES = ("drop", "regenerate")


def rollouts_in_flight(max_staleness: int, steps_left: int, saves: bool) -> int:
    """How many rollouts the queue keeps in flight after a take: K = --max-staleness, fewer
    near the end (none past the last step) unless a checkpoint keeps them (--save: a longer
    resumed run continues as this one would)."""
    return max_staleness if saves else min(max_staleness, steps_left)


class EngineLock:
    """The engines' lock: one generation call or one weight sync at a time, and a sync that is
    waiting goes before the next generation call (a worker generating segment after segment
    would otherwise take the lock back before the waiting trainer wakes)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held = False
        self._syncs_waiting = 0

    @contextmanager
    def generation(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._held and self._syncs_waiting == 0)
            self._held = True
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def weight_sync(self) -> Iterator[None]:
        with self._changed:
            self._syncs_waiting += 1
            try:
                self._changed.wait_for(lambda: not self._held)
            finally:
                self._syncs_waiting -= 1
            self._held = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._changed:
            self._held = False
            self._changed.notify_all()


@dataclass
class QueuedRollout:
    """One rollout step's generation, as the worker made it."""

    batch: Any  # a RolloutBatch
    routed: list | None  # the engine's routing, kept apart (RolloutManager.rollout)
    prompts: list  # the task's prompts it was generated for (regenerate takes them)
    # the policy version of each generation call (one per round; per segment,
    # --inflight-weight-updates)
    versions: list[int]
    engine_idle_s: float = 0.0  # the worker had nothing to do for this long before it
    # the worker's seconds per stage making it ("rollout": generation, "reward"): not on the
    # trainer's path, logged as perf/worker_<stage>_s (a checkpointed rollout has none)
    stage_s: dict[str, float] = field(default_factory=dict)

    @property
    def response_versions(self) -> list[list[int]] | None:
        """The version that sampled each response token (None: a batch from before them)."""
        return getattr(self.batch, "response_versions", None)

    @property
    def version(self) -> int:
        """Its oldest weights' version (of any token, else of any call): the staleness bound
        holds for every response."""
        per_token = self.response_versions
        if per_token and any(per_token):
            return min(min(v) for v in per_token if v)
        return min(self.versions)

    def staleness(self, trainer_version: int) -> list[int]:
        """Per response, the trainer's version - the oldest version among its tokens; per
        generation call for a batch without per-token versions."""
        per_token = self.response_versions
        if per_token is None:
            return [trainer_version - v for v in self.versions]
        return [trainer_version - (min(v) if v else self.version) for v in per_token]


@dataclass
class Taken:
    """What `take` hands the trainer for one rollout step, and its account."""

    rollout: QueuedRollout
    trainer_version: int
    trainer_idle_s: float  # waiting for the worker
    stale_dropped: int = 0  # batches dropped as too stale (drop)
    stale_regenerated: int = 0  # batches generated again (regenerate)
    dropped_responses: int = 0  # responses decoded into dropped batches
    engine_idle_s: float = 0.0  # the worker's idle time before this batch and dropped ones
    staleness: list[int] = field(default_factory=list)  # per response (per call: see above)

    def metrics(self) -> dict:
        """rollout/*, perf/engine_idle_s and the worker's perf/worker_<stage>_s for the step's
        first record."""
        return {
            "rollout/staleness_mean": sum(self.staleness) / len(self.staleness),
            "rollout/staleness_max": max(self.staleness),
            "rollout/stale_dropped": self.stale_dropped,
            "rollout/stale_regenerated": self.stale_regenerated,
            **version_metrics(self.rollout.response_versions or []),
            "perf/engine_idle_s": self.engine_idle_s,
            **{f"perf/worker_{stage}_s": s for stage, s in self.rollout.stage_s.items()},
        }


class RolloutQueue:
    """Up to max_staleness rollouts in flight, produced by one worker thread.

    produce(): generate and score one rollout step (on the worker thread) -> QueuedRollout.
    regenerate(prompts): the same on the caller's thread for the given prompts (regenerate).
    saved: rollouts a checkpoint held, taken first (oldest first)."""

    def __init__(
        self,
        produce: Callable[[], QueuedRollout],
        max_staleness: int,
        stale_policy: str = "drop",
        regenerate: Callable[[list], QueuedRollout] | None = None,
        saved: list[QueuedRollout] | tuple = (),
    ):
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        if stale_policy not in STALE_POLICIES:
            raise ValueError(f"stale_policy must be one of {STALE_POLICIES}, got {stale_policy}")
        if stale_policy == "regenerate" and regenerate is None:
            raise ValueError("stale_policy regenerate needs a regenerate function")
        self.produce, self.regenerate = produce, regenerate
        self.max_staleness, self.stale_policy = max_staleness, stale_policy
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hyrl-rollout")
        self._pending: deque[Future] = deque()
        for rollout in saved:
            done: Future = Future()
            done.set_result(rollout)
            self._pending.append(done)
        self._last_done = time.perf_counter()  # when the worker last finished (idle since)

    def __len__(self) -> int:
        """Rollouts queued or in the making."""
        return len(self._pending)

    def _job(self) -> QueuedRollout:
        """On the worker thread: one rollout, with the idle gap before it."""
        idle_s = max(0.0, time.perf_counter() - self._last_done)
        try:
            rollout = self.produce()
        finally:
            self._last_done = time.perf_counter()
        rollout.engine_idle_s = idle_s
        return rollout

    def submit(self) -> None:
        self._pending.append(self._executor.submit(self._job))

    def top_up(self, in_flight: int) -> None:
        """Submit jobs until `in_flight` rollouts are queued or in the making."""
        while len(self._pending) < in_flight:
            self.submit()

    def take(self, trainer_version: int) -> Taken:
        """The oldest rollout within max_staleness of trainer_version (waiting for it); staler
        ones are dropped or regenerated. With nothing queued (K = 0) one is made now."""
        began = time.perf_counter()
        dropped, regenerated, dropped_responses, idle_s = 0, 0, 0, 0.0
        while True:
            fresh = not self._pending
            if fresh:
                self.submit()
            rollout = self._pending.popleft().result()
            idle_s += rollout.engine_idle_s
            if trainer_version - rollout.version <= self.max_staleness:
                break
            if fresh:  # generated now: the engines must hold the trainer's weights
                raise RuntimeError(
                    f"hyrl bug: a rollout generated now by version {rollout.version} weights is "
                    f"staler than --max-staleness={self.max_staleness} for the trainer's "
                    f"version {trainer_version}"
                )
            if self.stale_policy == "drop":
                dropped += 1
                dropped_responses += rollout.batch.responses_generated
                continue
            assert self.regenerate is not None, "checked in __init__"
            self.wait()  # the worker idle: one thread scores at a time
            regenerated += 1
            dropped_responses += rollout.batch.responses_generated
            rollout = self.regenerate(rollout.prompts)
            break
        return Taken(
            rollout=rollout,
            trainer_version=trainer_version,
            trainer_idle_s=time.perf_counter() - began,
            stale_dropped=dropped,
            stale_regenerated=regenerated,
            dropped_responses=dropped_responses,
            engine_idle_s=idle_s,
            staleness=rollout.staleness(trainer_version),
        )

    def wait(self) -> None:
        """Until every job submitted is done (an evaluation or a checkpoint next); a failed
        job raises here."""
        for job in list(self._pending):
            job.result()

    def drain(self) -> list[QueuedRollout]:
        """Every queued rollout, done, oldest first; they stay queued (a checkpoint saves
        them and the run goes on)."""
        self.wait()
        return [job.result() for job in self._pending]

    def close(self) -> None:
        """Cancel what has not started; the running job, if any, finishes first."""
        self._executor.shutdown(wait=True, cancel_futures=True)
