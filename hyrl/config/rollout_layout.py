"""Where generation runs: the rollout layout resolved from the --rollout-* flags and the
training world size, and the facts about the engines that the trainer and validation share.

Standard library only (no torch): `hyrl.config` validates with it on a login node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyrl.config.errors import _fail, divisors
from hyrl.config.weight_transport import LOAD_STATE_DICT, TRANSPORTS, default_transport, reaching

if TYPE_CHECKING:
    from hyrl.config.concerns.rollout import RolloutFlags


@dataclass(frozen=True)
class RolloutLayout:
    """Where generation runs, resolved from the --rollout-* flags and the training world size."""

    engine: str  # hf or sglang
    in_process: bool  # hf only: one engine inside the trainer's rank 0, no Ray
    num_engines: int  # engines started by hyrl (0 when attached to --sglang-router-url)
    gpus_per_engine: int
    num_gpus: int  # GPUs the engines take in all (on the training GPUs with --colocate)
    concurrency_per_engine: int
    update_weight_transport: str  # hyrl.config.weight_transport's names; load_state_dict for hf
    uses_ray: bool  # engines or reward workers run as Ray actors


def _router_url_ok(url: str) -> bool:
    scheme, sep, rest = url.partition("://")
    host, colon, port = rest.rstrip("/").rpartition(":")
    return (
        scheme in ("http", "https")
        and bool(sep)
        and bool(host)
        and bool(colon)
        and port.isdigit()
        and "/" not in host
    )


def update_weight_transport(c: RolloutFlags) -> str:
    """--update-weight-transport of SGLang engines, none resolved: distributed behind a router or
    on GPUs of their own, tensor with --colocate (`default_transport`)."""
    if c.update_weight_transport is not None:
        return c.update_weight_transport
    return default_transport(colocated=c.colocate and c.sglang_router_url is None)


def rollout_layout(c: RolloutFlags, world_size: int) -> RolloutLayout:
    """Resolve and check the rollout flags; raises ConfigError naming the flag.

    The flags that do not apply to the engine (SGLang-only flags with hf, engine flags with
    --sglang-router-url) are refused before, by validation (`hyrl.config.conditional_flags`).

    hf: --rollout-num-engines none = one engine in the trainer process; N = N engines as Ray
    actors with --rollout-num-gpus-per-engine GPUs each (none = 0). sglang: engines take
    --rollout-num-gpus-per-engine GPUs each (none = 1, SGLang's tensor-parallel size);
    with --colocate they sit on the training GPUs (--rollout-num-gpus = world size), else
    --rollout-num-gpus or --rollout-num-engines says how many (the other is derived and must
    agree); with --sglang-router-url hyrl starts nothing and sends to the router.
    --update-weight-transport none = tensor with --colocate, else distributed (NCCL cannot join two
    ranks on one GPU, so colocated engines refuse distributed).
    """
    uses_ray_rewards = c.reward_num_workers > 0
    if c.rollout_engine == "hf":
        if c.rollout_num_engines is None:
            return RolloutLayout(
                "hf", True, 1, 0, 0, c.rollout_concurrency, LOAD_STATE_DICT, uses_ray_rewards
            )
        per_engine = c.rollout_num_gpus_per_engine or 0
        return RolloutLayout(
            "hf",
            False,
            c.rollout_num_engines,
            per_engine,
            c.rollout_num_engines * per_engine,
            c.rollout_concurrency,
            LOAD_STATE_DICT,
            True,
        )

    if c.sglang_router_url is not None:
        if not _router_url_ok(c.sglang_router_url):
            _fail(
                "sglang_router_url",
                c.sglang_router_url,
                "not an http(s)://HOST:PORT address",
                "e.g. http://10.0.0.5:30000",
            )
        transport = update_weight_transport(c)
        if not TRANSPORTS[transport].attached:
            _fail(
                "update_weight_transport",
                transport,
                TRANSPORTS[transport].refused,
                " or ".join(reaching("attached")) + " with --sglang-router-url",
            )
        return RolloutLayout(
            "sglang", False, 0, 0, 0, c.rollout_concurrency, transport, uses_ray_rewards
        )

    per_engine = 1 if c.rollout_num_gpus_per_engine is None else c.rollout_num_gpus_per_engine
    if per_engine < 1:
        _fail(
            "rollout_num_gpus_per_engine",
            per_engine,
            "an SGLang engine needs a GPU",
            "an integer >= 1",
        )
    if c.colocate:
        gpus = world_size if c.rollout_num_gpus is None else c.rollout_num_gpus
        if gpus != world_size:
            _fail(
                "rollout_num_gpus",
                gpus,
                f"colocated engines use exactly the {world_size} training GPUs",
                f"{world_size}, or none",
            )
    elif c.rollout_num_gpus is None and c.rollout_num_engines is None:
        _fail(
            "rollout_num_gpus",
            "none",
            "rollout engines need GPUs of their own without --colocate",
            "--rollout-num-gpus N or --rollout-num-engines N, or --colocate",
        )
    elif c.rollout_num_gpus is not None:
        gpus = c.rollout_num_gpus
    else:
        assert c.rollout_num_engines is not None, "neither given is refused above"
        gpus = c.rollout_num_engines * per_engine
    if gpus % per_engine:
        _fail(
            "rollout_num_gpus_per_engine",
            per_engine,
            f"does not divide the {gpus} rollout GPUs into whole engines",
            f"a divisor of {gpus}: {divisors(gpus)}",
        )
    engines = gpus // per_engine
    if c.rollout_num_engines is not None and c.rollout_num_engines != engines:
        _fail(
            "rollout_num_engines",
            c.rollout_num_engines,
            f"disagrees with {gpus} rollout GPUs at {per_engine} per engine ({engines} engines)",
            f"{engines}, or only one of --rollout-num-engines and --rollout-num-gpus",
        )
    transport = update_weight_transport(c)
    if c.colocate and not TRANSPORTS[transport].colocated:
        _fail(
            "update_weight_transport",
            transport,
            TRANSPORTS[transport].refused,
            " or ".join(reaching("colocated")) + " with --colocate",
        )
    return RolloutLayout(
        "sglang", False, engines, per_engine, gpus, c.rollout_concurrency, transport, True
    )
