"""Run by torchrun (2 gloo ranks) from tests/unit/weight_sync/test_colocated_ipc.py: colocated
tensor sync (hyrl.weight_sync.tensor.send_by_cuda_ipc on every rank, ColocatedTensorSync on rank
0), each engine TP rank fed by the training rank on its GPU. Rank 0 hosts the fake server (TP 2).

Usage: torchrun --nproc-per-node 2 tests/helpers/ipc_stream_worker.py OUT.json ok|fail
"""

import json
import sys

import torch.distributed as dist
from fake_sglang_server import (
    FakeSGLangServer,
    hf_state_dict_with_shift,
    pickle_deserializer,
    pickle_serializer,
)
from torch_ranks import DefaultGroupRanks

from hyrl.models.qwen3_moe.hf_mapping import split_fused_experts
from hyrl.models.weight_buckets import iter_buckets
from hyrl.rollout.sglang.client import SGLangClient
from hyrl.rollout.sglang.receive.tensor import ColocatedTensorSync, match_engine_ranks
from hyrl.weight_sync.tensor import send_by_cuda_ipc


def main(out_path: str, scenario: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # rank 0 sits on GPU 1 and rank 1 on GPU 0 of host "h"; the engine's TP ranks on GPUs 0, 1
    engine_ranks = match_engine_ranks([("h", 1), ("h", 0)], [[("h", 0), ("h", 1)]])
    buckets = iter_buckets(
        split_fused_experts(hf_state_dict_with_shift(2.0 + rank)), buffer_bytes=200
    )
    result = {"engine_ranks": engine_ranks}
    fake, sync = None, None
    if rank == 0:
        fake = FakeSGLangServer(tp_size=2).__enter__()
        if scenario == "fail":
            fake.fail("/update_weights_from_tensor")
        sync = ColocatedTensorSync([SGLangClient(fake.url)], engine_ranks)
    try:
        send_by_cuda_ipc(buckets, DefaultGroupRanks(), sync, pickle_serializer)
        result["error"] = None
        if rank == 0:
            result["buckets"] = sync.last_stats.buckets
    except Exception as err:  # noqa: BLE001 - the test reads it
        result["error"] = f"{type(err).__name__}: {err}"
    if rank == 0:
        result["routes"] = fake.routes_called()
        result["shift"] = fake.shift
        posts = [p for r, p in fake.calls if r == "/update_weights_from_tensor"]
        # per post, per TP rank: the shift its entry carries (2 = rank 0's copy, 3 = rank 1's)
        result["entry_shifts"] = [
            [
                round(float(sum(t.sum() for _, t in pickle_deserializer(e))))
                for e in p["serialized_named_tensors"]
            ]
            for p in posts
        ]
        fake.__exit__(None, None, None)
    with open(f"{out_path}.rank{rank}", "w") as out:
        json.dump(result, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
