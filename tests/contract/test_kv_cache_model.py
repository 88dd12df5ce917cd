"""hyrl plan's SGLang KV cache against SGLang 0.5.23's own sizing, on each 30B recipe's server.

SGLang sizes its KV pool once per GPU at start-up: KVCacheConfigurator._resolve_memory_pool_config
(sglang/srt/mem_cache/kv_cache_configurator.py), which takes the budget from
_profile_available_bytes and the tokens from the pool configurator. Both run here, on CPU, built
from SGLang's own pieces: the ServerArgs parsed from the argv hyrl builds for the recipe's
server, the ModelConfig of the rollout model directory hyrl writes, SGLang's KV dtype resolution
(configure_kv_cache_dtype) and layer count (resolve_layer_indices), in a runtime context of its
own (create_context / use_context, so the process's context is left as it was).

What stands in for the GPU, with the plan's assumptions as the numbers:

* ``get_available_gpu_memory`` (CUDA's free memory after the weights load, the least over the
  engine's GPUs) returns the plan's free memory before loading less SGLang's weights;
* ``pre_model_load_memory`` (free memory before loading, measured by SGLang) is the plan's
  assumed --gpu-memory-gib less what the trainer holds when colocated;
* the world group SGLang takes that minimum over is a namespace (every rank answers the same);
* ``--device cpu`` is added to the argv, so the args resolve without a GPU.
"""

from __future__ import annotations

import types
from contextlib import contextmanager

import pytest
from sglang.srt.configs.model_config import AttentionArch, ModelConfig
from sglang.srt.mem_cache import kv_cache_configurator
from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    resolve_spec_aux_hidden_state_config,
)
from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
from sglang.srt.runtime_context import (
    SpawnRanks,
    create_context,
    get_parallel,
    get_schedule,
    use_context,
)
from sglang.srt.server_args import prepare_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from hyrl.config import resolve
from hyrl.config.rollout_layout import rollout_layout
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B
from hyrl.plan import check_fit, config_from_dry_run, make_plan, recipe_dry_run
from hyrl.rollout.sglang.build import sglang_server_options
from hyrl.rollout.sglang.launch import sglang_server_process, write_rollout_model

GRPO, PPO = "recipes/qwen3_30b_a3b/grpo.sh", "recipes/qwen3_30b_a3b/ppo.sh"
QWEN_EOS = [151645, 151643]
GIB = 1 << 30


def plan_and_server_argv(recipe: str, tmp_path, *extra: str) -> tuple[dict, list[str]]:
    """The plan of the recipe (its dry run) and engine 0's server argv, less the launcher."""
    dry_run, world_size = config_from_dry_run(recipe_dry_run(recipe, list(extra)))
    cfg = resolve(dry_run)
    model = write_rollout_model(QWEN3_30B_A3B, tmp_path / "model", QWEN_EOS)
    options = sglang_server_options(
        cfg.rollout,
        rollout_layout(cfg, world_size),
        model,
        str(tmp_path),
        seed=cfg.seed,
        return_routed_experts=cfg.mismatch.engine_returns_routing,
    )
    argv = sglang_server_process(**options, engine_index=0).command()
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    return make_plan(cfg, world_size), argv[3:]


@contextmanager
def sglang_kv_sizing(argv: list[str], free_after_load_gib: float, monkeypatch):
    """SGLang's KVCacheConfigurator for one GPU of the server `argv` starts, as the model runner
    builds it (init_kv_cache_configurator), with CUDA's free memory standing at the given GiB."""
    args = prepare_server_args([*argv, "--device", "cpu"])
    context = create_context(args, role="scheduler", ranks=SpawnRanks(world_rank=0))
    with use_context(context):
        parallel = get_parallel()
        world = types.SimpleNamespace(cpu_group=None, world_size=parallel.launch_world_size)
        with parallel.override(world_group=world):
            config = ModelConfig.from_server_args(args)
            spec = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
            kv_dtype_name, kv_dtype = configure_kv_cache_dtype(
                server_args_kv_cache_dtype=args.kv_cache_dtype,
                model=None,
                model_dtype=config.dtype,
                is_draft_worker=False,
                is_dflash=False,
                speculative_draft_attention_backend=None,
            )
            monkeypatch.setattr(
                kv_cache_configurator,
                "get_available_gpu_memory",
                lambda *_, **__: free_after_load_gib,
            )
            yield kv_cache_configurator.KVCacheConfigurator(
                device="cuda",
                gpu_id=0,
                attn_dp_size=parallel.attn_dp_size,
                pp_size=parallel.pp_size,
                pp_group=None,
                model=None,
                model_config=config,
                server_args=args,
                kv_cache_dtype=kv_dtype,
                kv_cache_dtype_str=kv_dtype_name or args.kv_cache_dtype,
                model_dtype=config.dtype,
                page_size=get_schedule().page_size,
                sliding_window_size=None,
                spec_algorithm=spec,
                is_draft_worker=False,
                post_capture_kv_active=False,  # SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is off
                spec_aux_config=resolve_spec_aux_hidden_state_config(
                    server_args=args,
                    model_config=config,
                    spec_algorithm=spec,
                    is_draft_worker=False,
                ),
                is_hybrid_swa=config.is_hybrid_swa,
                is_hybrid_swa_compress=config.is_hybrid_swa_compress,
                use_mla_backend=config.attention_arch == AttentionArch.MLA,
                layer_info=resolve_layer_indices(
                    model=None, model_config=config, is_draft_worker=False
                ),
                forward_stream=None,
                req_to_token_pool=None,
                token_to_kv_pool_allocator=None,
                memory_pool_config=None,
            )


