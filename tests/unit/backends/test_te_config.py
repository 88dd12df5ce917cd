"""The TransformerConfig hyrl builds for the Transformer Engine spec turns TE's fusions on.

No CI machine has Transformer Engine, so megatron's own checks for it are satisfied by stand-ins
(megatron asks only that a fused RoPE function exists, and whether APEX's wgrad kernel imported);
the config is megatron's real TransformerConfig either way.
"""

import pytest
import torch
from megatron.core.models.common.embeddings import rope_utils
from megatron.core.tensor_parallel import layers as tp_layers

from hyrl.backends.megatron.model import ParallelLayout, transformer_config
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B, TINY

TE_LAYOUT = ParallelLayout(
    tensor_model_parallel_size=4, expert_model_parallel_size=16, sequence_parallel=True
)


@pytest.fixture
def te_rope(monkeypatch):
    """Stands in for TE's fused RoPE kernels, which megatron looks up when asked to fuse."""
    monkeypatch.setattr(rope_utils, "fused_apply_rotary_pos_emb", lambda *a, **k: None)
    monkeypatch.setattr(rope_utils, "fused_apply_rotary_pos_emb_thd", lambda *a, **k: None)


def test_te_spec_fuses_rope_and_grouped_experts(te_rope, monkeypatch):
    monkeypatch.setattr(tp_layers, "_grad_accum_fusion_available", True)
    config = transformer_config(
        QWEN3_30B_A3B, TE_LAYOUT, "alltoall", params_dtype=torch.bfloat16, with_te=True
    )
    assert config.apply_rope_fusion is True  # unfused, every q/k RoPE under THD syncs to host
    assert config.gradient_accumulation_fusion is True
    assert config.moe_grouped_gemm is True


def test_te_spec_leaves_wgrad_fusion_off_without_apex_kernel(te_rope, monkeypatch):
    """megatron's (non-TE) output layer raises at build time when the fusion is on without
    APEX's fused_weight_gradient_mlp_cuda."""
    monkeypatch.setattr(tp_layers, "_grad_accum_fusion_available", False)
    config = transformer_config(QWEN3_30B_A3B, TE_LAYOUT, "alltoall", with_te=True)
    assert config.apply_rope_fusion is True
    assert config.gradient_accumulation_fusion is False


def test_local_spec_fuses_nothing(monkeypatch):
    monkeypatch.setattr(tp_layers, "_grad_accum_fusion_available", True)
    config = transformer_config(TINY, ParallelLayout(), "alltoall")
    assert config.apply_rope_fusion is False
    assert config.gradient_accumulation_fusion is False
    assert config.moe_grouped_gemm is False
