"""SGLang 0.5.23's own Qwen3-MoE ``load_weights`` on the tensors hyrl's weight sync sends.

SGLang's loader skips a name it cannot map without a word (models/qwen3_moe.py: ``if name not in
params_dict: continue``), so a name hyrl gets wrong would leave the server generating with stale
weights. Here every SGLang parameter starts as NaN; after hyrl's tensors are loaded one at a
time, each must have changed some parameter and none may be left NaN, and the fused parameters
must hold hyrl's values where SGLang's layout puts them.
"""

from __future__ import annotations

import pytest
import torch
from sglang_model import build_sglang_qwen3_moe, sglang_runtime
from transformers import Qwen3MoeForCausalLM

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import TINY
from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors


def trainer_stream(hf_state: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """What the trainer streams: each full Megatron parameter renamed to the checkpoint layout
    (hf_mapping.megatron_to_hf_checkpoint, as backends/megatron/weights.py calls it)."""
    mcore = hf_mapping.hf_to_megatron(hf_state, TINY)
    return [
        pair
        for name, t in mcore.items()
        for pair in hf_mapping.megatron_to_hf_checkpoint(name, t, TINY)
    ]


def nan_parameters(model) -> dict[str, torch.nn.Parameter]:
    params = dict(model.named_parameters())
    for param in params.values():
        param.data.fill_(float("nan"))
    return params


def skipped_by_sglang(model, named) -> list[str]:
    """The names whose load changed no parameter."""
    params = dict(model.named_parameters())
    skipped = []
    for name, tensor in named:
        before = sum(int(p.isnan().sum()) for p in params.values())
        model.load_weights([(name, tensor)])
        if sum(int(p.isnan().sum()) for p in params.values()) == before:
            skipped.append(name)
    return skipped


@pytest.fixture(scope="module")
def hf_state():
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(TINY.to_hf_config()).state_dict()


@pytest.mark.parametrize("source", ["trainer stream", "whole state dict"])
def test_every_tensor_hyrl_sends_lands_in_sglangs_model(hf_state, source):
    named = (
        trainer_stream(hf_state)
        if source == "trainer stream"
        else (checkpoint_named_tensors(hf_state))
    )
    with sglang_runtime():
        model = build_sglang_qwen3_moe(TINY.to_hf_config())
        params = nan_parameters(model)
        assert skipped_by_sglang(model, named) == []
        assert [name for name, p in params.items() if p.isnan().any()] == []


def test_fused_parameters_hold_hyrls_values_in_sglangs_layout(hf_state):
    named = dict(trainer_stream(hf_state))
    layer = "model.layers.1"
    with sglang_runtime():
        model = build_sglang_qwen3_moe(TINY.to_hf_config())
        nan_parameters(model)
        model.load_weights(list(named.items()))
        params = dict(model.named_parameters())
    qkv = torch.cat([named[f"{layer}.self_attn.{p}_proj.weight"] for p in "qkv"])
    assert torch.equal(params[f"{layer}.self_attn.qkv_proj.weight"], qkv)
    for expert in range(TINY.num_experts):
        prefix = f"{layer}.mlp.experts.{expert}"
        gate_up = torch.cat(
            [named[f"{prefix}.gate_proj.weight"], named[f"{prefix}.up_proj.weight"]]
        )
        assert torch.equal(params[f"{layer}.mlp.experts.w13_weight"][expert], gate_up)
        assert torch.equal(
            params[f"{layer}.mlp.experts.w2_weight"][expert], named[f"{prefix}.down_proj.weight"]
        )
    vocab = TINY.vocab_size  # SGLang pads the vocabulary; the padding rows are zeroed
    assert torch.equal(params["lm_head.weight"][:vocab], named["lm_head.weight"])


def test_a_name_sglang_cannot_map_is_caught(hf_state):
    """The check above can fail: HF's fused expert name is one SGLang skips silently."""
    fused = [(n, t) for n, t in hf_state.items() if n.endswith("mlp.experts.gate_up_proj")][:1]
    assert fused, "transformers' state dict has fused experts"
    with sglang_runtime():
        model = build_sglang_qwen3_moe(TINY.to_hf_config())
        nan_parameters(model)
        assert skipped_by_sglang(model, fused) == [fused[0][0]]
