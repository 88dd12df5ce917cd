"""`hyrl plan`: rank layout, GPUs and a per-GPU memory estimate of a run, before it starts.

    hyrl plan RECIPE.sh [--json] [-- EXTRA RECIPE FLAGS]
    hyrl plan [--json] -- TRAIN FLAGS --world-size N

`make_plan(cfg, world_size)` is pure arithmetic on a resolved RunConfig (no torch, no GPU), so a
layout can be checked on a laptop. What it counts, per GPU, in GiB (2**30 bytes):

- parameters from the architecture flags (`param_counts`), split as Megatron splits them:
  attention, router, norms and the (vocab-parallel) embedding and output layer over TP (and
  their layers over PP), routed experts over EP x ETP;
- actor weights, gradients and optimizer states at the bytes the trainer's precision flags give
  (`bytes_per_param`: --bf16, --accumulate-allreduce-grads-in-fp32), states sharded over
  data-parallel ranks (experts over expert-DP) with --use-distributed-optimizer;
- activations of one micro-batch with the chosen recomputation (`activation_bytes_per_token`),
  in the activation dtype, with the s x s scores of unfused attention when the trainer runs the
  local spec (`attention_implementation`), and the chunked log-prob pass's logits;
- the frozen reference (weights only) when a KL term is on, the critic (its own weights, grads,
  Adam and activations) under gae;
- SGLang: its weights copy and the KV cache its --sglang-mem-fraction-static leaves, in tokens
  and in sequences of the longest length, against --rollout-concurrency.

`check_fit(plan)` lists what cannot work (each names the flag to change); `plan["warnings"]`
what may be slow. Everything not modelled is listed in NOT_MODELLED and printed with the table.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

from hyrl.config import (ARITH_PROMPT_TOKENS, ConfigError, RunConfig, load, resolve,
                         rollout_layout)
from hyrl.recipes import dry_run, error_lines

GIB = 2 ** 30
# Bytes per element as hyrl's trainer runs megatron-core (hyrl/backends/megatron/trainable.py,
# wrap_for_training), by precision flag: see bytes_per_param.
BYTES_FP32, BYTES_BF16 = 4, 2
# megatron-core 0.16.1's DDP gradient buffer under --use-distributed-optimizer: every parameter
# starts at a multiple of 64 elements, the bucket ends at a multiple of lcm(DP, 128)
# (param_and_grad_buffer.py, _pad_start_of_param_if_needed / _pad_end_of_bucket_if_needed).
PARAM_ALIGN_ELEMENTS = 64
# Positions per chunk of the log-prob pass (hyrl/backends/megatron/logprobs.py CHUNK_POSITIONS;
# tests/test_plan.py pins the two equal: the plan imports no torch).
LOGPROB_CHUNK_POSITIONS = 512
BYTES_KV = 2  # bf16 KV cache in SGLang
BYTES_SGLANG_WEIGHT = 2  # SGLang serves bf16 weights whatever the trainer's precision
# Fraction of GPU memory kept free for fragmentation, the CUDA context and NCCL buffers.
SAFETY_MARGIN = 0.10
# SGLang picks its default --mem-fraction-static from GPU memory and TP size (about 0.8-0.9 on
# 80-141 GiB GPUs); the plan assumes this when the flag is not given. Pass the flag to be exact.
SGLANG_DEFAULT_MEM_FRACTION = 0.85
# Ranks above this are summarised instead of listing every group.
MAX_RANKS_LISTED = 64
# Megatron-core 0.16's rank order (parallel_state.initialize_model_parallel(order=...)):
# consecutive ranks first vary TP, then CP, EP, DP, and PP last.
MEGATRON_ORDER = ("tp", "cp", "ep", "dp", "pp")
# Published sizes of Qwen3-30B-A3B (model card): 30.5B parameters in all, 3.3B active per token.
QWEN3_30B_A3B_PUBLISHED = {"total": 30.5e9, "active": 3.3e9}

NOT_MODELLED = (
    "router imbalance (tokens per expert assumed equal; a hot expert holds more activations)",
    "PyTorch caching-allocator fragmentation and the CUDA context (inside the safety margin)",
    "log-prob and reference forward passes (no stored activations; smaller than training)",
    "the full HF state dict gathered for weight sync beyond one --update-weight-buffer-size bucket",
    "SGLang's CUDA graphs and decode workspace (outside its static fraction)",
    "context parallelism (hyrl has no CP flag; CP = 1)",
    "the distributed optimizer's buffer padding (< 64 elements per tensor; tests/test_plan_live.py"
    " measures it inside 5%)",
)


class PlanError(ValueError):
    """A plan that cannot be made (bad recipe, dry run failed): says why."""


# --- parameters ---------------------------------------------------------------------------------

def param_counts(c: RunConfig) -> dict:
    """Parameter counts of a Qwen3-MoE model from its architecture flags (every layer MoE).

    Per layer: attention q, k, v, o = h*a*d + 2*h*g*d + a*d*h (no bias); qk-layernorm 2*d;
    two RMSNorms 2*h; router h*E; E experts of SwiGLU 3*h*f (gate, up, down). Plus the
    embedding V*h, the output layer V*h when untied, the final norm h.
    Active per token: the same with top-k experts instead of E.
    """
    h, a, g, d = c.hidden_size, c.num_attention_heads, c.num_query_groups, c.kv_channels
    attention = h * a * d + 2 * h * g * d + a * d * h
    qk_norm = 2 * d if c.qk_layernorm else 0
    norms = 2 * h
    router = h * c.num_experts
    one_expert = 3 * h * c.moe_ffn_hidden_size
    embedding = c.vocab_size * h
    output = c.vocab_size * h if c.untie_embeddings_and_output_weights else 0
    per_layer_dense = attention + qk_norm + norms + router
    layers = c.num_layers
    total = layers * (per_layer_dense + c.num_experts * one_expert) + embedding + output + h
    active = layers * (per_layer_dense + c.moe_router_topk * one_expert) + embedding + output + h
    return {
        "attention_per_layer": attention, "norms_per_layer": qk_norm + norms,
        "router_per_layer": router, "expert": one_expert,
        "experts_per_layer": c.num_experts * one_expert,
        "embedding": embedding, "output_layer": output, "final_norm": h,
        "dense": layers * per_layer_dense + embedding + output + h,
        "experts": layers * c.num_experts * one_expert,
        "total": total, "active": active,
    }


def _params_per_gpu(c: RunConfig, counts: dict, value_head: bool = False) -> dict:
    """Parameters one GPU holds (the most loaded pipeline stage).

    dense = ceil(L / PP) x (attention / TP + norms + router) + vocab layer(s) / TP
            (PP = 1: embedding and output; PP > 1: the larger end stage holds one of them);
    experts = ceil(L / PP) x (E / EP) x 3*h*f / ETP.
    A critic (value_head) has a 1 x h value head instead of the V x h output layer.
    Norm and router weights are replicated over TP, as Megatron keeps them.
    """
    tp, pp = c.tensor_model_parallel_size, c.pipeline_model_parallel_size
    ep, etp = c.expert_model_parallel_size, c.expert_tensor_parallel_size
    layers = math.ceil(c.num_layers / pp)
    output = c.hidden_size if value_head else counts["output_layer"]
    vocab = counts["embedding"] + output if pp == 1 else max(counts["embedding"], output)
    dense = layers * (counts["attention_per_layer"] / tp + counts["norms_per_layer"]
                      + counts["router_per_layer"]) + vocab / tp + counts["final_norm"]
    experts = layers * (c.num_experts / ep) * counts["expert"] / etp
    return {"dense": dense, "experts": experts, "layers": layers}


# --- activations -------------------------------------------------------------------------------

def sequence_length(c: RunConfig) -> tuple[int, int]:
    """(longest prompt, longest response) in tokens: --rollout-max-prompt-len, else for
    --prompt-data max positions - response, else the arithmetic task's 5-token prompt."""
    if c.rollout_max_prompt_len is not None:
        prompt = c.rollout_max_prompt_len
    elif c.task == "prompt_data":
        prompt = c.max_position_embeddings - c.rollout_max_response_len
    else:
        prompt = ARITH_PROMPT_TOKENS
    return prompt, c.rollout_max_response_len


