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


@torch.no_grad()
def sharded_squared_norm(
    model: torch.nn.Module, tensors: dict[str, torch.Tensor], include_experts: bool = True
) -> float:
    """|x|^2 of a model-shaped set of tensors (by parameter name), summed over TP and EP shards
    and pipeline stages.

    Not reduced over data parallelism: per-rank values stay per rank.
    """
    from megatron.core import parallel_state

    first_tp_rank = parallel_state.get_tensor_model_parallel_rank() == 0
    dense_sq = torch.zeros(1, dtype=torch.float64, device=next(model.parameters()).device)
    expert_sq = torch.zeros_like(dense_sq)
    for name, param in model.named_parameters():
        tensor = tensors.get(name)
        if tensor is None:
            continue
        sq = tensor.double().pow(2).sum()
        if is_expert(name):
            if include_experts:
                expert_sq += sq
        elif getattr(param, "tensor_model_parallel", False) or first_tp_rank:
            dense_sq += sq
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
