"""`hyrl convert`: a tiny Qwen3-MoE goes HF -> Megatron distributed checkpoint -> HF unchanged, the
checkpoint reshards on load (saved at TP=1, loaded at TP=2 x EP=2, and back), and bad input is
refused with a message that names the flag or field and the value.

Only the local layer spec builds on CPU: Transformer Engine's names are exercised through the
sharded-key table (the one key that differs), not through a TE model.
"""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from testpaths import HELPERS
from torchrun_worker import run_ranks

from hyrl.backends.megatron import convert_cli as cli
from hyrl.backends.megatron.convert import hf_to_mcore, mcore_to_hf
from hyrl.backends.megatron.model_checkpoint import load_mcore_into
from hyrl.checkpoint.hf_io import (
    ConversionError,
    load_hf_state_dict,
    load_raw_hf_tensors,
    read_hf_arch,
    save_hf_state_dict,
)
from hyrl.checkpoint.model_dir import read_checkpoint_metadata
from hyrl.models.qwen3_moe.config import TINY

WORKER = HELPERS / "convert_worker.py"


def _save_tiny_hf(path: Path, dtype=torch.float32, seed=0) -> Path:
    from transformers import Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    Qwen3MoeForCausalLM(TINY.to_hf_config()).to(dtype).save_pretrained(path)
    return path


def _assert_same_files(expected_dir: Path, got_dir: Path) -> None:
    expected, got = load_raw_hf_tensors(expected_dir), load_raw_hf_tensors(got_dir)
    assert sorted(got) == sorted(expected)
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype, name
        assert torch.equal(got[name], tensor), name


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return _save_tiny_hf(tmp_path_factory.mktemp("hf") / "tiny")


@pytest.fixture(scope="module")
def mcore_dir(hf_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("mcore") / "ckpt"
    assert (
        cli.main(
            ["hf-to-mcore", "--hf-dir", str(hf_dir), "--out", str(out), "--tp", "2", "--ep", "2"]
        )
        == 0
    )
    return out


# -- round trips -------------------------------------------------------------------------------
def test_hf_to_mcore_to_hf_gives_back_the_same_tensor_names_values_dtypes_and_config(
    hf_dir, mcore_dir, tmp_path
):
    out = tmp_path / "hf_back"
    assert cli.main(["mcore-to-hf", "--load", str(mcore_dir), "--out", str(out)]) == 0
    _assert_same_files(hf_dir, out)
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (hf_dir / "config.json").read_text()
    )


def test_bfloat16_weights_stay_bfloat16_and_bit_exact_through_the_round_trip(tmp_path):
    hf = _save_tiny_hf(tmp_path / "hf_bf16", dtype=torch.bfloat16, seed=3)
    meta = hf_to_mcore(hf, tmp_path / "mcore")
    assert meta.dtype == "bfloat16"
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back")
    _assert_same_files(hf, tmp_path / "back")
    assert {t.dtype for t in load_raw_hf_tensors(tmp_path / "back").values()} == {torch.bfloat16}


def test_checkpoint_directory_holds_a_dist_checkpoint_hf_assets_and_hyrl_metadata(
    hf_dir, mcore_dir
):
    from megatron.core.dist_checkpointing import check_is_distributed_checkpoint

    assert check_is_distributed_checkpoint(str(mcore_dir / "model"))
    assert (mcore_dir / "hf" / "config.json").is_file()
    meta = read_checkpoint_metadata(mcore_dir)
    assert meta.arch == read_hf_arch(hf_dir) == TINY
    assert (meta.spec, meta.dtype, meta.model_type) == ("local", "float32", "qwen3_moe")
    assert meta.saved_layout["tensor_model_parallel_size"] == 1  # conversion runs as one process
    assert meta.intended_layout == {
        "tensor_model_parallel_size": 2,
        "expert_model_parallel_size": 2,
        "pipeline_model_parallel_size": 1,
        "virtual_pipeline_model_parallel_size": None,
    }
    assert meta.hyrl_version and meta.megatron_core_version == "0.16.1"