def bytes_per_activation(c: RunConfig) -> int:
    """Activations are in the weights' dtype: bf16 under --bf16 (Float16Module), else fp32."""
    return BYTES_BF16 if c.bf16 else BYTES_FP32


def attention_implementation(c: RunConfig) -> tuple[str, str]:
    """("flash" | "unfused", why) as build_gpt_model picks the layer spec
    (hyrl/backends/megatron/model.py, use_transformer_engine): Transformer Engine's spec runs
    fused/flash attention (no s x s scores kept); the local spec (CPU, --transformer-impl local)
    runs megatron's DotProductAttention, which materialises [b, a/TP, s, s] scores. `auto` takes
    Transformer Engine where it is installed: here, on the machine that makes the plan."""
    if c.transformer_impl == "local":
        return "unfused", "--transformer-impl local"
    if c.transformer_impl == "transformer_engine":
        return "flash", "--transformer-impl transformer_engine"
    if importlib.util.find_spec("transformer_engine") is not None:
        return "flash", "auto: transformer_engine installed here"
    return "unfused", ("auto: transformer_engine not installed here, the local spec (plan a TE "
                       "cluster with --transformer-impl transformer_engine)")


def flash_attention(c: RunConfig) -> bool:
    return attention_implementation(c)[0] == "flash"


def activation_bytes_per_token(c: RunConfig, seq_len: int) -> dict:
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
    h, a, g, d = c.hidden_size, c.num_attention_heads, c.num_query_groups, c.kv_channels
    k, f, e = c.moe_router_topk, c.moe_ffn_hidden_size, c.num_experts
    b = bytes_per_activation(c)
    norms = b * (h + h)
    attention = b * (h + (a + 2 * g) * d + ((a + g) * d if c.qk_layernorm else 0) + a * d)
    scores = 0 if flash_attention(c) else (BYTES_FP32 + (b if c.bf16 else 0)) * a * seq_len
    moe = b * h + 4 * e + k * b * (h + 2 * f + f) + k * b * h
    return {"norms": norms, "attention": attention, "attention_scores": scores, "moe": moe}


# The unfused attention of the layer being run (or recomputed) needs, beyond the scores it keeps,
# megatron's global matmul buffer (B bytes per score, parallel_state.get_global_memory_buffer)
# and about 3 fp32 copies in the softmax backward (gradient of the probabilities, of the masked
# and of the scaled scores): an estimate read from the code path, per score element.
UNFUSED_WORKSPACE_FP32_COPIES = 3


def attention_workspace(c: RunConfig, tokens_per_micro_batch: int, seq_len: int) -> float:
    """Bytes of one layer's unfused-attention workspace on one GPU (0 with flash attention):
    T x a/TP x s score elements x (B + 3 x 4 B), T tokens of sequences of s."""
    if flash_attention(c):
        return 0.0
    scores = tokens_per_micro_batch * c.num_attention_heads * seq_len / c.tensor_model_parallel_size
    return scores * (bytes_per_activation(c) + UNFUSED_WORKSPACE_FP32_COPIES * BYTES_FP32)


