"""The weight stream on CUDA: buckets stay on the GPU, the GPU memory a sync takes is about a
bucket, and SGLang's serializer turns a bucket into CUDA IPC handles another process can open.
Skipped without CUDA (the SGLang parts also without sglang).

Run on a GPU machine with `python -m pytest tests/gpu -q`.
"""

import dataclasses

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.fixture(scope="module")
def cuda_actor():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
    from hyrl.models.qwen3_moe.config import TINY

    arch = dataclasses.replace(
        TINY, num_layers=8, hidden_size=256, moe_ffn_hidden_size=256, kv_channels=64
    )  # ~9 MB of fp32, 36 buckets of 256 KiB
    init_distributed(ParallelLayout(), seed=1)
    actor = MegatronActor(
        arch,
        ParallelLayout(),
        ActorSettings(optim=OptimizerSettings(micro_batch_size=1), transformer_impl="local"),
    )
    yield actor
    destroy_distributed()


def test_buckets_stay_on_the_gpu_and_take_about_a_bucket_of_its_memory(cuda_actor):
    from hyrl.models.qwen3_moe import hf_mapping
    from hyrl.models.weight_buckets import LiveBytes

    buffer_bytes = 256 * 1024
    reference = dict(hf_mapping.split_fused_experts(cuda_actor.export_hf_state_dict()))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    live, seen = LiveBytes(), {}
    for bucket in cuda_actor.hf_weight_buckets(buffer_bytes, live=live):
        assert all(t.is_cuda for _, t in bucket)
        seen.update((n, t.cpu()) for n, t in bucket)  # host copies: not the GPU's memory
        del bucket
    grown = torch.cuda.max_memory_allocated() - before
    assert sorted(seen) == sorted(reference)
    assert all(torch.equal(seen[n], reference[n]) for n in reference)
    # one rank, no gathers: the buckets are views of the parameters, except q/k/v copies
    assert grown <= 2 * buffer_bytes
    assert live.peak <= 2 * buffer_bytes


def test_a_bucket_travels_as_cuda_ipc_handles(cuda_actor):
    """What tensor mode sends: SGLang's MultiprocessingSerializer of a GPU bucket, opened by
    another process (as a SGLang TP worker does) and equal to what was sent."""
    pytest.importorskip("sglang", reason="sglang is not installed")
    import multiprocessing

    from hyrl.rollout.sglang.receive.payload import sglang_serializer

    bucket = next(iter(cuda_actor.hf_weight_buckets(256 * 1024)))
    payload = sglang_serializer(flattened=False)(bucket)
    assert len(payload) < 64 * 1024  # handles, not the bytes of the tensors
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        sums = pool.apply(_open_and_sum, (payload,))
    assert sums == pytest.approx([float(t.double().sum()) for _, t in bucket])


def test_a_flattened_bucket_travels_as_one_cuda_ipc_handle(cuda_actor):
    """The default: load_format="flattened_bucket", rebuilt by SGLang's FlattenedTensorBucket
    in another process."""
    pytest.importorskip("sglang", reason="sglang is not installed")
    import multiprocessing

    from hyrl.rollout.sglang.receive.payload import sglang_serializer

    bucket = next(iter(cuda_actor.hf_weight_buckets(256 * 1024)))
    serializer = sglang_serializer()
    payload = serializer(bucket)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        sums = pool.apply(_open_flattened_and_sum, (payload,))
    serializer.release()
    assert sums == pytest.approx([float(t.double().sum()) for _, t in bucket])


def _open_flattened_and_sum(payload: str) -> list[float]:
    from sglang.srt.utils import MultiprocessingSerializer
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    data = MultiprocessingSerializer.deserialize(payload)
    bucket = FlattenedTensorBucket(
        flattened_tensor=data["flattened_tensor"], metadata=data["metadata"]
    )
    return [float(t.double().sum()) for _, t in bucket.reconstruct_tensors()]


def _open_and_sum(payload: str) -> list[float]:
    from sglang.srt.utils import MultiprocessingSerializer

    return [float(t.double().sum()) for _, t in MultiprocessingSerializer.deserialize(payload)]
