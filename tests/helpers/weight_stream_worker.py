"""Run by torchrun from tests/unit/rollout/test_weight_stream.py: the streamed weights against the
full dict.

Usage:
  torchrun --nproc-per-node N tests/helpers/weight_stream_worker.py \
    OUT.json TP EP BUFFER_BYTES DTYPE [PP]

Given PP (pipeline stages), only the sync through rank 0 is measured (``rank_0_sync``).
"""

import dataclasses
import json
import sys

import torch

from hyrl.backends.megatron import weights
from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import TINY
from hyrl.models.weight_buckets import LiveBytes, tensor_bytes

# TINY with 8 layers: ~2 MB of fp32 weights, many times the tests' buckets
DEEP = dataclasses.replace(TINY, num_layers=8)


def main(
    out_path: str, tp: int, ep: int, buffer_bytes: int, dtype: str, pp: int | None = None
) -> None:
    layout = ParallelLayout(
        tensor_model_parallel_size=tp,
        expert_model_parallel_size=ep,
        pipeline_model_parallel_size=pp or 1,
    )
    init_distributed(layout, seed=7)
    rank = torch.distributed.get_rank()
    actor = MegatronActor(DEEP, layout, ActorSettings(optim=OptimizerSettings(micro_batch_size=2)))
    if dtype == "bfloat16":
        actor.model.to(torch.bfloat16)
    reference = dict(hf_mapping.split_fused_experts(actor.export_hf_state_dict()))
    if pp is not None:
        write(
            out_path,
            rank,
            {
                "to_rank_0": rank_0_sync(actor, buffer_bytes, rank, reference),
                "expert_bytes": expert_bytes(reference),
            },
        )
        return

    live = LiveBytes()
    buckets = list_of_buckets(actor.hf_weight_buckets(buffer_bytes, keep=True, live=live))
    streamed = [pair for bucket in buckets for pair in bucket]
    streamed_dict = dict(streamed)
    kept_on_rank0 = sum(1 for _ in actor.hf_weight_buckets(buffer_bytes, keep=rank == 0))
    owned = [
        k
        for k, _ in enumerate(
            actor.hf_weight_buckets(
                buffer_bytes, keep=lambda k: k % torch.distributed.get_world_size() == rank
            )
        )
    ]
    freed = previous_bucket_freed_while_building_next(actor, buffer_bytes)
    to_rank_0 = rank_0_sync(actor, buffer_bytes, rank, reference)
    one_at_a_time, gathers_alone = full_parameters_and_gathers(actor, gather_bytes=1)
    per_layer, gathers_per_layer = full_parameters_and_gathers(actor, gather_bytes=None)
    result = {
        "layers": DEEP.num_layers,
        "local_expert_weights": sum(
            1 for n, _ in actor.model.named_parameters() if ".experts." in n
        ),
        "gathers_one_at_a_time": gathers_alone,
        "gathers_per_layer": gathers_per_layer,
        "per_layer_equals_one_at_a_time": [n for n, _ in per_layer] == [n for n, _ in one_at_a_time]
        and all(torch.equal(a, b) for (_, a), (_, b) in zip(per_layer, one_at_a_time)),
        "gathered_tensors_own_their_storage": own_their_storage(actor, per_layer_live(actor)),
        # the bucketed stream at the test's bucket and at one 4x bigger (whole layers grouped)
        "streams": {str(b): stream_measures(actor, b) for b in (buffer_bytes, 4 * buffer_bytes)},
        "previous_bucket_freed_while_building_next": freed,
        "names_equal": sorted(streamed_dict) == sorted(reference),
        "no_duplicates": len(streamed) == len(streamed_dict),
        "bit_exact": all(torch.equal(streamed_dict[n], reference[n]) for n in reference),
        "dtypes": sorted({str(t.dtype) for _, t in streamed}),
        "bucket_bytes": [sum(tensor_bytes(t) for _, t in b) for b in buckets],
        "largest_tensor_bytes": max(tensor_bytes(t) for _, t in streamed),
        "largest_parameter_bytes": max(
            tensor_bytes(t) for _, t in weights.iter_full_parameters(actor.model, DEEP)
        ),
        "model_bytes": sum(tensor_bytes(t) for t in reference.values()),
        "peak_bytes": live.peak,
        "live_after": live.current,
        "buckets_kept_on_rank0_only": kept_on_rank0,
        "buckets_owned": len(owned),
        "num_buckets": len(buckets),
        "to_rank_0": to_rank_0,
        "expert_bytes": expert_bytes(reference),
    }
    write(out_path, rank, result)


def expert_bytes(reference: dict) -> int:
    return sum(tensor_bytes(t) for n, t in reference.items() if ".experts." in n)


def write(out_path: str, rank: int, result: dict) -> None:
    with open(f"{out_path}.rank{rank}", "w") as out:
        json.dump(result, out)
    destroy_distributed()


def counting_gathers(make):
    """``make()``'s result and the all-gathers (TP or EP) it took."""
    calls = []
    real = torch.distributed.all_gather_into_tensor

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    torch.distributed.all_gather_into_tensor = counting
    try:
        result = make()
    finally:
        torch.distributed.all_gather_into_tensor = real
    return result, len(calls)


