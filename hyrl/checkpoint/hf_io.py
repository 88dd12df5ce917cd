"""Hugging Face model directories: config.json -> architecture, safetensors <-> state dict.

In memory, state dicts use transformers 5's layout for Qwen3-MoE (each layer's experts fused:
`mlp.experts.gate_up_proj` [E, 2F, H] = [gate; up], `mlp.experts.down_proj` [E, H, F]), the
layout hyrl's `hf_mapping` reads. On disk, transformers 5 and the released Qwen3 checkpoints
store one tensor per expert and projection (`mlp.experts.{e}.gate_proj.weight`, ...); reading
fuses them, writing splits them again, so a saved directory looks like `save_pretrained`'s.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
TORCH_INDEX = "pytorch_model.bin.index.json"
TORCH_SINGLE = "pytorch_model.bin"
# Files besides the weights that make a directory usable by transformers / SGLang.
ASSET_PATTERNS = (
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template*",
)


class ConversionError(ValueError):
    """Bad input to a conversion: the message names the flag or field and the offending value."""


def read_hf_config(hf_dir: str | Path) -> dict:
    path = Path(hf_dir) / "config.json"
    if not Path(hf_dir).is_dir():
        raise ConversionError(f"--hf-dir {hf_dir}: not a directory")
    if not path.is_file():
        raise ConversionError(
            f"--hf-dir {hf_dir}: no config.json (not a Hugging Face model directory)"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConversionError(f"--hf-dir {hf_dir}: config.json is not valid JSON ({err})") from None


def _rope_theta(config: dict) -> float:
    # transformers 5 writes rope_parameters = {"rope_theta": ..., "rope_type": ...}; 4.x and the
    # released Qwen3 checkpoints write a top-level rope_theta.
    rope = config.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", "default")
    scaling = config.get("rope_scaling")
    if rope_type != "default" or (
        scaling and scaling.get("rope_type", scaling.get("type")) != "default"
    ):
        raise ConversionError(
            f"config.json: rope scaling {rope or scaling} is not supported "
            "(hyrl's Megatron model uses plain RoPE: rope_type 'default')"
        )
    return float(rope.get("rope_theta", config.get("rope_theta", 10_000.0)))


def _num_experts(config: dict, source: str) -> int:
    # The released checkpoints say num_experts; transformers 5 writes num_local_experts.
    values = {k: config[k] for k in ("num_experts", "num_local_experts") if k in config}
    if len(set(values.values())) > 1:
        raise ConversionError(
            f"{source}: num_experts {values['num_experts']} and num_local_experts "
            f"{values['num_local_experts']} disagree"
        )
    if not values:
        raise ConversionError(f"{source}: neither num_experts nor num_local_experts is set")
    return int(next(iter(values.values())))


def arch_from_hf_config(config: dict, source: str = "config.json") -> Qwen3MoeArch:
    """The architecture a Qwen3-MoE config.json describes; refuses what hyrl cannot build."""
    if config.get("model_type") != "qwen3_moe":
        raise ConversionError(
            f"{source}: model_type {config.get('model_type')!r}; hyrl converts "
            "Qwen3-MoE only (model_type 'qwen3_moe')"
        )
    # Features of the HF class that hyrl's Megatron model does not build: refuse, do not guess.
    unsupported = {
        "decoder_sparse_step": (config.get("decoder_sparse_step", 1), 1),
        "mlp_only_layers": (config.get("mlp_only_layers") or [], []),
        "attention_bias": (config.get("attention_bias", False), False),
        "norm_topk_prob": (config.get("norm_topk_prob", True), True),
        "hidden_act": (config.get("hidden_act", "silu"), "silu"),
        "use_sliding_window": (config.get("use_sliding_window", False), False),
    }
    for field, (found, needed) in unsupported.items():
        if found != needed:
            raise ConversionError(
                f"{source}: {field} {found!r} is not supported (hyrl builds "
                f"{field} {needed!r}: MoE in every layer, no biases, renormalised top-k)"
            )
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return Qwen3MoeArch(
        num_layers=int(config["num_hidden_layers"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=int(config.get("num_key_value_heads") or heads),
        kv_channels=int(config.get("head_dim") or hidden // heads),
        num_experts=_num_experts(config, source),
        moe_ffn_hidden_size=int(config["moe_intermediate_size"]),
        moe_router_topk=int(config["num_experts_per_tok"]),
        vocab_size=int(config["vocab_size"]),
        ffn_hidden_size=int(config.get("intermediate_size") or 0),
        norm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
        rotary_base=_rope_theta(config),
        max_position_embeddings=int(config.get("max_position_embeddings", 40960)),
        qk_layernorm=True,  # Qwen3 always normalises q and k per head
        normalization="RMSNorm",
        untie_embeddings_and_output_weights=not config.get("tie_word_embeddings", False),
    )


def read_hf_arch(hf_dir: str | Path) -> Qwen3MoeArch:
    """The Qwen3MoeArch of a Hugging Face model directory, from its config.json."""
    return arch_from_hf_config(read_hf_config(hf_dir), source=f"--hf-dir {hf_dir}: config.json")


def hf_shapes(arch: Qwen3MoeArch) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Qwen3MoeForCausalLM state dict (transformers' fused layout) and its
    shape."""
    h, d, v, e, f = (
        arch.hidden_size,
        arch.kv_channels,
        arch.vocab_size,
        arch.num_experts,
        arch.moe_ffn_hidden_size,
    )
    q_rows, kv_rows = arch.num_attention_heads * d, arch.num_query_groups * d
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if arch.untie_embeddings_and_output_weights:
        shapes["lm_head.weight"] = (v, h)
    for i in range(arch.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q_rows, h),
            p + "self_attn.k_proj.weight": (kv_rows, h),
            p + "self_attn.v_proj.weight": (kv_rows, h),
            p + "self_attn.o_proj.weight": (h, q_rows),
            p + "self_attn.q_norm.weight": (d,),
            p + "self_attn.k_norm.weight": (d,),
            p + "mlp.gate.weight": (e, h),
            p + "mlp.experts.gate_up_proj": (e, 2 * f, h),
            p + "mlp.experts.down_proj": (e, h, f),
        }
    return shapes


