"""Process groups and the megatron-core GPTModel for a Qwen3-MoE architecture."""

from __future__ import annotations

import datetime
import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from hyrl.backends.megatron import cpu_compat, initial_weights
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

if TYPE_CHECKING:
    from hyrl.config.concerns.model import ModelView
    from hyrl.config.concerns.parallel import ParallelView


@dataclass(frozen=True)
class ParallelLayout:
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    # V model chunks per pipeline rank (megatron's interleaved schedule); None: one chunk
    virtual_pipeline_model_parallel_size: int | None = None
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int = 1
    sequence_parallel: bool = False
    recompute_granularity: str | None = None  # None, "full" or "selective" (megatron's names)
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    moe_permute_fusion: bool = (
        False  # Transformer Engine's fused permutation (--moe-permute-fusion)
    )

    @classmethod
    def of(cls, parallel: ParallelView, model: ModelView) -> ParallelLayout:
        """The parallel settings' layout and recomputation, with the model's MoE permutation."""
        return cls(
            tensor_model_parallel_size=parallel.tensor_model_parallel_size,
            pipeline_model_parallel_size=parallel.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=parallel.virtual_pipeline_model_parallel_size,
            expert_model_parallel_size=parallel.expert_model_parallel_size,
            expert_tensor_parallel_size=parallel.expert_tensor_parallel_size,
            sequence_parallel=parallel.sequence_parallel,
            recompute_granularity=parallel.recompute_granularity,
            recompute_method=parallel.recompute_method,
            recompute_num_layers=parallel.recompute_num_layers,
            moe_permute_fusion=model.moe_permute_fusion,
        )


def init_distributed(layout: ParallelLayout, seed: int, timeout_minutes: float = 10.0) -> None:
    """torch.distributed (gloo on CPU, nccl on GPU), megatron's parallel_state, and the gloo
    group where ranks wait for rank 0 (collectives.wait_group).

    timeout_minutes (--distributed-timeout-minutes) bounds every collective of the world and
    megatron's groups, as in Megatron; the wait group has its own, longer one.
    """
    from megatron.core import parallel_state

    from hyrl.backends.megatron import collectives

    cpu_compat.apply()
    if not torch.distributed.is_initialized():
        if not cpu_compat.on_cpu():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        # A lone process outside torchrun needs no rendezvous: a private free port, whatever
        # MASTER_PORT says, so a stale or shared one cannot collide. Under torchrun (even with
        # one rank) the ranks meet at torchrun's own store: env://.
        under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ
        init_method = (
            "env://" if world_size > 1 or under_torchrun else f"tcp://127.0.0.1:{_free_port()}"
        )
        torch.distributed.init_process_group(
            backend=cpu_compat.distributed_backend(),
            init_method=init_method,
            world_size=world_size,
            rank=int(os.environ.get("RANK", "0")),
            timeout=datetime.timedelta(minutes=timeout_minutes),
        )
    collectives.create_wait_group()
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=layout.tensor_model_parallel_size,
            pipeline_model_parallel_size=layout.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=layout.virtual_pipeline_model_parallel_size,
            expert_model_parallel_size=layout.expert_model_parallel_size,
            expert_tensor_parallel_size=layout.expert_tensor_parallel_size,
            distributed_timeout_minutes=timeout_minutes,
        )
    cpu_compat.seed_model_parallel_rng(seed)


def destroy_distributed() -> None:
    from megatron.core import parallel_state

    from hyrl.backends.megatron import collectives

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    collectives.forget_wait_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def transformer_engine_importable() -> bool:
    try:
        import transformer_engine  # noqa: F401

        return True
    except Exception:  # noqa: BLE001 - ImportError, or a TE build failing without CUDA libs
        return False


def use_transformer_engine(transformer_impl: str) -> bool:
    """`auto` picks Transformer Engine when it imports (GPU clusters), the local spec otherwise."""
    if transformer_impl == "local":
        return False
    have_te = transformer_engine_importable()
    if transformer_impl == "transformer_engine" and not have_te:
        raise RuntimeError(
            "--transformer-impl transformer_engine: transformer_engine does not import"
        )
    return have_te