def counting_received_bytes(make):
    """``make()``'s result and the bytes its gathers (all-gathers over TP or EP, gathers to one
    rank) wrote into this rank's buffers."""
    received = []
    real_all_gather, real_gather = (
        torch.distributed.all_gather_into_tensor,
        torch.distributed.gather,
    )

    def all_gather(output, *args, **kwargs):
        received.append(tensor_bytes(output))
        return real_all_gather(output, *args, **kwargs)

    def gather(tensor, gather_list=None, *args, **kwargs):
        received.append(sum(tensor_bytes(t) for t in gather_list or []))
        return real_gather(tensor, gather_list, *args, **kwargs)

    torch.distributed.all_gather_into_tensor, torch.distributed.gather = all_gather, gather
    try:
        result = make()
    finally:
        torch.distributed.all_gather_into_tensor = real_all_gather
        torch.distributed.gather = real_gather
    return result, sum(received)


def rank_0_sync(actor, buffer_bytes: int, rank: int, reference: dict) -> dict:
    """The stream as weight sync through rank 0 runs it (keep=rank == 0, each bucket dropped
    after a copy on rank 0): what each rank received in its gathers, its counted peak, and on
    rank 0 whether the buckets are the full state dict bit for bit."""
    live = LiveBytes()

    def run():
        return [
            (n, t.clone())
            for bucket in actor.hf_weight_buckets(buffer_bytes, keep=rank == 0, live=live)
            for n, t in bucket
        ]

    kept, received = counting_received_bytes(run)
    return {
        "received_bytes": received,
        "peak_bytes": live.peak,
        "live_after": live.current,
        "kept_tensors": len(kept),
        "bit_exact": sorted(n for n, _ in kept) == sorted(reference)
        and all(torch.equal(t, reference[n]) for n, t in kept),
    }


def full_parameters_and_gathers(actor, gather_bytes):
    """Every full parameter (copied) and the all-gathers it took (gather_bytes=1: one gather
    per weight, as before EP gathers were grouped per layer)."""
    return counting_gathers(
        lambda: [
            (n, t.clone())
            for n, t in weights.iter_full_parameters(actor.model, DEEP, gather_bytes=gather_bytes)
        ]
    )


def stream_measures(actor, buffer_bytes: int) -> dict:
    """One sync's stream (each bucket dropped on receipt, as a sync does): its counted peak,
    what is still counted after it, its buckets, its largest tensor and its all-gathers."""
    live = LiveBytes()

    def run():
        sizes = []
        for bucket in actor.hf_weight_buckets(buffer_bytes, live=live):
            sizes.append([tensor_bytes(t) for _, t in bucket])
            del bucket
        return sizes

    sizes, gathers = counting_gathers(run)
    return {
        "peak_bytes": live.peak,
        "live_after": live.current,
        "num_buckets": len(sizes),
        "largest_tensor_bytes": max(size for bucket in sizes for size in bucket),
        "gathers": gathers,
    }


def per_layer_live(actor) -> list:
    """Every item of iter_full_parameters with whole layers of experts per gather, all kept
    (so no buffer is freed and reused while the others are looked at)."""
    return list(weights.iter_full_parameters(actor.model, DEEP, gather_bytes=None))


def own_their_storage(actor, items) -> bool:
    """Whether every item that is not a view of a parameter has a storage of its own, exactly
    its size: a bucket that holds it then keeps alive only the bytes it counts (a view into
    a shared gather buffer would keep the whole buffer)."""
    param_storages = {p.untyped_storage().data_ptr() for p in actor.model.parameters()}
    gathered = [t for _, t in items if t.untyped_storage().data_ptr() not in param_storages]
    storages = {t.untyped_storage().data_ptr() for t in gathered}
    return len(storages) == len(gathered) and all(
        t.untyped_storage().nbytes() == tensor_bytes(t) for t in gathered
    )


def previous_bucket_freed_while_building_next(actor, buffer_bytes: int) -> bool:
    """Drop each bucket on receipt, then watch, from inside the name mapping (called for every
    parameter that goes into the next bucket), whether the dropped bucket's tensors are gone."""
    import weakref

    dropped: list = []
    alive_while_building = []
    original = hf_mapping.megatron_to_hf_checkpoint

    def watching(name, tensor, arch):
        alive_while_building.append(any(ref() is not None for ref in dropped))
        return original(name, tensor, arch)

    hf_mapping.megatron_to_hf_checkpoint = watching
    try:
        for bucket in actor.hf_weight_buckets(buffer_bytes):
            dropped = [weakref.ref(t) for _, t in bucket]
            del bucket
    finally:
        hf_mapping.megatron_to_hf_checkpoint = original
    return not any(alive_while_building)


def list_of_buckets(stream):
    """Keep every bucket (the test compares them all; a sync would drop each one)."""
    return [[(n, t.clone()) for n, t in bucket] for bucket in stream]


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5], *map(int, sys.argv[6:7]))
