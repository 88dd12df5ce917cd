"""The one HF <-> Megatron table, checked against transformers' own Qwen3MoeForCausalLM."""

import pytest
import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B, TINY


@pytest.fixture(scope="module")
def hf_model():
    from transformers import Qwen3MoeForCausalLM

    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(TINY.to_hf_config()).eval()


@pytest.fixture(scope="module")
def megatron_model(hf_model):
    """A one-rank gloo GPTModel (local spec) holding the HF model's weights."""
    from hyrl.backends.megatron import weights
    from hyrl.backends.megatron.model import (
        ParallelLayout,
        build_gpt_model,
        destroy_distributed,
        init_distributed,
    )

    layout = ParallelLayout()
    init_distributed(layout, seed=1)
    model = build_gpt_model(TINY, layout, transformer_impl="local").eval()
    weights.load_full_state_dict(
        model, hf_mapping.hf_to_megatron(hf_model.state_dict(), TINY), TINY
    )
    yield model
    destroy_distributed()


def test_hf_to_megatron_to_hf_round_trip_is_bit_exact(hf_model):
    hf_state = hf_model.state_dict()
    back = hf_mapping.megatron_to_hf(hf_mapping.hf_to_megatron(hf_state, TINY), TINY)
    assert set(back) == set(hf_state)
    for name, tensor in hf_state.items():
        assert torch.equal(back[name], tensor), name


def test_table_covers_every_megatron_parameter(megatron_model):
    assert set(hf_mapping.megatron_names(TINY)) == {n for n, _ in megatron_model.named_parameters()}


def test_te_names_differ_only_in_the_fused_input_norm():
    local, te = hf_mapping.megatron_names(TINY), hf_mapping.megatron_names(TINY, te_names=True)
    changed = [(a, b) for a, b in zip(local, te) if a != b]
    assert changed == [
        (
            f"decoder.layers.{i}.input_layernorm.weight",
            f"decoder.layers.{i}.self_attention.linear_qkv.layer_norm_weight",
        )
        for i in range(TINY.num_layers)
    ]


def test_megatron_logits_match_transformers_within_1e_5(hf_model, megatron_model):
    from hyrl.backends.megatron.model import causal_attention_mask

    tokens = torch.randint(0, TINY.vocab_size, (3, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf_model(tokens).logits
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        got = megatron_model(
            tokens, positions, causal_attention_mask(tokens.shape[1], tokens.device)
        )
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= 1e-5


def test_qwen3_30b_a3b_table_has_the_expected_size():
    names = hf_mapping.megatron_names(QWEN3_30B_A3B)
    # 3 global + 48 layers x (6 renames + qkv + 128 experts x 2)
    assert len(names) == 3 + 48 * (6 + 1 + 256)


def test_grouped_gemm_expert_names_map_to_the_local_specs_experts():
    """Transformer Engine's grouped experts (weight{e} of one linear_fc1/fc2) are the local
    spec's local_experts.{e}: one name table serves both."""
    from hyrl.models.qwen3_moe.hf_mapping import from_te_name

    assert (
        from_te_name("decoder.layers.3.mlp.experts.linear_fc1.weight7")
        == "decoder.layers.3.mlp.experts.local_experts.7.linear_fc1.weight"
    )
    assert (
        from_te_name("decoder.layers.0.mlp.experts.linear_fc2.weight12")
        == "decoder.layers.0.mlp.experts.local_experts.12.linear_fc2.weight"
    )
    local = "decoder.layers.0.mlp.experts.local_experts.2.linear_fc1.weight"
    assert from_te_name(local) == local  # local names stay as they are
    assert (
        from_te_name("decoder.layers.1.self_attention.linear_qkv.layer_norm_weight")
        == "decoder.layers.1.input_layernorm.weight"
    )


def test_megatron_names_grouped_experts_weight_e_and_checkpoints_them_like_sequential_mlp():
    """Pins what the mapping above assumes of the pinned megatron-core (TE does not import
    here, so its source is read): TEGroupedMLP keys expert e as `linear_fc1.weight{e}` and its
    sharded checkpoint is interchangeable with SequentialMLP's (so a local-spec checkpoint
    loads into the grouped model)."""
    import inspect

    from megatron.core.transformer.moe import experts

    source = inspect.getsource(experts.TEGroupedMLP.sharded_state_dict)
    assert "f'{name}.weight{i}'" in source
    assert "interchangable with SequentialMLP's" in source


def test_split_then_fuse_experts_is_the_identity_and_the_split_names_are_save_pretrained_s(
    hf_model,
):
    fused = hf_model.state_dict()
    split = dict(hf_mapping.split_fused_experts(fused))
    assert "model.layers.0.mlp.experts.1.up_proj.weight" in split
    assert not any(name.endswith("gate_up_proj") for name in split)
    refused = hf_mapping.fuse_split_experts(split)
    assert set(refused) == set(fused)
    assert all(torch.equal(refused[name], fused[name]) for name in fused)


def test_fuse_refuses_missing_expert_ids_and_missing_projections():
    one = torch.zeros(2, 3)
    prefix = "model.layers.0.mlp.experts"
    gap = {f"{prefix}.{e}.{p}_proj.weight": one for e in (0, 2) for p in ("gate", "up", "down")}
    with pytest.raises(ValueError, match=r"expert ids \[0, 2\] are not 0..1"):
        hf_mapping.fuse_split_experts(gap)
    no_down = {f"{prefix}.0.{p}_proj.weight": one for p in ("gate", "up")}
    with pytest.raises(ValueError, match=r"\.0: has \['gate_proj', 'up_proj'\], needs"):
        hf_mapping.fuse_split_experts(no_down)
