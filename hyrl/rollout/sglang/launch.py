"""What hyrl launches for each SGLang engine it starts: the servers' model directory, one
server's command line, and the engine an engine actor builds around its server.

    model_path = write_rollout_model(arch, RUN_DIR / "rollout_model", rollout_eos_ids(eos_id, ckpt))
    server = sglang_server_process(model_path, ..., engine_index=i)   # nothing started yet
    engine = make_sglang_engine(server_options, stop_ids, transport, ...)  # in engine i's Ray actor

The servers start from a model directory of ``config.json`` and ``generation_config.json`` only
(``--load-format dummy``: the weights arrive by weight sync); ``write_rollout_model`` says what
SGLang reads from them. ``sglang_server_process(...).command()`` is the argv, which
tests/contract/ parses with SGLang's own parser.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from hyrl.config.weight_transport import TENSOR, TRANSPORTS
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

ROLLOUT_DTYPE = "bfloat16"  # the servers' weights and activations (SGLang --dtype)
SGLANG_REQUEST_TIMEOUT_S = 600.0  # --sglang-request-timeout-s none

SGLANG_STARTUP_TIMEOUT_S = 900.0  # a 30B model loads in minutes; the tiny one in seconds


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


def checkpoint_bos_id(hf_checkpoint: str | None) -> int | None:
    """The bos_token_id of the checkpoint's config.json, None without one."""
    from pathlib import Path

    path = Path(hf_checkpoint) / "config.json" if hf_checkpoint is not None else None
    if path is None or not path.is_file():
        return None
    bos = json.loads(path.read_text()).get("bos_token_id")
    return int(bos) if isinstance(bos, int) else None


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


def make_sglang_engine(
    server_options: dict,
    stop_token_ids: list[int],
    transport: str,
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
    starts at base GPU 0. Weights reach it from this actor by the transport's ``engine_actor``
    (hyrl.config.weight_transport): "tensor" as CUDA IPC handles on the server's own GPU,
    "disk" through a directory; "distributed" engines are synced by the trainer over NCCL (see
    SGLangFleet) and take the tensor path only when a replacement must catch up.
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
    local = TRANSPORTS[transport].engine_actor
    options = (
        {"device": "cuda:0", "tp_size": gpus_per_engine}
        if local == TENSOR
        else {"directory": str(Path(log_dir) / f"weights_engine{engine_index}")}
    )
    return SGLangEngine.launch(
        server,
        startup_timeout_s,
        concurrency=server_options["concurrency"],
        stop_token_ids=stop_token_ids,
        weight_sync=local,
        buffer_bytes=buffer_bytes,
        weight_sync_options=options,
        return_routed_experts=return_routed_experts,
        num_moe_layers=num_moe_layers,
        moe_top_k=moe_top_k,
        timeout_s=request_timeout_s,
    )
