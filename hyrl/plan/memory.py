"""Per-GPU memory of a run, estimated from its resolved settings: parameter counts, bytes per
parameter, activations of one micro-batch (pure arithmetic, no torch). Each function takes the
settings views it reads: the model's architecture, the parallel layout and precision, the
batch's packing."""

from __future__ import annotations

import importlib.util
import math

from hyrl.config.concerns.batch import BatchView
from hyrl.config.concerns.data import ARITH_PROMPT_TOKENS, DataView
from hyrl.config.concerns.model import ModelView
from hyrl.config.concerns.parallel import ParallelView
from hyrl.config.concerns.rollout import RolloutView

GIB = 2**30
# Bytes per element as hyrl's trainer runs megatron-core (hyrl/backends/megatron/ddp_optimizer.py,
# wrap_for_training), by precision flag: see bytes_per_param.
BYTES_FP32, BYTES_BF16 = 4, 2
# megatron-core 0.16.1's DDP gradient buffer under --use-distributed-optimizer: every parameter
# starts at a multiple of 64 elements, the bucket ends at a multiple of lcm(DP, 128)
# (param_and_grad_buffer.py, _pad_start_of_param_if_needed / _pad_end_of_bucket_if_needed).
PARAM_ALIGN_ELEMENTS = 64
# Positions per chunk of the log-prob pass (hyrl/backends/megatron/logprobs.py CHUNK_POSITIONS;
# tests/unit/plan/test_plan.py pins the two equal: the plan imports no torch).
LOGPROB_CHUNK_POSITIONS = 512
BYTES_KV = 2  # bf16 KV cache in SGLang
BYTES_SGLANG_WEIGHT = 2  # SGLang serves bf16 weights whatever the trainer's precision
# SGLang picks its default --mem-fraction-static from GPU memory and TP size (about 0.8-0.9 on
# 80-141 GiB GPUs); the plan assumes this when the flag is not given. Pass the flag to be exact.
SGLANG_DEFAULT_MEM_FRACTION = 0.85
# Published sizes of Qwen3-30B-A3B (model card): 30.5B parameters in all, 3.3B active per token.
QWEN3_30B_A3B_PUBLISHED = {"total": 30.5e9, "active": 3.3e9}


def param_counts(model: ModelView) -> dict:
    """Parameter counts of a Qwen3-MoE model from its architecture (every layer MoE).

    Per layer: attention q, k, v, o = h*a*d + 2*h*g*d + a*d*h (no bias); qk-layernorm 2*d;
    two RMSNorms 2*h; router h*E; E experts of SwiGLU 3*h*f (gate, up, down). Plus the
    embedding V*h, the output layer V*h when untied, the final norm h.
    Active per token: the same with top-k experts instead of E.
    """
    m = model
    h, a, g, d = m.hidden_size, m.num_attention_heads, m.num_query_groups, m.kv_channels
    attention = h * a * d + 2 * h * g * d + a * d * h
    qk_norm = 2 * d if m.qk_layernorm else 0
    norms = 2 * h
    router = h * m.num_experts
    one_expert = 3 * h * m.moe_ffn_hidden_size
    embedding = m.vocab_size * h
    output = m.vocab_size * h if m.untie_embeddings_and_output_weights else 0
    per_layer_dense = attention + qk_norm + norms + router
    layers = m.num_layers
    total = layers * (per_layer_dense + m.num_experts * one_expert) + embedding + output + h
    active = layers * (per_layer_dense + m.moe_router_topk * one_expert) + embedding + output + h
    return {
        "attention_per_layer": attention,
        "norms_per_layer": qk_norm + norms,
        "router_per_layer": router,
        "expert": one_expert,
        "experts_per_layer": m.num_experts * one_expert,
        "embedding": embedding,
        "output_layer": output,
        "final_norm": h,
        "dense": layers * per_layer_dense + embedding + output + h,
        "experts": layers * m.num_experts * one_expert,
        "total": total,
        "active": active,
    }