def transformer_config(
    arch: Qwen3MoeArch,
    layout: ParallelLayout,
    token_dispatcher: str = "auto",
    params_dtype: torch.dtype = torch.float32,
    routing_replay: bool = False,
    with_te: bool = False,
):
    """megatron's TransformerConfig for this architecture and layout. with_te: for the
    Transformer Engine spec, with TE's kernels: experts as one grouped GEMM (TEGroupedMLP),
    fused RoPE (unfused, every q/k RoPE under --qkv-format thd syncs device to host), and weight
    gradients accumulated into the fp32 main grads inside the GEMM (TE's own linears; megatron's
    output layer also needs APEX's fused_weight_gradient_mlp_cuda, so only where it imports)."""
    from megatron.core.tensor_parallel import layers as tp_layers
    from megatron.core.transformer.transformer_config import TransformerConfig

    if token_dispatcher == "auto":
        token_dispatcher = cpu_compat.default_token_dispatcher()
    return TransformerConfig(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        ffn_hidden_size=arch.ffn_hidden_size or arch.moe_ffn_hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups,
        kv_channels=arch.kv_channels,
        # Qwen3-MoE: softmax over all experts, top-k, renormalise (HF norm_topk_prob=True).
        num_moe_experts=arch.num_experts,
        moe_ffn_hidden_size=arch.moe_ffn_hidden_size,
        moe_router_topk=arch.moe_router_topk,
        moe_router_pre_softmax=False,
        moe_router_load_balancing_type="none",
        moe_aux_loss_coeff=0.0,
        moe_token_dispatcher_type=token_dispatcher,
        # grouped GEMM (all local experts in one kernel) with Transformer Engine; the local spec
        # runs its experts one after another
        moe_grouped_gemm=with_te,
        # TE's fused permute/unpermute: after the router (and its replay), the same routing
        moe_permute_fusion=layout.moe_permute_fusion,
        moe_router_dtype="fp32",
        moe_enable_routing_replay=routing_replay,  # hyrl.backends.megatron.routing_replay
        qk_layernorm=arch.qk_layernorm,
        normalization=arch.normalization,
        layernorm_epsilon=arch.norm_epsilon,
        add_bias_linear=False,
        gated_linear_unit=True,
        activation_func=F.silu,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=with_te,
        persist_layer_norm=False,
        gradient_accumulation_fusion=with_te and tp_layers._grad_accum_fusion_available,
        tensor_model_parallel_size=layout.tensor_model_parallel_size,
        pipeline_model_parallel_size=layout.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=layout.virtual_pipeline_model_parallel_size,
        **_interleaved_p2p_settings(layout),
        expert_model_parallel_size=layout.expert_model_parallel_size,
        expert_tensor_parallel_size=layout.expert_tensor_parallel_size,
        sequence_parallel=layout.sequence_parallel,
        **_recompute_settings(layout),
        use_cpu_initialization=cpu_compat.on_cpu(),
        params_dtype=params_dtype,
        pipeline_dtype=params_dtype,
        bf16=params_dtype == torch.bfloat16,
        # hyrl's losses are sums over tokens already divided by the global batch's token count:
        # megatron's DDP then sums gradients over DP ranks instead of averaging them
        calculate_per_token_loss=True,
        init_method_std=0.02,
    )


def _interleaved_p2p_settings(layout: ParallelLayout) -> dict:
    """Under virtual pipeline stages, overlapped and unbatched p2p (Megatron-LM's
    --overlap-p2p-communication). Batched, the steady state posts a stage's sends to its previous
    and next stage as one batch; at PP = 2 both are the same rank, and the activation and the
    gradient of one exchange meet the other side's receives in the opposite order (measured
    here on gloo: micro-batches after the first group took each other's tensors). Unbatched,
    megatron's _p2p_ops sends the two directions over two groups when the pipeline group has
    2 ranks (p2p_communication.py). Earlier megatron-core refused interleaving at PP <= 2
    outright; 0.16.1 asks only PP > 1 (parallel_state.initialize_model_parallel)."""
    if layout.virtual_pipeline_model_parallel_size is None:
        return {}
    return {"overlap_p2p_comm": True, "batch_p2p_comm": False}


