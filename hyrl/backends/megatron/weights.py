"""Full (HF-mappable) weights <-> this rank's Megatron shards, across TP and EP; the weight
stream that weight sync sends (one parameter gathered at a time, under EP one layer's experts
per gather, cut into buckets; when only global rank 0 keeps the buckets, the experts are
gathered to the ranks that feed it, not to every rank: ``experts_to_holders``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.models.weight_buckets import LiveBytes, NamedTensors, iter_buckets, tensor_bytes

_LOCAL_EXPERT = re.compile(r"(\.mlp\.experts\.local_experts\.)(\d+)(\.)")


def is_expert(name: str) -> bool:
    return ".mlp.experts." in name


def _num_local_experts(arch: Qwen3MoeArch) -> int:
    from megatron.core import parallel_state

    return arch.num_experts // parallel_state.get_expert_model_parallel_world_size()


_LOCAL_LAYER = re.compile(r"^(decoder\.layers\.)(\d+)(\.)")


def model_chunks(model) -> list[torch.nn.Module]:
    """A model given as one module or as its chunks (one per virtual pipeline stage)."""
    return list(model) if isinstance(model, (list, tuple)) else [model]


def layer_offset(chunk: torch.nn.Module) -> int:
    """The model's index of a chunk's first layer: megatron's own offset for this pipeline
    rank and the chunk's virtual stage (chunk v of rank p: v*L/V + p*L/(PP*V); without virtual
    stages p*L/PP)."""
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    config = getattr(chunk, "config", None)
    if config is None:  # a module without megatron's config: not pipelined
        return 0
    return get_transformer_layer_offset(config, vp_stage=getattr(chunk, "vp_stage", None))


def global_layer_name(local_name: str, offset: int) -> str:
    """A chunk's local layer index -> the model's (offset: layer_offset of the chunk)."""
    if offset == 0:
        return local_name
    return _LOCAL_LAYER.sub(lambda m: f"{m[1]}{int(m[2]) + offset}{m[3]}", local_name)


def global_name(local_name: str, arch: Qwen3MoeArch, offset: int) -> str:
    """Local layer and expert indices -> the model's layer and expert ids (the chunk's layers
    from `offset` on, EP rank r experts r*E_local ..)."""
    from megatron.core import parallel_state

    expert_offset = parallel_state.get_expert_model_parallel_rank() * _num_local_experts(arch)
    return _LOCAL_EXPERT.sub(
        lambda m: f"{m[1]}{int(m[2]) + expert_offset}{m[3]}",
        global_layer_name(local_name, offset),
    )


def _tp_split(param: torch.nn.Parameter, name: str) -> bool:
    # Experts run with expert-tensor-parallel size 1 (validated): they are never TP-split.
    return bool(getattr(param, "tensor_model_parallel", False)) and not is_expert(name)


def _partition_dim(param: torch.nn.Parameter) -> int:
    """The dimension a tensor-parallel parameter is split along over the TP ranks."""
    # megatron sets partition_dim on its TP-split parameters; torch's Parameter type lacks it
    return param.partition_dim  # type: ignore[attr-defined]


@torch.no_grad()
def load_full_state_dict(
    model: torch.nn.Module | list[torch.nn.Module],
    full: dict[str, torch.Tensor],
    arch: Qwen3MoeArch,
    skip=lambda name: False,
) -> None:
    """Copy full tensors (Megatron names, global layer and expert ids) into this rank's shards
    (of a model, or of each of its chunks).

    Parameters for which `skip(local name)` is true keep their values.
    """

    def shard(key: str, tp_rank: int, tp_size: int, partition_dim: int | None) -> torch.Tensor:
        tensor = full[key]
        if partition_dim is not None:
            tensor = torch.chunk(tensor, tp_size, dim=partition_dim)[tp_rank]
        return tensor

    _load_shards(model, arch, shard, skip)


@torch.no_grad()
def load_from_hf(
    model: torch.nn.Module | list[torch.nn.Module],
    reader: hf_mapping.SliceReader,
    arch: Qwen3MoeArch,
    skip=lambda name: False,
) -> None:
    """This rank's shards (of a model, or of each of its chunks) read from a Hugging Face
    directory one parameter at a time (``reader``: hf_io's ``HFWeights``): only this rank's
    pipeline stage's layers, its EP rank's experts and its TP slice of each tensor are read,
    each cast into the parameter's dtype as it is copied, so the rank never holds more than
    its own shards and one parameter's slice of the files. Same values as
    ``load_full_state_dict`` of ``hf_to_megatron`` of the whole directory.

    Parameters for which `skip(local name)` is true keep their values."""

    def shard(key: str, tp_rank: int, tp_size: int, partition_dim: int | None) -> torch.Tensor:
        return hf_mapping.read_megatron_shard(key, arch, reader, tp_rank, tp_size, partition_dim)

    _load_shards(model, arch, shard, skip)


def _load_shards(model, arch: Qwen3MoeArch, shard, skip) -> None:
    """Each parameter of this rank (not skipped) from ``shard(full name, tp rank, tp size,
    partition dim or None)``; KeyError lists the parameters whose source is missing."""
    from megatron.core import parallel_state

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    missing = []
    named = [
        (name, param, layer_offset(chunk))
        for chunk in model_chunks(model)
        for name, param in chunk.named_parameters()
    ]
    for name, param, offset in named:
        if skip(name):
            continue
        key = global_name(hf_mapping.from_te_name(name), arch, offset)
        split = _tp_split(param, name) and tp_size > 1
        try:
            tensor = shard(key, tp_rank, tp_size, _partition_dim(param) if split else None)
        except KeyError as err:
            missing.append(f"{key} ({err.args[0]})" if err.args and err.args[0] != key else key)
            continue
        if tensor.shape != param.shape:
            raise ValueError(
                f"{key}: shard shape {tuple(tensor.shape)} != parameter {tuple(param.shape)}"
            )
        param.copy_(tensor)  # cast into the parameter's dtype as it is copied
        del tensor
    if missing:
        raise KeyError(f"weights missing for {len(missing)} parameters, e.g. {missing[:3]}")


@torch.no_grad()
def iter_full_parameters(
    model: torch.nn.Module | list[torch.nn.Module],
    arch: Qwen3MoeArch,
    live: LiveBytes | None = None,
    gather_bytes: int | None = None,
    experts_to_holders: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """(Megatron name with global layer and expert ids, full tensor), one parameter at a time,
    on the parameter's device and in its dtype: TP shards all-gathered and concatenated, an
    expert all-gathered over EP (one item per EP rank's copy of that local expert), and under
    PP every stage's parameters, stage after stage, broadcast from the stage that holds them
    (under virtual pipeline stages chunk after chunk, each over the stages: layer order).

    Collective: every rank iterates to the end, in the same order, and every rank gets every
    full tensor. ``live`` counts the buffers this allocates, from the gather (or broadcast)
    until the consumer asks for the next parameter; an ungathered parameter of this rank is
    yielded as itself (a view: nothing allocated, nothing counted).

    Under EP the experts of one layer go in one all-gather (consecutive expert parameters of a
    layer and dtype, flattened into one buffer), not one per weight: ``gather_bytes`` caps the
    gathered bytes of such a group (None: a whole layer; a parameter larger than the cap is
    gathered alone). Each EP item is a copy out of the group's buffer (its own storage), which
    ``live`` counts until the next item is asked for; the group's buffer counts until its last
    item has been taken. The items, their order and values are the same whatever the cap.

    ``experts_to_holders`` (the same on every rank): under EP the experts reach the expert
    holders only (``is_expert_holder``: the ranks that are global rank 0 or feed it through
    the pipeline broadcasts), each group by one ``gather`` to its EP group's first rank; an EP
    group without a holder gathers nothing. Everywhere else an expert is yielded as a meta
    tensor (its shape and dtype, no data, nothing counted), in the same place of the order."""
    from megatron.core import parallel_state

    live = live if live is not None else LiveBytes()
    chunks = model_chunks(model)
    pp_size = parallel_state.get_pipeline_model_parallel_world_size()
    ep_size = parallel_state.get_expert_model_parallel_world_size()
    placeholder = experts_to_holders and ep_size > 1 and not is_expert_holder()
    if pp_size == 1:
        for chunk in chunks:
            yield from _iter_stage_parameters(chunk, arch, live, gather_bytes, experts_to_holders)
        return
    pp_group = parallel_state.get_pipeline_model_parallel_group()
    pp_ranks = torch.distributed.get_process_group_ranks(pp_group)
    my_stage = parallel_state.get_pipeline_model_parallel_rank()
    device = next(chunks[0].parameters()).device
    # every stage's (name, shape, dtype) per chunk, in stage order
    stage_items: list = [None] * pp_size
    torch.distributed.all_gather_object(
        stage_items, [_stage_parameter_items(chunk, arch) for chunk in chunks], group=pp_group
    )
    for index, stage in ((i, s) for i in range(len(chunks)) for s in range(pp_size)):
        if stage == my_stage:
            stage_parameters = _iter_stage_parameters(
                chunks[index], arch, live, gather_bytes, experts_to_holders
            )
            for name, tensor in stage_parameters:
                if not (placeholder and is_expert(name)):
                    torch.distributed.broadcast(
                        tensor.contiguous(), src=pp_ranks[stage], group=pp_group
                    )
                yield name, tensor
            continue
        for name, shape, dtype in stage_items[stage][index]:
            if placeholder and is_expert(name):  # so is every rank of this PP group
                yield name, torch.empty(shape, dtype=getattr(torch, dtype), device="meta")
                continue
            tensor = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
            live.add(tensor_bytes(tensor))
            torch.distributed.broadcast(tensor, src=pp_ranks[stage], group=pp_group)
            yield name, tensor
            del tensor
            live.release(tensor_bytes_of(shape, dtype))


def tensor_bytes_of(shape, dtype: str) -> int:
    return torch.Size(shape).numel() * torch.empty((), dtype=getattr(torch, dtype)).element_size()


def is_expert_holder() -> bool:
    """Whether this rank needs the full experts for global rank 0: the first rank of its EP
    group, in the first EP group of the expert-data-parallel replicas. Global rank 0 is (all
    its parallel ranks are 0), and so is every rank of its pipeline group: megatron builds
    the pipeline groups of the experts and of the rest alike (it asserts so), so the ranks of
    one pipeline group share their EP and expert-DP ranks. Experts run with expert-TP 1."""
    from megatron.core import parallel_state

    return (
        parallel_state.get_expert_model_parallel_rank() == 0
        and parallel_state.get_expert_data_parallel_rank() == 0
    )


def _full_names(name: str, arch: Qwen3MoeArch, offset: int) -> list[str]:
    """The full model's names of this rank's parameter `name` (local-spec naming) in a chunk
    whose layers start at `offset`: its global layer id, and for an expert under EP one name
    per EP rank's copy of that local expert, in the order an EP all-gather returns them."""
    from megatron.core import parallel_state

    layer_name = global_layer_name(name, offset)
    ep_size = parallel_state.get_expert_model_parallel_world_size()
    if not (is_expert(name) and ep_size > 1):
        return [layer_name]
    match = _LOCAL_EXPERT.search(name)
    assert match is not None, "an expert's name holds its local id"
    local_id, local_experts = int(match[2]), _num_local_experts(arch)
    return [
        _LOCAL_EXPERT.sub(rf"\g<1>{ep_rank * local_experts + local_id}\g<3>", layer_name)
        for ep_rank in range(ep_size)
    ]


def _stage_parameter_items(model: torch.nn.Module, arch: Qwen3MoeArch) -> list:
    """What _iter_stage_parameters yields on this stage, as (name, full shape, dtype name),
    without gathering anything: the other stages allocate their receive buffers from it."""
    from megatron.core import parallel_state

    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    offset = layer_offset(model)
    items = []
    for te_name, param in model.named_parameters():
        name = hf_mapping.from_te_name(te_name)  # the local spec's names
        shape = list(param.shape)
        if _tp_split(param, name) and tp_size > 1:
            shape[_partition_dim(param)] *= tp_size
        dtype = str(param.dtype).removeprefix("torch.")
        items += [(full_name, shape, dtype) for full_name in _full_names(name, arch, offset)]
    return items


def _iter_stage_parameters(
    model: torch.nn.Module,
    arch: Qwen3MoeArch,
    live: LiveBytes,
    gather_bytes: int | None = None,
    experts_to_holders: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """iter_full_parameters of one chunk within one pipeline stage (every rank of the stage
    iterates). Each parameter, or group of experts, is a sub-generator: this frame holds no
    tensor of its own (a loop variable would keep the last one alive while the consumer
    builds the next bucket, measured with weakrefs)."""
    from megatron.core import parallel_state

    ep_size = parallel_state.get_expert_model_parallel_world_size()
    offset = layer_offset(model)
    params = [(hf_mapping.from_te_name(n), p) for n, p in model.named_parameters()]
    index = 0
    while index < len(params):
        name, param = params[index]
        if is_expert(name) and ep_size > 1:
            group = _expert_group(params, index, ep_size, gather_bytes)
            if experts_to_holders:
                yield from _gather_experts_to_holder(group, arch, offset, live)
            else:
                yield from _gather_experts(group, arch, offset, live)
            index += len(group)
        else:
            yield from _gather_tp(name, param, arch, offset, live)
            index += 1


def _gather_tp(
    name: str, param: torch.nn.Parameter, arch: Qwen3MoeArch, offset: int, live: LiveBytes
) -> Iterator[tuple[str, torch.Tensor]]:
    """One parameter that is not gathered over EP: a TP-split one all-gathered over TP and put
    together, any other as itself (a view of the parameter: nothing allocated, nothing
    counted). Its buffer counts until the consumer asks for the next item."""
    from megatron.core import parallel_state

    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    tensor, held = param.detach(), 0
    if _tp_split(param, name) and tp_size > 1:
        group = parallel_state.get_tensor_model_parallel_group()
        tensor, held = _all_gather(tensor, tp_size, group, live), tp_size * tensor_bytes(tensor)
        if _partition_dim(param) != 0:  # shards side by side: one copy, then the buffer goes
            tensor = torch.cat(tensor.unbind(0), dim=_partition_dim(param))
            live.add(tensor_bytes(tensor))
            live.release(held)
            held = tensor_bytes(tensor)
        else:  # shards stacked along dim 0: the gather buffer is the full tensor
            tensor = tensor.view(-1, *tensor.shape[2:])
    yield _full_names(name, arch, offset)[0], tensor
    live.release(held)


def _layer_of(name: str) -> str | None:
    """A local name's layer index (None outside the decoder layers)."""
    match = _LOCAL_LAYER.match(name)
    return match[2] if match else None


def _expert_group(
    params: list[tuple[str, torch.nn.Parameter]], start: int, ep_size: int, cap: int | None
) -> list[tuple[str, torch.nn.Parameter]]:
    """The expert parameters from ``start`` on that share one EP all-gather: consecutive,
    of one layer and dtype, at most ``cap`` bytes once gathered (at least one)."""
    first_name, first = params[start]
    group, gathered = [params[start]], ep_size * tensor_bytes(first)
    for name, param in params[start + 1 :]:
        size = ep_size * tensor_bytes(param)
        if (
            not is_expert(name)
            or _layer_of(name) != _layer_of(first_name)
            or param.dtype != first.dtype
            or (cap is not None and gathered + size > cap)
        ):
            break
        group.append((name, param))
        gathered += size
    return group


def _gather_experts(
    group: list[tuple[str, torch.nn.Parameter]], arch: Qwen3MoeArch, offset: int, live: LiveBytes
) -> Iterator[tuple[str, torch.Tensor]]:
    """One EP all-gather of a group of expert parameters (flattened into one send buffer),
    then each parameter's copy of every EP rank, each copied out of the gathered buffer.

    Why copies, not views: a view keeps the whole group buffer alive for as long as any
    bucket holds it, so one small expert weight in the next bucket would hold up to half a
    bucket more than is counted. With copies the group buffer is freed (and released in
    ``live``) when its last item has been taken, and every tensor handed out owns exactly
    its bytes."""
    from megatron.core import parallel_state

    ep_group = parallel_state.get_expert_model_parallel_group()
    ep_size = parallel_state.get_expert_model_parallel_world_size()
    flat, allocated = _send_buffer(group)
    live.add(allocated)
    parts = _all_gather(flat, ep_size, ep_group, live)  # [EP rank, all the group's elements]
    live.release(allocated)
    del flat
    start = 0
    for name, param in group:
        stop = start + param.numel()
        for ep_rank, full_name in enumerate(_full_names(name, arch, offset)):
            yield from _owned_copy(full_name, parts[ep_rank, start:stop].view(param.shape), live)
        start = stop
    live.release(tensor_bytes(parts))


def _gather_experts_to_holder(
    group: list[tuple[str, torch.nn.Parameter]], arch: Qwen3MoeArch, offset: int, live: LiveBytes
) -> Iterator[tuple[str, torch.Tensor]]:
    """``_gather_experts`` for the expert holder only (``iter_full_parameters``'
    ``experts_to_holders``): an EP group with a holder gathers to it (its first rank), which
    yields what ``_gather_experts`` yields; its other ranks send and, like every rank of an EP
    group without a holder (which gathers nothing), yield meta tensors."""
    from megatron.core import parallel_state

    names = [(_full_names(name, arch, offset), param) for name, param in group]
    if parallel_state.get_expert_data_parallel_rank() != 0:  # no holder in this EP group
        for full_names, param in names:
            for full_name in full_names:
                yield full_name, torch.empty(param.shape, dtype=param.dtype, device="meta")
        return
    ep_group = parallel_state.get_expert_model_parallel_group()
    ep_size = parallel_state.get_expert_model_parallel_world_size()
    flat, allocated = _send_buffer(group)
    live.add(allocated)
    parts = _gather_to_first(flat, ep_size, ep_group, live)  # [EP rank, elements] or None
    live.release(allocated)
    del flat
    start = 0
    for full_names, param in names:
        stop = start + param.numel()
        for ep_rank, full_name in enumerate(full_names):
            if parts is None:
                yield full_name, torch.empty(param.shape, dtype=param.dtype, device="meta")
            else:
                yield from _owned_copy(
                    full_name, parts[ep_rank, start:stop].view(param.shape), live
                )
        start = stop
    if parts is not None:
        live.release(tensor_bytes(parts))


def _send_buffer(group: list[tuple[str, torch.nn.Parameter]]) -> tuple[torch.Tensor, int]:
    """The group's elements in one flat tensor, and the bytes that allocated: one contiguous
    parameter is sent as itself (a view, 0 bytes), several are concatenated (a copy)."""
    if len(group) == 1 and group[0][1].is_contiguous():
        return group[0][1].detach().view(-1), 0
    flat = torch.cat([param.detach().reshape(-1) for _, param in group])
    return flat, tensor_bytes(flat)


def _owned_copy(
    name: str, view: torch.Tensor, live: LiveBytes
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, a copy of ``view`` with storage of its own), counted until the consumer asks for
    the next item (then a bucket counts it, or it is gone)."""
    copy = view.clone()
    live.add(tensor_bytes(copy))
    yield name, copy
    live.release(tensor_bytes(copy))


def _all_gather(tensor: torch.Tensor, world: int, group, live: LiveBytes) -> torch.Tensor:
    """[world, *tensor.shape], rank r's tensor at [r]: one buffer, written in place
    (all_gather into a list would stage a second, flat copy: measured on gloo)."""
    out = torch.empty(
        (world * tensor.shape[0], *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device
    )  # ranks concatenated along dim 0, as gloo wants it
    live.add(tensor_bytes(out))
    torch.distributed.all_gather_into_tensor(out, tensor.contiguous(), group=group)
    return out.view(world, *tensor.shape)


def _gather_to_first(
    tensor: torch.Tensor, world: int, group, live: LiveBytes
) -> torch.Tensor | None:
    """[world, *tensor.shape] on the group's first rank (rank r's tensor at [r]), None on the
    others, which only send theirs (``torch.distributed.gather``; gloo stages one more flat
    copy on the first rank, NCCL receives in place)."""
    first = torch.distributed.get_global_rank(group, 0)
    if torch.distributed.get_rank() != first:
        torch.distributed.gather(tensor.contiguous(), None, dst=first, group=group)
        return None
    out = torch.empty((world, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    live.add(tensor_bytes(out))
    torch.distributed.gather(tensor.contiguous(), list(out.unbind(0)), dst=first, group=group)
    return out


@torch.no_grad()
def gather_full_state_dict(
    model: torch.nn.Module | list[torch.nn.Module], arch: Qwen3MoeArch, keep: bool = True
) -> dict[str, torch.Tensor]:
    """The full model in host memory (conversion, checkpoints, the critic's first weights).

    Collective: every rank calls it. keep=False: this rank takes part in the gathers and keeps
    nothing (returns {}). Weight sync does not use it: see ``iter_hf_buckets``."""
    full: dict[str, torch.Tensor] = {}
    for name, tensor in iter_full_parameters(model, arch):
        if keep:
            full[name] = tensor.to("cpu", copy=True)
    return full


def iter_hf_buckets(
    model: torch.nn.Module | list[torch.nn.Module],
    arch: Qwen3MoeArch,
    buffer_bytes: int,
    keep: Callable[[int], bool] | bool = True,
    live: LiveBytes | None = None,
) -> Iterator[NamedTensors]:
    """The model as buckets of HF checkpoint-layout tensors (``hf_mapping.
    megatron_to_hf_checkpoint``), each <= buffer_bytes (one larger tensor is a bucket alone),
    built one Megatron parameter at a time (under EP a group of one layer's experts, gathered
    at once, at most half a bucket): no rank holds more than a bucket, the tensor that
    overflowed it and the buffers of one parameter or expert group in flight. With the group
    at most B/2 (B = buffer_bytes) and its send buffer B/(2 EP), that is at most two buckets
    and the largest tensor (B + B/2 + B/4 during a gather; B + B/2 + the overflowing tensor
    while a bucket is out), as long as one expert weight gathered over EP fits in B/2.

    Collective: every rank iterates to the end (a rank that keeps nothing still drives the
    gathers: ``for _ in iter_hf_buckets(...): pass``). Bucket k (counting from 0, the same cut
    on every rank) is yielded where ``keep(k)`` (or ``keep``) is true and dropped elsewhere; a
    rank whose ``keep`` is False cuts no buckets at all. When no rank but the expert holders
    keeps any (weight sync through rank 0: ``keep=rank == 0``; ``_only_holders_keep``), the
    experts are gathered to the holders only (``iter_full_parameters``' ``experts_to_holders``),
    not to every rank. Tensors are on the parameters' device in their dtype; treat them as
    read-only (some are views of the parameters). ``live`` counts the buckets and the gather
    buffers (see ``LiveBytes``); its peak is what a sync reports as
    perf/weight_sync_peak_bytes."""
    keeps = keep if callable(keep) else (lambda index: keep)
    live = live if live is not None else LiveBytes()
    full = iter_full_parameters(
        model,
        arch,
        live,
        max(1, buffer_bytes // 2),  # a group of experts gathered at once: at most half a bucket
        experts_to_holders=_only_holders_keep(model, keep),
    )
    if keep is False:  # this rank only takes part in the gathers: each item dropped on receipt
        for _ in full:
            pass
        return
    named = (
        (hf_name, hf_tensor)
        for name, tensor in full
        for hf_name, hf_tensor in hf_mapping.megatron_to_hf_checkpoint(name, tensor, arch)
    )
    index = 0
    # not enumerate(): it keeps its last (index, bucket) tuple, so the previous bucket would
    # stay alive until the next one is complete (measured: twice the memory)
    for bucket in iter_buckets(named, buffer_bytes, live):
        if keeps(index):
            yield bucket
        del bucket
        index += 1


def _only_holders_keep(
    model: torch.nn.Module | list[torch.nn.Module], keep: Callable[[int], bool] | bool
) -> bool:
    """Whether no rank but the expert holders (``is_expert_holder``) keeps any bucket, agreed by
    every rank (collective under EP: one all-reduce of a flag; a callable ``keep`` may keep
    some bucket). False without EP, where there is nothing to gather to fewer ranks."""
    from megatron.core import parallel_state

    if parallel_state.get_expert_model_parallel_world_size() == 1:
        return False
    keeps_any = callable(keep) or bool(keep)
    device = next(model_chunks(model)[0].parameters()).device
    others_keep = torch.tensor([int(keeps_any and not is_expert_holder())], device=device)
    torch.distributed.all_reduce(others_keep, op=torch.distributed.ReduceOp.MAX)
    return int(others_keep.item()) == 0