def logits_bytes(c: RunConfig, tokens_per_micro_batch: int) -> float:
    """The actor's output layer and log-prob pass (hyrl/backends/megatron/logprobs.py) on one GPU:
    the fp32 logits it keeps for backward (Float16Module casts them to fp32 under --bf16), their
    fp32 gradient, and up to 3 fp32 working copies of one chunk of LOGPROB_CHUNK_POSITIONS:
        4 x T x V/TP + 4 x T x V/TP + 3 x 4 x min(T, 512) x V/TP."""
    shard = c.vocab_size / c.tensor_model_parallel_size
    chunk = min(tokens_per_micro_batch, LOGPROB_CHUNK_POSITIONS)
    return (2 * BYTES_FP32 * tokens_per_micro_batch + 3 * BYTES_FP32 * chunk) * shard


def activation_memory(c: RunConfig, tokens_per_micro_batch: int, seq_len: int,
                      with_logits: bool = True) -> dict:
    """Activation bytes on one GPU for one micro-batch, with the chosen recomputation.

    per layer (no recompute)  A = T x (norms + attention + scores + moe) / TP   (T tokens; SP / TP)
    selective                 A without the attention-score term (Korthikanti: 34sbh/t)
    full, uniform, n layers   ceil(L/n) x B*T*h / TP (group inputs) + n x A (one group rebuilt)
    full, block, n layers     n x B*T*h / TP + (L - n) x A + A
    plus, with unfused attention, one layer's attention workspace (attention_workspace).
    With PP (1F1B) the first stage holds PP micro-batches of L/PP layers: L layers' worth in all
    (Korthikanti section 4.2.3), so layers_held = L whatever PP is.
    Logits (actor): logits_bytes.
    """
    tp = c.tensor_model_parallel_size
    parts = activation_bytes_per_token(c, seq_len)
    full_layer = sum(parts.values())
    if c.recompute_granularity == "selective":
        full_layer -= parts["attention_scores"]
    per_layer = tokens_per_micro_batch * full_layer / tp
    layer_input = bytes_per_activation(c) * tokens_per_micro_batch * c.hidden_size / tp
    layers = c.num_layers
    if c.recompute_granularity == "full":
        n = c.recompute_num_layers or 1
        if (c.recompute_method or "uniform") == "uniform":
            stored = math.ceil(layers / n) * layer_input + n * per_layer
        else:  # block: the first n layers keep their input only, the rest everything
            stored = n * layer_input + (layers - n) * per_layer + per_layer
    else:
        stored = layers * per_layer
    logits = logits_bytes(c, tokens_per_micro_batch) if with_logits else 0
    return {"layers": stored, "logits": logits, "per_layer_no_recompute": per_layer,
            "bytes_per_token_per_layer": full_layer,
            "attention_workspace": attention_workspace(c, tokens_per_micro_batch, seq_len)}


# --- rank layout -------------------------------------------------------------------------------

def rank_groups(sizes: dict[str, int], token: str) -> list[list[int]]:
    """Megatron's rank groups of the parallelism `token` ("tp", "dp", "tp-ep", ...).

    Ranks are laid out in `sizes`' order, the first fastest (rank = sum idx_i x stride_i); a
    group varies the named dimensions and fixes the others, as
    parallel_state.generate_masked_orthogonal_rank_groups does.
    """
    names = list(sizes)
    strides = [math.prod(sizes[n] for n in names[:i]) for i in range(len(names))]
    varying = [i for i, n in enumerate(names) if n in token.split("-")]
    fixed = [i for i in range(len(names)) if i not in varying]

    def indices(dims):  # every index tuple over dims, the first dimension fastest
        for combo in itertools.product(*[range(sizes[names[i]]) for i in reversed(dims)]):
            yield tuple(reversed(combo))

    groups = []
    for fixed_idx in indices(fixed):
        base = sum(i * strides[dim] for i, dim in zip(fixed_idx, fixed))
        groups.append([base + sum(i * strides[dim] for i, dim in zip(var_idx, varying))
                       for var_idx in indices(varying)])
    return groups


def _layout(c: RunConfig, world_size: int) -> dict:
    tp, pp = c.tensor_model_parallel_size, c.pipeline_model_parallel_size
    ep, etp = c.expert_model_parallel_size, c.expert_tensor_parallel_size
    return {"tp": tp, "pp": pp, "ep": ep, "etp": etp, "cp": 1,
            "dp": world_size // (tp * pp), "expert_dp": world_size // (ep * etp * pp),
            "sequence_parallel": c.sequence_parallel, "order": "-".join(MEGATRON_ORDER)}


def _groups(layout: dict) -> dict:
    dense = {"tp": layout["tp"], "cp": 1, "ep": 1, "dp": layout["dp"], "pp": layout["pp"]}
    expert = {"tp": layout["etp"], "cp": 1, "ep": layout["ep"], "dp": layout["expert_dp"],
              "pp": layout["pp"]}
    return {"tp": rank_groups(dense, "tp"), "dp": rank_groups(dense, "dp"),
            "pp": rank_groups(dense, "pp"), "ep": rank_groups(expert, "ep"),
            "expert_dp": rank_groups(expert, "dp")}