def params_per_gpu(
    model: ModelView, parallel: ParallelView, counts: dict, value_head: bool = False
) -> dict:
    """Parameters one GPU holds (the most loaded pipeline stage).

    dense = ceil(L / PP) x (attention / TP + norms + router) + vocab layer(s) / TP
            (PP = 1: embedding and output; PP > 1: the larger end stage holds one of them);
    experts = ceil(L / PP) x (E / EP) x 3*h*f / ETP.
    A critic (value_head) has a 1 x h value head instead of the V x h output layer.
    Norm and router weights are replicated over TP, as Megatron keeps them.
    """
    tp, pp = parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size
    ep, etp = parallel.expert_model_parallel_size, parallel.expert_tensor_parallel_size
    layers = math.ceil(model.num_layers / pp)
    output = model.hidden_size if value_head else counts["output_layer"]
    vocab = counts["embedding"] + output if pp == 1 else max(counts["embedding"], output)
    dense = (
        layers
        * (
            counts["attention_per_layer"] / tp
            + counts["norms_per_layer"]
            + counts["router_per_layer"]
        )
        + vocab / tp
        + counts["final_norm"]
    )
    experts = layers * (model.num_experts / ep) * counts["expert"] / etp
    return {"dense": dense, "experts": experts, "layers": layers}


def sequence_length(model: ModelView, rollout: RolloutView, data: DataView) -> tuple[int, int]:
    """(longest prompt, longest response) in tokens: --rollout-max-prompt-len, else for
    --prompt-data max positions - response, else the arithmetic task's 5-token prompt."""
    response = rollout.rollout_max_response_len
    if data.rollout_max_prompt_len is not None:
        prompt = data.rollout_max_prompt_len
    elif data.task == "prompt_data":
        prompt = model.max_position_embeddings - response
    else:
        prompt = ARITH_PROMPT_TOKENS
    return prompt, response


def bytes_per_activation(parallel: ParallelView) -> int:
    """Activations are in the weights' dtype: bf16 under --bf16 (Float16Module), else fp32."""
    return BYTES_BF16 if parallel.bf16 else BYTES_FP32


def attention_implementation(model: ModelView) -> tuple[str, str]:
    """("flash" | "unfused", why) as build_gpt_model picks the layer spec
    (hyrl/backends/megatron/model.py, use_transformer_engine): Transformer Engine's spec runs
    fused/flash attention (no s x s scores kept); the local spec (CPU, --transformer-impl local)
    runs megatron's DotProductAttention, which materialises [b, a/TP, s, s] scores. `auto` takes
    Transformer Engine where it is installed: here, on the machine that makes the plan."""
    if model.transformer_impl == "local":
        return "unfused", "--transformer-impl local"
    if model.transformer_impl == "transformer_engine":
        return "flash", "--transformer-impl transformer_engine"
    if importlib.util.find_spec("transformer_engine") is not None:
        return "flash", "auto: transformer_engine installed here"
    return "unfused", (
        "auto: transformer_engine not installed here, the local spec (plan a TE "
        "cluster with --transformer-impl transformer_engine)"
    )


def flash_attention(model: ModelView) -> bool:
    return attention_implementation(model)[0] == "flash"


