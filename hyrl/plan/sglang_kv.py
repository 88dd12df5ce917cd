"""SGLang's memory per GPU of one engine: its copy of the weights and the KV cache it sizes.

SGLang 0.5.23 sizes its KV pool once, after loading its weights (sglang/srt/
mem_cache/kv_cache_configurator.py, KVCacheConfigurator._profile_available_bytes, lines
2990-3060; "free" is CUDA's free memory, the least over the engine's GPUs, the "before" taken
in distributed/bootstrap.py measure_pre_model_load_memory, lines 193-223):

    KV bytes = free after loading - free before loading x (1 - mem_fraction_static)

and cuts it into tokens (model_executor/pool_configurator.py, DefaultPoolConfigurator:
_compute_cell_size lines 491-498, calculate_pool_sizes lines 637-647):

    tokens = KV bytes // cell, cell = kv heads per GPU x (K + V head dims) x layers x 2 B
    kv heads per GPU = max(1, kv heads // TP)   (configs/model_config.py get_num_kv_heads)
    KV dtype = the model's, bf16 (--kv-cache-dtype auto; mem_cache/kv_cache_dtype.py)

A plan has no GPU to ask, so it assumes free before loading = --gpu-memory-gib minus what is
resident before the server starts (colocated: the trainer's resident memory; else nothing),
and free after = that minus SGLang's weights. Then KV = fraction x free before - weights: a
colocated trainer costs the KV cache fraction x its memory, since SGLang's slack (free before x
(1 - fraction)) shrinks with it. Not modelled: the CUDA context (about 0.5 GiB less free), and
a --page-size above 1 (tokens rounded down to it). tests/contract/test_kv_cache_model.py runs
SGLang's own sizing on the recipes' server commands and compares.
"""

from __future__ import annotations

from hyrl.config.concerns.model import ModelView
from hyrl.config.concerns.parallel import ParallelView
from hyrl.config.concerns.rollout import RolloutView
from hyrl.config.rollout_layout import RolloutLayout
from hyrl.plan.memory import BYTES_KV, BYTES_SGLANG_WEIGHT, GIB, SGLANG_DEFAULT_MEM_FRACTION


def kv_bytes_per_token(model: ModelView, gpus_per_engine: int) -> int:
    """KV bytes one token takes on each of an engine's GPUs: its share of the kv heads (at
    least one, replicated when there are fewer heads than GPUs), K and V of kv_channels each."""
    kv_heads_per_gpu = max(1, model.num_query_groups // gpus_per_engine)
    return kv_heads_per_gpu * 2 * model.kv_channels * model.num_layers * BYTES_KV


def kv_cache_bytes(free_before_load: float, weights: float, mem_fraction_static: float) -> float:
    """SGLang's KV budget on one GPU (bytes): what is free after its weights load, less the
    slack it keeps of what was free before (negative: SGLang refuses to start)."""
    free_after_load = free_before_load - weights
    return free_after_load - free_before_load * (1 - mem_fraction_static)


def sglang_plan(
    model: ModelView,
    parallel: ParallelView,
    rollout: RolloutView,
    engines: RolloutLayout,
    counts: dict,
    seq_len: int,
    resident: float,
) -> dict:
    """One engine's GPU (tensor-parallel size T = GPUs per engine, from the engines' layout):
    weights = params x 2 B / T, the KV cache as above (resident: the trainer's bytes on the
    GPU, counted when colocated; the GPU's size: --gpu-memory-gib), and the sequences of prompt
    + response tokens it holds against --rollout-concurrency."""
    t_engine = engines.gpus_per_engine
    fraction = rollout.sglang_mem_fraction_static
    fraction_text = (
        f"{fraction}"
        if fraction is not None
        else f"{SGLANG_DEFAULT_MEM_FRACTION} (assumed default)"
    )
    fraction = SGLANG_DEFAULT_MEM_FRACTION if fraction is None else fraction
    weights = BYTES_SGLANG_WEIGHT * counts["total"] / t_engine
    per_token = kv_bytes_per_token(model, t_engine)
    out = {
        "gpus_per_engine": t_engine,
        "num_engines": engines.num_engines,
        "mem_fraction_static": fraction,
        "mem_fraction_text": fraction_text,
        "weights_gib": round(weights / GIB, 3),
        "weights_bytes": int(weights),
        "kv_bytes_per_token": per_token,
        "concurrency_per_engine": engines.concurrency_per_engine,
        "colocated": rollout.colocate,
        "sequence_tokens": seq_len,
    }
    if parallel.gpu_memory_gib is not None:
        resident_before = resident if rollout.colocate else 0.0
        free_before = parallel.gpu_memory_gib * GIB - resident_before
        kv = int(kv_cache_bytes(free_before, weights, fraction))  # SGLang truncates to bytes
        tokens = max(kv, 0) // per_token  # every GPU holds its heads' share of every token
        out.update(
            free_before_load_gib=round(free_before / GIB, 3),
            free_before_load_bytes=int(free_before),
            resident_before_load_gib=round(resident_before / GIB, 3),
            slack_gib=round(free_before * (1 - fraction) / GIB, 3),
            kv_gib=round(kv / GIB, 3),
            kv_bytes=kv,
            kv_tokens=tokens,
            sequences=tokens // seq_len,
        )
    return out
