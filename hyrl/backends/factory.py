"""Which TrainBackend trains: megatron-core today. Imported lazily, so the loop (hyrl.train.trainer)
names no backend package and loading it costs nothing until a run starts."""

from __future__ import annotations

from hyrl.backends.base import TrainBackend
from hyrl.config import RunConfig
from hyrl.models.qwen3_moe.config import Qwen3MoeArch


def build_backend(cfg: RunConfig, world_size: int, arch: Qwen3MoeArch) -> TrainBackend:
    """Process groups started, the actor (and the critic) built on every rank."""
    from hyrl.backends.megatron.backend import MegatronBackend

    return MegatronBackend(cfg, world_size, arch)


def check_machine(cfg: RunConfig) -> None:
    """The backend's flag checks against this machine, before any process group; raises
    ConfigError naming the flag."""
    from hyrl.backends.megatron.backend import check_machine as megatron_checks

    megatron_checks(cfg)


def shutdown_backend() -> None:
    """The process groups torn down, also after a backend that failed half-way."""
    from hyrl.backends.megatron.backend import shutdown

    shutdown()
