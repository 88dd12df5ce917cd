"""``--rollout-engine sglang``: the engine the flags ask for, attached to a running router or a
fleet of servers hyrl launches (``hyrl.rollout.build.build_engine`` calls it).

    sglang, --sglang-router-url      one SGLangEngine that sends to the running router, and its
                                     weights to each server behind it (``router_worker_urls``)
    sglang                           an SGLangFleet of engine actors, each launching one
                                     sglang.launch_server on its placement-group GPUs
"""

from __future__ import annotations

import json
from typing import Any

import torch

from hyrl.config import RunConfig, engine_returns_routing
from hyrl.config.rollout_layout import RolloutLayout
from hyrl.config.weight_transport import DISTRIBUTED
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout.base import RolloutEngine
from hyrl.rollout.sglang.fleet import SGLangFleet
from hyrl.rollout.sglang.launch import (
    SGLANG_REQUEST_TIMEOUT_S,
    SGLANG_STARTUP_TIMEOUT_S,
    checkpoint_bos_id,
    make_sglang_engine,
    rollout_eos_ids,
    write_rollout_model,
)


def sglang_server_options(cfg: RunConfig, layout: RolloutLayout, model_path: str, log_dir: str):
    """The arguments of ``sglang_server_process`` (all but the engine's index, host and port)
    that hyrl's engines launch their servers with for this run."""
    import shlex

    return {
        "model_path": model_path,
        "concurrency": layout.concurrency_per_engine,
        "gpus_per_engine": layout.gpus_per_engine,
        "colocated": cfg.colocate,
        "mem_fraction_static": cfg.sglang_mem_fraction_static,
        "server_args": shlex.split(cfg.sglang_server_args or ""),
        "log_dir": log_dir,
        "seed": cfg.seed,
        "return_routed_experts": engine_returns_routing(cfg),
    }


def build_sglang_engine(
    cfg: RunConfig, layout: RolloutLayout, arch: Qwen3MoeArch, pad_id: int, eos_id: int, run_dir
) -> RolloutEngine:
    import functools
    from pathlib import Path

    # Qwen3-MoE routes in every layer, so the engine returns num_layers x top-k ids per token
    routed_experts: dict[str, Any] = {
        "return_routed_experts": engine_returns_routing(cfg),
        "num_moe_layers": arch.num_layers,
        "moe_top_k": arch.moe_router_topk,
    }
    if cfg.sglang_router_url is not None:  # attached: hyrl starts nothing
        from hyrl.rollout.sglang.client import SGLangClient
        from hyrl.rollout.sglang.engine import SGLangEngine
        from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync

        urls = router_worker_urls(SGLangClient(cfg.sglang_router_url))
        options = (
            {"device": torch.device("cuda", torch.cuda.current_device())}
            if layout.update_weight_transport == DISTRIBUTED
            else {"directory": str(Path(run_dir) / "rollout_weights")}
        )
        engine = SGLangEngine(
            cfg.sglang_router_url,
            concurrency=layout.concurrency_per_engine,
            stop_token_ids=rollout_eos_ids(eos_id, cfg.hf_checkpoint),
            weight_sync=layout.update_weight_transport,
            buffer_bytes=cfg.update_weight_buffer_size,
            weight_sync_options=options,
            weight_sync_urls=urls,
            timeout_s=sglang_request_timeout_s(cfg),
            **routed_experts,
        )
        if isinstance(engine.weight_sync, DistributedWeightSync):
            engine.weight_sync.connect()  # the broadcast group, formed before the first sync
        return engine

    from hyrl.rollout.fleet import RolloutFleet

    stop_ids = rollout_eos_ids(eos_id, cfg.hf_checkpoint)
    model_path = write_rollout_model(
        arch, Path(run_dir) / "rollout_model", stop_ids, checkpoint_bos_id(cfg.hf_checkpoint)
    )
    log_dir = str(Path(run_dir).resolve() / "rollout_logs")
    factory = functools.partial(
        make_sglang_engine,
        sglang_server_options(cfg, layout, model_path, log_dir),
        stop_ids,
        layout.update_weight_transport,
        cfg.update_weight_buffer_size,
        SGLANG_STARTUP_TIMEOUT_S,
        num_moe_layers=arch.num_layers,
        moe_top_k=arch.moe_router_topk,
        request_timeout_s=sglang_request_timeout_s(cfg),
    )
    fleet = RolloutFleet(
        factory,
        num_engines=layout.num_engines,
        concurrency_per_engine=layout.concurrency_per_engine,
        num_gpus_per_engine=layout.gpus_per_engine,
        max_restarts=cfg.rollout_max_restarts,
        ray_address=cfg.ray_address,
        startup_timeout_s=SGLANG_STARTUP_TIMEOUT_S,
    )
    return SGLangFleet(
        fleet, layout.update_weight_transport, cfg.update_weight_buffer_size, layout.gpus_per_engine
    )


def sglang_request_timeout_s(cfg: RunConfig) -> float:
    """How long one HTTP request to a server may take (--sglang-request-timeout-s)."""
    if cfg.sglang_request_timeout_s is None:
        return SGLANG_REQUEST_TIMEOUT_S
    return cfg.sglang_request_timeout_s


def router_worker_urls(router) -> list[str]:
    """The servers behind an sglang-router (weights go to each server, not through the router):
    GET /workers -> {"workers": [{"url": ...}]} on sglang-router > 0.2.1 (0.3.2 is pinned),
    GET /list_workers -> {"urls": [...]} before."""
    status, body = router.request("GET", "/workers")
    if status == 200:
        urls = [w.get("url") for w in json.loads(body).get("workers", []) if isinstance(w, dict)]
    else:
        status, body = router.request("GET", "/list_workers")
        urls = json.loads(body).get("urls", []) if status == 200 else []
    worker_urls: list[str] = [u for u in urls if u]
    if not worker_urls:
        raise RuntimeError(
            f"--sglang-router-url {router.base_url}: the router lists no workers "
            f"(last answer HTTP {status}: {body[:200]!r}); start the servers and "
            "register them with the router"
        )
    return worker_urls
