"""Megatron distributed checkpoints (torch_dist) of a Qwen3-MoE GPTModel, plus hyrl's metadata
(the directory and its hyrl_checkpoint.json: hyrl.checkpoint.model_dir).

The sharded keys are global (layers stacked, experts indexed globally, TP shards placed by
offset), so a checkpoint saved under one TP/EP/PP layout loads under any other, virtual
pipeline stages included (a model held in chunks saves and loads each chunk's keys): the layout
it was saved from is recorded, not required.
"""

from __future__ import annotations

from pathlib import Path

import torch

from hyrl.backends.megatron import checkpoint_writer, cpu_compat
from hyrl.backends.megatron.weights import model_chunks
from hyrl.checkpoint.hf_io import ConversionError
from hyrl.checkpoint.model_dir import (
    HF_ASSETS_SUBDIR,
    METADATA_FILE,
    MODEL_SUBDIR,
    CheckpointMetadata,
    arch_mismatches,
    package_version,
    read_checkpoint_metadata,
)
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

SPECS = ("local", "transformer_engine")

# Sharded-checkpoint keys that differ between the two layer specs (megatron-core 0.16.1,
# gpt_layer_specs.py). The local spec's sharded_state_dict_keys_map already saves its input norm
# under TE's fused name (`self_attention.linear_qkv.layer_norm_weight`), and its pre-MLP norm
# under `mlp.linear_fc1.layer_norm_weight`; the TE spec with MoE keeps a separate TENorm there.
LOCAL_TO_TE_KEYS = {
    "decoder.layers.mlp.linear_fc1.layer_norm_weight": "decoder.layers.pre_mlp_layernorm.weight",
}
TE_TO_LOCAL_KEYS = {te: local for local, te in LOCAL_TO_TE_KEYS.items()}


def current_layout(model) -> dict:
    """The parallel layout of the running process groups (and the model's sequence parallel;
    `model` one module or its chunks)."""
    from megatron.core import parallel_state

    model = model_chunks(model)[0]
    return {
        "tensor_model_parallel_size": parallel_state.get_tensor_model_parallel_world_size(),
        "pipeline_model_parallel_size": parallel_state.get_pipeline_model_parallel_world_size(),
        "virtual_pipeline_model_parallel_size": (
            parallel_state.get_virtual_pipeline_model_parallel_world_size()
        ),
        "expert_model_parallel_size": parallel_state.get_expert_model_parallel_world_size(),
        "expert_tensor_parallel_size": parallel_state.get_expert_tensor_parallel_world_size(),
        "sequence_parallel": bool(getattr(model.config, "sequence_parallel", False)),
    }


def sharded_state_dict_of(model) -> dict:
    """megatron's sharded state dict of a model (one GPTModel, or its chunks: one dict, each
    chunk's entries under `chunk<v>.`; the sharded keys inside are global either way)."""
    chunks: list = model_chunks(model)  # megatron modules: sharded_state_dict is theirs
    if len(chunks) == 1:
        return chunks[0].sharded_state_dict()
    return {
        f"chunk{index}.{name}": item
        for index, chunk in enumerate(chunks)
        for name, item in chunk.sharded_state_dict().items()
    }


def load_state_dict_of(model, state: dict) -> tuple[list[str], list[str]]:
    """load_state_dict(strict=False) of sharded_state_dict_of's layout; (missing, unexpected)."""
    chunks = model_chunks(model)
    if len(chunks) == 1:
        missing, unexpected = chunks[0].load_state_dict(state, strict=False)
        return list(missing), list(unexpected)
    missing, unexpected = [], []
    for index, chunk in enumerate(chunks):
        prefix = f"chunk{index}."
        part = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
        result = chunk.load_state_dict(part, strict=False)
        missing += [prefix + k for k in result.missing_keys]
        unexpected += [prefix + k for k in result.unexpected_keys]
    return missing, unexpected


def rename_sharded_keys(sharded: dict, renames: dict[str, str]) -> dict:
    """Rename the ShardedTensors whose key is in renames (in place; the dict is returned)."""
    from megatron.core.dist_checkpointing import ShardedObject

    for item in sharded.values():
        if not isinstance(item, ShardedObject) and getattr(item, "key", None) in renames:
            item.key = renames[item.key]
    return sharded


