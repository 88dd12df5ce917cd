"""Reward scoring off the trainer process: a pool of Ray actors with per-item timeouts.

    pool = RewardPool(ExactMatchReward, num_workers=4, timeout_s=10.0)
    scored = pool.score(texts, labels, finish_reasons)  # a ScoredBatch; a bad item never raises
    pool.close()

Semantics, identical in both modes unless noted:

* An item whose reward function raises (any ``Exception``), returns something ``float()`` rejects,
  or returns a non-finite number scores 0.0 and counts in ``ScoredBatch.failures``; the first few
  messages ("index i: ExcType: message", in index order) go into ``ScoredBatch.errors`` for the
  log. The worker keeps running.
* ``num_workers > 0``: each worker is a Ray actor, a separate single-threaded process that builds
  its own reward function with ``reward_fn_factory()`` and runs every call on its main thread, so
  rewards that use ``signal.alarm`` (math-verify) work. The batch is cut into contiguous chunks,
  one per worker; a worker that finishes its chunk takes items from the tail of the largest chunk
  still queued (so one slow worker does not leave the others idle). Each remote call scores ONE
  item and each worker has at most one call in flight, so at most ``num_workers`` items are in
  flight at a time. Output order is always the input order. A call costs ~1.5 ms of Ray overhead,
  so workers pay off for rewards that take milliseconds (parsing, math-verify), not for
  ``ExactMatchReward``, which ``num_workers=0`` scores in microseconds.
* Timeouts (``num_workers > 0`` only): a call's clock starts when it is submitted to an idle,
  started worker. If it has not returned after ``timeout_s`` the item scores 0.0 and counts as a
  failure and a timeout, and the worker process is killed (``ray.kill``) - the only way to stop a
  hung call, whether it is stuck in Python or in C - and replaced by a fresh actor, counted in
  ``RewardPool.worker_restarts``. The replacement starts in the background while the other
  workers keep scoring (they take over its queued items), so a hung item delays the batch by about
  ``timeout_s`` plus an actor start (~0.5 s), not more. A worker process that dies while scoring
  (segfault, ``os._exit``, out of memory) is replaced the same way; its item is a failure but not
  a timeout. A replacement that fails to start is reported in ``errors`` ("worker k: ...") and
  tried again at the next ``score()``; items no worker can take score 0 as failures.
* ``num_workers == 0``: the reward function runs in this process, item by item. Exceptions are
  caught as above, but a hung call cannot be preempted from the same thread, so ``timeout_s`` is
  NOT enforced (``timeouts`` is always 0); use workers when rewards can hang.
* Ray: if Ray is not initialised, the pool starts it (``ray.init(address=ray_address)`` when an
  address is given, else a local instance with ``num_cpus=max(num_workers, 1)``; no dashboard, no
  log forwarding) and shuts it down in ``close()``; if Ray was already initialised, the pool uses
  it and leaves it running. Each actor reserves ``num_cpus=1`` for its lifetime unless
  ``actor_options`` (passed to ``.options()``) says otherwise, so a shared cluster needs that many
  free CPUs; a worker that cannot be placed within ``startup_timeout_s`` fails the constructor
  with a message naming the cluster's free resources.

Ray pickles the factory with cloudpickle. A factory defined in a module the workers cannot import
(a test module, a script outside the project) must be pickled by value:
``ray.cloudpickle.register_pickle_by_value(module)``; importable classes such as
``hyrl.rewards.exact_match.ExactMatchReward`` need nothing.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hyrl.ray_actors import ActorSlot, describe
from hyrl.rewards.base import RewardFn

if TYPE_CHECKING:
    from ray import ObjectRef

MAX_ERRORS = 5  # messages kept in ScoredBatch.errors
MAX_MESSAGE_CHARS = 160  # each message's exception text is cut to this


@dataclass
class ScoredBatch:
    rewards: list[float]
    failures: int = 0  # items that raised, returned a non-number or timed out (each scored 0.0)
    timeouts: int = 0  # of which timed out
    errors: list[str] = field(default_factory=list)  # up to MAX_ERRORS "index i: ExcType: message"


def _describe(exc: BaseException) -> str:
    return describe(exc, MAX_MESSAGE_CHARS)


def _score_one(
    fn: RewardFn, text: str, label: str, finish_reason: str
) -> tuple[float | None, str | None]:
    """(reward, None) on success, (None, "ExcType: message") on failure.

    Never raises an Exception.
    """
    try:
        value = float(fn(text, label, finish_reason))
    except Exception as exc:  # noqa: BLE001 - any failure of user code scores 0
        return None, _describe(exc)
    if not math.isfinite(value):
        return None, f"ValueError: non-finite reward {value!r}"
    return value, None


class _RewardWorker:
    """The body of one Ray actor: builds its own reward function, scores one item per call."""

    def __init__(self, reward_fn_factory: Callable[[], RewardFn]):
        self._fn = reward_fn_factory()

    def ready(self) -> int:
        return os.getpid()

    def score(self, text: str, label: str, finish_reason: str) -> tuple[float | None, str | None]:
        return _score_one(self._fn, text, label, finish_reason)


class _Slot(ActorSlot):
    """One worker position in the pool; its actor is replaced when it hangs or dies."""

    actor: Any  # a Ray actor handle of _RewardWorker (Ray's handles carry no method types)

    def __init__(self, index: int, options: dict, factory_ref, startup_timeout_s: float):
        super().__init__(index, _RewardWorker, options, (factory_ref,), startup_timeout_s)
        self.ready_ref: ObjectRef[Any] | None = None  # set while the actor is starting
        self.alive = False  # started and usable
        self.queue: deque[int] = deque()
        # (ref, item index, deadline) while a call is in flight
        self.call: tuple[ObjectRef[Any], int, float] | None = None

    @property
    def starting(self) -> bool:
        return self.ready_ref is not None

    def kill(self) -> None:
        super().kill()
        self.ready_ref, self.alive, self.call = None, False, None


class RewardPool:
    """Scores (text, label, finish_reason) items with `num_workers` Ray actors.

    See the module doc.
    """

    def __init__(
        self,
        reward_fn_factory: Callable[[], RewardFn],
        num_workers: int,
        timeout_s: float,
        ray_address: str | None = None,
        *,
        startup_timeout_s: float = 120.0,
        actor_options: dict[str, Any] | None = None,
    ):
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if num_workers > 0 and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 with reward workers, got {timeout_s}")
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.worker_restarts = 0  # actors replaced after a timeout or a crash, over the pool's life
        self._closed = False
        self._owns_ray = False
        self._slots: list[_Slot] = []
        self._local_fn: RewardFn | None = None
        if num_workers == 0:
            self._local_fn = reward_fn_factory()
            return

        import ray

        if not ray.is_initialized():
            if ray_address is not None:
                ray.init(address=ray_address, log_to_driver=False)
            else:
                ray.init(num_cpus=max(num_workers, 1), include_dashboard=False, log_to_driver=False)
            self._owns_ray = True
        try:
            self._actor_options = {"num_cpus": 1, **(actor_options or {})}
            self._factory_ref = ray.put(reward_fn_factory)
            self._slots = [
                _Slot(i, self._actor_options, self._factory_ref, self.startup_timeout_s)
                for i in range(num_workers)
            ]
            for slot in self._slots:
                self._spawn(slot)
            self._await_startup()
        except BaseException:
            self.close()
            raise

    # -- public API -------------------------------------------------------------------------
    def score(
        self, texts: Sequence[str], labels: Sequence[str], finish_reasons: Sequence[str]
    ) -> ScoredBatch:
        if self._closed:
            raise RuntimeError("RewardPool.score() after close()")
        if not len(texts) == len(labels) == len(finish_reasons):
            raise ValueError(
                f"got {len(texts)} texts, {len(labels)} labels and "
                f"{len(finish_reasons)} finish reasons"
            )
        if self._local_fn is not None:
            return self._score_local(texts, labels, finish_reasons)
        return self._score_remote(list(texts), list(labels), list(finish_reasons))

    def close(self) -> None:
        """Kill the workers; shut Ray down if this pool started it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._slots or self._owns_ray:
            import ray

            for slot in self._slots:
                slot.kill()
            self._slots = []
            if self._owns_ray and ray.is_initialized():
                ray.shutdown()
        self._local_fn = None

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- in-process -------------------------------------------------------------------------
    def _score_local(self, texts, labels, finish_reasons) -> ScoredBatch:
        fn = self._local_fn
        assert fn is not None, "score() comes here only when the pool has no workers"
        rewards, failed = [], []
        for i, (t, y, f) in enumerate(zip(texts, labels, finish_reasons)):
            value, error = _score_one(fn, t, y, f)
            rewards.append(0.0 if value is None else value)
            if error is not None:
                failed.append((i, error))
        return ScoredBatch(
            rewards, len(failed), 0, [f"index {i}: {m}" for i, m in failed[:MAX_ERRORS]]
        )

    # -- actors -----------------------------------------------------------------------------
    def _spawn(self, slot: _Slot) -> None:
        """A new actor in an empty slot; `ready_ref` answers once it has built its reward fn."""
        slot.ready_ref = slot.start().ready.remote()

    def _replace(self, slot: _Slot) -> None:
        slot.ready_ref = slot.replace().ready.remote()
        self.worker_restarts += 1

    def _await_startup(self) -> None:
        """Block until every slot's actor has started; raise if one fails (used at construction)."""
        import ray

        for slot in self._slots:
            remaining = max(0.0, slot.start_deadline - time.monotonic())
            assert slot.ready_ref is not None, "_spawn gave every slot a start to wait for"
            try:
                ray.get(slot.ready_ref, timeout=remaining)
            except ray.exceptions.GetTimeoutError:
                raise RuntimeError(
                    f"reward worker {slot.index} did not start within "
                    f"{self.startup_timeout_s:g} s: "
                    f"does the Ray cluster have {self._actor_options} free for each of "
                    f"{self.num_workers} workers? available: {ray.available_resources()}"
                ) from None
            except Exception as exc:
                raise RuntimeError(f"reward worker {slot.index} failed to start: {exc}") from exc
            slot.ready_ref, slot.alive = None, True

    # -- scoring with workers -----------------------------------------------------------------
    def _score_remote(
        self, texts: list[str], labels: list[str], finish_reasons: list[str]
    ) -> ScoredBatch:
        import ray

        n = len(texts)
        rewards = [0.0] * n
        failed: list[tuple[int, str]] = []  # (item index, message)
        notes: list[str] = []  # worker start failures, for the log
        timeouts = 0

        for slot in self._slots:  # a slot whose replacement failed to start last batch: try again
            if not slot.alive and not slot.starting:
                self._spawn(slot)
        base, extra = divmod(n, self.num_workers)
        start = 0
        for slot in self._slots:  # contiguous chunks, the first `extra` one item longer
            stop = start + base + (slot.index < extra)
            slot.queue = deque(range(start, stop))
            start = stop

        def next_item(slot: _Slot) -> int | None:
            if slot.queue:
                return slot.queue.popleft()
            donor = max(self._slots, key=lambda s: len(s.queue))
            return donor.queue.pop() if donor.queue else None

        def fail(i: int, message: str) -> None:
            rewards[i] = 0.0
            failed.append((i, message))

        while True:
            for slot in self._slots:  # keep every started, idle worker busy
                if slot.alive and slot.call is None:
                    i = next_item(slot)
                    if i is not None:
                        ref = slot.actor.score.remote(texts[i], labels[i], finish_reasons[i])
                        slot.call = (ref, i, time.monotonic() + self.timeout_s)
            in_flight = [(s, s.call) for s in self._slots if s.call is not None]
            busy = [s for s, _ in in_flight]
            starting = [s for s in self._slots if s.starting]
            if not busy:
                if not any(s.queue for s in self._slots):
                    break
                if not starting:  # items left and no worker able to take them
                    for s in self._slots:
                        while s.queue:
                            fail(
                                s.queue.popleft(), "RuntimeError: no reward worker could be started"
                            )
                    break

            waiting = {call[0]: s for s, call in in_flight}
            waiting.update({s.ready_ref: s for s in starting if s.ready_ref is not None})
            deadline = min(
                [call[2] for _, call in in_flight] + [s.start_deadline for s in starting]
            )
            ready, _ = ray.wait(
                list(waiting), num_returns=1, timeout=max(0.0, deadline - time.monotonic())
            )
            if ready:  # collect everything else that has finished too, before judging deadlines
                ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=0)

            for ref in ready:
                slot = waiting[ref]
                if slot.starting:
                    try:
                        ray.get(ref)
                        slot.ready_ref, slot.alive = None, True
                    except Exception as exc:  # noqa: BLE001
                        notes.append(f"worker {slot.index}: failed to start: {_describe(exc)}")
                        slot.kill()  # its queued items go to the other workers
                    continue
                assert slot.call is not None, "a ready ref of a started worker is its call's"
                _, i, _ = slot.call
                slot.call = None
                try:
                    value, error = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the worker process died
                    fail(i, f"{_describe(exc)} (worker {slot.index} died, replaced)")
                    self._replace(slot)
                    continue
                if error is None:
                    rewards[i] = value
                else:
                    fail(i, error)

            now = time.monotonic()
            for slot in self._slots:
                if slot.call is not None and slot.call[0] not in ready and now >= slot.call[2]:
                    i = slot.call[1]
                    fail(
                        i,
                        f"TimeoutError: reward took more than {self.timeout_s:g} s "
                        f"(worker {slot.index} killed and replaced)",
                    )
                    timeouts += 1
                    self._replace(slot)
                elif slot.starting and slot.ready_ref not in ready and now >= slot.start_deadline:
                    notes.append(
                        f"worker {slot.index}: did not start within {self.startup_timeout_s:g} s"
                    )
                    slot.kill()

        failed.sort()
        errors = [f"index {i}: {m}" for i, m in failed[:MAX_ERRORS]]
        errors.extend(notes[: max(0, MAX_ERRORS - len(errors))])
        return ScoredBatch(rewards, len(failed), timeouts, errors)
