"""On a CPU, megatron's local-spec paths run as torch's own kernels: its linears, core
attention, router GEMM, grouped experts, rotary embedding and gradient norm are torch's
one-call equivalents of the Python loops and autograd Functions megatron runs without
Transformer Engine (the role TE's fused kernels play on a GPU). Each patch is used only where
it computes the same thing as megatron's own code, which runs otherwise; on a machine with CUDA
none is applied (`apply_cpu_kernels` is called on CPU only)."""

from __future__ import annotations

import functools

import torch


def apply_cpu_kernels() -> None:
    """Every kernel below, each patched once per process."""
    plain_linears_without_tensor_parallelism()
    torch_attention_kernel()
    eager_expert_bias_count()
    rotary_cos_sin_once()
    grouped_expert_kernel()
    foreach_norm_and_scale()
    plain_router_gemm()


def plain_linears_without_tensor_parallelism() -> None:
    """megatron's Column/RowParallelLinear run every matrix multiply through a Python autograd
    Function (for TP communication overlapped with the backward and for gradient-accumulation
    fusion into main_grad, a CUDA kernel), and wrap their inputs and outputs in identity
    Functions (copy to / reduce from the TP region) when the TP group has one rank. On a CPU,
    with none of that in play (no fusion, no input-gradient all-reduce, no sequence
    parallelism, no deferred weight gradients), the same product is torch's `F.linear` and the
    identities are the tensors themselves; megatron's DDP hooks see the same `param.grad`.
    Measured with tools/profile_step.py's actor: the update 47.5 -> 43 ms (about 10%). With TP >
    1 or any of those features megatron's own functions run unchanged."""
    from megatron.core.tensor_parallel import layers
    from megatron.core.utils import get_tensor_model_parallel_group_if_none

    megatron_linear = layers.linear_with_grad_accumulation_and_async_allreduce
    if getattr(megatron_linear, "_hyrl_plain", False):
        return

    @functools.wraps(megatron_linear)
    def linear(
        input,
        weight,
        bias,
        gradient_accumulation_fusion,
        allreduce_dgrad,
        sequence_parallel,
        grad_output_buffer=None,
        wgrad_deferral_limit=0,
        async_grad_allreduce=None,
        tp_group=None,
    ):
        if (
            gradient_accumulation_fusion
            or allreduce_dgrad
            or sequence_parallel
            or grad_output_buffer is not None
            or async_grad_allreduce is not None  # deprecated; megatron decides
        ):
            return megatron_linear(
                input,
                weight,
                bias,
                gradient_accumulation_fusion,
                allreduce_dgrad,
                sequence_parallel,
                grad_output_buffer,
                wgrad_deferral_limit,
                async_grad_allreduce,
                tp_group,
            )
        return torch.nn.functional.linear(input, weight, bias)

    def identity_on_one_rank(mapping):
        @functools.wraps(mapping)
        def mapped(input_, group=None):
            if get_tensor_model_parallel_group_if_none(group).size() == 1:
                return input_
            return mapping(input_, group=group)

        return mapped

    linear._hyrl_plain = True  # type: ignore[attr-defined]
    layers.linear_with_grad_accumulation_and_async_allreduce = linear
    for name in (
        "copy_to_tensor_model_parallel_region",
        "reduce_from_tensor_model_parallel_region",
    ):
        setattr(layers, name, identity_on_one_rank(getattr(layers, name)))


