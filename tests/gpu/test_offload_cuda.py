"""--offload-train on CUDA: torch.cuda.memory_allocated drops by at least the gradient buffers,
the optimizer states and the frozen reference when the training state is parked, by at least the
weights when they are, and the bytes come back on restore with every value intact. Skipped
without CUDA. Run on a GPU machine with `python -m pytest tests/gpu -q`.
"""

import dataclasses

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.fixture(scope="module")
def distributed():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=1)
    yield
    destroy_distributed()


def _actor(bf16: bool):
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout
    from hyrl.models.qwen3_moe.config import TINY

    arch = dataclasses.replace(
        TINY, num_layers=8, hidden_size=256, moe_ffn_hidden_size=256, kv_channels=64
    )  # a few MB per part: well above allocator rounding
    optim = OptimizerSettings(micro_batch_size=4, bf16=bf16, use_distributed_optimizer=bf16)
    return MegatronActor(
        arch,
        ParallelLayout(),
        ActorSettings(optim=optim, keep_reference=True, transformer_impl="local"),
    )


def _train_step(actor, seed: int) -> dict:
    from training_batches import training_batch

    batch = training_batch(actor, seed)
    return actor.train_step(batch, batch.num_response_tokens, lr=1e-3)


def _storages_bytes(tensors) -> int:
    return sum({t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}.values())


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16_distributed_optimizer"])
def test_offload_releases_grads_optimizer_reference_and_weights_and_restore_retakes_them(
    distributed, bf16
):
    from hyrl.backends.megatron.offload import grad_buffer_bytes, optimizer_tensors

    torch.manual_seed(0)
    actor = _actor(bf16)
    _train_step(actor, seed=1)  # Adam's states exist from the first step
    weights = list(actor.model.parameters())
    weight_ids = {p.untyped_storage()._cdata for p in weights}
    grad_bytes = grad_buffer_bytes(actor.ddp)
    optimizer_bytes = _storages_bytes(
        t
        for t in optimizer_tensors(actor.optimizer)
        if t.is_cuda and t.untyped_storage()._cdata not in weight_ids
    )
    reference_bytes = _storages_bytes(actor.ref_model.parameters())
    weight_bytes = _storages_bytes(weights)
    assert min(grad_bytes, optimizer_bytes, reference_bytes, weight_bytes) > 1 << 20
    values = [p.detach().clone() for p in weights]
    states = [t.clone() for t in optimizer_tensors(actor.optimizer)]
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()

    freed = actor.offload_training_state()
    after_training_state = torch.cuda.memory_allocated()
    assert freed == before - after_training_state  # what perf/offload_freed_bytes reports
    assert freed >= grad_bytes + optimizer_bytes + reference_bytes
    freed_weights = actor.offload_weights()
    assert freed_weights == after_training_state - torch.cuda.memory_allocated()
    assert freed_weights >= weight_bytes
    print(
        f"offload freed {freed} B of training state and {freed_weights} B of weights "
        f"({'bf16, distributed optimizer' if bf16 else 'fp32'})"
    )

    actor.restore_offloaded()
    torch.cuda.synchronize()
    restored = torch.cuda.memory_allocated()
    assert restored - (after_training_state - freed_weights) >= (
        grad_bytes + optimizer_bytes + reference_bytes + weight_bytes
    )
    assert restored <= before  # nothing left behind twice
    assert all(torch.equal(p, v) for p, v in zip(weights, values))
    assert all(torch.equal(t, s) for t, s in zip(optimizer_tensors(actor.optimizer), states))
    assert all(g.grad_data.count_nonzero() == 0 for g in actor.ddp.buffers)
    metrics = _train_step(actor, seed=2)  # training goes on after the round trip
    assert torch.isfinite(torch.tensor(metrics["actor/loss"]))