def _recompute_settings(layout: ParallelLayout) -> dict:
    """Megatron's recompute fields; full recomputation defaults to uniform groups of 1 layer."""
    if layout.recompute_granularity is None:
        return {}
    if layout.recompute_granularity == "selective":
        return {"recompute_granularity": "selective"}
    return {
        "recompute_granularity": "full",
        "recompute_method": layout.recompute_method or "uniform",
        "recompute_num_layers": layout.recompute_num_layers or 1,
    }


def build_gpt_model(
    arch: Qwen3MoeArch,
    layout: ParallelLayout,
    transformer_impl: str = "auto",
    token_dispatcher: str = "auto",
    value_head: bool = False,
    routing_replay: bool = False,
    params_dtype: torch.dtype = torch.float32,
):
    """A megatron-core GPTModel for this rank's shard in one piece (no virtual pipeline
    stages); see build_model_chunks."""
    if layout.virtual_pipeline_model_parallel_size is not None:
        raise ValueError("a layout with virtual pipeline stages builds chunks: build_model_chunks")
    (model,) = build_model_chunks(
        arch, layout, transformer_impl, token_dispatcher, value_head, routing_replay, params_dtype
    )
    return model


def build_model_chunks(
    arch: Qwen3MoeArch,
    layout: ParallelLayout,
    transformer_impl: str = "auto",
    token_dispatcher: str = "auto",
    value_head: bool = False,
    routing_replay: bool = False,
    params_dtype: torch.dtype = torch.float32,
) -> list:
    """This rank's shard of the model as megatron-core GPTModels (parallel_state must be
    initialised), its parameters in params_dtype (bfloat16 under --bf16): one, or under
    virtual pipeline stages V chunks (vp_stage 0..V-1, chunk v holding megatron's layers of
    that virtual stage), sharing one TransformerConfig as megatron's interleaved schedule
    expects.

    value_head=True builds a critic: the vocab-parallel output layer becomes `ValueHead`, one
    scalar per position. routing_replay=True gives every MoE router megatron's RouterReplay
    (see routing_replay.py).

    On CPU (megatron's CPU init) a fresh model is the same at every layout for one global RNG
    state: megatron's own at TP=1, PP=1, EP=1, replayed where a rank builds only part of the
    model (initial_weights).
    """
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )

    with_te = use_transformer_engine(transformer_impl)  # the one place the kernels are chosen
    config = transformer_config(
        arch,
        layout,
        token_dispatcher,
        params_dtype=params_dtype,
        routing_replay=routing_replay,
        with_te=with_te,
    )
    if with_te:
        layer_spec = get_gpt_layer_with_transformer_engine_spec(
            num_experts=arch.num_experts, moe_grouped_gemm=True, qk_layernorm=arch.qk_layernorm
        )
    else:
        cpu_compat.allow_sequence_parallel_torch_norm()
        layer_spec = get_gpt_layer_local_spec(
            num_experts=arch.num_experts,
            moe_grouped_gemm=False,
            qk_layernorm=arch.qk_layernorm,
            normalization=arch.normalization,
        )
        # --qkv-format thd on the local spec: packed sequences through a block-diagonal mask
        layer_spec.submodules.self_attention.submodules.core_attention = (
            packed_dot_product_attention()
        )
    from megatron.core import parallel_state

    virtual_stages = layout.virtual_pipeline_model_parallel_size
    rng_state = torch.get_rng_state()  # where megatron's CPU init starts drawing
    chunks = []
    for vp_stage in [None] if virtual_stages is None else range(virtual_stages):
        # a (virtual) pipeline stage builds its share of the layers; the first embeds, the
        # last projects
        first_stage = parallel_state.is_pipeline_first_stage(
            ignore_virtual=False, vp_stage=vp_stage
        )
        last_stage = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
        model = GPTModel(
            config=config,
            transformer_layer_spec=layer_spec,
            vocab_size=arch.vocab_size,
            max_sequence_length=arch.max_position_embeddings,
            pre_process=first_stage,
            post_process=last_stage,
            parallel_output=True,  # logits stay vocab-parallel; log-probs are computed across TP
            share_embeddings_and_output_weights=not arch.untie_embeddings_and_output_weights,
            position_embedding_type="rope",
            rotary_base=int(arch.rotary_base),
            vp_stage=vp_stage,
        )
        if value_head and last_stage:
            model.output_layer = ValueHead(config)
        _reduce_experts_over_expert_data_parallel(model)
        chunks.append(model.to(cpu_compat.device()))
    if config.use_cpu_initialization and not initial_weights.builds_whole_model(layout):
        # this rank built a part of the model and drew a shifted stream: the reference's values
        initial_weights.replay_reference_init(chunks, arch, config, rng_state, value_head)
    return chunks


