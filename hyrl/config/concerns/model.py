"""The model architecture: the Qwen3-MoE shape (layers, widths, heads, experts), its numerics,
the kernels megatron builds it with, and the Hugging Face weights that initialise it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hyrl.config.errors import _fail
from hyrl.config.kinds import _opt


@dataclass
class ModelFlags:
    num_layers: int = _opt(2, "number of transformer layers (count)", "model")
    hidden_size: int = _opt(64, "model width (hidden units)", "model")
    ffn_hidden_size: int = _opt(
        128, "dense MLP inner size (units); unused by MoE layers, kept for Megatron parity", "model"
    )
    num_attention_heads: int = _opt(4, "number of query attention heads (count)", "model")
    num_query_groups: int = _opt(
        2, "number of key/value heads for grouped-query attention (count)", "model"
    )
    kv_channels: int = _opt(16, "size of one attention head (units per head)", "model")
    num_experts: int = _opt(4, "routed experts per MoE layer (count)", "model")
    moe_ffn_hidden_size: int = _opt(64, "inner size of one expert's MLP (units)", "model")
    moe_router_topk: int = _opt(2, "experts each token is routed to (count)", "model")
    qk_layernorm: bool = _opt(
        True, "normalise queries and keys per head before attention (on/off)", "model"
    )
    normalization: str = _opt(
        "RMSNorm", "normalisation layer type (name)", "model", choices=("RMSNorm", "LayerNorm")
    )
    norm_epsilon: float = _opt(
        1e-6, "epsilon added inside the normalisation (dimensionless)", "model"
    )
    rotary_base: float = _opt(
        1000000.0, "rotary position embedding base (theta, dimensionless)", "model"
    )
    vocab_size: int = _opt(16, "vocabulary size (tokens)", "model")
    max_position_embeddings: int = _opt(64, "longest sequence the model handles (tokens)", "model")
    untie_embeddings_and_output_weights: bool = _opt(
        True, "use a separate output projection instead of the input embedding (on/off)", "model"
    )
    moe_token_dispatcher_type: str = _opt(
        "auto",
        "MoE token dispatcher (name); auto = allgather on CPU, alltoall on GPU",
        "model",
        choices=("auto", "allgather", "alltoall"),
    )
    moe_permute_fusion: bool = _opt(
        False,
        "megatron's fused MoE token permutation (Transformer Engine's moe_permute kernels, TE "
        ">= 2.1; needs the transformer_engine layer spec); routing replay is unaffected: it "
        "sets the routing the permutation follows (on/off)",
        "model",
    )
    cross_entropy_loss_fusion: bool = _opt(
        False,
        "megatron's fused cross-entropy (refused: it gives -log p at temperature 1 only, "
        "while hyrl's chunked vocab-parallel log-prob pass also gives the entropy and log p "
        "at the sampling temperature, a chunk of positions at a time) (on/off)",
        "model",
    )
    transformer_impl: str = _opt(
        "auto",
        "transformer layer implementation (name); auto picks transformer_engine when available",
        "model",
        choices=("auto", "local", "transformer_engine"),
    )
    hf_checkpoint: str | None = _opt(
        None,
        "local Hugging Face Qwen3-MoE directory whose weights initialise the actor (and "
        "the reference and critic trunk unless set otherwise); its config.json must match the "
        "model flags (path); none = random initialisation",
        "model",
    )


@dataclass(frozen=True)
class ModelView:
    """The model concern's settings, resolved (`ResolvedConfig.model`): the architecture, the
    kernels and the initial weights."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    num_experts: int
    moe_ffn_hidden_size: int
    moe_router_topk: int
    qk_layernorm: bool
    normalization: str
    norm_epsilon: float
    rotary_base: float
    vocab_size: int
    max_position_embeddings: int
    untie_embeddings_and_output_weights: bool
    moe_token_dispatcher_type: str
    moe_permute_fusion: bool
    cross_entropy_loss_fusion: bool
    transformer_impl: str
    hf_checkpoint: str | None


POSITIVE_COUNTS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "num_experts",
    "moe_ffn_hidden_size",
    "moe_router_topk",
    "vocab_size",
    "max_position_embeddings",
)


def check_given(c: ModelFlags) -> None:
    """The model's numerics."""
    if not c.norm_epsilon > 0:
        _fail("norm_epsilon", c.norm_epsilon, "must be positive", "a number > 0")
    if not c.rotary_base > 0:
        _fail("rotary_base", c.rotary_base, "must be positive", "a number > 0")


def check_kernels(c: ModelFlags) -> None:
    """Kernel choices the layer spec must support (model.build_gpt_model picks the spec; what
    depends on this machine's Transformer Engine is backend.check_machine's)."""
    if c.moe_permute_fusion and c.transformer_impl == "local":
        _fail(
            "moe_permute_fusion",
            True,
            "megatron's fused permutation is a Transformer Engine kernel (TE >= 2.1), and "
            "--transformer-impl local builds the local layer spec",
            "--no-moe-permute-fusion, or --transformer-impl auto / transformer_engine",
        )
    if c.cross_entropy_loss_fusion:
        _fail(
            "cross_entropy_loss_fusion",
            True,
            "megatron's fused cross-entropy gives -log p(target) at temperature 1 over the "
            "whole logits only; hyrl's log-prob pass (hyrl/backends/megatron/logprobs.py) needs "
            "log p at --rollout-temperature and the entropy, and works through the logits a "
            "chunk of positions at a time",
            "--no-cross-entropy-loss-fusion (the chunked vocab-parallel pass runs either way)",
        )


def check_hf_checkpoint(c: ModelFlags, files: bool = True) -> None:
    """--hf-checkpoint names a Hugging Face model directory (its config.json is compared with
    the model flags by the preflight); `files`: whether it must exist here."""
    if files and c.hf_checkpoint is not None:
        allowed = "a local Hugging Face model directory (holding config.json and the weights)"
        if not os.path.isdir(c.hf_checkpoint):
            _fail("hf_checkpoint", c.hf_checkpoint, "not an existing directory", allowed)
        if not os.path.isfile(os.path.join(c.hf_checkpoint, "config.json")):
            _fail("hf_checkpoint", c.hf_checkpoint, "has no config.json", allowed)
