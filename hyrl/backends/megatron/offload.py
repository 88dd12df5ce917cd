"""--offload-train: a trained model's GPU memory handed to colocated engines while they generate.

Two parts, offloaded separately because the weights must stay for the weight sync:
- training state (`offload_training_state`): megatron-core's gradient buffers, freed by its own
  DistributedDataParallel.offload_grad_buffers (storage resized to 0, nothing copied: the next
  accumulation zeroes them; restore_grad_buffers reallocates and zeroes), and the optimizer's
  states (Adam moments, fp32 main params under bf16 or their distributed-optimizer shards),
  parked in host memory by `HostCopies`; frozen models (the actor's KL reference) likewise;
- weights (`offload_weights`): the model's parameters (under the distributed optimizer the DDP
  param buffers they are views of), parked the same way.

`HostCopies` is the mechanism megatron-core uses for its param buffers
(_ParamAndGradBuffer.offload_to_cpu / reload_from_cpu): copy a storage to host, resize it to 0,
later resize it back and copy in. Every tensor and view on the storage (param.main_grad, the
distributed optimizer's shard views, `.data` of a Parameter) stays the same object and sees the
bytes again. megatron's MegatronOptimizer.offload_to_cpu is not used: it moves only tensors that
are `is_cuda` (nothing on CPU, so it cannot be tested there), and it swaps `.data` of the params
in its groups, which for the fp32 optimizer are the model's own weights (they would be gone for
the weight sync) and for the fp32 distributed optimizer views of the param buffer (the view is
replaced by a copy). One code path runs on CPU (the host copy is a second host buffer) and GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

import torch


def _storage_view(storage: torch.UntypedStorage) -> torch.Tensor:
    """All bytes of a storage as one uint8 tensor (a view: nothing is copied)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class HostCopies:
    """Device storages parked in host memory between `offload` and `restore`.

    The host buffers (pinned under CUDA) are kept from one offload to the next, as megatron keeps
    its param_data_cpu, so a step pays the copies but no pinned allocation."""

    def __init__(self) -> None:
        self._host: dict[int, torch.Tensor] = {}  # storage id (its StorageImpl) -> host bytes
        self._parked: list[tuple[torch.UntypedStorage, torch.Tensor]] = []

    @property
    def parked(self) -> bool:
        return bool(self._parked)

    def offload(
        self, tensors: Iterable[torch.Tensor], device: torch.device, skip: Set[int] = frozenset()
    ) -> int:
        """Park every distinct storage of `tensors` on `device` (not those in `skip`, ids from
        storage_ids; not those parked already); the bytes it releases there."""
        storages: dict[int, torch.UntypedStorage] = {}  # by storage id (see storage_ids)
        for tensor in tensors:
            storage = tensor.untyped_storage()
            if (
                storage.device.type == device.type
                and storage.nbytes() > 0
                and storage._cdata not in skip
            ):
                storages.setdefault(storage._cdata, storage)
        if not storages:
            return 0
        on_cuda = device.type == "cuda"
        parked = []
        for key, storage in storages.items():
            host = self._host.get(key)
            if host is None or host.numel() != storage.nbytes():
                host = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=on_cuda)
                self._host[key] = host
            host.copy_(_storage_view(storage), non_blocking=on_cuda)
            parked.append((storage, host))
        if on_cuda:  # the copies must land before the device memory is given back
            torch.cuda.synchronize()
        for storage, _ in parked:
            storage.resize_(0)
        self._parked.extend(parked)
        # a storage gone since the last offload (an optimizer state replaced by a load) frees
        # its host copy
        live = {s._cdata for s, _ in self._parked}
        self._host = {key: host for key, host in self._host.items() if key in live}
        return sum(host.numel() for _, host in parked)

    def restore(self) -> None:
        """Reallocate every parked storage (same size, same tensors on it) and copy it back."""
        on_cuda = False
        for storage, host in self._parked:
            storage.resize_(host.numel())
            _storage_view(storage).copy_(host, non_blocking=storage.device.type == "cuda")
            on_cuda = on_cuda or storage.device.type == "cuda"
        if on_cuda:  # the next offload overwrites the host buffers
            torch.cuda.synchronize()
        self._parked = []


