"""Qwen3-MoE checkpoint conversion: Hugging Face directory <-> Megatron distributed checkpoint.

Conversion runs in one process (world size 1, TP=EP=PP=1): a distributed checkpoint's keys are
global, so it is resharded when it is loaded, and a checkpoint written at TP=1 loads at TP=2 x
EP=2 (tests/unit/checkpoint/test_convert.py proves both directions). --tp/--ep/--pp therefore do
not change what is written: they are checked against the architecture (so a layout that cannot
be built is refused now, not at the first training step) and recorded as the intended layout.

Every check on the input runs before a process group starts; failures raise ConversionError
with the flag or config field, the value found and the value expected.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from hyrl.checkpoint.hf_io import (
    ConversionError,
    HFShardWriter,
    HFWeights,
    copy_assets,
    hf_shapes,
    load_hf_state_dict,
    read_hf_arch,
)
from hyrl.checkpoint.model_dir import (
    HF_ASSETS_SUBDIR,
    CheckpointMetadata,
    read_checkpoint_metadata,
)
from hyrl.config.errors import divisors
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

__all__ = [
    "ConversionError",
    "check_layout",
    "hf_to_mcore",
    "mcore_to_hf",
    "read_hf_arch",
    "load_hf_state_dict",
]


# -- checks (no process group, no model) -------------------------------------------------------
def check_layout(
    arch: Qwen3MoeArch, tp: int = 1, ep: int = 1, pp: int = 1, vp_layers: int | None = None
) -> None:
    """Refuse a layout hyrl cannot build for this architecture, naming the flag (vp_layers:
    --num-layers-per-virtual-pipeline-stage, None without virtual stages)."""
    for flag, value in (("--tp", tp), ("--ep", ep), ("--pp", pp)):
        if not isinstance(value, int) or value < 1:
            raise ConversionError(f"{flag} {value}: must be a positive integer")
    # TP splits attention heads, key/value groups and (hyrl pads no vocabulary) the embedding rows.
    tp_must_divide = {
        "num_attention_heads": arch.num_attention_heads,
        "num_query_groups": arch.num_query_groups,
        "vocab_size": arch.vocab_size,
    }
    bad = {name: n for name, n in tp_must_divide.items() if n % tp}
    if bad:
        valid = [
            d
            for d in divisors(arch.num_query_groups)
            if all(n % d == 0 for n in tp_must_divide.values())
        ]
        raise ConversionError(
            f"--tp {tp}: must divide "
            + ", ".join(f"{k} ({v})" for k, v in bad.items())
            + f"; valid: {valid}"
        )
    if arch.num_experts % ep:
        raise ConversionError(
            f"--ep {ep}: must divide num_experts ({arch.num_experts}); "
            f"valid: {divisors(arch.num_experts)}"
        )
    if arch.num_layers % pp:
        raise ConversionError(
            f"--pp {pp}: must divide num_layers ({arch.num_layers}); "
            f"valid: {divisors(arch.num_layers)}"
        )
    if vp_layers is not None:
        flag = f"--num-layers-per-virtual-pipeline-stage {vp_layers}"
        if pp == 1:
            raise ConversionError(f"{flag}: needs --pp > 1 (virtual stages split a pipeline rank)")
        per_rank = arch.num_layers // pp
        if vp_layers < 1 or per_rank % vp_layers or vp_layers == per_rank:
            valid = [d for d in divisors(per_rank) if d < per_rank]
            raise ConversionError(
                f"{flag}: must split each pipeline rank's {per_rank} layers into two or more "
                f"virtual stages; valid: {valid}"
            )


def check_out_dir(out_dir: str | Path) -> None:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError(f"--out {out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise ConversionError(f"--out {out_dir}: exists and is not empty; refusing to overwrite")


def _found_in_weights(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[object, str]]:
    """The architecture fields the weights themselves determine (from their shapes in
    transformers' fused layout), each with its evidence."""
    found: dict[str, tuple[object, str]] = {}

    def shape(name: str):
        return tuple(shapes[name]) if name in shapes else None

    if (embed := shape("model.embed_tokens.weight")) is not None:
        found["vocab_size"] = (embed[0], f"model.embed_tokens.weight {embed}")
        found["hidden_size"] = (embed[1], f"model.embed_tokens.weight {embed}")
    layers = {int(n.split(".")[2]) for n in shapes if n.startswith("model.layers.")}
    if layers:
        found["num_hidden_layers"] = (max(layers) + 1, f"layers model.layers.0..{max(layers)}")
    p = "model.layers.0."
    head_dim = shape(p + "self_attn.q_norm.weight")
    if head_dim is not None:
        found["head_dim"] = (head_dim[0], f"{p}self_attn.q_norm.weight {head_dim}")
        for field, proj in (("num_attention_heads", "q_proj"), ("num_key_value_heads", "k_proj")):
            if (rows := shape(f"{p}self_attn.{proj}.weight")) is not None:
                found[field] = (
                    rows[0] // head_dim[0],
                    f"{p}self_attn.{proj}.weight {rows} / head_dim",
                )
    if (router := shape(p + "mlp.gate.weight")) is not None:
        found["num_experts"] = (router[0], f"{p}mlp.gate.weight {router}")
    if (down := shape(p + "mlp.experts.down_proj")) is not None:
        found["moe_intermediate_size"] = (down[2], f"{p}mlp.experts.0.down_proj.weight {down[1:]}")
    found["tie_word_embeddings"] = (
        "lm_head.weight" not in shapes,
        "lm_head.weight " + ("absent" if "lm_head.weight" not in shapes else "present"),
    )
    return found


def _in_config(arch: Qwen3MoeArch) -> dict[str, object]:
    return {
        "vocab_size": arch.vocab_size,
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "head_dim": arch.kv_channels,
        "num_attention_heads": arch.num_attention_heads,
        "num_key_value_heads": arch.num_query_groups,
        "num_experts": arch.num_experts,
        "moe_intermediate_size": arch.moe_ffn_hidden_size,
        "tie_word_embeddings": not arch.untie_embeddings_and_output_weights,
    }


def check_weights_match_config(
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: set[torch.dtype],
    arch: Qwen3MoeArch,
    hf_dir: str | Path,
    flag: str = "--hf-dir",
) -> torch.dtype:
    """Refuse weights that config.json does not describe (shapes: every tensor's, in
    transformers' fused layout; dtypes: those stored); returns their (single) dtype. flag: the
    flag that named hf_dir, for the message."""
    expected = _in_config(arch)
    problems = [
        f"{field}: {value!r} in the weights ({evidence}), {expected[field]!r} in config.json"
        for field, (value, evidence) in _found_in_weights(shapes).items()
        if value != expected[field]
    ]
    if not problems:  # every field agrees: any remaining difference is a missing or odd tensor
        wanted = hf_shapes(arch)
        problems += [f"{name}: missing" for name in wanted if name not in shapes][:5]
        problems += [f"{name}: not a Qwen3-MoE tensor" for name in shapes if name not in wanted][:5]
        problems += [
            f"{name}: shape {tuple(shapes[name])}, config.json implies {shape}"
            for name, shape in wanted.items()
            if name in shapes and tuple(shapes[name]) != shape
        ][:5]
    if problems:
        raise ConversionError(
            f"{flag} {hf_dir}: config.json disagrees with the weights:\n  " + "\n  ".join(problems)
        )
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise ConversionError(
            f"{flag} {hf_dir}: weights in dtypes {sorted(map(str, dtypes))}; "
            "hyrl reads checkpoints stored in one floating-point dtype"
        )
    return next(iter(dtypes))


def check_hf_weights(reader: HFWeights, arch: Qwen3MoeArch, flag: str = "--hf-dir") -> torch.dtype:
    """check_weights_match_config of a lazily read directory, from its metadata only (nothing
    is read); returns the stored dtype."""
    dtypes = {reader.dtype(name) for name in reader.names()}
    return check_weights_match_config(reader.fused_shapes(), dtypes, arch, reader.hf_dir, flag)


@contextmanager
def one_process_group():
    """World size 1 with TP=EP=PP=1, started here (and ended) unless the caller already has one."""
    from megatron.core import parallel_state

    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        raise ConversionError(
            f"WORLD_SIZE={world_size}: conversion runs as one process (the "
            "checkpoint is resharded when loaded); run it without torchrun"
        )
    if torch.distributed.is_initialized():
        sizes = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_expert_model_parallel_world_size(),
            parallel_state.get_pipeline_model_parallel_world_size(),
        )
        if torch.distributed.get_world_size() != 1 or sizes != (1, 1, 1):
            raise ConversionError(
                "conversion needs a one-process group with TP=EP=PP=1; "
                f"this process has world size {torch.distributed.get_world_size()}, "
                f"TP/EP/PP {sizes}"
            )
        yield
        return
    init_distributed(ParallelLayout(), seed=0)
    try:
        yield
    finally:
        destroy_distributed()