def save_mcore(
    model,
    out_dir: str | Path,
    arch: Qwen3MoeArch,
    spec: str = "local",
    intended_layout: dict | None = None,
    source: str = "",
    hf_assets_from: str | Path | None = None,
) -> CheckpointMetadata:
    """Save this GPTModel (or its chunks) as a distributed checkpoint plus hyrl metadata
    (collective: every rank of the model's process groups calls it, under whatever layout is
    active).

    spec: the sharded-key naming to write, "local" or "transformer_engine" (the model may be
    built with either spec; the one key where they differ is renamed as needed).
    """
    from megatron.core import dist_checkpointing

    if spec not in SPECS:
        raise ConversionError(f"--transformer-impl {spec}: choose from {', '.join(SPECS)}")
    out_dir = Path(out_dir)
    model_dir = out_dir / MODEL_SUBDIR
    rank = torch.distributed.get_rank()
    if model_dir.exists() and any(model_dir.iterdir()):  # every rank refuses, none waits alone
        raise ConversionError(f"--out {out_dir}: {MODEL_SUBDIR}/ exists and is not empty")
    torch.distributed.barrier()
    if rank == 0:
        model_dir.mkdir(parents=True, exist_ok=True)
    torch.distributed.barrier()
    cpu_compat.apply()  # CPU: the writer stages tensors with torch.cuda.synchronize()
    sharded = sharded_state_dict_of(model)
    # Whichever spec built the model, write the keys `spec` names.
    sharded = rename_sharded_keys(
        sharded, LOCAL_TO_TE_KEYS if spec == "transformer_engine" else TE_TO_LOCAL_KEYS
    )
    dtypes = {p.dtype for chunk in model_chunks(model) for p in chunk.parameters()}
    checkpoint_writer.start()  # before megatron starts its own (see there)
    dist_checkpointing.save(sharded, str(model_dir))
    metadata = CheckpointMetadata(
        arch=arch,
        spec=spec,
        dtype=str(next(iter(dtypes))).removeprefix("torch.") if len(dtypes) == 1 else "mixed",
        saved_layout=current_layout(model),
        intended_layout=intended_layout or current_layout(model),
        source=source,
        hyrl_version=package_version("hyrl"),
        megatron_core_version=package_version("megatron-core"),
    )
    if rank == 0:
        if hf_assets_from is not None:
            from hyrl.checkpoint.hf_io import copy_assets

            copy_assets(hf_assets_from, out_dir / HF_ASSETS_SUBDIR)
        (out_dir / METADATA_FILE).write_text(metadata.to_json())
    torch.distributed.barrier()
    return metadata


def _stored_keys(model_dir: Path) -> set[str]:
    from megatron.core.dist_checkpointing.serialization import load_sharded_metadata

    return set(load_sharded_metadata(str(model_dir)))


def stored_dtypes(load_dir: str | Path) -> set[torch.dtype]:
    """The dtypes of the tensors in a checkpoint, read from its metadata (no tensor is loaded)."""
    from megatron.core.dist_checkpointing import load_tensors_metadata

    return {t.dtype for t in load_tensors_metadata(str(Path(load_dir) / MODEL_SUBDIR)).values()}


def _align_to_checkpoint(sharded: dict, stored: set[str], load_dir: Path) -> dict:
    """Request what the checkpoint holds: local/TE key aliases resolved, absent extra state
    skipped."""
    from megatron.core.dist_checkpointing import ShardedObject

    aligned, missing = {}, []
    for name, item in sharded.items():
        if isinstance(item, ShardedObject):
            # Module extra state (None for local layers; TE's FP8 metadata): keep the module's own
            # when the checkpoint has none, e.g. a TE model loading a local-spec checkpoint.
            if item.unique_key in stored:
                aligned[name] = item
            continue
        if item.key not in stored:
            alias = LOCAL_TO_TE_KEYS.get(item.key) or TE_TO_LOCAL_KEYS.get(item.key)
            if alias in stored:
                item.key = alias
            else:
                missing.append(item.key)
        aligned[name] = item
    if missing:
        raise ConversionError(
            f"--load {load_dir}: the checkpoint has no {sorted(set(missing))[:4]} "
            "that this model needs (another architecture?)"
        )
    return aligned


@torch.no_grad()
def load_mcore_into(
    model, load_dir: str | Path, arch: Qwen3MoeArch | None = None
) -> CheckpointMetadata:
    """Load a checkpoint into an already built GPTModel (or its chunks), resharded to the active
    TP/EP/PP layout and virtual stages (collective: every rank calls it). Parameters take the
    model's dtype.

    arch: the architecture the caller built (e.g. from its flags); a checkpoint of another one is
    refused, naming each differing field.
    """
    from megatron.core import dist_checkpointing

    load_dir = Path(load_dir)
    metadata = read_checkpoint_metadata(load_dir)
    if arch is not None:
        problems = arch_mismatches(
            metadata.arch,
            arch,
            f"the checkpoint {load_dir}",
            "the flags",
            label=lambda name: "--" + name.replace("_", "-"),
        )
        if problems:
            raise ConversionError(
                "--load: the checkpoint's architecture differs from the flags:\n  "
                + "\n  ".join(problems)
            )
    cpu_compat.apply()  # CPU: the writer stages tensors with torch.cuda.synchronize()
    model_dir = load_dir / MODEL_SUBDIR
    request = _align_to_checkpoint(sharded_state_dict_of(model), _stored_keys(model_dir), load_dir)
    state = dist_checkpointing.load(request, str(model_dir))
    missing, unexpected = load_state_dict_of(model, state)
    missing = [k for k in missing if not k.endswith("._extra_state")]
    if missing or unexpected:
        raise ConversionError(
            f"--load {load_dir}: parameters not loaded {missing[:4]}, unexpected {unexpected[:4]}"
        )
    return metadata
