"""``--rollout-engine sglang``: the engine the flags ask for, attached to a running router or a
fleet of servers hyrl launches (``hyrl.rollout.build.build_engine`` calls it).

    sglang, --sglang-router-url      one SGLangEngine that sends to the running router, and its
                                     weights to each server behind it (``router_worker_urls``)
    sglang                           an SGLangFleet of engine actors, each launching one
                                     sglang.launch_server on its placement-group GPUs
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import torch

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

if TYPE_CHECKING:
    from hyrl.config.concerns.rollout import RolloutView


def sglang_server_options(
    rollout: RolloutView,
    layout: RolloutLayout,
    model_path: str,
    log_dir: str,
    *,
    seed: int,
    return_routed_experts: bool,
):
    """The arguments of ``sglang_server_process`` (all but the engine's index, host and port)
    that hyrl's engines launch their servers with for this run (seed: --seed;
    return_routed_experts: `MismatchView.engine_returns_routing`)."""
    import shlex

    return {
        "model_path": model_path,
        "concurrency": layout.concurrency_per_engine,
        "gpus_per_engine": layout.gpus_per_engine,
        "colocated": rollout.colocate,
        "mem_fraction_static": rollout.sglang_mem_fraction_static,
        "server_args": shlex.split(rollout.sglang_server_args or ""),
        "log_dir": log_dir,
        "seed": seed,
        "return_routed_experts": return_routed_experts,
    }


def build_sglang_engine(
    rollout: RolloutView,
    layout: RolloutLayout,
    arch: Qwen3MoeArch,
    pad_id: int,
    eos_id: int,
    run_dir,
    *,
    seed: int,
    hf_checkpoint: str | None,
    return_routed_experts: bool,
) -> RolloutEngine:
    """`hyrl.rollout.build.build_engine`'s SGLang engine (the same arguments)."""
    import functools
    from pathlib import Path

    # Qwen3-MoE routes in every layer, so the engine returns num_layers x top-k ids per token
    routed_experts: dict[str, Any] = {
        "return_routed_experts": return_routed_experts,
        "num_moe_layers": arch.num_layers,
        "moe_top_k": arch.moe_router_topk,
    }
    if rollout.sglang_router_url is not None:  # attached: hyrl starts nothing
        from hyrl.rollout.sglang.client import SGLangClient
        from hyrl.rollout.sglang.engine import SGLangEngine
        from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync

        urls = router_worker_urls(SGLangClient(rollout.sglang_router_url))
        options = (
            {"device": torch.device("cuda", torch.cuda.current_device())}
            if layout.update_weight_transport == DISTRIBUTED
            else {"directory": str(Path(run_dir) / "rollout_weights")}
        )
        engine = SGLangEngine(
            rollout.sglang_router_url,
            concurrency=layout.concurrency_per_engine,
            stop_token_ids=rollout_eos_ids(eos_id, hf_checkpoint),
            weight_sync=layout.update_weight_transport,
            buffer_bytes=rollout.update_weight_buffer_size,
            weight_sync_options=options,
            weight_sync_urls=urls,
            timeout_s=sglang_request_timeout_s(rollout),
            **routed_experts,
        )
        if isinstance(engine.weight_sync, DistributedWeightSync):
            engine.weight_sync.connect()  # the broadcast group, formed before the first sync
        return engine

    from hyrl.rollout.fleet import RolloutFleet

    stop_ids = rollout_eos_ids(eos_id, hf_checkpoint)
    model_path = write_rollout_model(
        arch, Path(run_dir) / "rollout_model", stop_ids, checkpoint_bos_id(hf_checkpoint)
    )
    log_dir = str(Path(run_dir).resolve() / "rollout_logs")
    server_options = sglang_server_options(
        rollout, layout, model_path, log_dir, seed=seed, return_routed_experts=return_routed_experts
    )
    factory = functools.partial(
        make_sglang_engine,
        server_options,
        stop_ids,
        layout.update_weight_transport,
        rollout.update_weight_buffer_size,
        SGLANG_STARTUP_TIMEOUT_S,
        num_moe_layers=arch.num_layers,
        moe_top_k=arch.moe_router_topk,
        request_timeout_s=sglang_request_timeout_s(rollout),
    )
    fleet = RolloutFleet(
        factory,
        num_engines=layout.num_engines,
        concurrency_per_engine=layout.concurrency_per_engine,
        num_gpus_per_engine=layout.gpus_per_engine,
        max_restarts=rollout.rollout_max_restarts,
        ray_address=rollout.ray_address,
        startup_timeout_s=SGLANG_STARTUP_TIMEOUT_S,
    )
    return SGLangFleet(
        fleet,
        layout.update_weight_transport,
        rollout.update_weight_buffer_size,
        layout.gpus_per_engine,
    )


def sglang_request_timeout_s(rollout: RolloutView) -> float:
    """How long one HTTP request to a server may take (--sglang-request-timeout-s)."""
    if rollout.sglang_request_timeout_s is None:
        return SGLANG_REQUEST_TIMEOUT_S
    return rollout.sglang_request_timeout_s


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
