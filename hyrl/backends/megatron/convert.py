"""`hyrl convert`'s conversions of Qwen3-MoE: Hugging Face directory <-> Megatron distributed
checkpoint (the command line: hyrl.backends.megatron.convert_cli).

Conversion runs in one process (world size 1, TP=EP=PP=1): a distributed checkpoint's keys are
global, so it is resharded when it is loaded, and a checkpoint written at TP=1 loads at TP=2 x
EP=2 (tests/unit/backends/test_convert.py proves both directions). --tp/--ep/--pp therefore do
not change what is written: they are checked against the architecture (so a layout that cannot
be built is refused now, not at the first training step) and recorded as the intended layout.

Every check on the input runs before a process group starts (hyrl.checkpoint.checks); failures
raise ConversionError with the flag or config field, the value found and the value expected.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import torch

from hyrl.backends.megatron import weights
from hyrl.backends.megatron.model import (
    ParallelLayout,
    build_gpt_model,
    destroy_distributed,
    init_distributed,
)
from hyrl.backends.megatron.model_checkpoint import (
    SPECS,
    load_mcore_into,
    save_mcore,
    stored_dtypes,
)
from hyrl.checkpoint.checks import check_hf_weights, check_layout, check_out_dir
from hyrl.checkpoint.hf_io import (
    ConversionError,
    HFShardWriter,
    HFWeights,
    copy_assets,
    read_hf_arch,
)
from hyrl.checkpoint.model_dir import (
    HF_ASSETS_SUBDIR,
    CheckpointMetadata,
    read_checkpoint_metadata,
)
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch


@contextmanager
def one_process_group():
    """World size 1 with TP=EP=PP=1, started here (and ended) unless the caller already has one."""
    from megatron.core import parallel_state

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