def test_gpt_model_loaded_from_the_checkpoint_matches_transformers_logits_within_1e_5(
    hf_dir, mcore_dir
):
    from transformers import Qwen3MoeForCausalLM

    from hyrl.backends.megatron.model import (
        ParallelLayout,
        build_gpt_model,
        causal_attention_mask,
        destroy_distributed,
        init_distributed,
    )

    layout = ParallelLayout()
    init_distributed(layout, seed=11)
    try:
        model = build_gpt_model(TINY, layout, transformer_impl="local").eval()
        load_mcore_into(model, mcore_dir, TINY)
        tokens = torch.randint(
            0, TINY.vocab_size, (3, 11), generator=torch.Generator().manual_seed(2)
        )
        with torch.no_grad():
            got = model(
                tokens, torch.arange(11).expand_as(tokens), causal_attention_mask(11, tokens.device)
            )
            expected = Qwen3MoeForCausalLM.from_pretrained(hf_dir).eval()(tokens).logits
    finally:
        destroy_distributed()
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= 1e-5


def test_transformer_engine_keys_rename_only_the_pre_mlp_norm_and_convert_back_bit_exact(
    hf_dir, mcore_dir, tmp_path
):
    from megatron.core.dist_checkpointing import load_tensors_metadata

    local_keys = set(load_tensors_metadata(str(mcore_dir / "model")))
    meta = hf_to_mcore(hf_dir, tmp_path / "te", spec="transformer_engine")
    te_keys = set(load_tensors_metadata(str(tmp_path / "te" / "model")))
    assert meta.spec == "transformer_engine"
    assert local_keys - te_keys == {"decoder.layers.mlp.linear_fc1.layer_norm_weight"}
    assert te_keys - local_keys == {"decoder.layers.pre_mlp_layernorm.weight"}
    # The input norm is saved under TE's fused name by both specs.
    assert "decoder.layers.self_attention.linear_qkv.layer_norm_weight" in te_keys & local_keys
    mcore_to_hf(tmp_path / "te", tmp_path / "back")  # loads TE keys into a local-spec model
    _assert_same_files(hf_dir, tmp_path / "back")


@pytest.mark.slow
def test_checkpoint_saved_at_tp1_loads_at_tp2_ep2_and_a_tp2_ep2_save_converts_back_bit_exact(
    hf_dir, mcore_dir, tmp_path
):
    result_path, resaved = tmp_path / "result.json", tmp_path / "tp2ep2"
    run_ranks(WORKER, 2, mcore_dir, hf_dir, resaved, result_path, 2, 2)
    result = json.loads(result_path.read_text())
    # Really sharded: half the qkv rows (TP=2) and 2 of 4 experts (EP=2) on each rank.
    assert result["linear_qkv_shard_shape"] == [64, 64]
    assert result["local_experts"] == 2
    assert result["same_names"] and result["different_tensors"] == []

    saved = read_checkpoint_metadata(resaved).saved_layout
    assert (saved["tensor_model_parallel_size"], saved["expert_model_parallel_size"]) == (2, 2)
    mcore_to_hf(resaved, tmp_path / "back")  # one process, TP=1, from a TP=2 x EP=2 save
    _assert_same_files(hf_dir, tmp_path / "back")
    assert read_hf_arch(tmp_path / "back") == TINY  # config.json rebuilt from the metadata


