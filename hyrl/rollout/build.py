"""Build the rollout side the flags ask for (see `hyrl.config.rollout_layout.rollout_layout`).

    hf, --rollout-num-engines none   one HFRolloutEngine inside the trainer's rank 0, no Ray
    hf, --rollout-num-engines N      RolloutFleet of N HFRolloutEngine Ray actors
    sglang                           RolloutFleet of SGLang engine actors, each launching one
                                     sglang.launch_server on its placement-group GPUs
    sglang, --sglang-router-url      one SGLangEngine that sends to the running router

Ray is started here, once, when engines or reward workers need it (`start_ray`), so the fleet
and the reward pool share one instance; whoever started it shuts it down (`stop_ray`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from hyrl.config import RunConfig, engine_returns_routing
from hyrl.config.rollout_layout import RolloutLayout
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout.base import RolloutEngine

if TYPE_CHECKING:
    from hyrl.rollout.fleet import RolloutFleet
    from hyrl.rollout.sglang.weight_sync.distributed import DistributedWeightSync
    from hyrl.rollout.sglang.weight_sync.session import SyncStats
    from hyrl.rollout.sglang.weight_sync.tensor import ColocatedTensorSync


def start_ray(cfg: RunConfig, layout: RolloutLayout) -> bool:
    """Initialise Ray if the layout needs it and it is not running; True if this call started it.

    A local Ray gets as many logical CPUs as the engines and reward workers reserve (at least
    the machine's count): Ray's CPUs are scheduling slots, not cores.
    """
    if not layout.uses_ray:
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, private instance
    import ray

    if ray.is_initialized():
        return False
    if cfg.ray_address is not None:
        ray.init(address=cfg.ray_address, log_to_driver=True)
    else:
        wanted = cfg.reward_num_workers + (0 if layout.in_process else layout.num_engines)
        ray.init(
            num_cpus=max(os.cpu_count() or 1, wanted), include_dashboard=False, log_to_driver=True
        )
    return True


def stop_ray(started: bool) -> None:
    if started:
        import ray

        if ray.is_initialized():
            ray.shutdown()


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
    cfg: RunConfig,
    layout: RolloutLayout,
    arch: Qwen3MoeArch,
    pad_id: int,
    eos_id: int,
    device: torch.device,
    run_dir,
) -> RolloutEngine:
    if layout.engine == "hf" and layout.in_process:
        from hyrl.rollout.hf_engine import HFRolloutEngine

        return HFRolloutEngine(
            arch,
            concurrency=layout.concurrency_per_engine,
            pad_id=pad_id,
            eos_id=eos_id,
            device=device,
            return_routed_experts=engine_returns_routing(cfg),
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
            cfg.seed,
            return_routed_experts=engine_returns_routing(cfg),
        )
        return RolloutFleet(
            factory,
            num_engines=layout.num_engines,
            concurrency_per_engine=layout.concurrency_per_engine,
            num_gpus_per_engine=layout.gpus_per_engine,
            max_restarts=cfg.rollout_max_restarts,
            ray_address=cfg.ray_address,
        )
    return build_sglang_engine(cfg, layout, arch, pad_id, eos_id, run_dir)


ROLLOUT_DTYPE = "bfloat16"  # the servers' weights and activations (SGLang --dtype)
SGLANG_REQUEST_TIMEOUT_S = 600.0  # --sglang-request-timeout-s none


def rollout_eos_ids(tokenizer_eos_id: int, hf_checkpoint: str | None = None) -> list[int]:
    """The ids the engines stop on: the checkpoint's generation_config.json eos ids, then its
    config.json's, then the tokenizer's, each once (Qwen3: <|im_end|> and <|endoftext|>)."""
    from pathlib import Path

    ids: list[int] = []
    if hf_checkpoint is not None:
        for name in ("generation_config.json", "config.json"):
            path = Path(hf_checkpoint) / name
            if path.is_file():
                ids += _as_id_list(json.loads(path.read_text()).get("eos_token_id"))
    ids.append(tokenizer_eos_id)
    return list(dict.fromkeys(ids))


def _as_id_list(value) -> list[int]:
    """An eos_token_id entry of a Hugging Face config: an int, a list of ints, or absent."""
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


def write_rollout_model(
    arch: Qwen3MoeArch,
    directory,
    eos_token_ids: Sequence[int],
    bos_token_id: int | None = None,
) -> str:
    """The HF directory SGLang starts from: config.json and generation_config.json. Servers
    start with --load-format dummy (random weights, no files read) and the actor's weights
    arrive by weight sync before the first rollout, so nothing of the model is written or read
    twice.

    SGLang picks its model class from ``architectures[0]`` and, under ``--dtype auto``, its
    dtype from the config's ``dtype`` (transformers 5; ``torch_dtype`` before), turning a
    missing one into float16; both are written, and the servers also get ``--dtype``.

    SGLang stops every request on the union of config.json's and generation_config.json's
    ``eos_token_id`` (``ModelConfig._get_hf_eos_token_id``), whatever the request's own stop ids,
    so both files carry exactly ``eos_token_ids`` (``rollout_eos_ids``: the checkpoint's and the
    tokenizer's). generation_config.json carries no sampling defaults: hyrl's --rollout-*
    flags alone decide how the engines sample."""
    from pathlib import Path

    if not eos_token_ids:
        raise ValueError("write_rollout_model needs the eos ids the engines stop on")
    directory = Path(directory)
    eos: int | list[int] = (
        int(eos_token_ids[0]) if len(eos_token_ids) == 1 else [int(i) for i in eos_token_ids]
    )
    arch.to_hf_config(eos_token_id=eos, bos_token_id=bos_token_id).save_pretrained(directory)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config.update(
        architectures=["Qwen3MoeForCausalLM"], dtype=ROLLOUT_DTYPE, torch_dtype=ROLLOUT_DTYPE
    )
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    generation: dict[str, int | list[int]] = {"eos_token_id": eos}
    if bos_token_id is not None:
        generation["bos_token_id"] = bos_token_id
    (directory / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return str(directory)


def sglang_server_process(
    model_path: str,
    concurrency: int,
    gpus_per_engine: int,
    colocated: bool,
    mem_fraction_static,
    server_args: Sequence[str],
    log_dir: str,
    seed: int,
    engine_index: int = 0,
    *,
    host: str = "127.0.0.1",
    port: int = 30000,
    return_routed_experts: bool = False,
):
    """The SGLang server hyrl launches for engine ``engine_index`` (nothing started):
    ``.command()`` is the argv, which tests/contract/ parses with SGLang's own parser."""
    from pathlib import Path

    from hyrl.rollout.sglang.server import SGLangServerProcess

    return SGLangServerProcess(
        model_path,
        host=host,
        port=port,
        tp_size=gpus_per_engine,
        base_gpu_id=0,
        mem_fraction_static=mem_fraction_static,
        max_running_requests=concurrency,
        colocated=colocated,
        random_seed=seed + engine_index,
        dtype=ROLLOUT_DTYPE,
        return_routed_experts=return_routed_experts,
        server_args=(
            list(server_args)
            if any(a.split("=")[0] == "--load-format" for a in server_args)
            else [*server_args, "--load-format", "dummy"]
        ),
        log_path=Path(log_dir) / f"sglang_engine{engine_index}.log",
        die_with_parent=True,
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


def make_sglang_engine(
    server_options: dict,
    stop_token_ids: list[int],
    mode: str,
    buffer_bytes: int,
    startup_timeout_s: float,
    engine_index: int = 0,
    *,
    num_moe_layers: int | None = None,
    moe_top_k: int | None = None,
    request_timeout_s: float = SGLANG_REQUEST_TIMEOUT_S,
):
    """One SGLang server on this Ray actor's GPUs (``sglang_server_process(**server_options)``),
    and the engine that drives it.

    Ray's CUDA_VISIBLE_DEVICES maps the bundle's GPUs to 0..gpus_per_engine-1, so the server
    starts at base GPU 0. Weights reach it from this actor: "tensor" as CUDA IPC handles on the
    server's own GPU, "disk" through a directory; "distributed" engines are synced by the trainer
    over NCCL (see SGLangFleet) and take the tensor path only when a replacement must catch up.
    With return_routed_experts (--use-rollout-routing-replay) the server records the experts it
    routes each token to and every Generation carries them ([tokens, num_moe_layers, moe_top_k]).
    """
    from pathlib import Path

    import ray

    from hyrl.rollout.sglang.engine import SGLangEngine
    from hyrl.rollout.sglang.server import free_port

    host = ray.util.get_node_ip_address()  # reachable from the trainer's node (distributed sync)
    server = sglang_server_process(
        **server_options, engine_index=engine_index, host=host, port=free_port(host)
    )
    gpus_per_engine = server_options["gpus_per_engine"]
    log_dir = server_options["log_dir"]
    return_routed_experts = server_options["return_routed_experts"]
    local_mode = "disk" if mode == "disk" else "tensor"
    options = (
        {"device": "cuda:0", "tp_size": gpus_per_engine}
        if local_mode == "tensor"
        else {"directory": str(Path(log_dir) / f"weights_engine{engine_index}")}
    )
    return SGLangEngine.launch(
        server,
        startup_timeout_s,
        concurrency=server_options["concurrency"],
        stop_token_ids=stop_token_ids,
        weight_sync=local_mode,
        buffer_bytes=buffer_bytes,
        weight_sync_options=options,
        return_routed_experts=return_routed_experts,
        num_moe_layers=num_moe_layers,
        moe_top_k=moe_top_k,
        timeout_s=request_timeout_s,
    )


class SGLangFleet:
    """RolloutEngine over a RolloutFleet of SGLang engine actors.

    generate: the fleet (placement, concurrency per engine, restarts, resubmission).
    update_weights_stream (and update_weights, a whole dict): "tensor"/"disk" through the fleet,
    bucket by bucket (each actor loads its own server, and a replacement loads the newest
    weights before it serves); "distributed": this process broadcasts each bucket over one NCCL
    group with every server and also hands the fleet the buckets, which only a replacement
    engine reads (kept only with --rollout-max-restarts > 0).
    release_memory/resume_memory: on every engine (--colocate).
    """

    def __init__(
        self,
        fleet: RolloutFleet,
        mode: str,
        buffer_bytes: int,
        gpus_per_engine: int,
        *,
        backend: str = "nccl",
        device: torch.device | None = None,
    ):
        self.fleet = fleet
        self.mode = mode
        self.last_sync_stats: SyncStats | None = None
        self._distributed: DistributedWeightSync | None = None
        # --colocate tensor: the servers fed by the training ranks
        self._ipc_sync: ColocatedTensorSync | None = None
        if mode == "distributed":
            from hyrl.rollout.sglang.client import SGLangClient
            from hyrl.rollout.sglang.weight_sync.distributed import DistributedWeightSync

            urls = fleet.call_all("server_url")
            if device is None:
                device = torch.device("cuda", torch.cuda.current_device())
            import ray

            # the servers may run on other nodes: they rendezvous at this node's address
            self._distributed = DistributedWeightSync(
                [SGLangClient(url) for url in urls],
                buffer_bytes,
                master_address=ray.util.get_node_ip_address(),
                backend=backend,
                tp_sizes=gpus_per_engine,
                device=device,
            )
            self._distributed.connect()

    def generate(self, prompts, params):
        return self.fleet.generate(prompts, params)

    def update_weights(self, hf_state_dict) -> None:
        if self._distributed is None:
            self.fleet.update_weights(hf_state_dict)
            self._collect_stats()
            return
        from hyrl.rollout.sglang.weight_sync.payload import checkpoint_named_tensors

        self.last_sync_stats = self._distributed.sync(checkpoint_named_tensors(hf_state_dict))
        self.fleet.stage_weights(hf_state_dict)

    def update_weights_stream(self, buckets) -> None:
        """tensor/disk: each bucket through the fleet to every engine actor; distributed: each
        bucket broadcast from here. Nothing is kept for replacements (hyrl.rollout.fleet)."""
        if self._distributed is None:
            self.fleet.update_weights_stream(buckets)
            self._collect_stats()
            return
        self.last_sync_stats = self._distributed.sync_buckets(buckets)
        self.fleet.mark_synced()

    def load_weights_from_disk(self, checkpoint) -> None:
        """disk: every engine loads the checkpoint the trainer ranks wrote."""
        self.fleet.load_weights_from_disk(checkpoint)
        self._collect_stats()

    def prepare_ipc_sync(self, rank_devices) -> None:
        """--colocate tensor, before each sync: the servers' URLs (a replacement has a new one)
        and which training rank sits on each server's GPUs (``rank_devices``: every training
        rank's (host, GPU)); raises when an engine GPU has no training rank."""
        from hyrl.rollout.sglang.client import SGLangClient
        from hyrl.rollout.sglang.weight_sync.tensor import ColocatedTensorSync, match_engine_ranks

        urls = self.fleet.call_all("server_url")
        # an engine keeps its bundle, so its GPUs, across replacements
        engine_ranks = match_engine_ranks(rank_devices, self.fleet.engine_devices)
        clients = [SGLangClient(url) for url in urls]
        if self._ipc_sync is None:
            self._ipc_sync = ColocatedTensorSync(clients, engine_ranks)
        self._ipc_sync.clients, self._ipc_sync.engine_ranks = clients, engine_ranks

    def update_weights_by_ipc(self, buckets, serializer) -> None:
        """Rank 0's part of ``colocated.stream_by_ipc`` (every training rank runs it with its own
        copy of the same buckets): each server gets the CUDA IPC handles of the training ranks
        on its GPUs. Nothing is kept for replacements (hyrl.rollout.fleet)."""
        from hyrl.rollout.sglang.weight_sync.tensor import stream_by_ipc

        self.last_sync_stats = stream_by_ipc(buckets, self._ipc_sync, serializer)
        self.fleet.mark_synced()

    def _collect_stats(self) -> None:
        stats = [s for s in self.fleet.call_all("sync_stats") if s is not None]
        self.last_sync_stats = max(stats, key=lambda s: s.elapsed_s) if stats else None

    def release_memory(self) -> None:
        self.fleet.call_all("release_memory")

    def resume_memory(self) -> None:
        self.fleet.call_all("resume_memory")

    def close(self) -> None:
        if self._distributed is not None:
            self._distributed.close()
        self.fleet.close()

    def sync_metrics(self) -> dict[str, float]:
        latest = self.last_sync_stats.metrics() if self.last_sync_stats is not None else {}
        return {**self.fleet.sync_metrics(), **latest}


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

        urls = router_worker_urls(SGLangClient(cfg.sglang_router_url))
        options = (
            {"device": torch.device("cuda", torch.cuda.current_device())}
            if layout.update_weight_mode == "distributed"
            else {"directory": str(Path(run_dir) / "rollout_weights")}
        )
        engine = SGLangEngine(
            cfg.sglang_router_url,
            concurrency=layout.concurrency_per_engine,
            stop_token_ids=rollout_eos_ids(eos_id, cfg.hf_checkpoint),
            weight_sync=layout.update_weight_mode,
            buffer_bytes=cfg.update_weight_buffer_size,
            weight_sync_options=options,
            weight_sync_urls=urls,
            timeout_s=sglang_request_timeout_s(cfg),
            **routed_experts,
        )
        if layout.update_weight_mode == "distributed":
            engine.weight_sync.connect()
        return engine

    from hyrl.rollout.fleet import RolloutFleet

    stop_ids = rollout_eos_ids(eos_id, cfg.hf_checkpoint)
    model_path = write_rollout_model(
        arch, Path(run_dir) / "rollout_model", stop_ids, _checkpoint_bos_id(cfg.hf_checkpoint)
    )
    log_dir = str(Path(run_dir).resolve() / "rollout_logs")
    factory = functools.partial(
        make_sglang_engine,
        sglang_server_options(cfg, layout, model_path, log_dir),
        stop_ids,
        layout.update_weight_mode,
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
        fleet, layout.update_weight_mode, cfg.update_weight_buffer_size, layout.gpus_per_engine
    )


def _checkpoint_bos_id(hf_checkpoint: str | None) -> int | None:
    from pathlib import Path

    path = Path(hf_checkpoint) / "config.json" if hf_checkpoint is not None else None
    if path is None or not path.is_file():
        return None
    bos = json.loads(path.read_text()).get("bos_token_id")
    return int(bos) if isinstance(bos, int) else None


def sglang_request_timeout_s(cfg: RunConfig) -> float:
    """How long one HTTP request to a server may take (--sglang-request-timeout-s)."""
    if cfg.sglang_request_timeout_s is None:
        return SGLANG_REQUEST_TIMEOUT_S
    return cfg.sglang_request_timeout_s


SGLANG_STARTUP_TIMEOUT_S = 900.0  # a 30B model loads in minutes; the tiny one in seconds


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