def _build_model(arch: Qwen3MoeArch, dtype: torch.dtype):
    from hyrl.backends.megatron.model import ParallelLayout, build_gpt_model

    # Local spec whatever the machine: conversion only moves tensors; on CPU nothing else builds.
    return build_gpt_model(arch, ParallelLayout(), transformer_impl="local").to(dtype).eval()


# -- conversions ------------------------------------------------------------------------------
def hf_to_mcore(
    hf_dir: str | Path,
    out_dir: str | Path,
    tp: int = 1,
    ep: int = 1,
    pp: int = 1,
    spec: str = "local",
    vp_layers: int | None = None,
) -> CheckpointMetadata:
    """A Hugging Face Qwen3-MoE directory -> an hyrl mcore checkpoint in out_dir (new or empty).

    tp/ep/pp/vp_layers (layers per virtual pipeline stage): the layout the checkpoint is meant
    for, checked and recorded (any valid layout loads it). spec: "local" or
    "transformer_engine", the layer spec whose sharded keys to write.
    """
    from hyrl.backends.megatron import weights
    from hyrl.backends.megatron.model_checkpoint import SPECS, save_mcore

    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    if spec not in SPECS:
        raise ConversionError(f"--transformer-impl {spec}: choose from {', '.join(SPECS)}")
    arch = read_hf_arch(hf_dir)
    check_layout(arch, tp, ep, pp, vp_layers)
    check_out_dir(out_dir)
    reader = HFWeights(hf_dir)
    dtype = check_hf_weights(reader, arch)  # from the metadata, before any process group
    with reader, one_process_group():
        model = _build_model(arch, dtype)
        weights.load_from_hf(model, reader, arch)  # one tensor at a time, into the model
        intended = {
            "tensor_model_parallel_size": tp,
            "expert_model_parallel_size": ep,
            "pipeline_model_parallel_size": pp,
            "virtual_pipeline_model_parallel_size": (
                None if vp_layers is None else arch.num_layers // pp // vp_layers
            ),
        }
        return save_mcore(
            model,
            out_dir,
            arch,
            spec=spec,
            intended_layout=intended,
            source=str(hf_dir.resolve()),
            hf_assets_from=hf_dir,
        )