def torch_attention_kernel() -> None:
    """megatron's local DotProductAttention (what runs without TE's fused attention) computes
    attention as separate ops: repeat the KV heads, baddbmm, masked softmax, dropout inside an
    RNG-tracker fork (which saves and restores the CPU generator's state every call), bmm and
    the reshapes. On a CPU this is torch's one scaled_dot_product_attention call with the same
    mask, scale and grouped KV heads (the role TE's fused attention plays on a GPU). Used where
    it is the same computation: float32, no dropout in play, no attention bias, vanilla
    softmax, no sliding window or query-key layer scaling, a boolean mask in which every query
    sees at least one key (causal and block-causal masks do); otherwise megatron's own forward
    runs. Measured with tools/profile_step.py's actor: the update about 8% faster; output
    and gradients equal to megatron's to float32 rounding
    (tests/unit/backends/test_cpu_step_speed.py)."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    megatron_forward = DotProductAttention.forward
    if getattr(megatron_forward, "_hyrl_torch_kernel", False):
        return

    @functools.wraps(megatron_forward)
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
        same = (
            packed_seq_params is None
            and attention_bias is None
            and query.dtype == torch.float32
            and (self.attention_dropout.p == 0.0 or not self.training)
            and self.softmax_offset is None
            and self.scale_mask_softmax.window_size is None
            and not self.config.apply_query_key_layer_scaling
            and attention_mask is not None
            and attention_mask.dtype == torch.bool
            and not bool(attention_mask.all(dim=-1).any())
        )
        if not same:
            return megatron_forward(
                self,
                query,
                key,
                value,
                attention_mask,
                attn_mask_type,
                attention_bias,
                packed_seq_params,
            )
        # [s, b, heads, dim] -> [b, heads, s, dim]; megatron's mask is True where not attended
        context = torch.nn.functional.scaled_dot_product_attention(
            query.permute(1, 2, 0, 3),
            key.permute(1, 2, 0, 3),
            value.permute(1, 2, 0, 3),
            attn_mask=attention_mask.logical_not(),
            scale=self.softmax_scale,
            enable_gqa=True,
        )
        # [b, heads, s, dim] -> [s, b, heads x dim], as megatron's forward returns
        return context.permute(2, 0, 1, 3).reshape(context.shape[2], context.shape[0], -1)

    forward._hyrl_torch_kernel = True  # type: ignore[attr-defined]
    DotProductAttention.forward = forward


def plain_router_gemm() -> None:
    """megatron's router GEMM is a Python autograd Function (moe_utils.RouterGatingLinearFunction)
    so that bf16 tokens and weights can give float32 logits without saving float32 copies; with
    TE absent its forward and backward are torch.mm calls. On a CPU, where the tokens, weight
    and router dtype are one dtype (nothing to convert), it is torch's `F.linear`: the same
    product and gradients without the Python Function; otherwise megatron's runs."""
    from megatron.core.transformer.moe import router

    megatron_gating = router.router_gating_linear
    if getattr(megatron_gating, "_hyrl_plain", False):
        return

    @functools.wraps(megatron_gating)
    def gating_linear(inp, weight, bias, router_dtype):
        if inp.dtype == weight.dtype == router_dtype and (
            bias is None or bias.dtype == router_dtype
        ):
            return torch.nn.functional.linear(inp, weight, bias)
        return megatron_gating(inp, weight, bias, router_dtype)

    gating_linear._hyrl_plain = True  # type: ignore[attr-defined]
    router.router_gating_linear = gating_linear


def grouped_expert_kernel() -> None:
    """megatron's SequentialMLP (its experts without TE or the grouped_gemm CUDA package; its
    GroupedMLP asserts bf16) runs the local experts one after another: a split, per expert two
    linear modules, the SwiGLU and the probability scaling, then a concatenation. On a CPU this
    is two calls of torch's grouped_mm over the experts' own weights (stacked per call, so
    parameters, gradients, checkpoints and weight sync stay megatron's), the role TE's grouped
    GEMM plays on a GPU: the same products, SwiGLU and scaling in megatron's order. Used for
    float32 SwiGLU experts (widths a multiple of 4) without bias, fp8/fp4, clamping,
    probabilities on the input, expert TP, gradient-accumulation fusion, deferred weight
    gradients or module hooks; otherwise megatron's forward runs. Output and gradients equal
    megatron's (tests/unit/backends/test_cpu_step_speed.py)."""
    grouped_mm = getattr(torch.nn.functional, "grouped_mm", None)
    from megatron.core.transformer.moe.experts import SequentialMLP

    megatron_forward = SequentialMLP.forward
    if grouped_mm is None or getattr(megatron_forward, "_hyrl_grouped", False):
        return

    def grouped(self, hidden: torch.Tensor) -> bool:
        config = self.config
        if not (
            hidden.dtype == torch.float32
            and self.num_local_experts > 1
            and config.gated_linear_unit
            and config.activation_func is torch.nn.functional.silu
            and not (config.use_te_activation_func or config.bias_activation_fusion)
            and config.activation_func_clamp_value is None
            and config.glu_linear_offset == 0.0
            and not (config.add_bias_linear or config.fp8 or config.fp4)
            and not config.moe_apply_probs_on_input
            and not (config.gradient_accumulation_fusion or config.delay_wgrad_compute)
            and self.tp_group.size() == 1
            # grouped_mm wants 16-byte strides: float32 rows of a multiple of 4 columns
            and hidden.shape[-1] % 4 == 0
            and config.moe_ffn_hidden_size % 4 == 0
        ):
            return False
        for expert in self.local_experts:  # the modules the grouped GEMMs step around
            for module in (expert, expert.linear_fc1, expert.linear_fc2):
                if (
                    module._forward_pre_hooks
                    or module._forward_hooks
                    or module._backward_pre_hooks
                    or module._backward_hooks
                ):
                    return False
        return True

    @functools.wraps(megatron_forward)
    def forward(self, permuted_local_hidden_states, tokens_per_expert, permuted_probs):
        hidden = permuted_local_hidden_states
        if not (isinstance(tokens_per_expert, torch.Tensor) and grouped(self, hidden)):
            return megatron_forward(self, hidden, tokens_per_expert, permuted_probs)
        offsets = torch.cumsum(tokens_per_expert, 0, dtype=torch.int32).to(hidden.device)
        experts = self.local_experts
        # [experts, in, out]: each expert's weight transposed, as its linear multiplies
        fc1 = torch.stack([e.linear_fc1.weight for e in experts]).transpose(1, 2)
        fc2 = torch.stack([e.linear_fc2.weight for e in experts]).transpose(1, 2)
        gate, up = torch.chunk(grouped_mm(hidden, fc1, offs=offsets), 2, -1)
        intermediate = torch.nn.functional.silu(gate) * up
        intermediate = intermediate * permuted_probs.unsqueeze(-1)
        return grouped_mm(intermediate, fc2, offs=offsets), None

    forward._hyrl_grouped = True  # type: ignore[attr-defined]
    SequentialMLP.forward = forward