def activation_bytes_per_token(model: ModelView, parallel: ParallelView, seq_len: int) -> dict:
    """Bytes stored per token per layer for the backward pass, before TP/SP sharding.

    After Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models" (arXiv:2205.05198), section 4.1: a GPT layer keeps s*b*h*(34 + 5*a*s/h) bytes
    (attention 11sbh + 5as^2b, MLP 19sbh, norms 4sbh), with sequence parallelism all of it / t.
    Their terms are re-derived here for Qwen3-MoE (GQA, qk-norm, SwiGLU experts, no dropout),
    with B = 2 bytes per activation under --bf16, else 4 (bytes_per_activation):
      norms      B(h + h)                inputs of the two RMSNorms
      attention  Bh                      QKV input (norm output)
                 B(a + 2g)d              Q, K, V
                 B(a + g)d               qk-layernorm inputs (with --qk-layernorm)
                 Bad                     attention output = out-projection input
      scores     unfused attention only (the local spec's DotProductAttention), per token a x s:
                 4 B fp32 softmax output (kept by softmax's backward) + under --bf16 its 2 B
                 bf16 copy (kept by the probs x V matmul): 4as fp32, 6as bf16 (no dropout
                 mask: attention dropout 0); 0 with flash attention; removed by selective
                 recomputation
      MoE        Bh + 4E                 router input, fp32 router logits
                 kB(h + 2f + f)          per routed copy: expert input, gate/up output (2f),
                                         SwiGLU output (f) = down-projection input
                 kBh                     expert outputs before the weighted combine
    """
    m = model
    h, a, g, d = m.hidden_size, m.num_attention_heads, m.num_query_groups, m.kv_channels
    k, f, e = m.moe_router_topk, m.moe_ffn_hidden_size, m.num_experts
    b = bytes_per_activation(parallel)
    norms = b * (h + h)
    attention = b * (h + (a + 2 * g) * d + ((a + g) * d if m.qk_layernorm else 0) + a * d)
    bf16_copy = b if parallel.bf16 else 0
    scores = 0 if flash_attention(m) else (BYTES_FP32 + bf16_copy) * a * seq_len
    moe = b * h + 4 * e + k * b * (h + 2 * f + f) + k * b * h
    return {"norms": norms, "attention": attention, "attention_scores": scores, "moe": moe}


# The unfused attention of the layer being run (or recomputed) needs, beyond the scores it keeps,
# megatron's global matmul buffer (B bytes per score, parallel_state.get_global_memory_buffer)
# and about 3 fp32 copies in the softmax backward (gradient of the probabilities, of the masked
# and of the scaled scores): an estimate read from the code path, per score element.
UNFUSED_WORKSPACE_FP32_COPIES = 3


def attention_workspace(
    model: ModelView, parallel: ParallelView, tokens_per_micro_batch: int, seq_len: int
) -> float:
    """Bytes of one layer's unfused-attention workspace on one GPU (0 with flash attention):
    T x a/TP x s score elements x (B + 3 x 4 B), T tokens of sequences of s."""
    if flash_attention(model):
        return 0.0
    tp = parallel.tensor_model_parallel_size
    scores = tokens_per_micro_batch * model.num_attention_heads * seq_len / tp
    return scores * (bytes_per_activation(parallel) + UNFUSED_WORKSPACE_FP32_COPIES * BYTES_FP32)


def logits_bytes(model: ModelView, parallel: ParallelView, tokens_per_micro_batch: int) -> float:
    """The actor's output layer and log-prob pass (hyrl/backends/megatron/logprobs.py) on one GPU:
    the fp32 logits it keeps for backward (Float16Module casts them to fp32 under --bf16), their
    fp32 gradient, and up to 3 fp32 working copies of one chunk of LOGPROB_CHUNK_POSITIONS:
        4 x T x V/TP + 4 x T x V/TP + 3 x 4 x min(T, 512) x V/TP."""
    shard = model.vocab_size / parallel.tensor_model_parallel_size
    chunk = min(tokens_per_micro_batch, LOGPROB_CHUNK_POSITIONS)
    return (2 * BYTES_FP32 * tokens_per_micro_batch + 3 * BYTES_FP32 * chunk) * shard


