"""The one place that knows megatron-core 0.16.1 can run without CUDA.

Every CPU-only workaround lives here, each function's docstring saying what it works around.
On a machine with CUDA, `apply()` only fixes what 0.16.1 gets wrong
wherever Transformer Engine (and Apex) are missing, as on CPU: the router GEMM's unbound
`te_general_gemm` (found on an H100 without TE) and torch Adam's `step` in the distributed
optimizer's load; with TE the rest of hyrl runs megatron-core untouched.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch.overrides import TorchFunctionMode

_applied = False


def on_cpu() -> bool:
    return not torch.cuda.is_available()


def device() -> torch.device:
    """The device parameters and batches live on for this process."""
    if on_cpu():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def distributed_backend() -> str:
    return "gloo" if on_cpu() else "nccl"


def default_token_dispatcher() -> str:
    # alltoall builds a CUDA stream and passes split sizes as tensors, which gloo rejects.
    return "allgather" if on_cpu() else "alltoall"


def apply() -> None:
    """Neutralise megatron-core's CUDA assumptions on a CPU-only machine, and on any machine
    without Transformer Engine fix what 0.16.1 gets wrong there (idempotent)."""
    global _applied
    if _applied:
        return
    _applied = True
    _define_te_general_gemm_without_te()
    from megatron.core.optimizer import distrib_optimizer

    # Without TE or Apex (any device) megatron runs torch's Adam, whose per-parameter `step`
    # its distributed-optimizer load mishandles.
    if not distrib_optimizer.HAVE_APEX_OR_TE:
        _skip_torch_adam_step_in_reshardable_load()
    if not on_cpu():
        return

    # Small float32 models hit denormals on these CPUs: steps slow down 30-100x without this.
    torch.set_flush_denormal(True)

    # Rotary embeddings place inv_freq with torch.cuda.current_device(); a device name, not
    # torch's int index, is what makes them place it on the CPU.
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment, return-value]

    # The torch_dist checkpoint writer stages tensors with torch.cuda.synchronize().
    torch.cuda.synchronize = lambda device=None: None

    # The model-parallel RNG tracker swaps CUDA generator states; use the CPU generator.
    from megatron.core.tensor_parallel import random as mp_random

    def _get_rng_state(device="cuda", clone=False, graph_safe=False):
        state = torch.get_rng_state()
        return state.clone() if clone else state

    def _set_rng_state(new_state, device=-1, graph_safe=False):
        torch.set_rng_state(new_state)

    mp_random._get_cuda_rng_state = _get_rng_state
    mp_random._set_cuda_rng_state = _set_rng_state

    _run_optimizers_on_cpu()
    _run_pipeline_schedules_on_cpu()
    _plain_linears_without_tensor_parallelism()
    _torch_attention_kernel()
    _eager_expert_bias_count()
    _rotary_cos_sin_once()
    _grouped_expert_kernel()
    _foreach_norm_and_scale()
    _plain_router_gemm()


def _plain_linears_without_tensor_parallelism() -> None:
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


def _torch_attention_kernel() -> None:
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


def _plain_router_gemm() -> None:
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


def _grouped_expert_kernel() -> None:
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


def _rotary_cos_sin_once() -> None:
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


def _foreach_norm_and_scale() -> None:
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


def _eager_expert_bias_count() -> None:
    """megatron decorates TopKRouter._apply_expert_bias (the token count behind aux-loss-free
    balancing) with its `jit_fuser`, torch.compile under torch >= 2.2, so every router call
    passes through dynamo's frame guards to fuse at most one add (and nothing at all without
    --moe-router-enable-expert-bias): 0.33 ms of the tiny recipe's 42 ms actor update on CPU
    (8 calls, timed in process). On a CPU the undecorated method runs: the same ops, eagerly."""
    from megatron.core.transformer.moe.router import TopKRouter

    eager = getattr(TopKRouter._apply_expert_bias, "_torchdynamo_orig_callable", None)
    if eager is not None:
        TopKRouter._apply_expert_bias = eager


def _define_te_general_gemm_without_te() -> None:
    """0.16.1's router GEMM (moe_utils.RouterGatingLinearFunction) tests `te_general_gemm is
    not None`, a name bound only when Transformer Engine imports: without TE every MoE forward
    raised NameError, on CPU and on CUDA alike. None sends it to its torch.mm branch."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


class _CudaAsCpu(TorchFunctionMode):
    """While active, megatron's `device='cuda'` tensors are made on the CPU, `.cuda()` returns
    the tensor itself and `Tensor.type()` names CPU tensors as their CUDA twins (the optimizers
    check `param.type() == 'torch.cuda.FloatTensor'`). Only megatron's optimizer code runs
    under it (see _run_optimizers_on_cpu): the model's forward and backward never do."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # Runs for every torch call in megatron's optimizer methods (529 per update of the tiny
        # recipe, counted; mostly attribute reads without keywords): that case is decided first.
        if func is _TENSOR_CUDA:
            return args[0]
        if kwargs:
            if _names_cuda(kwargs.get("device")):
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)
        if func is _TENSOR_TYPE and len(args) == 1:
            name = func(*args)
            return (
                name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
            )
        return func(*args)


_TENSOR_CUDA = torch.Tensor.cuda
_TENSOR_TYPE = torch.Tensor.type


def _names_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)  # an ordinal: a CUDA device


def _under_cuda_as_cpu(function):
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        # one mode on the stack: the wrapped methods call each other, and every mode on the
        # stack would see every torch call once more
        if isinstance(torch.overrides._get_current_function_mode(), _CudaAsCpu):
            return function(*args, **kwargs)
        with _CudaAsCpu():
            return function(*args, **kwargs)

    wrapped._hyrl_cuda_as_cpu = True  # type: ignore[attr-defined]  # a marker on a function
    return wrapped


def _run_optimizers_on_cpu() -> None:
    """megatron-core's optimizers (FP32, bf16 with fp32 main params, distributed) create their
    scalars, norms and shards with device='cuda' and check CUDA tensor types: every method of
    theirs, and the factory, runs under _CudaAsCpu on a CPU-only machine."""
    from megatron.core import optimizer as mcore_optimizer
    from megatron.core.optimizer import clip_grads, distrib_optimizer
    from megatron.core.optimizer import optimizer as optimizer_classes

    classes = [
        optimizer_classes.MegatronOptimizer,
        optimizer_classes.MixedPrecisionOptimizer,
        optimizer_classes.Float16OptimizerWithFloat16Params,
        optimizer_classes.FP32Optimizer,
        optimizer_classes.ChainedOptimizer,
        distrib_optimizer.DistributedOptimizer,
    ]
    for cls in classes:
        for name, attr in list(vars(cls).items()):
            if inspect.isfunction(attr) and not getattr(attr, "_hyrl_cuda_as_cpu", False):
                setattr(cls, name, _under_cuda_as_cpu(attr))
    factory = mcore_optimizer.get_megatron_optimizer
    if not getattr(factory, "_hyrl_cuda_as_cpu", False):
        mcore_optimizer.get_megatron_optimizer = _with_fused_adam(_under_cuda_as_cpu(factory))
    for module, name in (
        (clip_grads, "clip_grad_by_total_norm_fp32"),
        (clip_grads, "get_grad_norm_fp32"),
        (optimizer_classes, "clip_grad_by_total_norm_fp32"),
        (optimizer_classes, "get_grad_norm_fp32"),
    ):
        if not getattr(getattr(module, name), "_hyrl_cuda_as_cpu", False):
            setattr(module, name, _under_cuda_as_cpu(getattr(module, name)))


def _with_fused_adam(factory):
    """Without TE or Apex megatron falls back to torch's Adam(W) with neither `foreach` nor
    `fused` set, which on CPU tensors is a Python loop over parameters with ~10 ops each. torch's
    fused CPU kernel does one call per parameter: the tiny recipe's optimizer step 3.0 -> 1.0 ms
    (measured with tools/profile_step.py's actor); results agree to float32 rounding (one ulp
    after five steps; tests/unit/backends/test_cpu_step_speed.py pins it)."""

    @functools.wraps(factory)
    def build(*args, **kwargs):
        optimizer = factory(*args, **kwargs)
        for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
            inner = getattr(sub, "optimizer", None)
            if isinstance(inner, torch.optim.Adam | torch.optim.AdamW):
                for group in inner.param_groups:
                    if not group.get("foreach") and group.get("fused") is None:
                        group["fused"] = True
                inner.step = _outside_cuda_as_cpu(inner.step)  # type: ignore[method-assign]
        return optimizer

    build._hyrl_cuda_as_cpu = True  # type: ignore[attr-defined]  # a marker on a function
    return build


def _outside_cuda_as_cpu(step):
    """torch's own optimizer step under megatron's wrapped methods: it places nothing on
    'cuda' (its states follow the parameters), yet under _CudaAsCpu each of its attribute reads
    and grad-mode switches went through the mode's Python. It runs with the mode taken off the
    stack, and put back after."""
    if getattr(step, "_hyrl_outside_cuda_as_cpu", False):
        return step

    @functools.wraps(step)
    def run(*args, **kwargs):
        if not isinstance(torch.overrides._get_current_function_mode(), _CudaAsCpu):
            return step(*args, **kwargs)
        with torch.overrides._pop_mode_temporarily():
            return step(*args, **kwargs)

    run._hyrl_outside_cuda_as_cpu = True  # type: ignore[attr-defined]  # a marker
    return run


def allow_sequence_parallel_torch_norm() -> None:
    """Let the local spec's torch norms run under sequence parallelism (no Transformer Engine).

    megatron's WrappedTorchNorm refuses sequence_parallel. The norm itself is correct on a
    sequence shard; only its weight gradient must be summed across TP ranks, which happens when
    the weight carries `sequence_parallel` (see `sequence_parallel_grads_need_tp_sum`). Needed
    wherever the local spec runs with TP > 1: on CPU always, on GPU without TE.
    """
    from megatron.core.transformer import torch_norm

    if getattr(torch_norm.WrappedTorchNorm, "_hyrl_patched", False):
        return

    def _new(
        cls,
        config,
        hidden_size,
        eps=1e-5,
        persist_layer_norm=False,
        zero_centered_gamma=False,
        normalization="LayerNorm",
    ):
        norm_cls = torch.nn.RMSNorm if config.normalization == "RMSNorm" else torch.nn.LayerNorm
        norm = norm_cls(normalized_shape=hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel  # type: ignore[attr-defined]
        return norm

    torch_norm.WrappedTorchNorm.__new__ = staticmethod(_new)
    torch_norm.WrappedTorchNorm._hyrl_patched = True


def seed_model_parallel_rng(seed: int) -> None:
    """Seed megatron's named RNG streams (data-parallel, tensor-parallel, expert)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    if not on_cpu():
        mp_random.model_parallel_cuda_manual_seed(seed)
        return
    # Same seed layout as model_parallel_cuda_manual_seed, on CPU generators.
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    etp_rank = parallel_state.get_expert_tensor_parallel_rank()
    mp_random.initialize_rng_tracker(force_reset=True)
    tracker = mp_random.get_cuda_rng_tracker()
    streams = {
        mp_random._DATA_PARALLEL_RNG_TRACKER_NAME: seed,
        mp_random._MODEL_PARALLEL_RNG_TRACKER_NAME: seed + 2718 + tp_rank,
        mp_random._EXPERT_PARALLEL_RNG_TRACKER_NAME: seed + 1024 + 100 * ep_rank + etp_rank,
    }
    tracker.set_states(
        {name: torch.Generator().manual_seed(s).get_state() for name, s in streams.items()}
    )


def _run_pipeline_schedules_on_cpu() -> None:
    """megatron-core's pipeline schedules count tokens and size their send/receive buffers with
    device='cuda': on a CPU-only machine they run under _CudaAsCpu (the model's forward and
    backward inside them too; only PP > 1 takes this path)."""
    from megatron.core.pipeline_parallel import schedules

    for name in (
        "forward_backward_pipelining_without_interleaving",
        "forward_backward_pipelining_with_interleaving",
    ):
        function = getattr(schedules, name)
        if not getattr(function, "_hyrl_cuda_as_cpu", False):
            setattr(schedules, name, _under_cuda_as_cpu(function))


def _skip_torch_adam_step_in_reshardable_load() -> None:
    """Two fixes to megatron-core 0.16.1's distributed-optimizer load for torch's Adam (the
    fallback without TE/Apex). Loading a "fully_reshardable" checkpoint copies every per-param
    state from the checkpoint, `step` included, which megatron restores separately and does not
    pass: the copy skips it here."""
    from megatron.core.optimizer import distrib_optimizer

    cls = distrib_optimizer.DistributedOptimizer
    original = cls._set_main_param_and_optimizer_states
    if getattr(original, "_hyrl_skips_step", False):
        return

    @functools.wraps(original)
    def set_states(self, model_param, tensors):
        if "step" in tensors or self.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
            return original(self, model_param, tensors)
        group_index, group_order = self.model_param_group_index_map[model_param]
        state = self.optimizer.state[
            self.optimizer.param_groups[group_index]["params"][group_order]
        ]
        step = state.pop("step", None)
        try:
            return original(self, model_param, tensors)
        finally:
            if step is not None:
                state["step"] = step

    # a function takes attributes; typeshed's functools._Wrapped declares none
    set_states._hyrl_skips_step = True  # type: ignore[attr-defined]
    cls._set_main_param_and_optimizer_states = set_states

    # ... and gives every parameter's state the *same* `step` tensor, which torch's Adam then
    # increments once per parameter per step (measured: 11 instead of 3 after one resumed
    # step, hence wrong bias corrections): each state gets its own copy.
    load = cls.load_state_dict

    @functools.wraps(load)
    def load_state_dict(self, state_dict):
        load(self, state_dict)
        for state in self.optimizer.state.values():
            if torch.is_tensor(state.get("step")):
                state["step"] = state["step"].clone()

    cls.load_state_dict = load_state_dict


def prepare_optimizer_states_for_load(optimizer) -> None:
    """Give a fresh megatron optimizer the per-parameter states a checkpoint load expects.

    Without Transformer Engine or Apex (CPU), megatron-core 0.16.1 falls back to torch's Adam,
    which creates its states (and their `step`) at the first step; the distributed optimizer's
    sharded_state_dict(is_loading=True) reads that `step` and fails on a fresh optimizer. With
    TE's FusedAdam (GPU) the step lives in the param groups and this does nothing."""
    from megatron.core.optimizer import distrib_optimizer

    if distrib_optimizer.HAVE_APEX_OR_TE:
        return
    for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = getattr(sub, "optimizer", None)
        if inner is None or getattr(sub, "init_state_fn", None) is None:
            continue
        sub.init_state_fn(inner, sub.config)
        for state in inner.state.values():
            state.setdefault("step", torch.tensor(0.0))
