"""Gradient reduction, global norm and clipping for a megatron-core model without DDP wrappers.

Rules follow megatron's finalize_model_grads and clip_grads:
- weights that see only a sequence shard (norms and router under SP) and q/k norms (each TP
  rank normalises its own heads with the shared weight) have their grads summed over TP;
- dense grads are summed over the data-parallel group, expert grads over the expert-DP group
  (the loss is already divided by the global token count, so a sum is the global mean);
- the norm counts TP-sharded tensors on every TP rank and replicated ones once, experts once
  per expert-parallel rank.
"""

from __future__ import annotations

import torch

from hyrl.backends.megatron.weights import is_expert


def _needs_tp_sum(name: str, param: torch.nn.Parameter) -> bool:
    return bool(getattr(param, "sequence_parallel", False)) or name.endswith(
        ("q_layernorm.weight", "k_layernorm.weight"))


def _all_reduce_sum(tensors: list[torch.Tensor], group) -> None:
    if not tensors or torch.distributed.get_world_size(group) == 1:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    torch.distributed.all_reduce(flat, group=group)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


@torch.no_grad()
def finalize_grads(model: torch.nn.Module) -> None:
    from megatron.core import parallel_state

    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    for _, p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    _all_reduce_sum([p.grad for n, p in params if _needs_tp_sum(n, p)],
                    parallel_state.get_tensor_model_parallel_group())
    _all_reduce_sum([p.grad for n, p in params if not is_expert(n)],
                    parallel_state.get_data_parallel_group())
    _all_reduce_sum([p.grad for n, p in params if is_expert(n)],
                    parallel_state.get_expert_data_parallel_group())


@torch.no_grad()
def sharded_squared_norm(model: torch.nn.Module, tensors: dict[str, torch.Tensor] | None = None,
                         include_experts: bool = True) -> float:
    """|x|^2 of a model-shaped set of tensors (default: the grads), summed over TP and EP shards.

    TP-sharded tensors count on every TP rank, replicated ones once; experts once per EP rank.
    Not reduced over data parallelism: per-rank values stay per rank.
    """
    from megatron.core import parallel_state

    first_tp_rank = parallel_state.get_tensor_model_parallel_rank() == 0
    dense_sq = torch.zeros(1, dtype=torch.float64, device=next(model.parameters()).device)
    expert_sq = torch.zeros_like(dense_sq)
    for name, param in model.named_parameters():
        tensor = param.grad if tensors is None else tensors.get(name)
        if tensor is None:
            continue
        sq = tensor.double().pow(2).sum()
        if is_expert(name):
            if include_experts:
                expert_sq += sq
        elif getattr(param, "tensor_model_parallel", False) or first_tp_rank:
            dense_sq += sq
    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(dense_sq, group=parallel_state.get_tensor_model_parallel_group())
    if include_experts and parallel_state.get_expert_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(expert_sq, group=parallel_state.get_expert_model_parallel_group())
    return float(dense_sq + expert_sq)


def global_grad_norm(model: torch.nn.Module) -> float:
    """L2 norm of the full model's gradient (call after finalize_grads)."""
    return sharded_squared_norm(model) ** 0.5


@torch.no_grad()
def clip_grads(model: torch.nn.Module, max_norm: float, norm: float) -> None:
    if max_norm <= 0 or norm <= max_norm or not torch.isfinite(torch.tensor(norm)):
        return
    scale = max_norm / (norm + 1e-6)
    for param in model.parameters():
        if param.grad is not None:
            param.grad.mul_(scale)
