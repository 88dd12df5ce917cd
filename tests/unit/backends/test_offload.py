"""--offload-train: a trainable's gradient buffers, optimizer states, frozen reference and weights
leave the device and come back bit-identical; training goes on exactly as without the round trip.
On CPU the freed bytes are the storage bytes released (tests/gpu/test_offload_cuda.py measures
torch.cuda.memory_allocated)."""

import pytest
import torch
from training_batches import training_batch

from hyrl.models.qwen3_moe.config import TINY


@pytest.fixture(scope="module")
def distributed():
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=3)
    yield
    destroy_distributed()


def _actor(bf16: bool):
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout

    optim = OptimizerSettings(micro_batch_size=4, bf16=bf16, use_distributed_optimizer=bf16)
    return MegatronActor(TINY, ParallelLayout(), ActorSettings(optim=optim, keep_reference=True))


def _batch(actor, seed: int):
    return training_batch(actor, seed)


def _adam_states(actor) -> list[torch.Tensor]:
    return [
        value
        for sub in actor.optimizer.chained_optimizers
        for state in sub.optimizer.state.values()
        for value in state.values()
    ]


def _main_params(actor) -> list[torch.Tensor]:
    return [
        p
        for sub in actor.optimizer.chained_optimizers
        for group in sub.optimizer.param_groups
        for p in group["params"]
    ]


def _snapshot(actor) -> dict[str, list[torch.Tensor]]:
    return {
        "weights": [p.detach().clone() for p in actor.model.parameters()],
        "reference": [p.detach().clone() for p in actor.ref_model.parameters()],
        "adam": [t.clone() for t in _adam_states(actor)],
        "main_params": [p.detach().clone() for p in _main_params(actor)],
    }


def _bitwise_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b))


def _grad_buffers(actor) -> list[torch.Tensor]:
    return [b.grad_data for b in actor.ddp.buffers + actor.ddp.expert_parallel_buffers]


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16_distributed_optimizer"])
def test_offload_frees_grads_optimizer_reference_then_weights_and_restores_them_bitwise(
    distributed, bf16
):
    torch.manual_seed(0)
    actor = _actor(bf16)
    batch = _batch(actor, seed=1)
    actor.train_step(batch, batch.num_response_tokens, lr=1e-3)  # Adam has states from here
    before = _snapshot(actor)
    params = list(actor.model.parameters())
    numel = sum(p.numel() for p in params)
    grad_bytes = sum(g.numel() * g.element_size() for g in _grad_buffers(actor))
    assert grad_bytes >= numel * 4  # fp32 grads (--accumulate-allreduce-grads-in-fp32)
    # Adam: exp_avg and exp_avg_sq in fp32 per element, one fp32 `step` per parameter; under
    # bf16 the distributed optimizer's fp32 main-param shards too (all of it at DP = 1)
    optimizer_bytes = 8 * numel + 4 * len(params) + (4 * numel if bf16 else 0)
    reference_bytes = sum(p.numel() * p.element_size() for p in actor.ref_model.parameters())
    assert reference_bytes >= numel * (2 if bf16 else 4)  # bf16 or fp32 (the router stays fp32)

    freed = actor.offload_training_state()
    assert freed == grad_bytes + optimizer_bytes + reference_bytes
    assert all(g.untyped_storage().nbytes() == 0 for g in _grad_buffers(actor))
    assert all(t.untyped_storage().nbytes() == 0 for t in _adam_states(actor))
    assert all(p.untyped_storage().nbytes() == 0 for p in actor.ref_model.parameters())
    assert _bitwise_equal([p.detach() for p in params], before["weights"])  # kept for the sync

    buffers = actor.ddp.buffers + actor.ddp.expert_parallel_buffers
    if bf16:  # views of DDP's param buffers (padded): each buffer goes as one storage
        expected_weight_bytes = sum(b.param_data.untyped_storage().nbytes() for b in buffers)
        assert expected_weight_bytes >= numel * 2
    else:
        assert all(b.param_data is None for b in buffers)  # megatron's DDP: separate tensors
        expected_weight_bytes = numel * 4
    assert actor.offload_weights() == expected_weight_bytes
    assert all(p.untyped_storage().nbytes() == 0 for p in params)
    assert actor.offload_weights() == 0 and actor.offload_training_state() == 0  # nothing left

    actor.restore_offloaded()
    after = _snapshot(actor)
    for part in before:
        assert _bitwise_equal(after[part], before[part]), part
    assert all(torch.count_nonzero(g) == 0 for g in _grad_buffers(actor))  # zeroed, as megatron's
    assert all(p.main_grad.untyped_storage().nbytes() > 0 for p in params)  # views valid again


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16_distributed_optimizer"])
def test_three_steps_with_offload_round_trips_train_exactly_like_three_without(distributed, bf16):
    torch.manual_seed(0)
    plain, offloaded = _actor(bf16), _actor(bf16)
    offloaded.model.load_state_dict(plain.model.state_dict())  # the same start
    offloaded.ref_model.load_state_dict(plain.ref_model.state_dict())
    offloaded.reload_weights()
    metrics = {id(plain): [], id(offloaded): []}
    for step in range(3):
        for actor in (plain, offloaded):
            batch = _batch(actor, seed=10 + step)
            metrics[id(actor)].append(actor.train_step(batch, batch.num_response_tokens, lr=1e-3))
        offloaded.offload_training_state()  # what --offload-train does between two steps
        offloaded.offload_weights()
        offloaded.restore_offloaded()
    for name in ("actor/loss", "actor/grad_norm"):
        assert [m[name] for m in metrics[id(offloaded)]] == [m[name] for m in metrics[id(plain)]]
    got, expected = _snapshot(offloaded), _snapshot(plain)
    for part in expected:
        assert _bitwise_equal(got[part], expected[part]), part


