"""Per-rank squared gradient norms for the gradient noise scale (hyrl/metrics/noise_scale.py).

Reduction, clipping and the optimizer step are megatron-core's (trainable.wrap_for_training);
what megatron does not give is the norm of a gradient *before* the data-parallel reduction (one
rank's, or one micro-batch's), the "small batch" of McCandlish et al. (2018). Counting follows
megatron's own grad norm: TP-sharded tensors count on every TP rank, replicated ones once,
experts once per expert-parallel rank; nothing is reduced over data parallelism.
"""

from __future__ import annotations

import torch

from hyrl.backends.megatron.weights import is_expert


class GradBufferNorms:
    """Squared norms of this rank's gradient, or of what was added to it since a snapshot, read
    from megatron DDP's flat gradient buffers (every `main_grad` is a view into one of them): a
    few whole-buffer ops instead of several per parameter (per micro-batch, at DP = 1, that was
    most of the noise scale's cost: tools/profile_step.py).

    Counting follows megatron's grad norm: experts (when included) and TP-sharded tensors on every
    rank, replicated dense tensors on TP rank 0 only; buffer padding is never written and stays
    zero. The layout of the buffers is fixed at DDP's construction; their storage is read at
    every call (offloading may swap it)."""

    def __init__(self, ddp, model: torch.nn.Module, include_experts: bool):
        from megatron.core import parallel_state

        first_tp_rank = parallel_state.get_tensor_model_parallel_rank() == 0
        names = {param: name for name, param in model.named_parameters()}
        self.include_experts = include_experts
        self._parts = []  # (buffer, dense positions, expert positions): None = all, [] = none
        for buffer in ddp.buffers + ddp.expert_parallel_buffers:
            dense: list[tuple[int, int]] = []
            expert: list[tuple[int, int]] = []
            for param, (start, end, _bucket) in buffer.param_index_map.items():
                if is_expert(names[param]):
                    if include_experts:
                        expert.append((start, end))
                elif getattr(param, "tensor_model_parallel", False) or first_tp_rank:
                    dense.append((start, end))
            every = len(dense) + len(expert) == len(buffer.param_index_map)
            device = buffer.grad_data.device
            self._parts.append(
                (
                    buffer,
                    None if every and not expert else _positions(dense, device),
                    None if every and not dense else _positions(expert, device),
                )
            )

    def snapshot(self) -> list[torch.Tensor]:
        return [buffer.grad_data.clone() for buffer, _, _ in self._parts]

    @torch.no_grad()
    def squared_norm(self, since: list[torch.Tensor] | None = None) -> float:
        """|g|^2 of this rank's gradient (or of g - snapshot), summed over TP and EP shards and
        pipeline stages, not over data parallelism (collective over those groups)."""
        device = self._parts[0][0].grad_data.device if self._parts else torch.device("cpu")
        dense_sq = torch.zeros(1, dtype=torch.float64, device=device)
        expert_sq = torch.zeros_like(dense_sq)
        for index, (buffer, dense, expert) in enumerate(self._parts):
            flat = buffer.grad_data if since is None else buffer.grad_data - since[index]
            for positions, total in ((dense, dense_sq), (expert, expert_sq)):
                if positions is None:
                    total += _sq(flat)
                elif positions.numel():
                    total += _sq(flat[positions])
        return _reduce_over_shards(dense_sq, expert_sq, self.include_experts)


def _positions(ranges: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    """The flat-buffer indices of `ranges` on the buffer's device (empty when there are none)."""
    if not ranges:
        return torch.empty(0, dtype=torch.long, device=device)
    return torch.cat([torch.arange(start, end, device=device) for start, end in ranges])


def _sq(flat: torch.Tensor) -> torch.Tensor:
    flat = flat.double()
    return torch.dot(flat, flat)


def _reduce_over_shards(
    dense_sq: torch.Tensor, expert_sq: torch.Tensor, include_experts: bool
) -> float:
    """Dense sums over TP, expert sums over EP, their total over the pipeline stages."""
    from megatron.core import parallel_state

    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(
            dense_sq, group=parallel_state.get_tensor_model_parallel_group()
        )
    if include_experts and parallel_state.get_expert_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(
            expert_sq, group=parallel_state.get_expert_model_parallel_group()
        )
    total = dense_sq + expert_sq
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:  # each stage: its layers
        torch.distributed.all_reduce(
            total, group=parallel_state.get_pipeline_model_parallel_group()
        )
    return float(total)
