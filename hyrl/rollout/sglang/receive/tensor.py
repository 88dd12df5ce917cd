"""``--update-weight-transport tensor``, SGLang's side: each bucket posted to
``/update_weights_from_tensor`` as CUDA IPC handles (``payload.py``), on two paths.

* ``TensorWeightSync`` (an engine actor feeds its own server: the engines on GPUs of their own):
  each bucket is moved to ``device`` (the engine's GPU; no copy when it is there already),
  serialized once per TP rank of every server (each rank opens a payload of its own, as
  SGLang's engine sends them: ``payload.serialize_per_rank``; a flattened bucket is one flat
  copy) and posted to every server at once (``post_to_all``). The server has copied the
  tensors when the call returns, so the bucket is freed before the next one is moved. With
  ``device=None`` CPU tensors travel as file-descriptor handles (``payload.py``).
* ``ColocatedTensorSync`` (--colocate: each engine is fed by the training ranks on its own GPUs,
  slime's colocated path; nothing goes through Ray). Every training rank serializes its own
  copy of each bucket and rank 0 hands the gathered payloads over (the trainer's side:
  hyrl.weight_sync.tensor.send_by_cuda_ipc); ``load_ipc_payloads`` posts
  ``/update_weights_from_tensor`` to every engine at once (one thread per engine,
  ``post_to_all``; a post returns once that engine has copied the bucket) with one entry per
  engine TP rank: the payload of the training rank on that TP rank's GPU, so each server
  process reads a copy on its own GPU. Each rank's copy travels flattened (one flat copy, one
  IPC handle; ``payload.flatten_bucket``). ``begin_ipc_update`` pauses before the first bucket
  and ``end_ipc_update`` flushes + continues after the last (continues also after a
  failure), as every weight sync does (``session.py``).
* ``match_engine_ranks`` maps engine k's TP rank j (its j-th GPU, as Ray gave them) to the
  training rank on the same host and physical GPU, and raises naming the engine and GPU that
  no training rank sits on.

    engine_ranks = match_engine_ranks(rank_devices, engine_devices)  # rank 0, before each sync
    sync = ColocatedTensorSync(clients, engine_ranks)  # driven by send_by_cuda_ipc on rank 0
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from hyrl.config.weight_transport import TENSOR
from hyrl.models.weight_buckets import NamedTensors, tensor_bytes
from hyrl.rollout.sglang.client import SGLangClient
from hyrl.rollout.sglang.receive.payload import (
    FLATTENED_BUCKET,
    Serializer,
    load_format_of,
    release_payload,
    serialize_per_rank,
    sglang_serializer,
)
from hyrl.rollout.sglang.receive.session import (
    PausedSync,
    SyncStats,
    copied_bytes,
    post_to_all,
)


class TensorWeightSync(PausedSync):
    transport = TENSOR

    def __init__(
        self,
        clients: Sequence[SGLangClient],
        buffer_bytes: int,
        tp_size: int = 1,
        device: str | torch.device | None = None,
        serializer: Serializer | None = None,
        load_format: str | None = None,
        pause_mode: str = "abort",
    ):
        super().__init__(clients, buffer_bytes, pause_mode)
        self.tp_size = tp_size
        self.device = device
        self.serializer = serializer
        self.load_format = load_format

    def _send(self, bucket: NamedTensors, weight_version: str) -> int:
        if self.serializer is None:
            self.serializer = sglang_serializer()
        serialize = self.serializer
        load_format = load_format_of(serialize, self.load_format)
        moved = bucket
        if self.device is not None:
            moved = [(n, t.detach().to(self.device)) for n, t in bucket]
        try:
            payloads = serialize_per_rank(serialize, moved, len(self.clients) * self.tp_size)
            payloads_of = {
                id(client): payloads[k * self.tp_size : (k + 1) * self.tp_size]
                for k, client in enumerate(self.clients)
            }
            # every server at once; each call returns once the server has copied the bucket
            post_to_all(
                self.clients,
                lambda client: client.update_weights_from_tensor(
                    payloads_of[id(client)],
                    load_format=load_format,
                    flush_cache=False,
                    weight_version=weight_version,
                ),
            )
        finally:
            release_payload(serialize)
        flat = sum(tensor_bytes(t) for _, t in moved) if load_format == FLATTENED_BUCKET else 0
        return copied_bytes(bucket, moved) + flat  # the device moves and the flat copy


Device = tuple[str, int]  # (host name, physical GPU id)


def match_engine_ranks(
    rank_devices: Sequence[Device], engine_devices: Sequence[Sequence[Device]]
) -> list[list[int]]:
    """Per engine, per TP rank, the training rank on the same GPU."""
    rank_of = {tuple(device): rank for rank, device in enumerate(rank_devices)}
    plan = []
    for engine, devices in enumerate(engine_devices):
        missing = [tuple(d) for d in devices if tuple(d) not in rank_of]
        if missing:
            raise ValueError(
                f"--update-weight-transport tensor with --colocate: engine {engine} runs on GPU(s) "
                f"{missing} where no training rank runs (training ranks: {list(rank_devices)}); "
                "Ray must place the engines on the training GPUs, or use "
                "--update-weight-transport disk"
            )
        plan.append([rank_of[tuple(d)] for d in devices])
    return plan


class ColocatedTensorSync(PausedSync):
    """Rank 0's side, a ``CudaIpcReceiver`` (hyrl.rollout.base): pause / per bucket one post to
    every engine at once / flush + continue; ``last_stats``: the latest sync's SyncStats."""

    transport = TENSOR

    def __init__(
        self,
        clients: Sequence[SGLangClient],
        engine_ranks: Sequence[Sequence[int]],
        load_format: str | None = None,
        pause_mode: str = "abort",
    ):
        super().__init__(clients, buffer_bytes=0, pause_mode=pause_mode)
        if len(engine_ranks) != len(self.clients):
            raise ValueError(f"{len(engine_ranks)} rank lists for {len(self.clients)} engines")
        self.engine_ranks = [list(r) for r in engine_ranks]
        self.load_format = load_format
        self.last_stats: SyncStats | None = None

    def begin_ipc_update(self, serializer: Serializer) -> None:
        """Pause every engine and open its session; the posts name the serializer's
        load_format (``load_format_of``)."""
        self.load_format = load_format_of(serializer, self.load_format)
        self.begin()

    def load_ipc_payloads(self, payloads: Sequence[str], num_bytes: int) -> None:
        """One bucket, already serialized by every training rank (``payloads[rank]``)."""
        start = time.perf_counter()
        ranks_of = {id(client): ranks for client, ranks in zip(self.clients, self.engine_ranks)}
        post_to_all(
            self.clients,
            lambda client: client.update_weights_from_tensor(
                [payloads[r] for r in ranks_of[id(client)]],
                load_format=self.load_format,
                flush_cache=False,
                weight_version=str(self.version),
            ),
        )
        opened = self._opened()
        opened.transfer_s += time.perf_counter() - start
        opened.bytes += num_bytes
        opened.buckets += 1

    def _send(self, bucket: NamedTensors, weight_version: str) -> int:
        raise TypeError(
            "ColocatedTensorSync takes serialized buckets: hyrl.weight_sync.tensor.send_by_cuda_ipc"
        )

    def end_ipc_update(self, succeeded: bool = True) -> None:
        """Close the sessions, flush (after a complete sync) and continue (``PausedSync.end``)."""
        self.last_stats = self.end(succeeded)
