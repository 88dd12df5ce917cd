"""The engine factory: the rollout engine the flags ask for (see
`hyrl.config.rollout_layout.rollout_layout`), and the one door into an engine's own package
(hyrl.rollout.sglang): whatever else needs an engine kind's part (its preflight, the CUDA IPC
serializer every training rank encodes with, an engine for `hyrl profile-rollout`) gets it here.

    hf, --rollout-num-engines none   one HFRolloutEngine inside the trainer's rank 0, no Ray
    hf, --rollout-num-engines N      RolloutFleet of N HFRolloutEngine Ray actors
    sglang                           hyrl.rollout.sglang.build: an SGLangFleet of engine actors,
                                     or one SGLangEngine attached to --sglang-router-url

Ray is started here, once, when engines or reward workers need it (`start_ray`), so the fleet
and the reward pool share one instance; whoever started it shuts it down (`stop_ray`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from hyrl.config.rollout_layout import RolloutLayout
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout.base import RolloutEngine

if TYPE_CHECKING:
    from hyrl.config.concerns.rollout import RolloutView


def start_ray(rollout: RolloutView, layout: RolloutLayout) -> bool:
    """Initialise Ray if the layout needs it and it is not running; True if this call started it.

    A local Ray gets as many logical CPUs as the engines and reward workers reserve (at least
    the machine's count): Ray's CPUs are scheduling slots, not cores.
    """
    if not layout.uses_ray:
        return False
    # A local instance is private; a cluster from launch/ray_cluster.sh runs the same mode
    # (disabled unless RAY_AUTH_MODE says otherwise). Left unset, Ray would turn token auth on
    # by itself wherever ~/.ray/auth_token exists, on one side only.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    if ray.is_initialized():
        return False
    if rollout.ray_address is not None:
        ray.init(address=rollout.ray_address, log_to_driver=True)
    else:
        wanted = rollout.reward_num_workers + (0 if layout.in_process else layout.num_engines)
        ray.init(
            num_cpus=max(os.cpu_count() or 1, wanted), include_dashboard=False, log_to_driver=True
        )
    return True


def stop_ray(started: bool) -> None:
    if started:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def cuda_ipc_serializer():
    """What every training rank turns its copy of a bucket into for engines fed by CUDA IPC
    (--colocate, --update-weight-transport tensor: hyrl.weight_sync.tensor): SGLang's serializer,
    flattened buckets (hyrl.rollout.sglang.receive.payload)."""
    from hyrl.rollout.sglang.receive.payload import sglang_serializer

    return sglang_serializer()


def make_hf_engine(
    arch: Qwen3MoeArch,
    concurrency: int,
    pad_id: int,
    eos_id: int,
    seed: int,
    engine_index: int = 0,
    return_routed_experts: bool = False,
):
    """One hf engine inside a Ray actor: on the actor's GPU when Ray gave it one; its sampling
    stream seeded by (seed, engine index) so engines do not draw the same numbers."""
    from hyrl.rollout.hf_engine import HFRolloutEngine

    torch.manual_seed(seed + 1_000_003 * (engine_index + 1))
    device = "cuda" if torch.cuda.is_available() else "cpu"  # Ray sets CUDA_VISIBLE_DEVICES
    return HFRolloutEngine(
        arch,
        concurrency=concurrency,
        pad_id=pad_id,
        eos_id=eos_id,
        device=device,
        return_routed_experts=return_routed_experts,
    )


def build_engine(
    rollout: RolloutView,
    layout: RolloutLayout,
    arch: Qwen3MoeArch,
    pad_id: int,
    eos_id: int,
    device: torch.device,
    run_dir,
    *,
    seed: int,
    hf_checkpoint: str | None,
    return_routed_experts: bool,
) -> RolloutEngine:
    """The engine of the layout, generating with arch (device: an in-process engine's). seed:
    --seed, which seeds each engine's sampling; hf_checkpoint: --hf-checkpoint, whose tokenizer
    files give SGLang's stop and BOS tokens; return_routed_experts: whether the engines return
    the experts they routed each token to (`MismatchView.engine_returns_routing`)."""
    if layout.engine == "hf" and layout.in_process:
        from hyrl.rollout.hf_engine import HFRolloutEngine

        return HFRolloutEngine(
            arch,
            concurrency=layout.concurrency_per_engine,
            pad_id=pad_id,
            eos_id=eos_id,
            device=device,
            return_routed_experts=return_routed_experts,
        )
    if layout.engine == "hf":
        import functools

        from hyrl.rollout.fleet import RolloutFleet

        factory = functools.partial(
            make_hf_engine,
            arch,
            layout.concurrency_per_engine,
            pad_id,
            eos_id,
            seed,
            return_routed_experts=return_routed_experts,
        )
        return RolloutFleet(
            factory,
            num_engines=layout.num_engines,
            concurrency_per_engine=layout.concurrency_per_engine,
            num_gpus_per_engine=layout.gpus_per_engine,
            max_restarts=rollout.rollout_max_restarts,
            ray_address=rollout.ray_address,
        )
    from hyrl.rollout.sglang.build import build_sglang_engine

    return build_sglang_engine(
        rollout,
        layout,
        arch,
        pad_id,
        eos_id,
        run_dir,
        seed=seed,
        hf_checkpoint=hf_checkpoint,
        return_routed_experts=return_routed_experts,
    )


def preflight_engine(rollout: RolloutView, transport: str) -> None:
    """The engine's checks against this machine and the flags, before any process group
    (SGLang: hyrl.rollout.sglang.preflight; the hf engine has none). transport: SGLang's
    --update-weight-transport, resolved (`hyrl.config.rollout_layout.update_weight_transport`)."""
    if rollout.rollout_engine == "sglang":
        from hyrl.rollout.sglang.preflight import preflight_sglang

        preflight_sglang(rollout, transport)


# --- hyrl profile-rollout: an engine at a server's URL, and a server on this machine ---------


def sglang_engine_at(url: str, concurrency: int, stop_token_ids: Sequence[int]) -> RolloutEngine:
    """An SGLang engine sending to the server or router at ``url``, at most ``concurrency``
    requests in flight; its ``last_request_latencies_s`` are the latest generate's."""
    from hyrl.rollout.sglang.engine import SGLangEngine

    return SGLangEngine(url, concurrency=concurrency, stop_token_ids=stop_token_ids)


def launch_sglang_server(model_path: str, log_path: str, **server_options):
    """One SGLang server on this machine's GPUs, on a free port, started and answering (its
    ``url``; ``kill()`` stops it). ``server_options``: SGLangServerProcess's (tp_size,
    mem_fraction_static, max_running_requests, random_seed, server_args). Raises SGLangError (a
    RuntimeError) with the log's tail when it does not come up."""
    from hyrl.rollout.sglang.server import SGLangServerProcess, free_port

    server = SGLangServerProcess(model_path, port=free_port(), log_path=log_path, **server_options)
    server.start()
    return server