def rotary_cos_sin_once() -> None:
    """megatron's unfused rotary embedding (what runs without TE's fused RoPE) recomputes
    cos(freqs) and sin(freqs) for every query and key of every layer, and splits off and
    concatenates back an empty pass-through part when the rotation covers the whole head: 15
    ops a call where 6 do the rotation. RotaryEmbedding.forward returns the same `freqs` tensor
    for a sequence length (megatron's lru_cache), so on a CPU cos and sin are computed once per
    freqs tensor (a few kept, each checked by a weak reference) and the rotation is megatron's
    own `t * cos + rotate_half(t) * sin`: the same values, bit for bit. Partial rotations and
    multi-latent attention run megatron's function unchanged."""
    import weakref

    from megatron.core.models.common.embeddings import rope_utils

    megatron_apply = rope_utils._apply_rotary_pos_emb_bshd
    if getattr(megatron_apply, "_hyrl_cached_cos_sin", False):
        return
    cache: dict[tuple, tuple] = {}  # (id(freqs), mscale, dtype) -> (weakref, cos, sin)

    def cos_sin(freqs: torch.Tensor, mscale: float, dtype: torch.dtype):
        key = (id(freqs), mscale, dtype)
        hit = cache.get(key)
        if hit is not None and hit[0]() is freqs:
            return hit[1], hit[2]
        cos = (torch.cos(freqs) * mscale).to(dtype)
        sin = (torch.sin(freqs) * mscale).to(dtype)
        if len(cache) >= 8:
            cache.pop(next(iter(cache)))
        cache[key] = (weakref.ref(freqs), cos, sin)
        return cos, sin

    @functools.wraps(megatron_apply)
    def apply(t, freqs, rotary_interleaved=False, multi_latent_attention=False, mscale=1.0):
        if (
            multi_latent_attention
            or freqs.shape[-1] != t.shape[-1]
            or freqs.requires_grad
            or torch.is_inference_mode_enabled()
        ):
            return megatron_apply(t, freqs, rotary_interleaved, multi_latent_attention, mscale)
        cos, sin = cos_sin(freqs, mscale, t.dtype)
        return (t * cos) + (rope_utils._rotate_half(t, rotary_interleaved) * sin)

    apply._hyrl_cached_cos_sin = True  # type: ignore[attr-defined]
    rope_utils._apply_rotary_pos_emb_bshd = apply


def foreach_norm_and_scale() -> None:
    """Without Apex or TE, megatron's gradient norm and clipping (optimizer.clip_grads) run its
    local stand-ins for Apex's multi-tensor kernels: a Python loop of torch.norm, then a
    tensor built from the list, per norm; `dst.copy_(src * scale)` per tensor, per clip. On a
    CPU these are torch's multi-tensor (`_foreach_`) ops over the same tensors: the same norms
    and products in one call each. Norms of other than float32 tensors and a scale into other
    tensors (a copy between dtypes) keep megatron's loops."""
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads

    if getattr(clip_grads, "l2_norm_impl", None) is utils.local_multi_tensor_l2_norm:

        def l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
            tensors = [t for group in tensor_lists for t in group]
            if per_tensor or not tensors or any(t.dtype != torch.float32 for t in tensors):
                return utils.local_multi_tensor_l2_norm(
                    chunk_size, noop_flag, tensor_lists, per_tensor, *args
                )
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors)))
            return total.reshape(1), None

        clip_grads.l2_norm_impl = l2_norm
    if getattr(clip_grads, "multi_tensor_scale_impl", None) is utils.local_multi_tensor_scale:

        def scale(chunk_size, noop_flag, tensor_lists, factor):
            sources, targets = tensor_lists
            if len(sources) == len(targets) and all(
                s is t for s, t in zip(sources, targets, strict=True)
            ):
                torch._foreach_mul_(targets, factor)
            else:
                utils.local_multi_tensor_scale(chunk_size, noop_flag, tensor_lists, factor)

        clip_grads.multi_tensor_scale_impl = scale


def eager_expert_bias_count() -> None:
    """megatron decorates TopKRouter._apply_expert_bias (the token count behind aux-loss-free
    balancing) with its `jit_fuser`, torch.compile under torch >= 2.2, so every router call
    passes through dynamo's frame guards to fuse at most one add (and nothing at all without
    --moe-router-enable-expert-bias): 0.33 ms of the tiny recipe's 42 ms actor update on CPU
    (8 calls, timed in process). On a CPU the undecorated method runs: the same ops, eagerly."""
    from megatron.core.transformer.moe.router import TopKRouter

    method = TopKRouter._apply_expert_bias
    # torch.compile's wrapper, or hyrl's deferred one (hyrl.backends.megatron._compile_deferred)
    eager = getattr(method, "_torchdynamo_orig_callable", None) or getattr(
        method, "__wrapped__", None
    )
    if eager is not None:
        TopKRouter._apply_expert_bias = eager