@pytest.mark.parametrize(
    ("recipe", "tp_size", "colocated"),
    [(GRPO, 8, True), (PPO, 4, False)],  # the recipes' own engines, both at fraction 0.85
)
def test_plan_sizes_the_kv_cache_as_sglang_does(recipe, tp_size, colocated, tmp_path, monkeypatch):
    plan, argv = plan_and_server_argv(recipe, tmp_path)
    sg = plan["sglang"]
    assert (sg["gpus_per_engine"], sg["colocated"]) == (tp_size, colocated)
    assert sg["mem_fraction_static"] == 0.85
    # The inputs, as the plan assumes them: free before loading = 80 GiB less the trainer's
    # resident memory when colocated (34.19 GiB for GRPO); SGLang's weights 2 B x params / TP.
    free_before_gib = plan["gpu_memory_gib"] - (plan["memory"]["resident_gib"] if colocated else 0)
    weights_gib = 2 * plan["params"]["total"] / tp_size / GIB
    with sglang_kv_sizing(argv, free_before_gib - weights_gib, monkeypatch) as sizing:
        assert get_parallel().attn_tp_size == tp_size
        budget_gib = sizing._profile_available_bytes(free_before_gib) / GIB
        tokens = sizing._resolve_memory_pool_config(free_before_gib).max_total_num_tokens
        cells = create_memory_pool_configurator(sizing)
        per_token = sg["kv_bytes_per_token"]  # 1 kv head per GPU x (128 + 128) x 48 x 2 B
        assert cells.calculate_pool_sizes(10 * per_token, 1).max_total_num_tokens == 10
        assert cells.calculate_pool_sizes(10 * per_token - 1, 1).max_total_num_tokens == 9
    rounding_gib = 0.001  # resident_gib and kv_gib are printed to 1/1000 GiB
    assert sg["kv_gib"] == pytest.approx(budget_gib, abs=rounding_gib)
    assert sg["kv_tokens"] == pytest.approx(tokens, abs=rounding_gib * GIB / per_token)
    # and exactly, from the plan's own unrounded bytes
    free_before_gib = sg["free_before_load_bytes"] / GIB
    free_after_gib = (sg["free_before_load_bytes"] - sg["weights_bytes"]) / GIB
    with sglang_kv_sizing(argv, free_after_gib, monkeypatch) as sizing:
        budget = sizing._profile_available_bytes(free_before_gib)
        tokens = sizing._resolve_memory_pool_config(free_before_gib).max_total_num_tokens
    assert sg["kv_bytes"] == pytest.approx(budget, abs=1)
    assert (sg["kv_tokens"], sg["sequences"]) == (tokens, tokens // (1024 + 8192))


def test_where_sglang_refuses_to_start_the_plan_does_not_fit(tmp_path, monkeypatch):
    """At fraction 0.1 SGLang's slack (0.9 x 45.81 GiB free) leaves less than its weights."""
    plan, argv = plan_and_server_argv(GRPO, tmp_path, "--sglang-mem-fraction-static", "0.1")
    sg = plan["sglang"]
    free_before_gib = plan["gpu_memory_gib"] - plan["memory"]["resident_gib"]
    weights_gib = 2 * plan["params"]["total"] / 8 / GIB
    with sglang_kv_sizing(argv, free_before_gib - weights_gib, monkeypatch) as sizing:
        with pytest.raises(ValueError, match="Loaded weights leave no GPU memory"):
            sizing._profile_available_bytes(free_before_gib)
    assert sg["kv_tokens"] == 0
    assert any(p.startswith("--sglang-mem-fraction-static=0.1:") for p in check_fit(plan))
