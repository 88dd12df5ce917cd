"""The weight transports: how the actor's new weights reach the rollout engines, by name, and
what each one reaches. Every table that picks by transport keys on these names:

* the flag's choices: --update-weight-transport (``NAMES``; hyrl.config.concerns.rollout);
* the rules of the rollout layout: the default, and where each one reaches
  (hyrl.config.rollout_layout; the SGLang preflight: hyrl.rollout.sglang.preflight);
* the trainer's side of each, one mode a name (hyrl.weight_sync.MODES);
* the SGLang engine's receiver of each (hyrl.rollout.sglang.engine.RECEIVERS; the receivers
  themselves: hyrl.rollout.sglang.receive);
* the plan's time model of a sync (hyrl.plan.sync.TRANSFERS).

tests/unit/weight_sync/test_transports.py pins them together. Standard library only: the config
imports it on a login node.
"""

from __future__ import annotations

from dataclasses import dataclass

TENSOR = "tensor"
DISTRIBUTED = "distributed"
DISK = "disk"
# the hf engines' own: the buckets copied into the engine's transformers model (no flag value;
# --rollout-engine hf takes no --update-weight-transport)
LOAD_STATE_DICT = "load_state_dict"


@dataclass(frozen=True)
class Transport:
    """One value of --update-weight-transport: how SGLang takes the weights and where it
    reaches. Engines on GPUs of their own, started by hyrl, are reached by every transport."""

    name: str
    route: str  # what the servers are sent
    colocated: bool  # reaches engines on the training GPUs (--colocate)
    attached: bool  # reaches servers hyrl did not start (--sglang-router-url)
    dp_replicas: bool  # SGLang 0.5.23 takes it into a server with --dp-size > 1
    # what an engine actor on Ray loads its own server by, when the fleet hands it buckets (a
    # replacement catching up, for transports the trainer drives itself)
    engine_actor: str
    refused: str = ""  # why it does not reach where it does not (the layout's error)


TRANSPORTS: dict[str, Transport] = {
    t.name: t
    for t in (
        Transport(
            TENSOR,
            "CUDA IPC handles to /update_weights_from_tensor",
            colocated=True,
            attached=False,
            dp_replicas=False,
            engine_actor=TENSOR,
            refused="tensor handles reach only engines that hyrl started on its own nodes",
        ),
        Transport(
            DISTRIBUTED,
            "an NCCL broadcast from rank 0, named by /update_weights_from_distributed",
            colocated=False,
            attached=True,
            dp_replicas=False,
            engine_actor=TENSOR,
            refused="NCCL cannot put a trainer rank and an engine rank on one GPU",
        ),
        Transport(
            DISK,
            "a safetensors directory to /update_weights_from_disk (a shared file system)",
            colocated=True,
            attached=True,
            dp_replicas=True,
            engine_actor=DISK,
        ),
    )
}
NAMES = tuple(TRANSPORTS)  # --update-weight-transport's choices


def default_transport(*, colocated: bool) -> str:
    """--update-weight-transport none: tensor for engines on the training GPUs, else
    distributed (behind a router, or on GPUs of their own)."""
    return TENSOR if colocated else DISTRIBUTED


def reaching(where: str) -> tuple[str, ...]:
    """The transports that reach `where` ("colocated", "attached"), for error messages."""
    return tuple(name for name, t in TRANSPORTS.items() if getattr(t, where))
