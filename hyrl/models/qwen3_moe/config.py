"""Qwen3-MoE architecture: one dataclass, the tiny CPU model and Qwen3-30B-A3B."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hyrl.config.concerns.model import ModelView


@dataclass(frozen=True)
class Qwen3MoeArch:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int  # key/value heads
    kv_channels: int  # head dimension
    num_experts: int
    moe_ffn_hidden_size: int
    moe_router_topk: int
    vocab_size: int
    ffn_hidden_size: int = 0  # dense MLP size; Qwen3-MoE has MoE in every layer
    norm_epsilon: float = 1e-6
    rotary_base: float = 1_000_000.0
    max_position_embeddings: int = 40960
    qk_layernorm: bool = True
    normalization: str = "RMSNorm"
    untie_embeddings_and_output_weights: bool = True

    @classmethod
    def of(cls, model: ModelView) -> Qwen3MoeArch:
        """The architecture the model settings describe, each field read from the view's field
        of the same name."""
        return cls(**{f.name: getattr(model, f.name) for f in fields(cls)})

    def to_hf_config(
        self, eos_token_id: int | list[int] | None = None, bos_token_id: int | None = None
    ):
        """transformers' Qwen3MoeConfig of this architecture. The special token ids belong to
        the tokenizer and checkpoint, not to the architecture: callers that write a config
        other programs read (SGLang stops on its eos ids) pass them."""
        from transformers import Qwen3MoeConfig

        # as a dict: transformers' stubs do not list every keyword Qwen3MoeConfig takes
        options: dict[str, Any] = dict(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.ffn_hidden_size or self.moe_ffn_hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_query_groups,
            head_dim=self.kv_channels,
            num_experts=self.num_experts,
            num_experts_per_tok=self.moe_router_topk,
            moe_intermediate_size=self.moe_ffn_hidden_size,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            rms_norm_eps=self.norm_epsilon,
            rope_theta=self.rotary_base,
            max_position_embeddings=self.max_position_embeddings,
            tie_word_embeddings=not self.untie_embeddings_and_output_weights,
            attention_bias=False,
            router_aux_loss_coef=0.0,
            output_router_logits=False,
            pad_token_id=None,  # no padding_idx: Megatron trains every embedding row, so must HF
            eos_token_id=eos_token_id,
            bos_token_id=bos_token_id,
        )
        return Qwen3MoeConfig(**options)

    def mismatches(self, hf_config: dict) -> list[str]:
        """Where a Hugging Face config.json disagrees with this architecture, as 'key: a != b'."""
        ours = _with_num_experts(self.to_hf_config().to_dict())
        theirs = _with_num_experts(hf_config)
        keys = (
            "model_type",
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "tie_word_embeddings",
        )
        return [
            f"{k}: {theirs.get(k)!r} in the checkpoint, {ours.get(k)!r} in the flags"
            for k in keys
            if theirs.get(k) != ours.get(k)
        ]

    def as_dict(self) -> dict:
        return asdict(self)


def _with_num_experts(hf_config: dict) -> dict:
    """transformers 5 writes the expert count as num_local_experts, earlier ones num_experts."""
    return {
        **hf_config,
        "num_experts": hf_config.get("num_experts", hf_config.get("num_local_experts")),
    }


# The tiny model the CPU recipes train (125k parameters; its task and measured batch-size
# behaviour: docs/batch-size.md).
TINY = Qwen3MoeArch(
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=128,
    num_attention_heads=4,
    num_query_groups=2,
    kv_channels=16,
    num_experts=4,
    moe_ffn_hidden_size=64,
    moe_router_topk=2,
    vocab_size=16,
    max_position_embeddings=64,
)

# Qwen3-30B-A3B (config.json of the released checkpoint).
QWEN3_30B_A3B = Qwen3MoeArch(
    num_layers=48,
    hidden_size=2048,
    ffn_hidden_size=6144,
    num_attention_heads=32,
    num_query_groups=4,
    kv_channels=128,
    num_experts=128,
    moe_ffn_hidden_size=768,
    moe_router_topk=8,
    vocab_size=151936,
    max_position_embeddings=40960,
)