def storage_ids(tensors: Iterable[torch.Tensor]) -> set[int]:
    return {t.untyped_storage()._cdata for t in tensors}


def optimizer_tensors(optimizer) -> list[torch.Tensor]:
    """The tensors megatron's (chained) optimizer owns: the params of its torch optimizers'
    groups (fp32 main params, or the model's own params for an fp32 non-distributed optimizer:
    the caller skips those) and every tensor in their states (Adam's exp_avg, exp_avg_sq, step)."""
    tensors: list[torch.Tensor] = []
    for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
        torch_optimizer = getattr(sub, "optimizer", None)
        if torch_optimizer is None:  # a stub part of the distributed optimizer: nothing on it
            continue
        for group in torch_optimizer.param_groups:
            tensors.extend(p for p in group["params"] if isinstance(p, torch.Tensor))
        for state in torch_optimizer.state.values():
            tensors.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    return tensors


def grad_buffer_bytes(ddp) -> int:
    """Bytes held by the gradient buffers of megatron's DistributedDataParallel."""
    return sum(
        buffer.grad_data.untyped_storage().nbytes()
        for buffer in ddp.buffers + ddp.expert_parallel_buffers
        if buffer.grad_data is not None
    )


def _parameters(chunks: list[torch.nn.Module]) -> list[torch.nn.Parameter]:
    """Every parameter of a model's chunks (one, or one per virtual pipeline stage)."""
    return [p for chunk in chunks for p in chunk.parameters()]


class TrainedModelOffload:
    """A MegatronTrainedModel's offload on this rank: every rank runs its own."""

    def __init__(self, trained, frozen_models: list[torch.nn.Module]):
        self.trained, self.frozen_models = trained, frozen_models
        self.optimizer_states, self.weights, self.frozen = HostCopies(), HostCopies(), HostCopies()
        self.grads_offloaded = False

    def _on_cuda(self) -> bool:
        return self.trained.device.type == "cuda"

    def offload_training_state(self) -> int:
        """Gradient buffers freed, optimizer states and frozen models parked; storage bytes."""
        trained, freed = self.trained, 0
        if not self.grads_offloaded:
            # the main params' .grad (copies when grads are not reduced in fp32) go now; the
            # next step's zero_grad would drop them anyway
            trained.optimizer.zero_grad(set_to_none=True)
            for ddp in trained.ddp_chunks:
                freed += grad_buffer_bytes(ddp)
                ddp.offload_grad_buffers(synchronize=self._on_cuda(), empty_cache=False)
            self.grads_offloaded = True
        weights = storage_ids(_parameters(trained.chunks))
        freed += self.optimizer_states.offload(
            optimizer_tensors(trained.optimizer), trained.device, skip=weights
        )
        for model in self.frozen_models:
            freed += self.frozen.offload(model.parameters(), trained.device)
        return freed

    def offload_weights(self) -> int:
        """The model's parameters parked (after the weight sync); storage bytes."""
        return self.weights.offload(_parameters(self.trained.chunks), self.trained.device)

    def restore(self) -> None:
        """Everything offloaded back on the device, in the state it left."""
        self.weights.restore()
        self.frozen.restore()
        self.optimizer_states.restore()
        if self.grads_offloaded:
            for ddp in self.trained.ddp_chunks:
                ddp.restore_grad_buffers(synchronize=self._on_cuda())
            self.grads_offloaded = False

    @property
    def offloaded(self) -> bool:
        return (
            self.grads_offloaded
            or self.weights.parked
            or self.frozen.parked
            or self.optimizer_states.parked
        )
