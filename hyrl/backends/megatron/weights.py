"""Full (HF-mappable) weights <-> this rank's Megatron shards, across TP and EP."""

from __future__ import annotations

import re

import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

_LOCAL_EXPERT = re.compile(r"(\.mlp\.experts\.local_experts\.)(\d+)(\.)")


def is_expert(name: str) -> bool:
    return ".mlp.experts." in name


def _num_local_experts(arch: Qwen3MoeArch) -> int:
    from megatron.core import parallel_state

    return arch.num_experts // parallel_state.get_expert_model_parallel_world_size()


def global_name(local_name: str, arch: Qwen3MoeArch) -> str:
    """Local expert index -> global expert id (EP rank r holds experts r*E_local .. )."""
    from megatron.core import parallel_state

    offset = parallel_state.get_expert_model_parallel_rank() * _num_local_experts(arch)
    return _LOCAL_EXPERT.sub(lambda m: f"{m[1]}{int(m[2]) + offset}{m[3]}", local_name)


def _tp_split(param: torch.nn.Parameter, name: str) -> bool:
    # Experts run with expert-tensor-parallel size 1 (validated): they are never TP-split.
    return bool(getattr(param, "tensor_model_parallel", False)) and not is_expert(name)


@torch.no_grad()
def load_full_state_dict(model: torch.nn.Module, full: dict[str, torch.Tensor],
                         arch: Qwen3MoeArch, skip=lambda name: False) -> None:
    """Copy full tensors (Megatron names, global expert ids) into this rank's shards.

    Parameters for which `skip(local name)` is true keep their values.
    """
    from megatron.core import parallel_state

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    missing = []
    for name, param in model.named_parameters():
        if skip(name):
            continue
        key = hf_mapping.from_te_name(global_name(name, arch))
        if key not in full:
            missing.append(key)
            continue
        tensor = full[key]
        if _tp_split(param, name):
            tensor = torch.chunk(tensor, tp_size, dim=param.partition_dim)[tp_rank]
        if tensor.shape != param.shape:
            raise ValueError(f"{key}: shard shape {tuple(tensor.shape)} != parameter {tuple(param.shape)}")
        param.copy_(tensor.to(param.dtype))
    if missing:
        raise KeyError(f"weights missing for {len(missing)} parameters, e.g. {missing[:3]}")


@torch.no_grad()
def gather_full_state_dict(model: torch.nn.Module, arch: Qwen3MoeArch,
                           keep: bool = True) -> dict[str, torch.Tensor]:
    """The full model in host memory: TP shards concatenated, experts gathered over EP.

    Collective: every rank calls it. keep=False: this rank takes part in the gathers and keeps
    nothing (returns {}), so only the rank that sends weights to the engines holds a full copy;
    one parameter at a time is gathered on the device and moved to the host.
    """
    from megatron.core import parallel_state

    tp_group = parallel_state.get_tensor_model_parallel_group()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    ep_group = parallel_state.get_expert_model_parallel_group()
    ep_size = parallel_state.get_expert_model_parallel_world_size()
    local_experts = _num_local_experts(arch)
    full: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        tensor = param.detach()
        if _tp_split(param, name) and tp_size > 1:
            parts = [torch.empty_like(tensor) for _ in range(tp_size)]
            torch.distributed.all_gather(parts, tensor.contiguous(), group=tp_group)
            tensor = torch.cat(parts, dim=param.partition_dim)
        if is_expert(name) and ep_size > 1:
            parts = [torch.empty_like(tensor) for _ in range(ep_size)]
            torch.distributed.all_gather(parts, tensor.contiguous(), group=ep_group)
            local_id = int(_LOCAL_EXPERT.search(name)[2])
            for ep_rank, part in enumerate(parts):
                global_id = ep_rank * local_experts + local_id
                global_key = _LOCAL_EXPERT.sub(rf"\g<1>{global_id}\g<3>", name)
                if keep:
                    full[hf_mapping.from_te_name(global_key)] = part.to("cpu", copy=True)
            continue
        if keep:
            full[hf_mapping.from_te_name(name)] = tensor.to("cpu", copy=True)
    return full
