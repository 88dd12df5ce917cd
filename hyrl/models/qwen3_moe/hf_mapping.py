"""The one HF <-> Megatron weight-name table for Qwen3-MoE.

Used by weight sync (actor -> rollout engine) and by checkpoint conversion. It maps *full*
(unsharded) tensors; splitting them over TP/EP ranks is the backend's job.

Two HF layouts: the *state dict* of transformers' Qwen3MoeForCausalLM, whose experts are fused
per layer (``mlp.experts.gate_up_proj`` [E, 2F, H], ``mlp.experts.down_proj`` [E, H, F]), and
the *checkpoint* layout that ``save_pretrained`` writes and SGLang's ``load_weights`` reads, one
tensor per expert (``mlp.experts.{e}.{gate,up,down}_proj.weight``). Whole dicts convert with
``megatron_to_hf`` / ``hf_to_megatron``; weight sync streams one Megatron parameter at a time
through ``megatron_to_hf_checkpoint`` and never builds the fused stacks.

Megatron names are the local-spec names with global expert ids
(`decoder.layers.{i}.mlp.experts.local_experts.{e}`); `te_names=True` gives the
Transformer Engine spec's names, which differ only where TE fuses the input norm into QKV.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Protocol

import torch

from hyrl.models.qwen3_moe.config import Qwen3MoeArch

# One-to-one renames: (megatron name, HF name); "{i}" is the layer index.
GLOBAL_RENAMES = (
    ("embedding.word_embeddings.weight", "model.embed_tokens.weight"),
    ("decoder.final_layernorm.weight", "model.norm.weight"),
    ("output_layer.weight", "lm_head.weight"),
)
LAYER_RENAMES = (
    ("decoder.layers.{i}.input_layernorm.weight", "model.layers.{i}.input_layernorm.weight"),
    (
        "decoder.layers.{i}.self_attention.linear_proj.weight",
        "model.layers.{i}.self_attn.o_proj.weight",
    ),
    (
        "decoder.layers.{i}.self_attention.q_layernorm.weight",
        "model.layers.{i}.self_attn.q_norm.weight",
    ),
    (
        "decoder.layers.{i}.self_attention.k_layernorm.weight",
        "model.layers.{i}.self_attn.k_norm.weight",
    ),
    (
        "decoder.layers.{i}.pre_mlp_layernorm.weight",
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    ("decoder.layers.{i}.mlp.router.weight", "model.layers.{i}.mlp.gate.weight"),
)
# Composite tensors, handled by the functions below.
QKV = "decoder.layers.{i}.self_attention.linear_qkv.weight"
HF_QKV = (
    "model.layers.{i}.self_attn.q_proj.weight",
    "model.layers.{i}.self_attn.k_proj.weight",
    "model.layers.{i}.self_attn.v_proj.weight",
)
EXPERT_FC1 = "decoder.layers.{i}.mlp.experts.local_experts.{e}.linear_fc1.weight"  # [gate; up]
EXPERT_FC2 = "decoder.layers.{i}.mlp.experts.local_experts.{e}.linear_fc2.weight"
HF_GATE_UP = "model.layers.{i}.mlp.experts.gate_up_proj"  # [experts, 2 * ffn, hidden], [gate; up]
HF_DOWN = "model.layers.{i}.mlp.experts.down_proj"  # [experts, hidden, ffn]

# Checkpoint layout of one expert (what save_pretrained writes; fc1 rows are [gate; up]).
CKPT_GATE = "model.layers.{i}.mlp.experts.{e}.gate_proj.weight"
CKPT_UP = "model.layers.{i}.mlp.experts.{e}.up_proj.weight"
CKPT_DOWN = "model.layers.{i}.mlp.experts.{e}.down_proj.weight"
_QKV_RE = re.compile(r"^decoder\.layers\.(\d+)\.self_attention\.linear_qkv\.weight$")
_EXPERT_RE = re.compile(
    r"^decoder\.layers\.(\d+)\.mlp\.experts\.local_experts\.(\d+)\."
    r"linear_fc([12])\.weight$"
)
_CKPT_EXPERT_RE = re.compile(
    r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\."
    r"(gate|up|down)_proj\.weight$"
)

# Transformer Engine spec: the input norm is fused into linear_qkv.
TE_RENAMES = {".input_layernorm.weight": ".self_attention.linear_qkv.layer_norm_weight"}


def to_te_name(name: str) -> str:
    for local, te in TE_RENAMES.items():
        if name.endswith(local):
            return name[: -len(local)] + te
    return name


# Transformer Engine's grouped GEMM (TEGroupedMLP, moe_grouped_gemm) keeps a layer's local
# experts as weight0 .. weight{E-1} of one linear_fc1 / linear_fc2 (megatron-core 0.16.1
# experts.py; its sharded checkpoint is interchangeable with the local spec's SequentialMLP).
_GROUPED_EXPERT_RE = re.compile(r"^(.*\.mlp\.experts)\.(linear_fc[12])\.weight(\d+)$")


def from_te_name(name: str) -> str:
    """A Transformer Engine parameter name as the local spec names it (the names this table and
    the HF mapping use): the fused input norm, and grouped-GEMM experts as local experts."""
    grouped = _GROUPED_EXPERT_RE.match(name)
    if grouped:
        return f"{grouped[1]}.local_experts.{grouped[3]}.{grouped[2]}.weight"
    for local, te in TE_RENAMES.items():
        if name.endswith(te):
            return name[: -len(te)] + local
    return name


def _renames(arch: Qwen3MoeArch) -> list[tuple[str, str]]:
    pairs = list(GLOBAL_RENAMES)
    if not arch.untie_embeddings_and_output_weights:
        pairs.remove(("output_layer.weight", "lm_head.weight"))
    for i in range(arch.num_layers):
        pairs += [(m.format(i=i), h.format(i=i)) for m, h in LAYER_RENAMES]
    if not arch.qk_layernorm:
        pairs = [
            (m, h) for m, h in pairs if not m.endswith(("q_layernorm.weight", "k_layernorm.weight"))
        ]
    return pairs


def megatron_names(arch: Qwen3MoeArch, te_names: bool = False) -> list[str]:
    """Every full-model Megatron parameter name the table covers, in a stable order."""
    names = [m for m, _ in _renames(arch)]
    for i in range(arch.num_layers):
        names.append(QKV.format(i=i))
        for e in range(arch.num_experts):
            names += [EXPERT_FC1.format(i=i, e=e), EXPERT_FC2.format(i=i, e=e)]
    return [to_te_name(n) for n in names] if te_names else names


def _qkv_split_sizes(arch: Qwen3MoeArch) -> tuple[int, int, int]:
    heads_per_group = arch.num_attention_heads // arch.num_query_groups
    return heads_per_group * arch.kv_channels, arch.kv_channels, arch.kv_channels


def megatron_to_hf(mcore: dict[str, torch.Tensor], arch: Qwen3MoeArch) -> dict[str, torch.Tensor]:
    """Full Megatron state dict (local or TE names) -> HF Qwen3MoeForCausalLM state dict."""
    mcore = {from_te_name(k): v for k, v in mcore.items()}
    hf = {h: mcore[m] for m, h in _renames(arch)}
    q_rows, k_rows, v_rows = _qkv_split_sizes(arch)
    for i in range(arch.num_layers):
        # Megatron interleaves per query group: [q_g (heads_per_group * d); k_g (d); v_g (d)].
        qkv = mcore[QKV.format(i=i)].view(arch.num_query_groups, q_rows + k_rows + v_rows, -1)
        q, k, v = torch.split(qkv, [q_rows, k_rows, v_rows], dim=1)
        for name, part in zip(HF_QKV, (q, k, v)):
            hf[name.format(i=i)] = part.reshape(-1, arch.hidden_size)
        hf[HF_GATE_UP.format(i=i)] = torch.stack(
            [mcore[EXPERT_FC1.format(i=i, e=e)] for e in range(arch.num_experts)]
        )
        hf[HF_DOWN.format(i=i)] = torch.stack(
            [mcore[EXPERT_FC2.format(i=i, e=e)] for e in range(arch.num_experts)]
        )
    return hf


def hf_to_megatron(
    hf: dict[str, torch.Tensor], arch: Qwen3MoeArch, te_names: bool = False
) -> dict[str, torch.Tensor]:
    """HF Qwen3MoeForCausalLM state dict -> full Megatron state dict."""
    mcore = {m: hf[h] for m, h in _renames(arch)}
    q_rows, k_rows, v_rows = _qkv_split_sizes(arch)
    for i in range(arch.num_layers):
        q, k, v = (hf[name.format(i=i)] for name in HF_QKV)
        groups = arch.num_query_groups
        qkv = torch.cat(
            [q.view(groups, q_rows, -1), k.view(groups, k_rows, -1), v.view(groups, v_rows, -1)],
            dim=1,
        )
        mcore[QKV.format(i=i)] = qkv.reshape(-1, arch.hidden_size)
        gate_up, down = hf[HF_GATE_UP.format(i=i)], hf[HF_DOWN.format(i=i)]
        for e in range(arch.num_experts):
            mcore[EXPERT_FC1.format(i=i, e=e)] = gate_up[e]
            mcore[EXPERT_FC2.format(i=i, e=e)] = down[e]
    if te_names:
        mcore = {to_te_name(k): v for k, v in mcore.items()}
    return mcore


# -- one parameter at a time (weight sync) ---------------------------------------------------


def megatron_to_hf_checkpoint(
    name: str, tensor: torch.Tensor, arch: Qwen3MoeArch
) -> Iterator[tuple[str, torch.Tensor]]:
    """One full Megatron parameter (local or TE name, global expert id) -> its HF tensors in
    the checkpoint layout, lazily: q/k/v are copies made one at a time, the rest are views.

    Same values as ``split_fused_experts(megatron_to_hf(full))`` for that parameter."""
    name = from_te_name(name)
    renamed = _rename_table(arch).get(name)
    if renamed is not None:
        yield renamed, tensor
        return
    if match := _QKV_RE.match(name):
        i = int(match[1])
        q_rows, k_rows, v_rows = _qkv_split_sizes(arch)
        qkv = tensor.view(arch.num_query_groups, q_rows + k_rows + v_rows, -1)
        for hf_name, part in zip(HF_QKV, torch.split(qkv, [q_rows, k_rows, v_rows], dim=1)):
            yield hf_name.format(i=i), part.reshape(-1, arch.hidden_size)
        return
    if match := _EXPERT_RE.match(name):
        i, e = int(match[1]), int(match[2])
        if match[3] == "2":
            yield CKPT_DOWN.format(i=i, e=e), tensor
            return
        ffn = tensor.shape[0] // 2
        yield CKPT_GATE.format(i=i, e=e), tensor[:ffn]
        yield CKPT_UP.format(i=i, e=e), tensor[ffn:]
        return
    raise KeyError(
        f"{name}: not a Qwen3-MoE parameter the weight-name table knows "
        f"(e.g. {megatron_names(arch)[:2]})"
    )


# -- one rank's shard of one parameter, read from an HF directory (sharded loading) ----------


class SliceReader(Protocol):
    """What ``read_megatron_shard`` reads from: HF tensors by their stored names (hf_io's
    ``HFWeights``)."""

    def __contains__(self, name: object) -> bool: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def read(
        self, name: str, dim: int = 0, start: int | None = None, stop: int | None = None
    ) -> torch.Tensor: ...


def _tp_range(size: int, tp_rank: int, tp_size: int) -> tuple[int, int]:
    """Rank tp_rank's [start, stop) of `size` as torch.chunk cuts it."""
    chunk = -(-size // tp_size)
    return min(size, tp_rank * chunk), min(size, (tp_rank + 1) * chunk)


def read_megatron_shard(
    name: str,
    arch: Qwen3MoeArch,
    reader: SliceReader,
    tp_rank: int = 0,
    tp_size: int = 1,
    partition_dim: int | None = None,
) -> torch.Tensor:
    """This TP rank's shard of the full Megatron parameter `name` (local-spec name, global
    layer and expert ids), read from the HF tensors it is made of and nothing else: a
    TP-split parameter reads only its rows (or columns) of them, an expert only its own
    tensors (checkpoint layout) or its index of the fused stack (transformers' layout).
    partition_dim: the dimension the parameter is split along over TP (None: not split).
    The dtype is the stored one. Same values as ``hf_to_megatron`` of the whole directory,
    then ``torch.chunk`` along partition_dim. KeyError names a missing HF tensor."""
    split = partition_dim is not None and tp_size > 1

    def part(hf_name: str, dim: int = 0) -> torch.Tensor:
        if not split:
            return reader.read(hf_name)
        return reader.read(hf_name, dim, *_tp_range(reader.shape(hf_name)[dim], tp_rank, tp_size))

    renamed = _rename_table(arch).get(name)
    if renamed is not None:
        return part(renamed, partition_dim or 0)
    if match := _QKV_RE.match(name):
        i, groups = int(match[1]), arch.num_query_groups
        first, last = (0, groups) if not split else _tp_range(groups, tp_rank, tp_size)
        pieces = []
        for hf_name, rows in zip(HF_QKV, _qkv_split_sizes(arch)):
            tensor = reader.read(hf_name.format(i=i), 0, first * rows, last * rows)
            pieces.append(tensor.view(last - first, rows, -1))
        return torch.cat(pieces, dim=1).reshape(-1, arch.hidden_size)
    if match := _EXPERT_RE.match(name):  # experts are never TP-split (ETP = 1)
        i, e = int(match[1]), int(match[2])
        if match[3] == "2":
            down = CKPT_DOWN.format(i=i, e=e)
            return (
                reader.read(down)
                if down in reader
                else reader.read(HF_DOWN.format(i=i), 0, e, e + 1)[0]
            )
        gate = CKPT_GATE.format(i=i, e=e)
        if gate in reader:
            return torch.cat([reader.read(gate), reader.read(CKPT_UP.format(i=i, e=e))])
        return reader.read(HF_GATE_UP.format(i=i), 0, e, e + 1)[0]
    raise KeyError(
        f"{name}: not a Qwen3-MoE parameter the weight-name table knows "
        f"(e.g. {megatron_names(arch)[:2]})"
    )


@functools.lru_cache(maxsize=8)
def _rename_table(arch: Qwen3MoeArch) -> dict[str, str]:
    return dict(_renames(arch))


def split_fused_experts(hf_state: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """HF state dict (fused experts) -> checkpoint layout (one view per expert), in order."""
    named: list[tuple[str, torch.Tensor]] = []
    for name, tensor in hf_state.items():
        if name.endswith(".mlp.experts.gate_up_proj"):
            i = _layer_of(name)
            ffn = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                named += [
                    (CKPT_GATE.format(i=i, e=e), tensor[e, :ffn]),
                    (CKPT_UP.format(i=i, e=e), tensor[e, ffn:]),
                ]
        elif name.endswith(".mlp.experts.down_proj"):
            i = _layer_of(name)
            named += [(CKPT_DOWN.format(i=i, e=e), tensor[e]) for e in range(tensor.shape[0])]
        else:
            named.append((name, tensor))
    return named


def fuse_split_experts(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint layout (one tensor per expert and projection) -> HF state dict with fused
    experts: the inverse of `split_fused_experts`. ValueError when a layer's expert ids are not
    0..E-1 or an expert lacks one of its three projections."""
    fused: dict[str, torch.Tensor] = {}
    per_expert: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for name, tensor in tensors.items():
        match = _CKPT_EXPERT_RE.match(name)
        if match is None:
            fused[name] = tensor
        else:
            experts = per_expert.setdefault(match[1], {})
            experts.setdefault(int(match[2]), {})[f"{match[3]}_proj"] = tensor
    for prefix, experts in per_expert.items():
        if sorted(experts) != list(range(len(experts))):
            raise ValueError(
                f"{prefix}: expert ids {sorted(experts)} are not 0..{len(experts) - 1}"
            )
        ordered = [experts[e] for e in range(len(experts))]
        for e, parts in enumerate(ordered):
            if set(parts) != {"gate_proj", "up_proj", "down_proj"}:
                raise ValueError(
                    f"{prefix}.{e}: has {sorted(parts)}, needs gate_proj, up_proj, down_proj"
                )
        fused[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([p["gate_proj"], p["up_proj"]]) for p in ordered]
        )
        fused[f"{prefix}.down_proj"] = torch.stack([p["down_proj"] for p in ordered])
    return fused


def fused_expert_slot(checkpoint_name: str) -> tuple[str, int, str] | None:
    """Where a checkpoint-layout expert tensor lives in the fused state dict:
    (fused name, expert, "gate" | "up" | "down"); None for a tensor that is not an expert's."""
    match = _CKPT_EXPERT_RE.match(checkpoint_name)
    if match is None:
        return None
    fused = ".down_proj" if match[3] == "down" else ".gate_up_proj"
    return match[1] + fused, int(match[2]), match[3]


def _layer_of(name: str) -> int:
    return int(name.split("model.layers.", 1)[1].split(".", 1)[0])