def _reduce_experts_over_expert_data_parallel(model: torch.nn.Module) -> None:
    """Mark every expert parameter as megatron's DDP marks them only under EP > 1
    (`allreduce=False`), so their gradients are reduced over the expert-data-parallel group and
    they get the experts' own optimizer. megatron-core 0.16.1 leaves experts "dense" at EP = 1
    and reduces them over DP alone; with TP > 1 and expert TP 1 each TP rank's experts see only
    its own tokens, and their TP partial gradients would never be summed (tests/
    test_parallel_parity.py, tp2). At TP = 1 the two groups are the same ranks."""
    from hyrl.backends.megatron.weights import is_expert

    for name, param in model.named_parameters():
        if is_expert(name):
            # megatron's DDP reads this attribute; torch's Parameter type lacks it
            param.allreduce = False  # type: ignore[attr-defined]


class ValueHead(torch.nn.Module):
    """A replicated hidden -> 1 projection in place of GPTModel's output layer.

    Called by GPTModel as `output_layer(hidden, weight=..., runtime_gather_output=...)` and
    returns (values, None) like a ColumnParallelLinear. Under sequence parallelism the hidden
    states are gathered first; every TP rank then computes the same values, so the gather's
    backward is a split (not a reduce-scatter) and the head's gradient needs no TP reduction.
    """

    def __init__(self, config):
        super().__init__()
        self.sequence_parallel = config.sequence_parallel
        self.weight = torch.nn.Parameter(
            torch.empty(
                1, config.hidden_size, dtype=config.params_dtype, device=cpu_compat.device()
            )
        )
        torch.nn.init.normal_(self.weight, std=config.init_method_std)

    def forward(self, hidden_states, weight=None, runtime_gather_output=None):
        if self.sequence_parallel:
            from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

            hidden_states = gather_from_sequence_parallel_region(
                hidden_states, tensor_parallel_output_grad=False
            )
        return torch.nn.functional.linear(hidden_states, self.weight), None


@functools.cache
def packed_dot_product_attention():
    """megatron-core's local DotProductAttention, also for packed sequences (--qkv-format thd),
    which it refuses: megatron hands core attention THD queries [t, heads, dim] and the
    segments as PackedSeqParams; this runs them as one [t, 1] sequence under the block-diagonal
    causal mask of those segments (packing.block_causal_mask), the same attention as a varlen
    kernel. Padded rows (no PackedSeqParams) go through unchanged."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    from hyrl.backends.megatron.packing import block_causal_mask

    class PackedDotProductAttention(DotProductAttention):
        def forward(
            self,
            query,
            key,
            value,
            attention_mask,
            attn_mask_type=None,
            attention_bias=None,
            packed_seq_params=None,
        ):
            if packed_seq_params is None:
                return super().forward(
                    query, key, value, attention_mask, attn_mask_type, attention_bias
                )
            if packed_seq_params.qkv_format != "thd":
                raise ValueError(f"packed sequences in {packed_seq_params.qkv_format!r}: thd only")
            mask = block_causal_mask(packed_seq_params.cu_seqlens_q, query.shape[0])
            return super().forward(
                query.unsqueeze(1),
                key.unsqueeze(1),
                value.unsqueeze(1),
                mask,
                attn_mask_type,
                attention_bias,
            )  # [t, 1, heads x dim]: megatron reshapes it as it does a THD kernel's output

    return PackedDotProductAttention


def causal_attention_mask(seq_len: int, device: torch.device) -> torch.Tensor:
    """Megatron convention: True marks positions that may NOT be attended."""
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), 1)[None, None]