def activation_memory(
    model: ModelView,
    parallel: ParallelView,
    batch: BatchView,
    tokens_per_micro_batch: int,
    seq_len: int,
    with_logits: bool = True,
) -> dict:
    """Activation bytes on one GPU for one micro-batch, with the chosen recomputation.

    per layer (no recompute)  A = T x (norms + attention + scores + moe) / TP   (T tokens; SP / TP)
    selective                 A without the attention-score term (Korthikanti: 34sbh/t)
    full, uniform, n layers   ceil(L/n) x B*T*h / TP (group inputs) + n x A (one group rebuilt)
    full, block, n layers     n x B*T*h / TP + (L - n) x A + A
    plus, with unfused attention, one layer's attention workspace (attention_workspace), over
    the span the batch's --qkv-format gives (attention_span).
    With PP (1F1B) the first stage holds PP micro-batches of L/PP layers: L layers' worth in all
    (Korthikanti section 4.2.3), so layers_held = L whatever PP is; the interleaved schedule
    (V virtual stages per rank) holds (1 + (PP-1)/(PP*V)) times that (same section).
    Logits (actor): logits_bytes.
    """
    tp = parallel.tensor_model_parallel_size
    span = attention_span(batch, tokens_per_micro_batch, seq_len)
    parts = activation_bytes_per_token(model, parallel, span)
    full_layer = sum(parts.values())
    if parallel.recompute_granularity == "selective":
        full_layer -= parts["attention_scores"]
    per_layer = tokens_per_micro_batch * full_layer / tp
    layer_input = bytes_per_activation(parallel) * tokens_per_micro_batch * model.hidden_size / tp
    layers = model.num_layers
    if parallel.recompute_granularity == "full":
        n = parallel.recompute_num_layers or 1
        if (parallel.recompute_method or "uniform") == "uniform":
            stored = math.ceil(layers / n) * layer_input + n * per_layer
        else:  # block: the first n layers keep their input only, the rest everything
            stored = n * layer_input + (layers - n) * per_layer + per_layer
    else:
        stored = layers * per_layer
    virtual_stages = parallel.virtual_pipeline_model_parallel_size
    if virtual_stages is not None:
        pp = parallel.pipeline_model_parallel_size
        stored *= 1 + (pp - 1) / (pp * virtual_stages)
    logits = logits_bytes(model, parallel, tokens_per_micro_batch) if with_logits else 0
    return {
        "layers": stored,
        "logits": logits,
        "per_layer_no_recompute": per_layer,
        "bytes_per_token_per_layer": full_layer,
        "attention_workspace": attention_workspace(model, parallel, tokens_per_micro_batch, span),
    }


def attention_span(batch: BatchView, tokens_per_micro_batch: int, seq_len: int) -> int:
    """Keys per query in unfused attention's scores: its sequence (seq_len), or under
    --qkv-format thd the whole packed micro-batch, which the local spec runs as one sequence
    under a block-diagonal mask (model.packed_dot_product_attention); flash keeps none."""
    return tokens_per_micro_batch if batch.qkv_format == "thd" else seq_len


def bytes_per_param(parallel: ParallelView) -> dict:
    """Bytes per parameter of weights, gradients and optimizer states as wrap_for_training runs
    megatron-core 0.16.1 (hyrl/backends/megatron/ddp_optimizer.py):

    weights    2 under --bf16 (Float16Module), else 4
    gradients  4 with --accumulate-allreduce-grads-in-fp32 (DDP's fp32 main_grad buffer), else
               the weights' dtype
    optimizer  --bf16: 12 = fp32 main params 4 + Adam m 4 + v 4 (Float16Optimizer /
               distributed optimizer's shard_fp32_from_float16 groups);
               fp32: 8 = Adam m + v (FP32Optimizer, and the distributed optimizer's fp32 shards
               are views of the weights: no master copy)
    """
    weight = BYTES_BF16 if parallel.bf16 else BYTES_FP32
    grad = BYTES_FP32 if parallel.accumulate_allreduce_grads_in_fp32 else weight
    optimizer = 3 * BYTES_FP32 if parallel.bf16 else 2 * BYTES_FP32
    return {"weight": weight, "grad": grad, "optimizer": optimizer}
