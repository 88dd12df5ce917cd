"""Which TrainBackend trains: megatron-core today. Imported lazily, so the loop (hyrl.train.trainer)
names no backend package and loading it costs nothing until a run starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyrl.backends.base import TrainBackend
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

if TYPE_CHECKING:
    from hyrl.config import ResolvedConfig
    from hyrl.config.concerns.model import ModelView


def build_backend(cfg: ResolvedConfig, world_size: int, arch: Qwen3MoeArch) -> TrainBackend:
    """Process groups started, the actor (and the critic) built on every rank, the backend
    handed the settings views it builds them from."""
    from hyrl.backends.megatron.backend import MegatronBackend

    return MegatronBackend(
        world_size,
        arch,
        model=cfg.model,
        parallel=cfg.parallel,
        batch=cfg.batch,
        optimizer=cfg.optimizer,
        algorithm=cfg.algorithm,
        mismatch=cfg.mismatch,
        rollout=cfg.rollout,
        critic=cfg.critic,
        seed=cfg.run.seed,
        load=cfg.checkpoint.load,
    )


def check_machine(model: ModelView) -> None:
    """The backend's checks of the model flags against this machine, before any process
    group; raises ConfigError naming the flag."""
    from hyrl.backends.megatron.backend import check_machine as megatron_checks

    megatron_checks(model)


def shutdown_backend() -> None:
    """The process groups torn down, also after a backend that failed half-way."""
    from hyrl.backends.megatron.backend import shutdown

    shutdown()
