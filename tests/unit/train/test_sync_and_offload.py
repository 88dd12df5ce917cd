"""The loop's weight sync (hyrl.train.sync_and_offload.SyncAndOffload.sync_engines): under the
engines' lock, with the policy version the engines then hold."""

from types import SimpleNamespace

from hyrl.rollout.async_queue import EngineLock
from hyrl.train.sync_and_offload import SyncAndOffload


class _Backend:
    def __init__(self, events):
        self.events = events

    def wait_for_rank_0(self):
        self.events.append("wait for rank 0")


def _rank_0(events, generates_ahead):
    manager = SimpleNamespace(engine="engine", engine_lock=EngineLock(), weights_version=0)

    class _Mode:
        def sync(self, actor, engine, resume_engines):
            events.append(("sync", engine, manager.engine_lock._held, manager.weights_version))
            return {"perf/weight_sync_bytes": 8}

    return manager, SyncAndOffload(_Backend(events), manager, _Mode(), False, generates_ahead)


def test_the_sync_holds_the_engine_lock_and_sets_the_version_after_it():
    events = []
    manager, sync_and_offload = _rank_0(events, generates_ahead=False)
    sync_and_offload.sync_engines("actor", None, version=3)
    assert events == [("sync", "engine", True, 0)]  # under the lock, still the old version
    assert manager.weights_version == 3 and not manager.engine_lock._held
    assert sync_and_offload.metrics == {"perf/weight_sync_bytes": 8}
    sync_and_offload.sync_engines("actor", None)  # a checkpoint's re-sync: version unchanged
    assert manager.weights_version == 3


def test_with_a_worker_generating_ahead_every_rank_waits_for_rank_0_first():
    events = []
    _, sync_and_offload = _rank_0(events, generates_ahead=True)
    sync_and_offload.sync_engines("actor", None, version=1)
    assert events == ["wait for rank 0", ("sync", "engine", True, 0)]
