"""hyrl's distributed sync sends each bucket as ONE broadcast, and SGLang 0.5.23's own receiver
takes it: ``load_format="flattened_bucket"`` in ``UpdateWeightsFromDistributedReqInput``
(managers/io_struct.py) routes the receive to ``_receive_bucketed_weights_from_distributed``
(model_executor/model_runner_components/weight_updater.py), which allocates
``FlattenedTensorBucket.empty(names, dtypes, shapes)`` (weight_sync/tensor_bucket.py: the
tensors back to back, no padding, each at a multiple of its element size), receives one uint8
broadcast into it and hands the model views of it. Before, hyrl broadcast every tensor on its
own: about 18.9k broadcasts per Qwen3-30B-A3B sync.
"""

from __future__ import annotations

import functools

import flattened_bucket_cases as cases
import pytest
import torch
from sglang_scheduler import joined_weight_group

from hyrl.models.weight_buckets import tensor_bytes
from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync
from hyrl.rollout.sglang.server import free_port


class CountingGroup:
    """The sync's process group, counting the bytes of each broadcast it starts."""

    def __init__(self, group):
        self.group, self.broadcast_bytes = group, []

    def broadcast(self, tensor, root):
        self.broadcast_bytes.append(tensor_bytes(tensor))
        return self.group.broadcast(tensor, root)


# One bucket of three dtypes. The first tensor is 3 bf16 values (6 bytes): sent in this order,
# the fp32 tensor after it would start at byte 6, which SGLang refuses (see
# test_sglang_refuses_a_flattened_bucket_as_the_fake_does).
MIXED = [
    ("model.norm.weight", torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)),  # 6 bytes
    ("lm_head.weight", torch.full((4, 2), 0.5)),  # fp32, 32 bytes
    ("model.embed_tokens.weight", torch.arange(6, dtype=torch.float64).view(2, 3)),  # 48 bytes
    ("model.layers.0.input_layernorm.weight", torch.tensor([7.0], dtype=torch.bfloat16)),
]


def test_a_mixed_dtype_bucket_goes_as_one_broadcast_and_sglang_loads_exactly_what_was_sent(
    server, client
):
    before = len(server.recorded()["loaded"])
    sync = DistributedWeightSync(
        [client], 1 << 20, backend="gloo", group_name=f"hyrl_flat_{free_port()}", timeout_s=60.0
    )
    try:
        sync.connect()
        real = sync.group
        sync.group = counting = CountingGroup(real)  # type: ignore[assignment]
        try:
            stats = sync.sync(MIXED)
        finally:
            sync.group = real
    finally:
        sync.close()
    assert stats.buckets == 1
    assert counting.broadcast_bytes == [6 + 32 + 48 + 2]  # one broadcast: the whole bucket
    loads = server.recorded()["loaded"][before:]
    assert len(loads) == 1  # SGLang handed the model the bucket in one load_weights call
    got = {
        name: (shape, total)
        for name, shape, total in zip(loads[0]["names"], loads[0]["shapes"], loads[0]["sums"])
    }
    assert got == {
        "model.norm.weight": ([3], 6.0),
        "lm_head.weight": ([4, 2], 4.0),
        "model.embed_tokens.weight": ([2, 3], 15.0),
        "model.layers.0.input_layernorm.weight": ([1], 7.0),
    }


def test_every_bucket_of_a_sync_is_one_broadcast(server, client):
    before = len(server.recorded()["loaded"])
    named = [
        (f"model.layers.{i}.input_layernorm.weight", torch.full((10,), float(i))) for i in range(6)
    ]
    sync = DistributedWeightSync(
        [client], 80, backend="gloo", group_name=f"hyrl_flat_{free_port()}", timeout_s=60.0
    )  # 80 bytes: two 40-byte tensors a bucket
    try:
        sync.connect()
        real = sync.group
        sync.group = counting = CountingGroup(real)  # type: ignore[assignment]
        try:
            sync.sync(named)
        finally:
            sync.group = real
    finally:
        sync.close()
    assert counting.broadcast_bytes == [80, 80, 80]  # 3 buckets, 3 broadcasts (6 before)
    loads = server.recorded()["loaded"][before:]
    assert [load["names"] for load in loads] == [
        [name for name, _ in named[k : k + 2]] for k in (0, 2, 4)
    ]
    assert [s for load in loads for s in load["sums"]] == [10.0 * i for i in range(6)]


@pytest.fixture
def joined_group(server):
    """The cases assume a joined group, as the fake's do."""
    with joined_weight_group(server.url, cases.GROUP_NAME):
        yield


def test_sglang_refuses_a_flattened_bucket_as_the_fake_does(server, client, joined_group):
    cases.check(cases.refusals(functools.partial(client.request, "POST")))
