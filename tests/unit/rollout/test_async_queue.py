"""Specification of hyrl.rollout.async_queue (--async-rollout): the queue of rollouts generated
ahead by one worker thread, the staleness bound and its drop/regenerate policies, with a fake
generator (no engine, no torch distributed)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from hyrl.rollout.async_queue import QueuedRollout, RolloutQueue, rollouts_in_flight


@dataclass
class FakeBatch:
    prompts: list[int]

    @property
    def responses_generated(self) -> int:
        return 2 * len(self.prompts)  # G = 2


class FakeSide:
    """Draws prompts 0, 1, 2, ... in order, generates under an engine lock with the version
    the engines hold, as RolloutManager.rollout_versioned does; logs what ran on which thread."""

    def __init__(self, prompts_per_step: int = 2, delay_s: float = 0.0):
        self.lock = threading.Lock()
        self.version = 0
        self.next_prompt = 0
        self.prompts_per_step, self.delay_s = prompts_per_step, delay_s
        self.events: list[tuple[str, int]] = []
        self.threads: set[str] = set()

    def produce(self, prompts: list | None = None) -> QueuedRollout:
        if prompts is None:
            prompts = list(range(self.next_prompt, self.next_prompt + self.prompts_per_step))
            self.next_prompt += self.prompts_per_step
        self.threads.add(threading.current_thread().name)
        with self.lock:
            version = self.version
            time.sleep(self.delay_s)
            self.events.append(("generate", prompts[0]))
        return QueuedRollout(FakeBatch(prompts), None, prompts, [version])

    def sync(self, version: int) -> None:
        with self.lock:
            self.events.append(("sync", version))
            self.version = version


def queue_of(side: FakeSide, k: int, policy: str = "drop", saved=()) -> RolloutQueue:
    return RolloutQueue(side.produce, k, policy, regenerate=side.produce, saved=list(saved))


def train_loop(side: FakeSide, queue: RolloutQueue, k: int, steps: int):
    """The queue as RolloutManager.step_rollout uses it for the trainer, in a run that saves no
    checkpoint: take, top up, train, sync."""
    taken = []
    for step in range(1, steps + 1):
        got = queue.take(side.version)
        queue.top_up(rollouts_in_flight(k, steps - step, saves=False))
        side.events.append(("train", got.rollout.prompts[0]))
        taken.append(got)
        side.sync(step)
    return taken


def test_k0_generates_waits_and_trains_in_the_synchronous_order():
    side = FakeSide()
    queue = queue_of(side, 0)
    try:
        taken = train_loop(side, queue, 0, 3)
    finally:
        queue.close()
    assert side.events == [
        ("generate", 0),
        ("train", 0),
        ("sync", 1),
        ("generate", 2),
        ("train", 2),
        ("sync", 2),
        ("generate", 4),
        ("train", 4),
        ("sync", 3),
    ]
    assert [t.staleness for t in taken] == [[0], [0], [0]]
    assert side.threads and all(t.startswith("hyrl-rollout") for t in side.threads)  # worker


def test_k1_trains_each_prompt_once_in_order_within_one_version():
    side = FakeSide(delay_s=0.01)
    queue = queue_of(side, 1)
    try:
        taken = train_loop(side, queue, 1, 5)
    finally:
        queue.close()
    assert [t.rollout.prompts for t in taken] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert side.next_prompt == 10  # nothing generated past the last step
    for t in taken:
        assert max(t.staleness) <= 1
        assert t.stale_dropped == 0 and t.metrics()["rollout/staleness_max"] <= 1


def test_k2_keeps_two_in_flight_and_bounds_staleness_by_two():
    side = FakeSide()
    queue = queue_of(side, 2)
    try:
        taken = train_loop(side, queue, 2, 6)
    finally:
        queue.close()
    assert [t.rollout.prompts[0] for t in taken] == [0, 2, 4, 6, 8, 10]
    assert all(0 <= max(t.staleness) <= 2 for t in taken)


def test_k_stay_in_flight_to_the_end_only_when_a_checkpoint_keeps_them():
    # K = 2, 10 steps: after step 9 one step is left, after step 10 none
    assert [rollouts_in_flight(2, left, saves=False) for left in (8, 1, 0)] == [2, 1, 0]
    # a checkpoint saves the queue: a longer resumed run takes them as this run would have
    assert [rollouts_in_flight(2, left, saves=True) for left in (8, 1, 0)] == [2, 2, 2]


def test_the_trainer_waits_for_a_slow_generation_and_counts_it_as_trainer_idle():
    side = FakeSide(delay_s=0.2)
    queue = queue_of(side, 1)
    try:
        got = queue.take(0)
    finally:
        queue.close()
    assert got.trainer_idle_s >= 0.2


def test_the_worker_idle_gap_before_a_job_is_its_engine_idle_time():
    side = FakeSide()
    queue = queue_of(side, 1)
    try:
        queue.take(0)
        time.sleep(0.3)  # the trainer trains; nothing submitted
        got = queue.take(0)
    finally:
        queue.close()
    assert got.engine_idle_s >= 0.3
    assert got.metrics()["perf/engine_idle_s"] == got.engine_idle_s


def test_the_workers_own_stage_times_are_logged_apart_from_the_trainers():
    rollout = QueuedRollout(FakeBatch([0, 1]), None, [0, 1], [0], stage_s={"rollout": 0.25})
    rollout.stage_s["reward"] = 0.01
    from hyrl.rollout.async_queue import Taken

    metrics = Taken(rollout, trainer_version=0, trainer_idle_s=0.0, staleness=[0, 0]).metrics()
    assert metrics["perf/worker_rollout_s"] == 0.25 and metrics["perf/worker_reward_s"] == 0.01
    assert "perf/rollout_s" not in metrics  # not a stage of the trainer's step


def stale(prompt: int, version: int) -> QueuedRollout:
    return QueuedRollout(FakeBatch([prompt]), None, [prompt], [version])


def test_drop_counts_batches_staler_than_k_and_takes_the_next():
    side = FakeSide()
    queue = queue_of(side, 1, "drop", saved=[stale(100, 0), stale(101, 2), stale(102, 4)])
    try:
        got = queue.take(4)  # versions 0 and 2 are 4 and 2 behind
    finally:
        queue.close()
    assert got.rollout.prompts == [102] and got.staleness == [0]
    assert got.stale_dropped == 2 and got.dropped_responses == 4
    assert got.metrics()["rollout/stale_dropped"] == 2


def test_drop_with_every_queued_batch_stale_generates_a_fresh_one():
    side = FakeSide()
    side.version = 3
    queue = queue_of(side, 0, "drop", saved=[stale(100, 0)])
    try:
        got = queue.take(3)
    finally:
        queue.close()
    assert got.stale_dropped == 1 and got.rollout.prompts == [0, 1] and got.staleness == [0]


def test_a_fresh_rollout_from_weights_older_than_the_trainers_is_a_bug_not_a_loop():
    side = FakeSide()  # the engines hold version 0, the trainer claims 3
    queue = queue_of(side, 0, "drop")
    try:
        with pytest.raises(RuntimeError, match="hyrl bug"):
            queue.take(3)
    finally:
        queue.close()


def test_regenerate_generates_the_stale_batchs_own_prompts_with_the_current_weights():
    side = FakeSide()
    side.version = 5
    queue = queue_of(side, 1, "regenerate", saved=[stale(100, 1), stale(101, 4)])
    try:
        got = queue.take(5)
        nxt = queue.take(5)
    finally:
        queue.close()
    assert got.rollout.prompts == [100] and got.staleness == [0]
    assert got.stale_regenerated == 1 and got.stale_dropped == 0
    assert got.dropped_responses == 2  # the stale responses were decoded, never trained on
    assert nxt.rollout.prompts == [101] and nxt.staleness == [1]
    assert side.next_prompt == 0  # no new prompt drawn for the regeneration


def test_staleness_is_measured_from_the_oldest_generation_call():
    rollout = QueuedRollout(FakeBatch([0]), None, [0], [3, 2, 3])  # --dynamic-sampling rounds
    queue = RolloutQueue(lambda: rollout, 2, saved=[rollout])
    try:
        got = queue.take(4)
    finally:
        queue.close()
    assert rollout.version == 2
    assert got.metrics()["rollout/staleness_max"] == 2
    assert got.metrics()["rollout/staleness_mean"] == pytest.approx(4 / 3)


def test_drain_waits_for_the_queued_rollouts_and_keeps_them_queued():
    side = FakeSide(delay_s=0.05)
    queue = queue_of(side, 2)
    try:
        queue.top_up(2)
        queued = queue.drain()
        assert [q.prompts for q in queued] == [[0, 1], [2, 3]]
        assert len(queue) == 2
        assert queue.take(0).rollout.prompts == [0, 1]
    finally:
        queue.close()


def test_a_failed_generation_raises_in_the_trainer():
    def broken() -> QueuedRollout:
        raise RuntimeError("engine 1 died")

    queue = RolloutQueue(broken, 1)
    try:
        with pytest.raises(RuntimeError, match="engine 1 died"):
            queue.take(0)
    finally:
        queue.close()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_staleness"):
        RolloutQueue(lambda: None, -1)
    with pytest.raises(ValueError, match="stale_policy"):
        RolloutQueue(lambda: None, 1, "keep")
    with pytest.raises(ValueError, match="regenerate function"):
        RolloutQueue(lambda: None, 1, "regenerate")
