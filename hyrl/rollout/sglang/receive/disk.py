"""``--update-weight-transport disk``, SGLang's side: the servers load a safetensors checkpoint
from a directory (``/update_weights_from_disk``), e.g. on a file system they share with the
trainer.

``DiskWeightSync`` writes each bucket as it arrives as one safetensors shard into
``directory`` (the previous shards removed first), then ``model.safetensors.index.json``
(+ ``config.json`` when given), then posts ``/update_weights_from_disk``: what an engine actor
does with the buckets the fleet hands it. The trainer does better (``sync_written``, reached
through the engine's ``load_weights_from_disk``): every trainer rank writes the buckets it owns
(``weight_buckets.write_shard``), rank 0 the index (``weight_buckets.write_index``) after
gathering the shard names (hyrl.weight_sync.disk), and the sync only posts
``/update_weights_from_disk`` of that directory. A disk update opens no weight-update session
(``session.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from hyrl.config.weight_transport import DISK
from hyrl.models.weight_buckets import NamedTensors, tensor_bytes, write_index, write_shard
from hyrl.rollout.sglang.client import SGLangClient
from hyrl.rollout.sglang.receive.session import PausedSync, SyncStats


class DiskWeightSync(PausedSync):
    transport = DISK
    session = False

    def __init__(
        self,
        clients: Sequence[SGLangClient],
        buffer_bytes: int,
        directory: str | Path,
        config_json: Mapping | None = None,
        load_format: str | None = None,
        pause_mode: str = "abort",
    ):
        super().__init__(clients, buffer_bytes, pause_mode)
        self.directory = Path(directory)
        self.config_json = dict(config_json) if config_json is not None else None
        self.load_format = load_format
        self._written: tuple[Path, int, int] | None = None  # sync_written's checkpoint

    def write_checkpoint(self, buckets: Iterable[NamedTensors]) -> None:
        """All buckets as shards + index (+ config.json) in ``directory``."""
        self._begin_transfer()
        for bucket in buckets:
            self._write_shard(bucket)
        write_index(self.directory, self._weight_map, self._total_bytes, self.config_json)

    def sync_written(self, directory: str | Path, tensor_bytes: int, shards: int) -> SyncStats:
        """pause -> /update_weights_from_disk of a checkpoint others wrote (every trainer rank
        its own shards, rank 0 the index) -> flush -> continue."""
        self._written = (Path(directory), tensor_bytes, shards)
        try:
            self.begin()
            stats = self.end(True)
        finally:
            self._written = None
        stats.tensor_bytes, stats.buckets = tensor_bytes, shards
        return stats

    def _begin_transfer(self) -> None:
        if self._written is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for old in [*self.directory.glob("*.safetensors"), *self.directory.glob("*.index.json")]:
            old.unlink()  # the server loads every shard in the directory
        self._weight_map: dict[str, str] = {}
        self._total_bytes = 0

    def _write_shard(self, bucket: NamedTensors) -> int:
        file_name = f"model-{len(set(self._weight_map.values())) + 1:05d}.safetensors"
        self._weight_map.update(write_shard(bucket, self.directory / file_name))
        written = sum(tensor_bytes(t) for _, t in bucket)  # the clones, freed once written
        self._total_bytes += written
        return written

    def _send(self, bucket: NamedTensors, weight_version: str) -> int:
        return self._write_shard(bucket)

    def _end_transfer(self, weight_version: str) -> None:
        directory = self.directory
        if self._written is not None:
            directory = self._written[0]
        else:
            write_index(self.directory, self._weight_map, self._total_bytes, self.config_json)
        for client in self.clients:
            client.update_weights_from_disk(
                str(directory), load_format=self.load_format, weight_version=weight_version
            )
