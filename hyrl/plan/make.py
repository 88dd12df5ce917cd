"""The plan of a run: layout, GPUs, the per-GPU memory lines and whether they fit."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

from hyrl.config import RunConfig, offloads_train, old_log_probs_from_update, resolve
from hyrl.config.concerns.batch import BatchView
from hyrl.config.concerns.critic import CriticView
from hyrl.config.concerns.model import ModelView
from hyrl.config.concerns.parallel import ParallelView
from hyrl.config.rollout_layout import rollout_layout
from hyrl.plan.disk import checkpoint_plan
from hyrl.plan.host import host_memory_plan
from hyrl.plan.layout import (
    MAX_RANKS_LISTED,
    groups_spanning_nodes,
    layout_groups,
    parallel_layout,
    summarise_groups,
)
from hyrl.plan.memory import (
    GIB,
    LOGPROB_CHUNK_POSITIONS,
    UNFUSED_WORKSPACE_FP32_COPIES,
    activation_bytes_per_token,
    activation_memory,
    attention_implementation,
    attention_span,
    bytes_per_activation,
    bytes_per_param,
    param_counts,
    params_per_gpu,
    sequence_length,
)
from hyrl.plan.sglang_kv import sglang_plan
from hyrl.plan.step_time import Throughput, step_passes, step_time_plan
from hyrl.plan.sync import Links, weight_sync_plan

# Fraction of GPU memory kept free for fragmentation, the CUDA context and NCCL buffers.
SAFETY_MARGIN = 0.10

NOT_MODELLED = (
    "router imbalance (tokens per expert assumed equal; a hot expert holds more activations)",
    "PyTorch caching-allocator fragmentation and the CUDA context (inside the safety margin)",
    "log-prob and reference forward passes (no stored activations; smaller than training)",
    "the full HF state dict gathered for weight sync beyond one --update-weight-buffer-size bucket",
    "SGLang's CUDA graphs and decode workspace (outside its static fraction)",
    "context parallelism (hyrl has no CP flag; CP = 1)",
    "the distributed optimizer's buffer padding (< 64 elements per tensor; "
    "tests/unit/plan/test_plan_live.py measures it inside 5%)",
)


def _gib(n_bytes: float) -> float:
    return n_bytes / GIB


def _line(name: str, n_bytes: float, formula: str) -> dict:
    return {
        "name": name,
        "gib": round(_gib(n_bytes), 3),
        "bytes": int(round(n_bytes)),
        "formula": formula,
    }


def format_params(n: float) -> str:
    return f"{n / 1e9:.3f}B" if n >= 1e8 else f"{n / 1e6:.3f}M" if n >= 1e4 else f"{n:.0f}"


def _model_state_lines(prefix: str, per_gpu: dict, layout: dict, parallel: ParallelView) -> list:
    """Weights, gradients and optimizer states of one trained model on one GPU.

    With --use-distributed-optimizer megatron shards main params and Adam states over DP (the
    experts' over expert-DP): each rank keeps 1/DP of every bucket. Weights and gradients stay
    whole (the gradient is reduce-scattered into a full-size buffer); the buffers' alignment
    padding (PARAM_ALIGN_ELEMENTS per tensor) is under 0.1% of any model here and not counted.
    """
    dense, experts = per_gpu["dense"], per_gpu["experts"]
    params = dense + experts
    per = bytes_per_param(parallel)
    precision = "bf16" if parallel.bf16 else "fp32"
    grad_text = (
        "fp32 main_grad buffer, --accumulate-allreduce-grads-in-fp32"
        if parallel.accumulate_allreduce_grads_in_fp32
        else f"{precision} grad buffer"
    )
    state_text = (
        "fp32 main params + Adam m + v"
        if parallel.bf16
        else "Adam m + v; fp32 weights are their own main params"
    )
    lines = [
        _line(
            f"{prefix} weights",
            per["weight"] * params,
            f"{per['weight']} B x (dense {format_params(dense)} + experts "
            f"{format_params(experts)}) params per GPU ({precision}"
            f"{', Float16Module' if parallel.bf16 else ''})",
        ),
        _line(
            f"{prefix} gradients",
            per["grad"] * params,
            f"{per['grad']} B x {format_params(params)} params ({grad_text}, megatron DDP)",
        ),
    ]
    if parallel.use_distributed_optimizer:
        states = per["optimizer"] * (dense / layout["dp"] + experts / layout["expert_dp"])
        formula = (
            f"{per['optimizer']} B x (dense / DP={layout['dp']} + experts / expert-DP="
            f"{layout['expert_dp']}) ({state_text}, distributed optimizer)"
        )
    else:
        states = per["optimizer"] * params
        formula = (
            f"{per['optimizer']} B x {format_params(params)} params ({state_text}, "
            "replicated; --use-distributed-optimizer shards it)"
        )
    lines.append(_line(f"{prefix} optimizer (Adam)", states, formula))
    return lines


def _activation_line(
    prefix: str,
    model: ModelView,
    parallel: ParallelView,
    batch: BatchView,
    tokens: int,
    seq_len: int,
    micro_text: str,
    with_logits: bool,
) -> tuple[dict, list]:
    """The activation lines of one model; act["total"] is their sum in bytes."""
    act = activation_memory(model, parallel, batch, tokens, seq_len, with_logits)
    recompute = parallel.recompute_granularity or "none"
    if recompute == "full":
        method, layers = parallel.recompute_method, parallel.recompute_num_layers
        recompute += f" {method or 'uniform'} x{layers or 1}"
    kind, why = attention_implementation(model)
    b = bytes_per_activation(parallel)
    span = attention_span(batch, tokens, seq_len)  # thd: a packed micro-batch is one sequence
    scores = activation_bytes_per_token(model, parallel, span)["attention_scores"]
    if kind == "flash":
        attn = f"flash attention ({why}): no s x s scores"
    elif parallel.recompute_granularity == "selective":
        attn = f"unfused attention ({why}): scores recomputed (selective)"
    else:
        attn = (
            f"unfused attention ({why}): {scores / (model.num_attention_heads * span):.0f} B x "
            f"a x s scores per token (s = {span}"
            + (", the packed micro-batch: --qkv-format thd)" if span != seq_len else ")")
        )
    tp = parallel.tensor_model_parallel_size
    lines = [
        _line(
            f"{prefix} activations",
            act["layers"],
            f"{micro_text} = {tokens} tokens x {act['bytes_per_token_per_layer']:.0f} "
            f"B/token/layer ({'bf16' if parallel.bf16 else 'fp32'}, {b} B) / TP={tp} x "
            f"{model.num_layers} layers, recompute {recompute}, {attn} "
            "(after Korthikanti et al. 2022)",
        )
    ]
    if act["attention_workspace"]:
        lines.append(
            _line(
                f"{prefix} attention workspace",
                act["attention_workspace"],
                f"one layer's unfused attention: {tokens} tokens x a={model.num_attention_heads}"
                f" / TP={tp} x s={span} scores x ({b} B matmul buffer + "
                f"{UNFUSED_WORKSPACE_FP32_COPIES} x 4 B fp32 softmax-backward copies)",
            )
        )
    if with_logits:
        chunk = min(tokens, LOGPROB_CHUNK_POSITIONS)
        lines.append(
            _line(
                f"{prefix} logits",
                act["logits"],
                f"(2 x 4 B x {tokens} tokens + 3 x 4 B x {chunk}-position chunk) x "
                f"V={model.vocab_size} / TP={tp} (fp32 logits kept + their gradient + the "
                "chunked log-prob pass's working copies)",
            )
        )
    act["total"] = act["layers"] + act["logits"] + act["attention_workspace"]
    return act, lines


def _micro_batch_tokens(batch: BatchView, micro_batch: int, seq_len: int) -> tuple[int, str]:
    if batch.use_dynamic_batch_size:
        assert batch.max_tokens_per_gpu is not None, "validate requires it with dynamic batches"
        return batch.max_tokens_per_gpu, f"--max-tokens-per-gpu {batch.max_tokens_per_gpu}"
    return micro_batch * seq_len, f"micro-batch {micro_batch} x {seq_len} tokens"


def _training_memory(
    model: ModelView,
    parallel: ParallelView,
    batch: BatchView,
    *,
    critic: CriticView | None,
    counts: dict,
    world_size: int,
    seq_len: int,
    reference: bool,
    bucket_bytes: int,
) -> dict:
    """One training GPU's memory: {"memory": the plan's entry, "lines": the resident lines,
    "actor" and "critic": parameters per GPU (critic None without one), "tokens": tokens per
    actor micro-batch, "resident" and "training_peak": bytes}. Resident: each trained model's
    weights, gradients and optimizer states, the frozen reference's weights when `reference`
    (a KL term), one weight-sync bucket of `bucket_bytes`; sequences of `seq_len` tokens."""
    layout = parallel_layout(parallel, world_size)
    actor = params_per_gpu(model, parallel, counts)
    lines = _model_state_lines("actor", actor, layout, parallel)
    tokens, micro_text = _micro_batch_tokens(batch, batch.micro_batch_size, seq_len)
    act, act_lines = _activation_line(
        "actor", model, parallel, batch, tokens, seq_len, micro_text, True
    )
    activations = act["total"]
    if reference:
        weight = bytes_per_param(parallel)["weight"]
        lines.append(
            _line(
                "reference weights",
                weight * (actor["dense"] + actor["experts"]),
                f"{weight} B x actor params per GPU (frozen, for the KL term)",
            )
        )
    critic_per_gpu = None
    critic_activations = 0.0
    critic_act_lines: list = []
    if critic is not None:
        critic_per_gpu = params_per_gpu(model, parallel, counts, value_head=True)
        lines += _model_state_lines("critic", critic_per_gpu, layout, parallel)
        c_tokens, c_text = _micro_batch_tokens(batch, critic.micro_batch_size, seq_len)
        c_act, critic_act_lines = _activation_line(
            "critic", model, parallel, batch, c_tokens, seq_len, c_text, False
        )
        critic_activations = c_act["total"]
    lines.append(
        _line(
            "weight-sync bucket",
            bucket_bytes,
            "--update-weight-buffer-size (one bucket gathered at a time)",
        )
    )
    resident = sum(line["gib"] for line in lines) * GIB
    # Actor and critic train one after the other: the larger activation set is the peak.
    peak_act_lines = act_lines if activations >= critic_activations else critic_act_lines
    training_peak = resident + max(activations, critic_activations)

    memory = {
        "lines": lines + peak_act_lines,
        "resident_gib": round(_gib(resident), 3),
        "activations_gib": round(_gib(max(activations, critic_activations)), 3),
        "training_peak_gib": round(_gib(training_peak), 3),
        "actor_activations_gib": round(_gib(activations), 3),
        "critic_activations_gib": round(_gib(critic_activations), 3),
    }
    if critic_act_lines and peak_act_lines is act_lines:
        memory["other_activation_lines"] = critic_act_lines
    elif critic_act_lines:
        memory["other_activation_lines"] = act_lines
    return {
        "memory": memory,
        "lines": lines,
        "actor": actor,
        "critic": critic_per_gpu,
        "tokens": tokens,
        "resident": resident,
        "training_peak": training_peak,
    }


def make_plan(
    cfg: RunConfig,
    world_size: int,
    links: Links | None = None,
    throughput: Throughput | None = None,
) -> dict:
    """Layout, GPUs, parameters, per-GPU memory, host memory, the predicted weight-sync, step
    and save times of a run; pure (no torch, no GPU).

    `cfg` may be as parsed or resolved (it is resolved here); each part of the plan is made
    from the settings views it reads. `links`: the bandwidths the weight-sync model assumes
    (hyrl.plan.sync.Links' defaults when None); `throughput`: what the step and save estimates
    assume (hyrl.plan.step_time.Throughput's defaults when None).
    Raises ConfigError for a rollout layout the config module refuses.
    """
    c = resolve(cfg)
    model, parallel, batch, rollout = c.model, c.parallel, c.batch, c.rollout
    algorithm, critic_settings = c.algorithm, c.critic
    layout = parallel_layout(parallel, world_size)
    counts = param_counts(model)
    engines = rollout_layout(c, world_size)
    gpn = parallel.gpus_per_node
    errors: list[str] = []
    warnings: list[str] = []

    # rank groups and nodes
    groups = layout_groups(layout)
    listed = world_size <= MAX_RANKS_LISTED
    crossing = {}
    if gpn is not None:
        for name in ("tp", "ep"):
            crossing[name] = groups_spanning_nodes(groups[name], gpn)
        if crossing["tp"]:
            errors.append(
                f"--tensor-model-parallel-size={layout['tp']}: TP group {crossing['tp'][0]} "
                f"spans nodes of {gpn} GPUs (--gpus-per-node); TP all-reduces every layer and "
                f"must stay inside NVLink; allowed: TP <= {gpn} and dividing {gpn}"
            )
        if crossing["ep"]:
            warnings.append(
                f"--expert-model-parallel-size={layout['ep']}: EP group {crossing['ep'][0]} spans "
                f"nodes of {gpn} GPUs; the token all-to-all then crosses the network (slower); "
                f"EP x ETP <= {gpn} keeps it inside a node"
            )
        if engines.gpus_per_engine > gpn:
            errors.append(
                f"--rollout-num-gpus-per-engine={engines.gpus_per_engine}: one SGLang engine "
                f"cannot span nodes of {gpn} GPUs (--gpus-per-node); allowed: <= {gpn}"
            )

    rollout_gpus = 0 if (rollout.colocate or engines.in_process) else engines.num_gpus
    gpus = {
        "training": world_size,
        "rollout": rollout_gpus,
        "colocated": rollout.colocate,
        "total": world_size + rollout_gpus,
        "gpus_per_node": gpn,
    }
    if gpn is not None:
        training_nodes, rollout_nodes = math.ceil(world_size / gpn), math.ceil(rollout_gpus / gpn)
        gpus["training_nodes"], gpus["rollout_nodes"] = training_nodes, rollout_nodes
        gpus["nodes"] = training_nodes + rollout_nodes
        if world_size > gpn and world_size % gpn:
            warnings.append(
                f"training world size {world_size} is not a whole number of nodes of {gpn} GPUs"
            )

    # memory: the actor, the reference, the critic; memory_of re-plans it for the suggestions
    prompt_len, response_len = sequence_length(model, rollout, c.data)
    seq_len = prompt_len + response_len
    memory_of = functools.partial(
        _training_memory,
        model,
        critic=critic_settings,
        counts=counts,
        world_size=world_size,
        seq_len=seq_len,
        reference=algorithm.kl_loss_coef > 0 or algorithm.kl_coef > 0,
        bucket_bytes=rollout.update_weight_buffer_size,
    )
    training = memory_of(parallel, batch)
    lines, memory, actor = training["lines"], training["memory"], training["actor"]
    resident, training_peak = training["resident"], training["training_peak"]

    # SGLang: weights copy and KV cache
    sglang = None
    if engines.engine == "sglang" and engines.num_engines > 0:
        sglang = sglang_plan(model, parallel, rollout, engines, counts, seq_len, resident)
        if (
            1
            <= sglang.get("sequences", engines.concurrency_per_engine)
            < engines.concurrency_per_engine
        ):
            warnings.append(
                f"--rollout-concurrency={engines.concurrency_per_engine}: only "
                f"{sglang['sequences']} sequences of the longest {seq_len} tokens fit in an "
                "engine's KV cache; SGLang queues or retracts the rest (fine while responses "
                "are shorter on average)"
            )

    weight_sync = weight_sync_plan(
        counts=counts,
        num_layers=model.num_layers,
        bytes_per_weight=bytes_per_param(parallel)["weight"],
        dtype="bf16" if parallel.bf16 else "fp32",
        layout=layout,
        group_nodes=(
            {k: len({r // gpn for r in groups[k][0]}) for k in ("tp", "ep", "pp")}
            if gpn is not None
            else None
        ),
        transport=engines.update_weight_transport,
        colocated=rollout.colocate,
        engine_tp=max(engines.gpus_per_engine, 1),
        buffer_bytes=rollout.update_weight_buffer_size,
        links=links or Links(),
        expert_tensors=model.num_layers * (model.num_experts or 0) * 3,
    )

    checkpoints = checkpoint_plan(parallel, c.checkpoint, c.run, critic_settings, counts)
    step_time = step_time_plan(
        model,
        batch,
        step_passes(algorithm, critic_settings, old_log_probs_from_update(c)),
        (prompt_len, response_len),
        world_size,
        engines,
        weight_sync,
        checkpoints["save_bytes"],
        math.ceil(world_size / gpn) if gpn else 1,  # training nodes
        throughput or Throughput(),
    )
    trained = [actor] + ([training["critic"]] if critic_settings is not None else [])
    # fp32 param, exp_avg and exp_avg_sq, whatever the weights' dtype (hyrl.plan.host)
    gathered = sum(t["dense"] + t["experts"] for t in trained) * 3 * 4
    host = host_memory_plan(
        lines,
        offloads_train(c),
        gpn and min(world_size, gpn),
        gathered if parallel.use_distributed_optimizer else 0.0,
    )

    gpu_gib = parallel.gpu_memory_gib
    plan = {
        "world_size": world_size,
        "layout": layout,
        "groups": groups if listed else summarise_groups(groups),
        "groups_listed": listed,
        "gpus": gpus,
        "params": {
            **counts,
            "actor_per_gpu": actor["dense"] + actor["experts"],
            "actor_dense_per_gpu": actor["dense"],
            "actor_experts_per_gpu": actor["experts"],
        },
        "sequence": {
            "prompt_tokens": prompt_len,
            "response_tokens": response_len,
            "tokens": seq_len,
            "tokens_per_micro_batch": training["tokens"],
        },
        "memory": memory,
        "sglang": sglang,
        "weight_sync": weight_sync,
        "checkpoints": checkpoints,
        "step_time": step_time,
        "host_memory": host,
        "gpu_memory_gib": gpu_gib,
        "safety_margin": SAFETY_MARGIN,
        "errors": errors,
        "warnings": warnings,
        "not_modelled": list(NOT_MODELLED),
    }
    if gpu_gib is not None:
        plan["usable_gib"] = round(gpu_gib * (1 - SAFETY_MARGIN), 3)
        plan["suggestions"] = _suggestions(
            model, parallel, batch, world_size, seq_len, training_peak, memory_of
        )
    return plan


def _suggestions(
    model: ModelView,
    parallel: ParallelView,
    batch: BatchView,
    world_size: int,
    seq_len: int,
    peak: float,
    memory_of: Callable[[ParallelView, BatchView], dict],
) -> list[dict]:
    """What-ifs that lower the training peak: each changes one flag (used in error messages).
    `memory_of(parallel, batch)`: the training memory (_training_memory) with those parallel
    and batch settings, the rest of the run's as they are."""
    layout = parallel_layout(parallel, world_size)
    # (the flag, the parallel settings it sets, the batch settings it sets)
    tries: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    if not parallel.use_distributed_optimizer:
        tries.append(("--use-distributed-optimizer", {"use_distributed_optimizer": True}, {}))
    if parallel.recompute_granularity != "full":
        tries.append(
            (
                "--recompute-granularity full",
                {
                    "recompute_granularity": "full",
                    "recompute_method": None,
                    "recompute_num_layers": None,
                },
                {},
            )
        )
    if batch.use_dynamic_batch_size:
        assert batch.max_tokens_per_gpu is not None, "validate requires it with dynamic batches"
        if batch.max_tokens_per_gpu // 2 >= seq_len:
            tries.append(
                (
                    f"--max-tokens-per-gpu {batch.max_tokens_per_gpu // 2}",
                    {},
                    {"max_tokens_per_gpu": batch.max_tokens_per_gpu // 2},
                )
            )
    elif batch.micro_batch_size > 1:
        tries.append(
            (
                f"--micro-batch-size {batch.micro_batch_size // 2}",
                {},
                {"micro_batch_size": batch.micro_batch_size // 2},
            )
        )
    ep2 = 2 * parallel.expert_model_parallel_size
    if model.num_experts % ep2 == 0 and (world_size // layout["pp"]) % (ep2 * layout["etp"]) == 0:
        tries.append(
            (f"--expert-model-parallel-size {ep2}", {"expert_model_parallel_size": ep2}, {})
        )
    tp2 = 2 * parallel.tensor_model_parallel_size
    if (
        world_size % (tp2 * layout["pp"]) == 0
        and model.num_query_groups % tp2 == 0
        and model.num_attention_heads % tp2 == 0
        and model.vocab_size % tp2 == 0
        and model.ffn_hidden_size % tp2 == 0
        and layout["dp"] // 2 >= 1
        and batch.responses_per_step % (batch.micro_batch_size * layout["dp"] // 2) == 0
        and (parallel.gpus_per_node is None or tp2 <= parallel.gpus_per_node)
    ):
        tries.append(
            (
                f"--tensor-model-parallel-size {tp2} --sequence-parallel",
                {"tensor_model_parallel_size": tp2, "sequence_parallel": True},
                {},
            )
        )
    out = []
    for flag, parallel_change, batch_change in tries:
        changed = memory_of(
            dataclasses.replace(parallel, **parallel_change),
            dataclasses.replace(batch, **batch_change),
        )
        other = changed["memory"]["training_peak_gib"] * GIB  # the peak as the plan rounds it
        if other < peak:
            out.append({"flag": flag, "training_peak_gib": round(_gib(other), 3)})
    return out


def check_fit(plan: dict) -> list[str]:
    """Problems that stop the run, each naming the flag to change and the numbers.

    Without --gpu-memory-gib only the layout is checked (TP inside a node, engines inside a
    node). With it: training peak <= GPU x (1 - SAFETY_MARGIN); SGLang's KV cache must hold at
    least one sequence of the longest length (colocated, the actor's resident memory is not free
    when SGLang starts: see hyrl.plan.sglang_kv).
    """
    problems = list(plan["errors"])
    gpu = plan.get("gpu_memory_gib")
    if gpu is None:
        return problems
    usable = plan["usable_gib"]
    mem = plan["memory"]
    if mem["training_peak_gib"] > usable:
        largest = max(mem["lines"], key=lambda line: line["gib"])
        hints = (
            ", ".join(
                f"{s['flag']} -> {s['training_peak_gib']:.1f} GiB"
                for s in plan.get("suggestions", [])
            )
            or "more GPUs (a larger world)"
        )
        problems.append(
            f"training needs {mem['training_peak_gib']:.1f} GiB per GPU, more than the usable "
            f"{usable:.1f} GiB ({gpu:g} GiB --gpu-memory-gib less {SAFETY_MARGIN:.0%} margin); "
            f"largest: {largest['name']} {largest['gib']:.1f} GiB; allowed: a layout that fits, "
            f"e.g. {hints}"
        )
    sg = plan.get("sglang")
    if sg and "kv_gib" in sg:
        if sg["sequences"] < 1:
            colocated = (
                f" ({gpu:g} GiB - the actor's resident {sg['resident_before_load_gib']:.1f} GiB, "
                "colocated)"
                if sg["colocated"]
                else ""
            )
            problems.append(
                f"--sglang-mem-fraction-static={sg['mem_fraction_text']}: SGLang's KV cache is "
                f"{sg['kv_gib']:.1f} GiB = {sg['mem_fraction_static']:g} x "
                f"{sg['free_before_load_gib']:.1f} GiB free before loading{colocated} - its "
                f"weights {sg['weights_gib']:.1f} GiB, not one {sg['sequence_tokens']}-token "
                f"sequence; allowed: a larger fraction, more --rollout-num-gpus-per-engine"
                + (
                    ", --use-distributed-optimizer, or separate rollout GPUs (--no-colocate)"
                    if sg["colocated"]
                    else ""
                )
            )
        if sg["colocated"] and mem["training_peak_gib"] > usable:
            pass  # already reported above
    return problems