class _FakeEngine:
    def __init__(self, events):
        self.events = events

    def release_memory(self):
        self.events.append("engines release")

    def resume_memory(self):
        self.events.append("engines resume")


class _OneRank:
    """The backend calls of the colocated sequence, on one rank: nothing to wait for."""

    def free_cached_memory(self):
        pass

    def wait_for_rank_0(self):
        pass


def test_trainer_parks_training_state_before_the_engines_resume_and_weights_after_the_sync(
    distributed,
):
    """The colocated sequence of the loop (hyrl.train.sync_and_offload.SyncAndOffload) on one
    rank, the engine and the weight transfer faked: at the sync the grads and Adam states are
    gone and the weights are there; after it nothing is left on the device until the engines have
    released their memory again."""
    from types import SimpleNamespace

    from hyrl.metrics.timers import StageTimers
    from hyrl.rollout.manager import RolloutManager
    from hyrl.train.sync_and_offload import SyncAndOffload

    torch.manual_seed(0)
    actor = _actor(bf16=False)
    batch = _batch(actor, seed=1)
    actor.train_step(batch, batch.num_response_tokens, lr=1e-3)
    events = []
    side = RolloutManager.__new__(RolloutManager)  # rank 0's engines, faked
    side._rollout = SimpleNamespace(colocate=True)
    side.engine, side.engines_released = _FakeEngine(events), True

    class _Transfer:  # what a real weight-sync mode does first on rank 0, then reads the weights
        def sync(self, synced_actor, engine, resume_engines):
            resume_engines()
            events.append(
                {
                    "grads": sum(g.untyped_storage().nbytes() for g in _grad_buffers(actor)),
                    "adam": sum(t.untyped_storage().nbytes() for t in _adam_states(actor)),
                    "weights": sum(p.untyped_storage().nbytes() for p in actor.model.parameters()),
                }
            )
            return {}

    sync_and_offload = SyncAndOffload(_OneRank(), side, _Transfer(), offloading=True)
    numel = sum(p.numel() for p in actor.model.parameters())
    resident = (
        sum(g.numel() * g.element_size() for g in _grad_buffers(actor))
        + sum(t.untyped_storage().nbytes() for t in _adam_states(actor))
        + sum(p.untyped_storage().nbytes() for p in actor.ref_model.parameters())
        + numel * 4
    )
    before = _snapshot(actor)

    timers = StageTimers()
    sync_and_offload.sync(actor, None, timers)
    assert events == ["engines resume", {"grads": 0, "adam": 0, "weights": numel * 4}]
    assert all(p.untyped_storage().nbytes() == 0 for p in actor.model.parameters())
    assert sync_and_offload.metrics["perf/offload_freed_bytes"] == resident
    assert sync_and_offload.trainer_offloaded and set(timers.pop()) == {
        "perf/offload_s",
        "perf/weight_sync_s",
    }

    sync_and_offload.reclaim([actor])  # what a checkpoint does: engines first, then the trainer
    assert events[-1] == "engines release" and not sync_and_offload.trainer_offloaded
    after = _snapshot(actor)
    for part in before:
        assert _bitwise_equal(after[part], before[part]), part
    sync_and_offload.restore([actor], StageTimers())  # nothing offloaded: nothing to do
    assert _bitwise_equal(_snapshot(actor)["adam"], before["adam"])