# -- refusals ----------------------------------------------------------------------------------
def _edited_copy(hf_dir: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "edited"
    shutil.copytree(hf_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    edit(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def _hub_style_eight_experts(config: dict) -> None:
    config.pop("num_local_experts")
    config["num_experts"] = 8  # the released checkpoints' spelling


def test_config_json_that_disagrees_with_the_weights_is_refused_naming_field_and_both_values(
    hf_dir, tmp_path, capsys
):
    edited = _edited_copy(hf_dir, tmp_path, _hub_style_eight_experts)
    out = tmp_path / "out"
    assert cli.main(["hf-to-mcore", "--hf-dir", str(edited), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "num_experts: 4 in the weights" in err and "8 in config.json" in err
    assert not out.exists() and not torch.distributed.is_initialized()


def test_a_model_type_other_than_qwen3_moe_is_refused(hf_dir, tmp_path, capsys):
    edited = _edited_copy(hf_dir, tmp_path, lambda c: c.update(model_type="llama"))
    assert cli.main(["hf-to-mcore", "--hf-dir", str(edited), "--out", str(tmp_path / "out")]) == 2
    assert "model_type 'llama'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--tp", "3"],
            "--tp 3: must divide num_attention_heads (4), num_query_groups (2), vocab_size (16)",
        ),
        (["--tp", "0"], "--tp 0: must be a positive integer"),
        (["--ep", "3"], "--ep 3: must divide num_experts (4); valid: [1, 2, 4]"),
        (["--pp", "3"], "--pp 3: must divide num_layers (2); valid: [1, 2]"),
        (
            ["--num-layers-per-virtual-pipeline-stage", "1"],
            "--num-layers-per-virtual-pipeline-stage 1: needs --pp > 1",
        ),
        (
            ["--pp", "2", "--num-layers-per-virtual-pipeline-stage", "1"],
            "--num-layers-per-virtual-pipeline-stage 1: must split each pipeline rank's 1 layers "
            "into two or more virtual stages; valid: []",
        ),
        (["--transformer-impl", "te"], "--transformer-impl: invalid choice: 'te'"),
    ],
)
def test_a_layout_the_architecture_cannot_use_is_refused_naming_the_flag(
    hf_dir, tmp_path, capsys, flags, message
):
    out = tmp_path / "out"
    assert cli.main(["hf-to-mcore", "--hf-dir", str(hf_dir), "--out", str(out), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not torch.distributed.is_initialized()


def test_a_checkpoint_meant_for_virtual_pipeline_stages_records_them(tmp_path):
    """4 layers at PP=2 in 1-layer virtual stages: 2 chunks per rank, recorded as intended."""
    from transformers import Qwen3MoeForCausalLM

    four_layers = replace(TINY, num_layers=4)
    torch.manual_seed(0)
    Qwen3MoeForCausalLM(four_layers.to_hf_config()).save_pretrained(tmp_path / "hf")
    flags = ["--pp", "2", "--num-layers-per-virtual-pipeline-stage", "1"]
    out = tmp_path / "out"
    assert (
        cli.main(["hf-to-mcore", "--hf-dir", str(tmp_path / "hf"), "--out", str(out), *flags]) == 0
    )
    intended = read_checkpoint_metadata(out).intended_layout
    assert intended["pipeline_model_parallel_size"] == 2
    assert intended["virtual_pipeline_model_parallel_size"] == 2


@pytest.mark.parametrize("command", ["hf-to-mcore", "mcore-to-hf"])
def test_an_existing_non_empty_out_is_refused_and_left_untouched(
    hf_dir, mcore_dir, tmp_path, capsys, command
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    source = ["--hf-dir", str(hf_dir)] if command == "hf-to-mcore" else ["--load", str(mcore_dir)]
    assert cli.main([command, *source, "--out", str(out)]) == 2
    assert f"--out {out}: exists and is not empty; refusing to overwrite" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (
        out / "keep.txt"
    ).read_text() == "mine"


def test_mcore_to_hf_refuses_a_directory_that_is_not_an_hyrl_checkpoint(
    hf_dir, mcore_dir, tmp_path, capsys
):
    assert cli.main(["mcore-to-hf", "--load", str(hf_dir), "--out", str(tmp_path / "a")]) == 2
    assert (
        f"--load {hf_dir}: not an hyrl mcore checkpoint: no hyrl_checkpoint.json"
        in capsys.readouterr().err
    )
    bare = mcore_dir / "model"  # a Megatron checkpoint, but without hyrl's metadata
    assert cli.main(["mcore-to-hf", "--load", str(bare), "--out", str(tmp_path / "b")]) == 2
    assert (
        "a Megatron distributed checkpoint without hyrl_checkpoint.json" in capsys.readouterr().err
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_loading_into_a_model_of_another_architecture_is_refused_naming_the_flag(mcore_dir):
    with pytest.raises(
        ConversionError, match="--num-experts: 4 in the checkpoint .*, 8 in the flags"
    ):
        load_mcore_into(model=None, load_dir=mcore_dir, arch=replace(TINY, num_experts=8))


# -- Hugging Face files ------------------------------------------------------------------------
def test_sharded_safetensors_with_an_index_read_back_equal_and_load_in_transformers(
    hf_dir, tmp_path
):
    from transformers import Qwen3MoeForCausalLM

    state = load_hf_state_dict(hf_dir)
    assert state["model.layers.0.mlp.experts.gate_up_proj"].shape == (
        4,
        128,
        64,
    )  # fused [gate; up]
    files = save_hf_state_dict(state, tmp_path, max_shard_bytes=200_000)
    assert files[-1] == "model.safetensors.index.json" and len(files) > 2
    back = load_hf_state_dict(tmp_path)
    assert sorted(back) == sorted(state) and all(torch.equal(back[k], state[k]) for k in state)
    shutil.copy(hf_dir / "config.json", tmp_path / "config.json")
    loaded = Qwen3MoeForCausalLM.from_pretrained(tmp_path).state_dict()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
