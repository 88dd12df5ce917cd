"""Loading a Hugging Face directory one slice at a time: each rank reads only its own TP/EP/PP
shards (`HFWeights`, `hf_mapping.read_megatron_shard`, `weights.load_from_hf`), bit-equal to a
full load, and a rank's host memory stays well under the whole model (tools/bench_load.py)."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from testpaths import ROOT

from hyrl.checkpoint.hf_io import HFShardWriter, HFWeights, hf_shapes
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import TINY

BENCH = ROOT / "tools" / "bench_load.py"
# TINY with 2 query groups and an even vocabulary: every TP-split parameter splits over 2 ranks
ARCH = replace(TINY, num_query_groups=2)
# the dimension megatron splits each TP-split parameter along (the rest are not split)
PARTITION = {
    "embedding.word_embeddings.weight": 0,
    "output_layer.weight": 0,
    "self_attention.linear_qkv.weight": 0,
    "self_attention.linear_proj.weight": 1,
}


def _random_state(arch, seed=0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(shape, generator=generator).to(torch.bfloat16)
        for name, shape in hf_shapes(arch).items()
    }


def _write(state, path, fused: bool, shard_bytes: int = 20_000):
    """A directory in the checkpoint layout (per-expert tensors) or with transformers' fused
    expert stacks on disk, in small shards so tensors of one parameter land in several files."""
    writer = HFShardWriter(path, shard_bytes)
    named = sorted(state.items()) if fused else hf_mapping.split_fused_experts(state)
    for name, tensor in named:
        writer.add(name, tensor)
    writer.finish()
    return path


def _partition_dim(name: str) -> int | None:
    return next((d for suffix, d in PARTITION.items() if name.endswith(suffix)), None)


@pytest.mark.parametrize("fused", [False, True], ids=["per-expert files", "fused experts"])
def test_each_shard_read_alone_equals_the_full_conversion_cut_as_megatron_cuts_it(tmp_path, fused):
    state = _random_state(ARCH)
    reader = HFWeights(_write(state, tmp_path, fused))
    assert len(list(tmp_path.glob("*.safetensors"))) > 2  # a parameter's parts span files
    full = hf_mapping.hf_to_megatron(state, ARCH)
    for name, tensor in full.items():
        dim = _partition_dim(name)
        for tp_size in (1, 2):
            for tp_rank in range(tp_size):
                got = hf_mapping.read_megatron_shard(
                    name, ARCH, reader, tp_rank, tp_size, None if tp_size == 1 else dim
                )
                cut = dim is not None and tp_size > 1
                want = tensor.chunk(tp_size, dim)[tp_rank] if cut else tensor
                assert got.dtype == torch.bfloat16 and torch.equal(got, want), (name, tp_rank)
    reader.close()


def test_the_reader_keeps_little_of_the_files_mapped_and_names_a_missing_tensor(tmp_path):
    state = _random_state(ARCH)
    reader = HFWeights(_write(state, tmp_path, fused=False), max_mapped_bytes=10_000)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert reader.shape(name) == tuple(state[name].shape) and reader.dtype(name) == torch.bfloat16
    for expert in range(ARCH.num_experts):
        reader.read(f"model.layers.1.mlp.experts.{expert}.down_proj.weight")
        assert len(reader._open) <= 1  # one file open at a time, dropped past the budget
    assert reader.fused_shapes() == {n: tuple(t.shape) for n, t in state.items()}
    with pytest.raises(KeyError, match="no tensor model.layers.9.mlp.gate.weight"):
        reader.read("model.layers.9.mlp.gate.weight")


def _bench(*flags: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--json", *flags], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_each_rank_of_a_100m_model_at_ep2_grows_by_under_0_6_of_the_model(tmp_path):
    report = _bench("--path", "sharded")  # ~104M parameters, EP=2 on 2 ranks, checked
    assert report["parameters"] >= 100_000_000 and report["layout"]["ep"] == 2
    ranks = report["paths"]["sharded"]["ranks"]
    assert len(ranks) == 2
    for rank in ranks:
        assert rank["bit_equal"] is True, rank["different"][:5]
        # the rank's own shard is ~0.52 of the model (half the experts): the load adds little
        assert rank["peak_growth_bytes"] < 0.6 * report["model_bytes"], rank


@pytest.mark.slow
@pytest.mark.parametrize("layout", [("--tp", "2"), ("--pp", "2")], ids=["tp2", "pp2"])
def test_sharded_load_is_bit_equal_to_a_full_load_under_tp_and_pp(layout):
    small = ("--layers", "2", "--hidden", "64", "--experts", "4", "--ffn", "32", "--vocab", "256")
    report = _bench(*small, "--ep", "1", *layout, "--path", "sharded")
    for rank in report["paths"]["sharded"]["ranks"]:
        assert rank["bit_equal"] is True, rank["different"][:5]
