"""``--update-weight-transport disk``: safetensors shards written by every rank into a file
system the ranks and the servers share, and the servers load the directory
(``/update_weights_from_disk``; SGLang's side: hyrl.rollout.sglang.receive.disk).

Every rank writes the buckets it owns (bucket k on rank k mod world size) as safetensors shards
into RUN_DIR/rollout_weights/sync-N (``weight_buckets.write_shard``); rank 0 gathers the shard
names and writes the index (``write_index``), then its engine loads the directory
(``load_weights_from_disk``: engines on Ray, replacements too, load the newest one) and the
previous sync's directory is removed. Peak bytes: a bucket and its host copy, on the rank that
writes it; the most on any rank.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any, cast

from hyrl.backends.base import TrainedActor
from hyrl.models.weight_buckets import LiveBytes, tensor_bytes, write_index, write_shard
from hyrl.rollout.base import DiskCheckpoint, DiskLoader, RolloutEngine
from hyrl.weight_sync.base import WeightSyncMode


class DiskMode(WeightSyncMode):
    def __init__(self, *args: Any, **kwargs: Any):  # WeightSyncMode's arguments
        super().__init__(*args, **kwargs)
        self.disk_syncs = 0  # the directory of sync N: RUN_DIR/rollout_weights/sync-N

    def sync(
        self,
        actor: TrainedActor,
        engine: RolloutEngine | None,
        resume_engines: Callable[[], None],
    ) -> dict:
        assert self.run_dir is not None, "the disk mode writes under the run directory"
        rank, world_size = self.backend.rank, self.backend.world_size
        self.disk_syncs += 1
        root = self.run_dir / "rollout_weights"
        directory = root / f"sync-{self.disk_syncs:06d}"
        directory.mkdir(parents=True, exist_ok=True)
        live, written, shards = LiveBytes(), 0, 0
        weight_map: dict[str, str] = {}  # tensor name -> this rank's shard file
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
        assert engine is not None, "rank 0 owns the engines"
        merged = {name: file for part in parts for name, file in part[0].items()}
        total_bytes, total_shards = sum(p[1] for p in parts), sum(p[2] for p in parts)
        write_index(directory, merged, total_bytes)
        resume_engines()
        # the layout allows disk only for SGLang engines, which load a directory
        cast(DiskLoader, engine).load_weights_from_disk(
            DiskCheckpoint(str(directory), total_bytes, total_shards)
        )
        for old in root.glob("sync-*"):  # every engine, replacements too, loads the newest
            if old != directory:
                shutil.rmtree(old, ignore_errors=True)
        return {
            "perf/weight_sync_peak_bytes": max(p[3] for p in parts),
            **engine.sync_metrics(),
        }