def _crosses(groups: list[list[int]], gpus_per_node: int) -> list[list[int]]:
    return [grp for grp in groups if len({r // gpus_per_node for r in grp}) > 1]


# --- the plan ----------------------------------------------------------------------------------

def _gib(n_bytes: float) -> float:
    return n_bytes / GIB


def _line(name: str, n_bytes: float, formula: str) -> dict:
    return {"name": name, "gib": round(_gib(n_bytes), 3), "bytes": int(round(n_bytes)),
            "formula": formula}


def bytes_per_param(c: RunConfig) -> dict:
    """Bytes per parameter of weights, gradients and optimizer states as wrap_for_training runs
    megatron-core 0.16.1 (hyrl/backends/megatron/trainable.py):

    weights    2 under --bf16 (Float16Module), else 4
    gradients  4 with --accumulate-allreduce-grads-in-fp32 (DDP's fp32 main_grad buffer), else
               the weights' dtype
    optimizer  --bf16: 12 = fp32 main params 4 + Adam m 4 + v 4 (Float16Optimizer /
               distributed optimizer's shard_fp32_from_float16 groups);
               fp32: 8 = Adam m + v (FP32Optimizer, and the distributed optimizer's fp32 shards
               are views of the weights: no master copy)
    """
    weight = BYTES_BF16 if c.bf16 else BYTES_FP32
    grad = BYTES_FP32 if c.accumulate_allreduce_grads_in_fp32 else weight
    optimizer = 3 * BYTES_FP32 if c.bf16 else 2 * BYTES_FP32
    return {"weight": weight, "grad": grad, "optimizer": optimizer}


def _model_state_lines(prefix: str, per_gpu: dict, layout: dict, c: RunConfig) -> list:
    """Weights, gradients and optimizer states of one trained model on one GPU.

    With --use-distributed-optimizer megatron shards main params and Adam states over DP (the
    experts' over expert-DP): each rank keeps 1/DP of every bucket. Weights and gradients stay
    whole (the gradient is reduce-scattered into a full-size buffer); the buffers' alignment
    padding (PARAM_ALIGN_ELEMENTS per tensor) is under 0.1% of any model here and not counted.
    """
    dense, experts = per_gpu["dense"], per_gpu["experts"]
    params = dense + experts
    per = bytes_per_param(c)
    precision = "bf16" if c.bf16 else "fp32"
    grad_text = ("fp32 main_grad buffer, --accumulate-allreduce-grads-in-fp32"
                 if c.accumulate_allreduce_grads_in_fp32 else f"{precision} grad buffer")
    state_text = ("fp32 main params + Adam m + v" if c.bf16
                  else "Adam m + v; fp32 weights are their own main params")
    lines = [
        _line(f"{prefix} weights", per["weight"] * params,
              f"{per['weight']} B x (dense {_fmt_params(dense)} + experts "
              f"{_fmt_params(experts)}) params per GPU ({precision}"
              f"{', Float16Module' if c.bf16 else ''})"),
        _line(f"{prefix} gradients", per["grad"] * params,
              f"{per['grad']} B x {_fmt_params(params)} params ({grad_text}, megatron DDP)"),
    ]
    if c.use_distributed_optimizer:
        states = per["optimizer"] * (dense / layout["dp"] + experts / layout["expert_dp"])
        formula = (f"{per['optimizer']} B x (dense / DP={layout['dp']} + experts / expert-DP="
                   f"{layout['expert_dp']}) ({state_text}, distributed optimizer)")
    else:
        states = per["optimizer"] * params
        formula = (f"{per['optimizer']} B x {_fmt_params(params)} params ({state_text}, "
                   "replicated; --use-distributed-optimizer shards it)")
    lines.append(_line(f"{prefix} optimizer (Adam)", states, formula))
    return lines


def _activation_line(prefix: str, c: RunConfig, tokens: int, seq_len: int,
                     micro_text: str, with_logits: bool) -> tuple[dict, list]:
    """The activation lines of one model; act["total"] is their sum in bytes."""
    act = activation_memory(c, tokens, seq_len, with_logits)
    recompute = c.recompute_granularity or "none"
    if recompute == "full":
        recompute += f" {c.recompute_method or 'uniform'} x{c.recompute_num_layers or 1}"
    kind, why = attention_implementation(c)
    b = bytes_per_activation(c)
    scores = activation_bytes_per_token(c, seq_len)["attention_scores"]
    if kind == "flash":
        attn = f"flash attention ({why}): no s x s scores"
    elif c.recompute_granularity == "selective":
        attn = f"unfused attention ({why}): scores recomputed (selective)"
    else:
        attn = (f"unfused attention ({why}): {scores / (c.num_attention_heads * seq_len):.0f} B x "
                "a x s scores per token")
    tp = c.tensor_model_parallel_size
    lines = [_line(f"{prefix} activations", act["layers"],
                   f"{micro_text} = {tokens} tokens x {act['bytes_per_token_per_layer']:.0f} "
                   f"B/token/layer ({'bf16' if c.bf16 else 'fp32'}, {b} B) / TP={tp} x "
                   f"{c.num_layers} layers, recompute {recompute}, {attn} "
                   "(after Korthikanti et al. 2022)")]
    if act["attention_workspace"]:
        lines.append(_line(
            f"{prefix} attention workspace", act["attention_workspace"],
            f"one layer's unfused attention: {tokens} tokens x a={c.num_attention_heads} / TP="
            f"{tp} x s={seq_len} scores x ({b} B matmul buffer + "
            f"{UNFUSED_WORKSPACE_FP32_COPIES} x 4 B fp32 softmax-backward copies)"))
    if with_logits:
        chunk = min(tokens, LOGPROB_CHUNK_POSITIONS)
        lines.append(_line(f"{prefix} logits", act["logits"],
                           f"(2 x 4 B x {tokens} tokens + 3 x 4 B x {chunk}-position chunk) x "
                           f"V={c.vocab_size} / TP={tp} (fp32 logits kept + their gradient + the "
                           "chunked log-prob pass's working copies)"))
    act["total"] = act["layers"] + act["logits"] + act["attention_workspace"]
    return act, lines


def _micro_batch_tokens(c: RunConfig, micro_batch: int, seq_len: int) -> tuple[int, str]:
    if c.use_dynamic_batch_size:
        return c.max_tokens_per_gpu, f"--max-tokens-per-gpu {c.max_tokens_per_gpu}"
    return micro_batch * seq_len, f"micro-batch {micro_batch} x {seq_len} tokens"


def make_plan(cfg: RunConfig, world_size: int) -> dict:
    """Layout, GPUs, parameters and per-GPU memory of a run; pure (no torch, no GPU).

    `cfg` may be as parsed or resolved (it is resolved here). Raises ConfigError for a rollout
    layout the config module refuses.
    """
    c = resolve(cfg)
    layout = _layout(c, world_size)
    counts = param_counts(c)
    rollout = rollout_layout(c, world_size)
    gpn = c.gpus_per_node
    errors: list[str] = []
    warnings: list[str] = []

    # rank groups and nodes
    groups = _groups(layout)
    listed = world_size <= MAX_RANKS_LISTED
    crossing = {}
    if gpn is not None:
        for name in ("tp", "ep"):
            crossing[name] = _crosses(groups[name], gpn)
        if crossing["tp"]:
            errors.append(
                f"--tensor-model-parallel-size={layout['tp']}: TP group {crossing['tp'][0]} "
                f"spans nodes of {gpn} GPUs (--gpus-per-node); TP all-reduces every layer and "
                f"must stay inside NVLink; allowed: TP <= {gpn} and dividing {gpn}")
        if crossing["ep"]:
            warnings.append(
                f"--expert-model-parallel-size={layout['ep']}: EP group {crossing['ep'][0]} spans "
                f"nodes of {gpn} GPUs; the token all-to-all then crosses the network (slower); "
                f"EP x ETP <= {gpn} keeps it inside a node")
        if rollout.gpus_per_engine > gpn:
            errors.append(
                f"--rollout-num-gpus-per-engine={rollout.gpus_per_engine}: one SGLang engine "
                f"cannot span nodes of {gpn} GPUs (--gpus-per-node); allowed: <= {gpn}")

    rollout_gpus = 0 if (c.colocate or rollout.in_process) else rollout.num_gpus
    gpus = {"training": world_size, "rollout": rollout_gpus, "colocated": c.colocate,
            "total": world_size + rollout_gpus, "gpus_per_node": gpn}
    if gpn is not None:
        gpus["training_nodes"] = math.ceil(world_size / gpn)
        gpus["rollout_nodes"] = math.ceil(rollout_gpus / gpn)
        gpus["nodes"] = gpus["training_nodes"] + gpus["rollout_nodes"]
        if world_size > gpn and world_size % gpn:
            warnings.append(f"training world size {world_size} is not a whole number of nodes "
                            f"of {gpn} GPUs")

    # memory: the actor
    prompt_len, response_len = sequence_length(c)
    seq_len = prompt_len + response_len
    actor = _params_per_gpu(c, counts)
    lines = _model_state_lines("actor", actor, layout, c)
    tokens, micro_text = _micro_batch_tokens(c, c.micro_batch_size, seq_len)
    act, act_lines = _activation_line("actor", c, tokens, seq_len, micro_text, True)
    activations = act["total"]
    if c.kl_loss_coef > 0 or c.kl_coef > 0:
        weight = bytes_per_param(c)["weight"]
        lines.append(_line("reference weights", weight * (actor["dense"] + actor["experts"]),
                           f"{weight} B x actor params per GPU (frozen, for the KL term)"))
    critic_activations = 0.0
    critic_act_lines: list = []
    if c.advantage_estimator == "gae":
        critic = _params_per_gpu(c, counts, value_head=True)
        lines += _model_state_lines("critic", critic, layout, c)
        c_tokens, c_text = _micro_batch_tokens(c, c.critic_micro_batch_size, seq_len)
        c_act, critic_act_lines = _activation_line("critic", c, c_tokens, seq_len, c_text, False)
        critic_activations = c_act["total"]
    lines.append(_line("weight-sync bucket", c.update_weight_buffer_size,
                       "--update-weight-buffer-size (one bucket gathered at a time)"))
    resident = sum(line["gib"] for line in lines) * GIB
    # Actor and critic train one after the other: the larger activation set is the peak.
    peak_act_lines = act_lines if activations >= critic_activations else critic_act_lines
    training_peak = resident + max(activations, critic_activations)

    memory = {"lines": lines + peak_act_lines, "resident_gib": round(_gib(resident), 3),
              "activations_gib": round(_gib(max(activations, critic_activations)), 3),
              "training_peak_gib": round(_gib(training_peak), 3),
              "actor_activations_gib": round(_gib(activations), 3),
              "critic_activations_gib": round(_gib(critic_activations), 3)}
    if critic_act_lines and peak_act_lines is act_lines:
        memory["other_activation_lines"] = critic_act_lines
    elif critic_act_lines:
        memory["other_activation_lines"] = act_lines

    # SGLang: weights copy and KV cache
    sglang = None
    if rollout.engine == "sglang" and rollout.num_engines > 0:
        sglang = _sglang_plan(c, counts, rollout, seq_len, resident)
        if 1 <= sglang.get("sequences", rollout.concurrency_per_engine) \
                < rollout.concurrency_per_engine:
            warnings.append(
                f"--rollout-concurrency={rollout.concurrency_per_engine}: only "
                f"{sglang['sequences']} sequences of the longest {seq_len} tokens fit in an "
                "engine's KV cache; SGLang queues or retracts the rest (fine while responses "
                "are shorter on average)")

    gpu_gib = c.gpu_memory_gib
    plan = {
        "world_size": world_size, "layout": layout,
        "groups": groups if listed else _summarise_groups(groups),
        "groups_listed": listed, "gpus": gpus,
        "params": {**counts, "actor_per_gpu": actor["dense"] + actor["experts"],
                   "actor_dense_per_gpu": actor["dense"],
                   "actor_experts_per_gpu": actor["experts"]},
        "sequence": {"prompt_tokens": prompt_len, "response_tokens": response_len,
                     "tokens": seq_len, "tokens_per_micro_batch": tokens},
        "memory": memory, "sglang": sglang, "gpu_memory_gib": gpu_gib,
        "safety_margin": SAFETY_MARGIN, "errors": errors, "warnings": warnings,
        "not_modelled": list(NOT_MODELLED),
    }
    if gpu_gib is not None:
        plan["usable_gib"] = round(gpu_gib * (1 - SAFETY_MARGIN), 3)
        plan["suggestions"] = _suggestions(c, world_size, training_peak)
    return plan


def _sglang_plan(c: RunConfig, counts: dict, rollout, seq_len: int, resident: float) -> dict:
    """SGLang's memory per GPU of one engine (tensor-parallel size T = GPUs per engine).

    SGLang sizes its KV pool at start-up as (model_runner.profile_max_num_token)
        KV = free memory after loading its weights - GPU x (1 - mem_fraction_static),
    so everything already on the GPU counts against the fraction. Hence
        KV bytes = fraction x GPU - weights (params x 2 B / T) - [colocated: the actor's
                   resident memory, weights + grads + optimizer + reference + critic]
        KV bytes per token = 2 (K, V) x layers x max(g / T, 1) kv heads x d x 2 B
        sequences = KV tokens / (prompt + response), against --rollout-concurrency per engine.
    """
    t_engine = rollout.gpus_per_engine
    fraction = c.sglang_mem_fraction_static
    fraction_text = f"{fraction}" if fraction is not None else \
        f"{SGLANG_DEFAULT_MEM_FRACTION} (assumed default)"
    fraction = SGLANG_DEFAULT_MEM_FRACTION if fraction is None else fraction
    weights = BYTES_SGLANG_WEIGHT * counts["total"] / t_engine
    kv_heads = max(c.num_query_groups / t_engine, 1)
    kv_per_token = 2 * c.num_layers * kv_heads * c.kv_channels * BYTES_KV
    out = {"gpus_per_engine": t_engine, "num_engines": rollout.num_engines,
           "mem_fraction_static": fraction, "mem_fraction_text": fraction_text,
           "weights_gib": round(_gib(weights), 3), "kv_bytes_per_token": kv_per_token,
           "concurrency_per_engine": rollout.concurrency_per_engine,
           "colocated": c.colocate, "sequence_tokens": seq_len}
    if c.gpu_memory_gib is not None:
        static = fraction * c.gpu_memory_gib * GIB
        kv = static - weights - (resident if c.colocate else 0.0)
        tokens = max(kv, 0) / kv_per_token  # every GPU holds its heads' share of every token
        out.update(static_gib=round(_gib(static), 3), kv_gib=round(_gib(kv), 3),
                   kv_tokens=int(tokens), sequences=int(tokens // seq_len))
    return out


def _summarise_groups(groups: dict) -> dict:
    return {name: {"count": len(grps), "size": len(grps[0]), "first": grps[0], "last": grps[-1]}
            for name, grps in groups.items()}


def _suggestions(c: RunConfig, world_size: int, peak: float) -> list[dict]:
    """What-ifs that lower the training peak: each changes one flag (used in error messages)."""
    layout = _layout(c, world_size)
    tries = []
    if not c.use_distributed_optimizer:
        tries.append(("--use-distributed-optimizer", {"use_distributed_optimizer": True}))
    if c.recompute_granularity != "full":
        tries.append(("--recompute-granularity full", {"recompute_granularity": "full",
                                                       "recompute_method": None,
                                                       "recompute_num_layers": None}))
    if c.use_dynamic_batch_size:
        if c.max_tokens_per_gpu // 2 >= sum(sequence_length(c)):
            tries.append((f"--max-tokens-per-gpu {c.max_tokens_per_gpu // 2}",
                          {"max_tokens_per_gpu": c.max_tokens_per_gpu // 2}))
    elif c.micro_batch_size > 1:
        tries.append((f"--micro-batch-size {c.micro_batch_size // 2}",
                      {"micro_batch_size": c.micro_batch_size // 2}))
    ep2 = 2 * c.expert_model_parallel_size
    if c.num_experts % ep2 == 0 and (world_size // layout["pp"]) % (ep2 * layout["etp"]) == 0:
        tries.append((f"--expert-model-parallel-size {ep2}", {"expert_model_parallel_size": ep2}))
    tp2 = 2 * c.tensor_model_parallel_size
    if (world_size % (tp2 * layout["pp"]) == 0 and c.num_query_groups % tp2 == 0
            and c.num_attention_heads % tp2 == 0 and c.vocab_size % tp2 == 0 and c.ffn_hidden_size % tp2 == 0
            and layout["dp"] // 2 >= 1 and c.global_batch_size % (c.micro_batch_size
                                                                  * layout["dp"] // 2) == 0
            and (c.gpus_per_node is None or tp2 <= c.gpus_per_node)):
        tries.append((f"--tensor-model-parallel-size {tp2} --sequence-parallel",
                      {"tensor_model_parallel_size": tp2, "sequence_parallel": True}))
    out = []
    for flag, change in tries:
        other = make_plan_memory(dataclasses.replace(c, **change), world_size)
        if other < peak:
            out.append({"flag": flag, "training_peak_gib": round(_gib(other), 3)})
    return out


def make_plan_memory(c: RunConfig, world_size: int) -> float:
    """The training peak (bytes per GPU) of `c`, for what-ifs."""
    plan = make_plan(dataclasses.replace(c, gpu_memory_gib=None), world_size)
    return plan["memory"]["training_peak_gib"] * GIB


def check_fit(plan: dict) -> list[str]:
    """Problems that stop the run, each naming the flag to change and the numbers.

    Without --gpu-memory-gib only the layout is checked (TP inside a node, engines inside a
    node). With it: training peak <= GPU x (1 - SAFETY_MARGIN); SGLang's KV cache must hold at
    least one sequence of the longest length (colocated, the actor's resident memory comes out
    of SGLang's fraction: see _sglang_plan).
    """
    problems = list(plan["errors"])
    gpu = plan.get("gpu_memory_gib")
    if gpu is None:
        return problems
    usable = plan["usable_gib"]
    mem = plan["memory"]
    if mem["training_peak_gib"] > usable:
        largest = max(mem["lines"], key=lambda line: line["gib"])
        hints = ", ".join(f"{s['flag']} -> {s['training_peak_gib']:.1f} GiB"
                          for s in plan.get("suggestions", [])) or "more GPUs (a larger world)"
        problems.append(
            f"training needs {mem['training_peak_gib']:.1f} GiB per GPU, more than the usable "
            f"{usable:.1f} GiB ({gpu:g} GiB --gpu-memory-gib less {SAFETY_MARGIN:.0%} margin); "
            f"largest: {largest['name']} {largest['gib']:.1f} GiB; allowed: a layout that fits, "
            f"e.g. {hints}")
    sg = plan.get("sglang")
    if sg and "kv_gib" in sg:
        if sg["sequences"] < 1:
            colocated = (f" - the actor's resident {mem['resident_gib']:.1f} GiB (colocated)"
                         if sg["colocated"] else "")
            problems.append(
                f"--sglang-mem-fraction-static={sg['mem_fraction_text']}: SGLang's KV cache is "
                f"{sg['kv_gib']:.1f} GiB = {sg['static_gib']:.1f} GiB static - its weights "
                f"{sg['weights_gib']:.1f} GiB{colocated}, not one {sg['sequence_tokens']}-token "
                f"sequence; allowed: a larger fraction, more --rollout-num-gpus-per-engine"
                + (", --use-distributed-optimizer, or separate rollout GPUs (--no-colocate)"
                   if sg["colocated"] else ""))
        if sg["colocated"] and mem["training_peak_gib"] > usable:
            pass  # already reported above
    return problems


# --- text --------------------------------------------------------------------------------------

def _fmt_params(n: float) -> str:
    return f"{n / 1e9:.3f}B" if n >= 1e8 else f"{n / 1e6:.3f}M" if n >= 1e4 else f"{n:.0f}"


def format_plan(plan: dict) -> str:
    """The plan as a readable table (layout, groups, GPUs, parameters, memory, SGLang)."""
    lay, gpus, p = plan["layout"], plan["gpus"], plan["params"]
    out = [f"hyrl plan: world size {plan['world_size']}",
           f"  layout  TP={lay['tp']} PP={lay['pp']} EP={lay['ep']} ETP={lay['etp']} CP=1 "
           f"DP={lay['dp']} expert-DP={lay['expert_dp']} SP={'on' if lay['sequence_parallel'] else 'off'}"
           f"  (rank order {lay['order']}, megatron-core default)"]
    groups = plan["groups"]
    for name in ("tp", "dp", "ep", "expert_dp", "pp"):
        g = groups[name]
        text = " ".join(str(grp).replace(" ", "") for grp in g) if plan["groups_listed"] else \
            f"{g['count']} groups of {g['size']}: first {g['first']}, last {g['last']}"
        out.append(f"  {name + ' groups':<17}{text}")
    gpn = gpus["gpus_per_node"]
    nodes = (f", {gpus['nodes']} nodes of {gpn} ({gpus['training_nodes']} training + "
             f"{gpus['rollout_nodes']} rollout)") if gpn else " (--gpus-per-node not given)"
    out.append(f"  GPUs    {gpus['total']} = {gpus['training']} training + {gpus['rollout']} "
               f"rollout{' (engines colocated on the training GPUs)' if gpus['colocated'] else ''}"
               f"{nodes}")
    out.append(f"  params  total {_fmt_params(p['total'])}, active per token "
               f"{_fmt_params(p['active'])} (dense {_fmt_params(p['dense'])}, experts "
               f"{_fmt_params(p['experts'])}); actor per GPU {_fmt_params(p['actor_per_gpu'])}")
    seq = plan["sequence"]
    out.append(f"  sequence {seq['prompt_tokens']} prompt + {seq['response_tokens']} response = "
               f"{seq['tokens']} tokens; {seq['tokens_per_micro_batch']} tokens per micro-batch")
    out.append("  memory per GPU (GiB)")
    mem = plan["memory"]
    for line in mem["lines"]:
        out.append(f"    {line['name']:<26}{line['gib']:>9.2f}   # {line['formula']}")
    out.append(f"    {'= training peak':<26}{mem['training_peak_gib']:>9.2f}   # resident "
               f"{mem['resident_gib']:.2f} + activations {mem['activations_gib']:.2f}")
    for line in mem.get("other_activation_lines", []):
        out.append(f"    ({line['name']:<24}{line['gib']:>9.2f})  # not at the same time")
    if plan.get("gpu_memory_gib") is not None:
        out.append(f"    {'usable':<26}{plan['usable_gib']:>9.2f}   # --gpu-memory-gib "
                   f"{plan['gpu_memory_gib']:g} x (1 - {plan['safety_margin']:.0%} margin)")
    sg = plan.get("sglang")
    if sg:
        out.append(f"  SGLang  {sg['num_engines']} engines x {sg['gpus_per_engine']} GPUs, "
                   f"mem fraction {sg['mem_fraction_text']}, weights {sg['weights_gib']:.2f} "
                   f"GiB per GPU, KV {sg['kv_bytes_per_token'] / 1024:.0f} KiB per token per GPU")
        if "kv_gib" in sg:
            minus = f" - actor resident {mem['resident_gib']:.2f}" if sg["colocated"] else ""
            out.append(f"    KV cache {sg['kv_gib']:.2f} GiB = static {sg['static_gib']:.2f} - "
                       f"weights {sg['weights_gib']:.2f}{minus} -> {sg['kv_tokens']} tokens = "
                       f"{sg['sequences']} sequences of {sg['sequence_tokens']} per engine "
                       f"(--rollout-concurrency {sg['concurrency_per_engine']})")
        else:
            out.append("    KV cache: give --gpu-memory-gib to size it")
    for warning in plan["warnings"]:
        out.append(f"  warning: {warning}")
    problems = check_fit(plan)
    for problem in problems:
        out.append(f"  error: {problem}")
    if plan.get("gpu_memory_gib") is None:
        out.append("  fit: not checked (give --gpu-memory-gib)")
    elif not problems:
        out.append(f"  fit: yes, {mem['training_peak_gib']:.1f} of {plan['usable_gib']:.1f} "
                   "usable GiB")
    out.append("  not modelled: " + "; ".join(plan["not_modelled"]))
    return "\n".join(out)


def describe_for_dry_run(cfg: RunConfig, world_size: int) -> str:
    """The plan table for `hyrl train --dry-run` (printed on stderr)."""
    return format_plan(make_plan(cfg, world_size))


# --- command line ------------------------------------------------------------------------------

USAGE = """usage: hyrl plan RECIPE.sh [--json] [-- EXTRA RECIPE FLAGS]
       hyrl plan [--json] [--world-size N] -- TRAIN FLAGS [--world-size N]

Rank layout, GPUs and per-GPU memory of a run, on any machine (no GPU). With a recipe, its dry
run (`bash RECIPE --dry-run EXTRA...`, one process at the recipe's intended world size) gives
the resolved flags. Exit status 1 when the plan does not fit (the error names the flag),
2 when the flags are refused."""

RECIPE_TIMEOUT_S = 600


def config_from_dry_run(resolved: dict) -> tuple[RunConfig, int]:
    """(RunConfig, world size) from the JSON `hyrl train --dry-run` prints."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    missing = names - set(resolved)
    if missing or "world_size" not in resolved:
        raise PlanError("the dry run's JSON lacks " + ", ".join(sorted(missing or {"world_size"}))
                        + " (is the recipe's hyrl older than this one?)")
    return RunConfig(**{n: resolved[n] for n in names}), int(resolved["world_size"])


def recipe_dry_run(recipe: str, extra: list[str]) -> dict:
    """The resolved config of `bash RECIPE --dry-run EXTRA...`; PlanError with its error."""
    if not Path(recipe).is_file():
        raise PlanError(f"{recipe}: no such recipe file")
    env = dict(os.environ)
    env.setdefault("PYTHON", sys.executable)
    # A run directory that never exists, so the dry run never refuses an existing one.
    probe = ["--run-dir", os.path.join(env.get("TMPDIR", "/tmp"), f"hyrl-plan-{os.getpid()}-none")]
    try:
        done = dry_run(recipe, [*extra, *probe], env, RECIPE_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise PlanError(f"{shlex.join(err.cmd)}: no answer in {RECIPE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise PlanError(error_lines(done.stderr, 5) or f"exit {done.returncode}")
    if done.config is None:
        raise PlanError(f"{recipe} --dry-run printed no JSON on stdout (does it pass --dry-run "
                        "on to hyrl.train?)")
    return done.config


def _split_world_size(args: list[str]) -> tuple[list[str], int | None]:
    out, world = [], None
    i = 0
    while i < len(args):
        flag, sep, value = args[i].partition("=")
        if flag == "--world-size":
            if not sep:
                if i + 1 >= len(args):
                    raise PlanError("--world-size needs a value")
                value, i = args[i + 1], i + 1
            try:
                world = int(value)
            except ValueError:
                raise PlanError(f"--world-size={value}: not an integer") from None
        else:
            out.append(args[i])
        i += 1
    return out, world


def main(argv: list[str] | None = None) -> int:
    """`hyrl plan`; returns 0 when it fits, 1 when it does not, 2 on refused flags."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv[:argv.index("--") if "--" in argv else None]):
        print(USAGE)
        return 0
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    try:
        argv, world = _split_world_size(argv)
        recipes = [a for a in argv if not a.startswith("-")]
        unknown = [a for a in argv if a.startswith("-")]
        if unknown or len(recipes) > 1:
            raise PlanError(f"unexpected {' '.join(unknown + recipes[1:])}\n{USAGE}")
        if recipes:
            if world is not None:
                raise PlanError("--world-size: a recipe states its own world size (NNODES x "
                                "GPUS_PER_NODE, or NPROC); set those instead")
            cfg, world = config_from_dry_run(recipe_dry_run(recipes[0], extra))
        else:
            if not extra:
                raise PlanError(f"nothing to plan\n{USAGE}")
            extra, world_in_flags = _split_world_size(extra)
            world = world_in_flags or world or int(os.environ.get("WORLD_SIZE", "1"))
            cfg = load(extra, world)
        plan = make_plan(cfg, world)
    except ConfigError as err:
        print(f"hyrl plan: error: {err}", file=sys.stderr)
        return 2
    except PlanError as err:
        print(f"hyrl plan: error: {err}", file=sys.stderr)
        return 2
    problems = check_fit(plan)
    if as_json:
        print(json.dumps({**plan, "problems": problems}, indent=2))
    else:
        print(format_plan(plan))
    for problem in problems:
        print(f"hyrl plan: error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
