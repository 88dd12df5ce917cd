"""--colocate --update-weight-mode tensor (the 30B GRPO recipe's sync) against SGLang 0.5.23's
own scheduler code: every training rank serializes its copy of each bucket, rank 0 posts them
inside one weight-update session (hyrl/rollout/sglang/colocated.py). One gloo rank here, whose
"GPU" the engine's one TP rank sits on."""

from __future__ import annotations

import contextlib

import torch.distributed as dist
from fake_sglang_server import hf_state_dict_with_shift
from sglang_scheduler import SchedulerServer

from hyrl.models.weight_buckets import iter_buckets
from hyrl.rollout.sglang.client import SGLangClient
from hyrl.rollout.sglang.colocated import ColocatedTensorSync, stream_by_ipc
from hyrl.rollout.sglang.weight_sync import checkpoint_named_tensors, sglang_serializer


@contextlib.contextmanager
def one_training_rank():
    """A gloo world of one rank; made after the server's fork, which must not inherit it."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_colocated_buckets_are_loaded_inside_one_session_per_sync():
    with SchedulerServer() as server, one_training_rank():
        sync = ColocatedTensorSync([SGLangClient(server.url, timeout_s=60.0)], [[0]])
        for shift in (2.0, 7.0):
            named = checkpoint_named_tensors(hf_state_dict_with_shift(shift))
            stats = stream_by_ipc(iter_buckets(named, 200), sync, sglang_serializer(cuda=False))
            assert stats is not None and stats.buckets == 4
            loads = server.recorded()["loaded"][-4:]
            assert [n for load in loads for n in load["names"]] == [n for n, _ in named]
            assert sum(s for load in loads for s in load["sums"]) == shift
        assert not server.recorded()["session_open"]