def _weight_files(hf_dir: Path) -> list[Path]:
    for index_name in (SAFETENSORS_INDEX, TORCH_INDEX):
        index = hf_dir / index_name
        if index.is_file():
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return [hf_dir / name for name in names]
    for single in (SAFETENSORS_SINGLE, TORCH_SINGLE):
        if (hf_dir / single).is_file():
            return [hf_dir / single]
    raise ConversionError(
        f"--hf-dir {hf_dir}: no weights ({SAFETENSORS_SINGLE}, {SAFETENSORS_INDEX}, "
        f"{TORCH_SINGLE} or {TORCH_INDEX})"
    )


def load_raw_hf_tensors(hf_dir: str | Path) -> dict[str, torch.Tensor]:
    """The tensors exactly as stored on disk (names, values and dtypes untouched)."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in _weight_files(Path(hf_dir)):
        if path.suffix == ".safetensors":
            tensors.update(load_file(path))
        else:
            tensors.update(torch.load(path, map_location="cpu", weights_only=True))
    return tensors


def fuse_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """On-disk per-expert tensors -> transformers 5's fused gate_up_proj / down_proj."""
    try:
        return hf_mapping.fuse_split_experts(tensors)
    except ValueError as err:
        raise ConversionError(str(err)) from None


def load_hf_state_dict(hf_dir: str | Path) -> dict[str, torch.Tensor]:
    """A Hugging Face Qwen3-MoE directory's weights in transformers 5's in-memory layout.

    Reads sharded (index.json) or single-file safetensors (or pytorch_model.bin); float dtypes
    are kept as stored.
    """
    return fuse_experts(load_raw_hf_tensors(hf_dir))


def save_hf_state_dict(
    hf_state: dict[str, torch.Tensor], out_dir: str | Path, max_shard_bytes: int = 5 * 1024**3
) -> list[str]:
    """Write weights the way `save_pretrained` does: per-expert names, safetensors shards of at
    most max_shard_bytes (one `model.safetensors`, or numbered shards plus an index). Returns the
    files."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = dict(hf_mapping.split_fused_experts(hf_state))
    shards: list[dict[str, torch.Tensor]] = [{}]
    shard_bytes = 0
    for name in sorted(tensors):
        size = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and shard_bytes + size > max_shard_bytes:
            shards.append({})
            shard_bytes = 0
        shards[-1][name] = tensors[name]
        shard_bytes += size

    def write(shard: dict[str, torch.Tensor], path: Path) -> None:
        # safetensors refuses tensors that share storage (views of one fused tensor): copy one
        # shard at a time, so at most one shard is held twice.
        save_file(
            {n: t.contiguous().clone() for n, t in shard.items()}, path, metadata={"format": "pt"}
        )

    if len(shards) == 1:
        write(shards[0], out_dir / SAFETENSORS_SINGLE)
        return [SAFETENSORS_SINGLE]
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map: dict[str, str] = {}  # tensor name -> its shard file
    for name, shard in zip(names, shards):
        write(shard, out_dir / name)
        weight_map |= {tensor_name: name for tensor_name in shard}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out_dir / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return names + [SAFETENSORS_INDEX]


def copy_assets(src_dir: str | Path, dst_dir: str | Path) -> list[str]:
    """Copy config, generation config and tokenizer files (not weights) from src_dir to dst_dir."""
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    dst_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for pattern in ASSET_PATTERNS:
        for path in sorted(src_dir.glob(pattern)):
            if path.is_file():
                shutil.copy2(path, dst_dir / path.name)
                copied.append(path.name)
    return copied
