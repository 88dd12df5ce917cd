"""After the actor's optimizer steps: the weights to the engines and, with --offload-train, the
trainer's GPU memory handed to the colocated engines while they generate and taken back after.

A rollout step under --offload-train: [trainer offloaded] generate -> engines release (rank 0)
-> `restore` (every rank) -> log-probs, values, training -> `sync`: park the training state
(grads freed, optimizer states, reference, critic), empty_cache, barrier -> engines resume and
take the weights (the sync reads them on every rank) -> park the actor's weights, empty_cache.
The loop calls `sync_engines`: the sync under rank 0's engine lock, which every engine call
holds too (hyrl.rollout.manager), and the policy version the engines then hold.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

from hyrl.backends.base import TrainBackend, TrainedActor, TrainedCritic, TrainedModel
from hyrl.metrics.timers import StageTimers
from hyrl.rollout.manager import RolloutManager
from hyrl.weight_sync import WeightSyncMode

if TYPE_CHECKING:
    from hyrl.config.concerns.rollout import RolloutView


class SyncAndOffload:
    """The weight sync and the GPU memory around it, on one rank. `metrics`: the latest sync's
    account (the engine's own, perf/offload_freed_bytes), for the next record."""

    def __init__(
        self,
        backend: TrainBackend,
        rollout_manager: RolloutManager | None,
        weight_sync: WeightSyncMode,
        offloading: bool,
        generates_ahead: bool = False,
    ):
        self.backend, self.rollout_manager = backend, rollout_manager  # rollout_manager: rank 0's
        self.weight_sync, self.offloading = weight_sync, offloading
        self.generates_ahead = generates_ahead  # --async-rollout: a worker thread generates
        self.trainer_offloaded = False
        self.metrics: dict = {}

    def sync_engines(
        self,
        actor: TrainedActor,
        critic: TrainedCritic | None,
        timers: StageTimers | None = None,
        version: int | None = None,
    ) -> None:
        """`sync` under the engine lock; version: the policy version the engines then hold
        (None: unchanged). Rank 0 holds the lock: a generation on --async-rollout's worker
        finishes first, while the other ranks wait in the backend's wait group (no NCCL
        timeout there). With --inflight-weight-updates the worker's call is one segment, and
        the sync goes before its next one."""
        manager = self.rollout_manager
        with manager.engine_lock.weight_sync() if manager is not None else nullcontext():
            if self.generates_ahead:
                self.backend.wait_for_rank_0()
            self.sync(actor, critic, StageTimers() if timers is None else timers)
            if manager is not None and version is not None:
                manager.weights_version = version

    def sync(self, actor: TrainedActor, critic: TrainedCritic | None, timers: StageTimers) -> None:
        """The weight sync; with --offload-train the engines resume only once every rank has
        parked its training state, and the actor's weights are parked after it.
        perf/offload_freed_bytes: what rank 0 released (torch.cuda.memory_allocated before -
        after on GPU, the storage bytes on CPU); perf/offload_s: offload and restore."""
        freed = 0
        if self.offloading:
            with timers("offload"):
                freed += actor.offload_training_state()
                if critic is not None:  # not synced: all of it goes now
                    freed += critic.offload_training_state() + critic.offload_weights()
                self._free_cached_blocks(barrier=True)
        with timers("weight_sync"):
            self._sync_weights(actor)
        if self.offloading:
            with timers("offload"):
                freed += actor.offload_weights()
                self._free_cached_blocks(barrier=False)
            self.trainer_offloaded = True
            self.metrics["perf/offload_freed_bytes"] = freed

    def restore(self, trainables: list[TrainedModel], timers: StageTimers) -> None:
        """Every rank takes its offloaded memory back; rank 0 released the engines before it
        broadcast the rollout, so no rank gets here before the engines' memory is free."""
        if not self.trainer_offloaded:
            return
        with timers("offload"):
            for part in trainables:
                part.restore_offloaded()
        self.trainer_offloaded = False

    def reclaim(self, trainables: list[TrainedModel]) -> None:
        """Outside a rollout step (a checkpoint): rank 0 releases the engines, then every rank
        restores the trainer."""
        if self.rollout_manager is not None:
            self.rollout_manager.release_engines()
        self.backend.wait_for_rank_0()
        self.restore(trainables, StageTimers())

    def _sync_weights(self, actor: TrainedActor) -> None:
        engine = self.rollout_manager.engine if self.rollout_manager is not None else None
        self.metrics.update(self.weight_sync.sync(actor, engine, self._engines_resume))

    def _engines_resume(self) -> None:
        """Rank 0: the engines retake their memory right before they take the weights."""
        if self.rollout_manager is not None:
            self.rollout_manager.resume_engines()

    def _free_cached_blocks(self, barrier: bool) -> None:
        """Hand this rank's freed blocks back to the driver; with barrier, wait for every rank
        (rank 0 resumes the engines after it, into all GPUs' freed memory)."""
        self.backend.free_cached_memory()
        if barrier:
            self.backend.wait_for_rank_0()


def sync_and_offload_for(
    rollout: RolloutView,
    offloading: bool,
    weight_sync: WeightSyncMode,
    backend: TrainBackend,
    rollout_manager: RolloutManager | None,
) -> SyncAndOffload:
    """The sync and offload the flags ask for: weight_sync, this rank's side of the rollout
    layout's weight-update transport (hyrl.weight_sync.weight_sync_for: --colocate,
    --update-weight-buffer-size, the run directory for a disk-mode sync's files); offloading,
    --offload-train as resolved (hyrl.config.offloads_train); the rollout's --async-rollout.
    rollout_manager: rank 0's, None on the others."""
    return SyncAndOffload(backend, rollout_manager, weight_sync, offloading, rollout.async_rollout)
