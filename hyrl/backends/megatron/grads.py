"""Per-rank squared gradient norms for the gradient noise scale (hyrl/metrics/noise_scale.py).

Reduction, clipping and the optimizer step are megatron-core's (ddp_optimizer.wrap_for_training);
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

    def __init__(self, ddp_chunks: list, chunks: list[torch.nn.Module], include_experts: bool):
        """ddp_chunks: megatron DDP around each of `chunks` (one model, or one per virtual
        pipeline stage)."""
        from megatron.core import parallel_state

        tp_size = parallel_state.get_tensor_model_parallel_world_size()
        experts_tp = parallel_state.get_expert_tensor_parallel_world_size()
        first_tp_rank = parallel_state.get_tensor_model_parallel_rank() == 0
        names = {param: name for model in chunks for name, param in model.named_parameters()}
        self.include_experts = include_experts
        # (buffer, dense positions, expert positions, TP-partial positions): None = all, [] = none
        self._parts = []
        buffers = [b for ddp in ddp_chunks for b in ddp.buffers + ddp.expert_parallel_buffers]
        for buffer in buffers:
            dense: list[tuple[int, int]] = []
            expert: list[tuple[int, int]] = []
            partial: list[tuple[int, int]] = []
            for param, (start, end, _bucket) in buffer.param_index_map.items():
                if is_expert(names[param]):
                    if (
                        include_experts and tp_size > experts_tp
                    ):  # ETP = 1: each TP rank's tokens' part
                        partial.append((start, end))
                    elif include_experts:
                        expert.append((start, end))
                elif tp_size > 1 and tp_partial(chunks[0].config, names[param], param):
                    partial.append((start, end))
                elif getattr(param, "tensor_model_parallel", False) or first_tp_rank:
                    dense.append((start, end))
            every = len(dense) + len(expert) == len(buffer.param_index_map)
            device = buffer.grad_data.device
            self._parts.append(
                (
                    buffer,
                    None if every and not expert else _positions(dense, device),
                    None if every and not dense else _positions(expert, device),
                    _positions(partial, device),
                )
            )
        self._first_tp_rank = first_tp_rank

    def snapshot(self, into: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """A copy of the buffers, written into `into` (an earlier snapshot) when given."""
        if into is None:
            return [part[0].grad_data.clone() for part in self._parts]
        for copy, part in zip(into, self._parts, strict=True):
            copy.copy_(part[0].grad_data)
        return into

    @torch.no_grad()
    def squared_norm(self, since: list[torch.Tensor] | None = None) -> float:
        """|g|^2 of this rank's gradient (or of g - snapshot, which is computed in the snapshot's
        own storage: `since` holds the difference afterwards), summed over TP and EP shards and
        pipeline stages, not over data parallelism (collective over those groups). Replicated
        tensors whose gradient each TP rank holds only a part of (tp_partial) are summed over
        TP first, as finalize_model_grads will, and counted once."""
        device = self._parts[0][0].grad_data.device if self._parts else torch.device("cpu")
        dense_sq = torch.zeros(1, dtype=torch.float64, device=device)
        expert_sq = torch.zeros_like(dense_sq)
        partials = []
        for index, (buffer, dense, expert, partial) in enumerate(self._parts):
            flat = (
                buffer.grad_data
                if since is None
                else torch.sub(buffer.grad_data, since[index], out=since[index])
            )
            for positions, total in ((dense, dense_sq), (expert, expert_sq)):
                if positions is None:
                    total += _sq(flat)
                elif positions.numel():
                    total += _sq(flat[positions])
            if partial.numel():
                partials.append(flat[partial].double())
        if partials:  # only under TP > 1; every TP rank holds the same tensors
            from megatron.core import parallel_state

            summed = torch.cat(partials)
            torch.distributed.all_reduce(
                summed, group=parallel_state.get_tensor_model_parallel_group()
            )
            if self._first_tp_rank:
                dense_sq += torch.dot(summed, summed)
        return _reduce_over_shards(dense_sq, expert_sq, self.include_experts)


def tp_partial(config, name: str, param: torch.nn.Parameter) -> bool:
    """Whether each TP rank holds only its part of this replicated tensor's gradient until
    megatron-core 0.16.1's finalize_model_grads sums it over TP
    (_allreduce_non_tensor_model_parallel_grads' sum condition): a sequence-parallel norm or
    router weight (it saw this rank's slice of the tokens only), or a q/k layernorm (this
    rank's heads only)."""
    return bool(
        (config.sequence_parallel and getattr(param, "sequence_parallel", False))
        or (config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name))
    )


def _positions(ranges: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    """The flat-buffer indices of `ranges` on the buffer's device (empty when there are none)."""
    if not ranges:
        return torch.empty(0, dtype=torch.long, device=device)
    return torch.cat([torch.arange(start, end, device=device) for start, end in ranges])


def _sq(flat: torch.Tensor) -> torch.Tensor:
    """|flat|^2 as a float64 scalar: one dot product in float32 (measured on CPU: 3e-7 relative
    to float64 over 1e5 random elements, 5e-5 over 1e7) with no float64 copy of the buffer,
    which at DP > 1 would double a rank's gradient memory for the moment."""
    if flat.dtype != torch.float32:
        flat = flat.float()
    return torch.dot(flat, flat).double()


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