def mcore_to_hf(
    load_dir: str | Path, out_dir: str | Path, max_shard_bytes: int = 5 * 1024**3
) -> CheckpointMetadata:
    """An hyrl mcore checkpoint -> a Hugging Face directory (safetensors, config, tokenizer files).

    Everything needed is in the checkpoint's metadata: no architecture or layout flags.
    """
    from hyrl.backends.megatron import weights
    from hyrl.backends.megatron.model_checkpoint import load_mcore_into, stored_dtypes

    load_dir, out_dir = Path(load_dir), Path(out_dir)
    metadata = read_checkpoint_metadata(load_dir)
    check_out_dir(out_dir)
    arch = metadata.arch
    with one_process_group():
        dtypes = stored_dtypes(load_dir)
        if len(dtypes) != 1:
            raise ConversionError(
                f"--load {load_dir}: tensors in dtypes {sorted(map(str, dtypes))}; "
                "hyrl converts checkpoints stored in one dtype"
            )
        dtype = next(iter(dtypes))
        model = _build_model(arch, dtype)
        load_mcore_into(model, load_dir, arch)
        # one parameter at a time into shards written as they fill: the model and one shard
        writer = HFShardWriter(out_dir, max_shard_bytes)
        for name, tensor in weights.iter_full_parameters(model, arch):
            for hf_name, hf_tensor in hf_mapping.megatron_to_hf_checkpoint(name, tensor, arch):
                writer.add(hf_name, hf_tensor)
        writer.finish()
        del model
    assets = load_dir / HF_ASSETS_SUBDIR
    if (assets / "config.json").is_file():
        copy_assets(assets, out_dir)
    else:  # saved by a job that did not start from an HF directory: describe the architecture
        config = arch.to_hf_config()
        config.dtype = str(dtype).removeprefix("torch.")
        config.architectures = ["Qwen3MoeForCausalLM"]
        config.to_json_file(str(out_dir / "config.json"))
    return metadata
