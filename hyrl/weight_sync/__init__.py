"""The actor's weights to the rollout engines after its optimizer steps: the one place where the
trainer (hyrl.backends.base) and the engines (hyrl.rollout.base) meet.

    sync = weight_sync_for(rollout, layout, backend, run_dir)  # RolloutView, RolloutLayout
    metrics = sync.sync(actor, engine, resume_engines)  # every rank; engine: rank 0's, else None

The transport is the value of --update-weight-transport (recorded in config.json as
rollout_layout.update_weight_transport; the hf engines' copy into their own model is
``load_state_dict``), named in hyrl.config.weight_transport and looked up in ``MODES``:

* ``load_state_dict``: buckets through rank 0 (``ThroughRank0``, base.py); the in-process hf
  engine (hyrl.rollout.hf_engine) copies each bucket's tensors into its own transformers model,
  cast to its dtype; engines on Ray (hyrl.rollout.fleet) get one ``ray.put`` per bucket and do
  the same in their process.
* ``tensor`` (tensor.py): with --colocate every rank's own copy as CUDA IPC handles, gathered to
  rank 0; otherwise buckets through rank 0; SGLang's ``/update_weights_from_tensor``.
* ``distributed``: buckets through rank 0 (``ThroughRank0``), whose engine broadcasts each over
  one NCCL group it formed with every server (``/update_weights_from_distributed``); the other
  training ranks take part in the gathers and hold nothing.
* ``disk`` (disk.py): safetensors shards from every rank, the index from rank 0; the servers
  load the directory (``/update_weights_from_disk``).

Every mode implements ``WeightSyncMode`` (base.py: ``sync`` is collective; rank 0 returns the
perf/weight_sync_* metrics). A mode reaches the trainer through ``TrainBackend`` /
``TrainedActor`` and the engine only through the RolloutEngine protocols of hyrl.rollout.base;
SGLang's side of each transport (routes, payloads) is hyrl.rollout.sglang.receive, which nothing
here imports (tests/unit/test_architecture.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hyrl.backends.base import TrainBackend
from hyrl.config.rollout_layout import RolloutLayout
from hyrl.config.weight_transport import DISK, DISTRIBUTED, LOAD_STATE_DICT, TENSOR
from hyrl.weight_sync.base import ThroughRank0, WeightSyncMode
from hyrl.weight_sync.disk import DiskMode
from hyrl.weight_sync.tensor import TensorMode

if TYPE_CHECKING:
    from hyrl.config.concerns.rollout import RolloutView

# transport -> the trainer's side of it
MODES: dict[str, type[WeightSyncMode]] = {
    LOAD_STATE_DICT: ThroughRank0,
    TENSOR: TensorMode,
    DISTRIBUTED: ThroughRank0,
    DISK: DiskMode,
}


def weight_sync_for(
    rollout: RolloutView, layout: RolloutLayout, backend: TrainBackend, run_dir: Path
) -> WeightSyncMode:
    """This rank's side of the transport the flags ask for (--update-weight-transport,
    resolved by the rollout layout), with buckets of --update-weight-buffer-size."""
    transport = layout.update_weight_transport
    if transport not in MODES:
        raise ValueError(f"weight transport {transport!r}: allowed: {', '.join(MODES)}")
    return MODES[transport](
        backend, rollout.update_weight_buffer_size, colocate=rollout.colocate, run_dir=run_dir
    )


__all__ = ["MODES", "WeightSyncMode", "weight_sync_for"]
