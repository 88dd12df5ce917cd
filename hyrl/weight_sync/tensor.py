"""``--update-weight-transport tensor`` (the default with --colocate): the buckets reach SGLang's
``/update_weights_from_tensor`` as CUDA IPC handles (SGLang's side:
hyrl.rollout.sglang.receive.tensor), on one of two paths.

* --colocate, by CUDA IPC from every rank (slime's colocated path; nothing goes through Ray).
  First every rank says where it runs (``this_device``: host, physical GPU) and rank 0's engine
  matches its GPUs to training ranks (``prepare_ipc_sync``); a bad placement stops every rank
  there, not in a gather later. Then ``send_by_cuda_ipc``: the gathers leave each bucket whole
  on every rank's GPU; every rank serializes its own copy (handles, not bytes) and the payloads
  are gathered to rank 0, whose engine posts each engine TP rank the payload of the training
  rank on its GPU (``load_ipc_payloads``); rank 0 then tells every rank whether the bucket went
  in, and every rank drops its copy. On a failure every rank raises (rank 0 the engine's error,
  the others a RuntimeError quoting it) instead of waiting forever in the next gather; rank 0's
  engine ends the sync either way (``end_ipc_update``). Peak bytes: the most on rank 0.
* Otherwise (engines on GPUs of their own): buckets through rank 0 (``ThroughRank0``), whose
  engine hands each to every engine actor, which moves it to its server's GPU and posts it
  the same way.

The serializer is the engine's (SGLang's ``MultiprocessingSerializer``, flattened buckets):
every rank gets it from the engine factory (``hyrl.rollout.build.cuda_ipc_serializer``), so
nothing here imports an engine's package. A serializer may hold what it made (the flat copy)
until its ``release()``, which every rank calls once rank 0 says the bucket is in.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch

from hyrl.backends.base import TrainBackend, TrainedActor
from hyrl.models.weight_buckets import LiveBytes, NamedTensors, tensor_bytes
from hyrl.rollout.base import CudaIpcEngine, CudaIpcReceiver, RolloutEngine
from hyrl.weight_sync.base import ThroughRank0

Serializer = Callable[[NamedTensors], str]
Device = tuple[str, int]  # (host name, physical GPU id)


def this_device() -> Device:
    """This process's current CUDA device as (host name, physical GPU id)."""
    index = torch.cuda.current_device()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        index = int(visible.split(",")[index])
    return socket.gethostname(), index


class TensorMode(ThroughRank0):
    def __init__(self, *args: Any, serializer: Serializer | None = None, **kwargs: Any):
        # WeightSyncMode's arguments, and the serializer
        super().__init__(*args, **kwargs)
        self.serializer = serializer  # None: the engine factory's, at the first --colocate sync

    def sync(
        self,
        actor: TrainedActor,
        engine: RolloutEngine | None,
        resume_engines: Callable[[], None],
    ) -> dict:
        if not self.colocate:
            return super().sync(actor, engine, resume_engines)
        return self._by_cuda_ipc(actor, engine, resume_engines)

    def _by_cuda_ipc(
        self,
        actor: TrainedActor,
        engine: RolloutEngine | None,
        resume_engines: Callable[[], None],
    ) -> dict:
        """--colocate: every rank keeps each bucket and hands the engine on its GPU CUDA IPC
        handles of its own copy, through rank 0 (the module doc)."""
        if self.serializer is None:
            from hyrl.rollout.build import cuda_ipc_serializer

            self.serializer = cuda_ipc_serializer()
        rank = self.backend.rank
        receiver: CudaIpcEngine | None = None
        devices = self.backend.all_gather_object(this_device())
        status = "ok"
        if rank == 0:  # a bad placement stops every rank here, not in a gather later
            assert engine is not None, "rank 0 owns the engines"
            # the layout allows tensor with --colocate only for SGLang engines, which take it
            receiver = cast(CudaIpcEngine, engine)
            try:
                resume_engines()
                receiver.prepare_ipc_sync(devices)
            except Exception as err:  # noqa: BLE001 - re-raised below, on every rank
                status, setup_error = f"{type(err).__name__}: {err}", err
        status = self.backend.broadcast_from_rank_0(status)
        if status != "ok":
            if rank == 0:
                raise setup_error
            raise RuntimeError(f"weight sync by CUDA IPC could not start on rank 0: {status}")
        live = LiveBytes()
        buckets = actor.hf_weight_buckets(self.buffer_bytes, live=live)
        send_by_cuda_ipc(buckets, self.backend, receiver, self.serializer)
        if receiver is None:
            return {}
        return {"perf/weight_sync_peak_bytes": live.peak, **receiver.sync_metrics()}


def send_by_cuda_ipc(
    buckets: Iterable[NamedTensors],
    ranks: TrainBackend,
    receiver: CudaIpcReceiver | None,
    serializer: Serializer,
) -> None:
    """Collective (every training rank, the same buckets; ``receiver`` on rank 0 only): each
    bucket serialized on every rank, the payloads gathered to rank 0 and handed to the
    receiver, the outcome broadcast to every rank (the module doc)."""
    rank = ranks.rank
    if rank == 0:
        assert receiver is not None, "rank 0 holds the receiver"
        receiver.begin_ipc_update(serializer)
    succeeded = False
    try:
        for bucket in buckets:
            payload = serializer(bucket)
            payloads = ranks.gather_to_rank_0(payload)  # every rank's, on rank 0
            status, error = "ok", None
            if rank == 0:
                assert receiver is not None and payloads is not None, "rank 0 holds both"
                try:
                    receiver.load_ipc_payloads(payloads, sum(tensor_bytes(t) for _, t in bucket))
                except Exception as err:  # noqa: BLE001 - every rank must hear of it
                    status, error = f"{type(err).__name__}: {err}", err
            status = ranks.broadcast_from_rank_0(status)  # the servers have copied: free the copies
            release = getattr(serializer, "release", None)
            if release is not None:
                release()
            del bucket, payload, payloads
            if error is not None:
                raise error
            if status != "ok":
                raise RuntimeError(f"weight sync by CUDA IPC failed on rank 0: {status}")
        succeeded = True
    finally:
        if rank == 0:
            assert receiver is not None, "rank 0 holds the receiver"
            receiver.end_ipc_update(succeeded)
