"""Every engine at once (hyrl/rollout/sglang/receive/session.py ``post_to_all``): one
bucket's post goes to every server concurrently, and returns only once every server has
answered."""

import threading
import time

import pytest

from hyrl.rollout.sglang.receive.session import SyncCounters, post_to_all
from hyrl.rollout.sglang.receive.tensor import ColocatedTensorSync, TensorWeightSync


class BarrierClient:
    """A server whose tensor update returns only once `barrier` has every party: the posts
    pass only when they are in flight together (a post after another would time out)."""

    def __init__(self, barrier: threading.Barrier, fail: bool = False, delay_s: float = 0.0):
        self.barrier, self.fail, self.delay_s = barrier, fail, delay_s
        self.posts: list[list] = []
        self.finished = False

    def update_weights_from_tensor(self, payloads, **kwargs):
        self.barrier.wait(timeout=5)
        time.sleep(self.delay_s)
        self.posts.append(list(payloads))
        self.finished = True
        if self.fail:
            raise RuntimeError("server refused the bucket")


def test_the_posts_of_a_bucket_are_in_flight_together():
    barrier = threading.Barrier(3)
    clients = [BarrierClient(barrier) for _ in range(3)]
    post_to_all(clients, lambda c: c.update_weights_from_tensor(["p"]))
    assert [c.posts for c in clients] == [[["p"]]] * 3


def test_a_failure_is_raised_only_after_every_server_has_answered():
    barrier = threading.Barrier(2)
    failing, slow = BarrierClient(barrier, fail=True), BarrierClient(barrier, delay_s=0.3)
    with pytest.raises(RuntimeError, match="server refused the bucket"):
        post_to_all([failing, slow], lambda c: c.update_weights_from_tensor(["p"]))
    assert slow.finished  # its read of the bucket ended before the caller may free it


def test_colocated_sync_posts_each_engine_its_ranks_payloads_at_once():
    barrier = threading.Barrier(2)
    clients = [BarrierClient(barrier), BarrierClient(barrier)]
    sync = ColocatedTensorSync(clients, [[1, 0], [2, 3]])  # type: ignore[arg-type]
    sync._open = SyncCounters(start=time.perf_counter())  # as begin() opens it
    sync.load_ipc_payloads(["r0", "r1", "r2", "r3"], num_bytes=8)
    assert clients[0].posts == [["r1", "r0"]] and clients[1].posts == [["r2", "r3"]]


def test_tensor_sync_posts_every_server_at_once():
    import torch

    barrier = threading.Barrier(2)
    clients = [BarrierClient(barrier), BarrierClient(barrier)]
    sync = TensorWeightSync(clients, 1 << 20, tp_size=2, serializer=lambda named: "payload")  # type: ignore[arg-type]
    sync._open = SyncCounters(start=time.perf_counter())  # as begin() opens it
    sync.send([("w", torch.ones(2))])
    assert [c.posts for c in clients] == [[["payload", "payload"]]] * 2
