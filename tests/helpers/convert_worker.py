"""Run by torchrun from tests/unit/backends/test_convert.py: reshard an hyrl mcore checkpoint on
load, and save one.

Loads CKPT_IN (saved at TP=1) into a GPTModel built at TP x EP, gathers the full weights, compares
them bit for bit with the HF directory's, then saves the sharded model to CKPT_OUT.

Usage:
  torchrun --nproc-per-node N tests/helpers/convert_worker.py \
    CKPT_IN HF_DIR CKPT_OUT RESULT.json TP EP
"""

import json
import sys

import torch


def main(ckpt_in: str, hf_dir: str, ckpt_out: str, result_path: str, tp: int, ep: int) -> None:
    from hyrl.backends.megatron import weights
    from hyrl.backends.megatron.model import (
        ParallelLayout,
        build_gpt_model,
        destroy_distributed,
        init_distributed,
    )
    from hyrl.backends.megatron.model_checkpoint import load_mcore_into, save_mcore
    from hyrl.checkpoint.hf_io import load_hf_state_dict
    from hyrl.checkpoint.model_dir import read_checkpoint_metadata
    from hyrl.models.qwen3_moe import hf_mapping

    arch = read_checkpoint_metadata(ckpt_in).arch
    layout = ParallelLayout(
        tensor_model_parallel_size=tp, expert_model_parallel_size=ep, sequence_parallel=tp > 1
    )
    init_distributed(layout, seed=5)  # a different seed: loaded weights must not depend on init
    model = build_gpt_model(arch, layout, transformer_impl="local")
    local_shapes = {name: list(p.shape) for name, p in model.named_parameters()}
    load_mcore_into(model, ckpt_in, arch)
    gathered = weights.gather_full_state_dict(model, arch)
    expected = hf_mapping.hf_to_megatron(load_hf_state_dict(hf_dir), arch)
    save_mcore(model, ckpt_out, arch, source=f"convert_worker TP{tp} EP{ep}")
    if torch.distributed.get_rank() == 0:
        result = {
            "same_names": sorted(gathered) == sorted(expected),
            "different_tensors": sorted(
                n
                for n in expected
                if n not in gathered or not torch.equal(gathered[n], expected[n])
            ),
            "linear_qkv_shard_shape": local_shapes[
                "decoder.layers.0.self_attention.linear_qkv.weight"
            ],
            "local_experts": sum(
                ".linear_fc1." in n for n in local_shapes if "layers.0.mlp.experts" in n
            ),
        }
        with open(result_path, "w") as f:
            json.dump(result, f)
    destroy_distributed()


if __name__ == "__main__":  # the torch_dist writer spawns helper processes that re-import __main__
    main(*sys.argv[1:5], int(sys.argv[5]), int(sys.argv[6]))
