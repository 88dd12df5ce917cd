"""The actor's weights to the rollout engines after its optimizer steps: the one place where the
trainer (hyrl.backends.base) and the engines (hyrl.rollout.base) meet, one module per mode.

    sync = weight_sync_for(cfg, world_size, backend, run_dir)
    metrics = sync.sync(actor, engine, resume_engines)  # every rank; engine: rank 0's, else None

The mode is the value of --update-weight-transport (recorded in config.json as
rollout_layout.update_weight_mode; the hf engines' copy into their own model is
``load_state_dict``), looked up in ``MODES``:

* ``load_state_dict`` (load_state_dict.py): buckets through rank 0; the hf engine copies each
  into its own model.
* ``tensor`` (tensor.py): with --colocate every rank's own copy as CUDA IPC handles, gathered to
  rank 0; otherwise buckets through rank 0; SGLang's ``/update_weights_from_tensor``.
* ``distributed`` (distributed.py): buckets through rank 0, whose engine broadcasts them over
  NCCL to every server (``/update_weights_from_distributed``).
* ``disk`` (disk.py): safetensors shards from every rank, the index from rank 0; the servers
  load the directory (``/update_weights_from_disk``).

Every mode implements ``WeightSyncMode`` (base.py: ``sync`` is collective; rank 0 returns the
perf/weight_sync_* metrics). A mode reaches the trainer through ``TrainBackend`` /
``TrainedActor`` and the engine only through the RolloutEngine protocols of hyrl.rollout.base;
SGLang's side of each mode (routes, payloads) is hyrl.rollout.sglang.weight_sync, which nothing
here imports (tests/unit/test_architecture.py).
"""

from __future__ import annotations

from pathlib import Path

from hyrl.backends.base import TrainBackend
from hyrl.config import RunConfig
from hyrl.config.rollout_layout import rollout_layout
from hyrl.weight_sync.base import WeightSyncMode
from hyrl.weight_sync.disk import DiskMode
from hyrl.weight_sync.distributed import DistributedMode
from hyrl.weight_sync.load_state_dict import LoadStateDictMode
from hyrl.weight_sync.tensor import TensorMode

MODES: dict[str, type[WeightSyncMode]] = {
    mode.name: mode for mode in (LoadStateDictMode, TensorMode, DistributedMode, DiskMode)
}


def weight_sync_for(
    cfg: RunConfig, world_size: int, backend: TrainBackend, run_dir: Path
) -> WeightSyncMode:
    """This rank's side of the weight-sync mode the flags ask for (--update-weight-transport,
    resolved by the rollout layout), with buckets of --update-weight-buffer-size."""
    name = rollout_layout(cfg, world_size).update_weight_mode
    if name not in MODES:
        raise ValueError(f"weight sync mode {name!r}: allowed: {', '.join(MODES)}")
    return MODES[name](
        backend, cfg.update_weight_buffer_size, colocate=cfg.colocate, run_dir=run_dir
    )


__all__ = ["MODES", "WeightSyncMode", "weight_sync_for"]
