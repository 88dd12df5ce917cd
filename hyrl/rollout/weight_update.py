"""The actor's weights to the rollout engines after its optimizer steps, in one of three modes
(--update-weight-transport, resolved by the rollout layout):

- stream (tensor, distributed): buckets of --update-weight-buffer-size through rank 0, which
  owns the engines;
- CUDA IPC (--colocate, tensor): every rank hands the engine on its GPU handles of its own copy;
- disk: safetensors shards written by every rank into a file system the servers share.

Every rank drives the TP/EP gathers of each parameter (collective); only rank 0 talks to the
engines. Each sync returns rank 0's perf/weight_sync_* metrics (empty elsewhere)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from hyrl.backends.base import TrainBackend, TrainedActor
from hyrl.models.weight_buckets import LiveBytes, tensor_bytes
from hyrl.rollout.base import DiskCheckpoint, RolloutEngine


class WeightSync:
    def __init__(
        self, mode: str, colocate: bool, buffer_bytes: int, run_dir: Path, backend: TrainBackend
    ):
        self.mode, self.colocate, self.buffer_bytes = mode, colocate, buffer_bytes
        self.run_dir, self.backend = run_dir, backend
        self.disk_syncs = 0  # the directory of sync N: RUN_DIR/rollout_weights/sync-N

    def sync(
        self, actor: TrainedActor, engine: RolloutEngine | None, resume_engines: Callable[[], None]
    ) -> dict:
        """resume_engines: rank 0 calls it right before the engines take the weights (colocated
        engines retake their memory only then). engine: rank 0's, None on the others."""
        if self.mode == "disk":
            return self._through_disk(actor, engine, resume_engines)
        if self.mode == "tensor" and self.colocate:
            return self._by_cuda_ipc(actor, engine, resume_engines)
        return self._stream(actor, engine, resume_engines)

    def _stream(self, actor, engine, resume_engines) -> dict:
        """Stream the actor's weights to the engines in buckets of --update-weight-buffer-size:
        every rank drives the TP/EP gathers, one parameter at a time; rank 0, which owns the
        engines, keeps each bucket until the engine has taken it. perf/weight_sync_peak_bytes:
        the most bytes rank 0's stream held at once (the buckets being filled or sent and the
        gather buffers of the parameter in flight; see weight_buckets.LiveBytes)."""
        rank = self.backend.rank
        live = LiveBytes()
        buckets = actor.hf_weight_buckets(self.buffer_bytes, keep=rank == 0, live=live)
        if rank != 0:
            for _ in buckets:  # nothing is kept here: this only takes part in the gathers
                pass
            return {}
        resume_engines()
        engine.update_weights_stream(buckets)
        return {"perf/weight_sync_peak_bytes": live.peak, **engine.sync_metrics()}

    def _by_cuda_ipc(self, actor, engine, resume_engines) -> dict:
        """--colocate, tensor mode: every rank keeps each bucket (the gathers leave it whole on
        every GPU) and hands the engine on its GPU CUDA IPC handles of its own copy, through
        rank 0 (hyrl.rollout.sglang.weight_sync.tensor). Peak bytes: the most on rank 0."""
        from hyrl.rollout.sglang.weight_sync.payload import sglang_serializer
        from hyrl.rollout.sglang.weight_sync.tensor import stream_by_ipc, this_device

        rank = self.backend.rank
        devices = self.backend.all_gather_object(this_device())
        status = "ok"
        if rank == 0:  # a bad placement stops every rank here, not in a gather later
            try:
                resume_engines()
                engine.prepare_ipc_sync(devices)
            except Exception as err:  # noqa: BLE001 - re-raised below, on every rank
                status, setup_error = f"{type(err).__name__}: {err}", err
        status = self.backend.broadcast_from_rank_0(status)
        if status != "ok":
            if rank == 0:
                raise setup_error
            raise RuntimeError(f"weight sync by CUDA IPC could not start on rank 0: {status}")
        live = LiveBytes()
        buckets = actor.hf_weight_buckets(self.buffer_bytes, live=live)
        if rank != 0:
            stream_by_ipc(buckets, None, sglang_serializer())
            return {}
        engine.update_weights_by_ipc(buckets, sglang_serializer())
        return {"perf/weight_sync_peak_bytes": live.peak, **engine.sync_metrics()}

    def _through_disk(self, actor, engine, resume_engines) -> dict:
        """--update-weight-transport disk: every rank writes the buckets it owns (bucket k on rank
        k mod world size) as safetensors shards into RUN_DIR/rollout_weights/sync-N (a file
        system the ranks and servers share), rank 0 the index after gathering the shard names;
        the engines load it, and the previous sync's directory is removed. Peak bytes: a bucket
        and its host copy on the rank that writes it."""
        from hyrl.models.weight_buckets import write_index, write_shard

        rank, world_size = self.backend.rank, self.backend.world_size
        self.disk_syncs += 1
        root = self.run_dir / "rollout_weights"
        directory = root / f"sync-{self.disk_syncs:06d}"
        directory.mkdir(parents=True, exist_ok=True)
        live, weight_map, written, shards = LiveBytes(), {}, 0, 0
        owned = actor.hf_weight_buckets(
            self.buffer_bytes, live=live, keep=lambda k: k % world_size == rank
        )
        for bucket in owned:
            size = sum(tensor_bytes(t) for _, t in bucket)
            live.add(size)  # the host copies safetensors writes from
            weight_map.update(
                write_shard(bucket, directory / f"model-rank{rank:05d}-{shards:05d}.safetensors")
            )
            live.release(size)
            written, shards = written + size, shards + 1
            del bucket
        parts = self.backend.gather_to_rank_0((weight_map, written, shards, live.peak))
        if rank != 0:
            return {}
        assert parts is not None, "rank 0 gets every rank's part"
        merged = {name: file for part in parts for name, file in part[0].items()}
        total_bytes, total_shards = sum(p[1] for p in parts), sum(p[2] for p in parts)
        write_index(directory, merged, total_bytes)
        resume_engines()
        engine.load_weights_from_disk(DiskCheckpoint(str(directory), total_bytes, total_shards))
        for old in root.glob("sync-*"):  # every engine, replacements too, loads the newest
            if old != directory:
                shutil.rmtree(old, ignore_errors=True)
        return {
            "perf/weight_sync_peak_bytes": max(p[3] for p in parts),
            **engine.sync_metrics(),
        }
