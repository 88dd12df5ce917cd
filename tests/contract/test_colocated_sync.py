"""--colocate --update-weight-transport tensor (the 30B GRPO recipe's sync) against SGLang 0.5.23's
own scheduler code: every training rank serializes its copy of each bucket
(hyrl/weight_sync/tensor.py), rank 0 posts them inside one weight-update session
(hyrl/rollout/sglang/receive/tensor.py). One gloo rank here, whose "GPU" the engine's one TP
rank sits on."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
from fake_sglang_server import hf_state_dict_with_shift
from sglang_scheduler import SchedulerServer
from torch_ranks import DefaultGroupRanks

from hyrl.models.weight_buckets import iter_buckets
from hyrl.rollout.sglang.client import SGLangClient, SGLangError
from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors, sglang_serializer
from hyrl.rollout.sglang.receive.tensor import ColocatedTensorSync
from hyrl.weight_sync.tensor import send_by_cuda_ipc


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
            ranks = DefaultGroupRanks()
            send_by_cuda_ipc(iter_buckets(named, 200), ranks, sync, sglang_serializer(cuda=False))
            assert sync.last_stats is not None and sync.last_stats.buckets == 4
            loads = server.recorded()["loaded"][-4:]
            assert [n for load in loads for n in load["names"]] == [n for n, _ in named]
            assert sum(s for load in loads for s in load["sums"]) == shift
        assert not server.recorded()["session_open"]


def mixed_bucket() -> list:
    """Odd-sized bf16 tensors before fp32 and int ones: a flat bucket without padding would put
    the fp32 tensor at an offset SGLang's view as float32 refuses."""
    return [
        ("model.layers.0.input_layernorm.weight", torch.arange(3, dtype=torch.bfloat16)),
        ("model.norm.weight", torch.full((5,), 0.5, dtype=torch.float32)),
        ("model.layers.0.mlp.gate.weight", torch.ones(1, 3, dtype=torch.bfloat16)),
        ("model.embed_tokens.weight", torch.arange(6, dtype=torch.float32).view(2, 3)),
    ]


def test_a_flattened_bucket_of_mixed_dtypes_reaches_the_model_as_the_tensors_it_was_made_of():
    serializer = sglang_serializer(cuda=False)
    assert serializer.load_format == "flattened_bucket"  # SGLang's load_format, the default
    bucket = mixed_bucket()
    with SchedulerServer() as server, one_training_rank():
        sync = ColocatedTensorSync([SGLangClient(server.url, timeout_s=60.0)], [[0]])
        send_by_cuda_ipc([bucket], DefaultGroupRanks(), sync, serializer)
        assert sync.last_stats is not None and sync.last_stats.buckets == 1
        load = server.recorded()["loaded"][-1]  # one load_weights call: the whole bucket
    assert load["names"] == [n for n, _ in bucket]
    assert load["shapes"] == [list(t.shape) for _, t in bucket]
    assert load["sums"] == [float(t.double().sum()) for _, t in bucket]
    assert serializer.held is None  # the flat copy went with the bucket


def test_sglang_refuses_a_flattened_payload_posted_without_its_load_format():
    """The load_format is part of the payload: without it SGLang reads a dict as named tensors
    and the load fails (hyrl posts both from the serializer: load_format_of)."""
    from hyrl.rollout.sglang.receive.payload import load_format_of

    serializer = sglang_serializer(cuda=False)
    with SchedulerServer() as server, one_training_rank():
        client = SGLangClient(server.url, timeout_s=60.0)
        client.begin_weight_update()
        with pytest.raises(SGLangError):
            client.update_weights_from_tensor(
                [serializer(mixed_bucket())], load_format=None, flush_cache=False
            )
        client.end_weight_update()
    with pytest.raises(
        ValueError,
        match="load_format=.direct. with a serializer whose payloads are .flattened_bucket.",
    ):
        load_format_of(serializer, "direct")
