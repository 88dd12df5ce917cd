"""The session every SGLang weight sync runs, whatever the transport: pause -> transfer -> flush ->
continue on every server, fed one bucket at a time.

    sync.begin()                 # /pause_generation, /begin_weight_update on every server
    for bucket in buckets:
        sync.send(bucket)        # one bucket by the transport (tensor, distributed, disk)
    stats = sync.end(succeeded)  # /end_weight_update, /flush_cache, /continue_generation

Semantics, common to all transports:

* Tensors are (name, tensor) pairs in the *checkpoint* layout SGLang's ``load_weights`` reads
  (what ``save_pretrained`` writes): one tensor per expert, ``mlp.experts.{e}.{gate,up,down}_
  proj.weight``. The trainer streams them in that layout (``hf_mapping.megatron_to_hf_checkpoint``);
  ``payload.checkpoint_named_tensors`` splits a state dict with fused experts into it.
* A bucket is a list of such pairs of at most ``buffer_bytes`` bytes (a larger tensor is a bucket
  by itself: ``hyrl.models.weight_buckets``). ``sync_buckets`` takes the buckets as given (the
  trainer cuts them with the same ``--update-weight-buffer-size``); ``sync`` cuts pairs itself.
  One bucket = one HTTP call per server (and, for distributed, one round of broadcasts), and a
  bucket is dropped before the next is asked for, so a sync holds one bucket at a time.
* A sync runs, on every server: ``/pause_generation`` and ``/begin_weight_update`` (``begin``)
  -> the transfer (one call per bucket, each with ``flush_cache=false``; ``send``) ->
  ``/end_weight_update`` (SGLang post-processes the loaded weights) -> ``/flush_cache`` once (KV
  cached under the old weights must not be reused) -> ``/continue_generation`` (``end``).
  SGLang 0.5.23 refuses tensor and distributed updates outside such a session
  (``managers/scheduler_components/weight_updater.py``); disk updates need none and open none.
  ``end`` closes the session and sends ``/continue_generation`` also when the transfer failed,
  so a failed sync never leaves a server paused or a session open; the transfer's error is the
  one raised. Each call carries ``weight_version`` = the
  number of syncs so far, so ``/get_model_info`` shows which weights a server holds.
* ``end`` returns ``SyncStats``: wall time of the whole sync and of the transfer alone, bytes
  and buckets sent (per server), and ``peak_bytes``, the most bytes of copies this sync made at
  once (device copies, disk clones; 0 when it sent the caller's tensors as they were).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import torch

from hyrl.models.weight_buckets import NamedTensors, iter_buckets, tensor_bytes
from hyrl.rollout.sglang.client import SGLangClient, SGLangError


@dataclass
class SyncStats:
    transport: str  # hyrl.config.weight_transport's name
    elapsed_s: float  # pause -> continue, all servers
    transfer_s: float  # the weight calls / broadcasts alone
    tensor_bytes: int  # sent to each server
    buckets: int
    peak_bytes: int = 0  # most bytes of copies (device moves, disk clones) held at once

    def metrics(self) -> dict[str, float]:
        """The sync's account as metrics.jsonl keys."""
        return {
            "perf/weight_transfer_s": self.transfer_s,
            "perf/weight_sync_bytes": self.tensor_bytes,
            "perf/weight_sync_buckets": self.buckets,
            # copies the engine side made (device moves, disk clones)
            "perf/weight_sync_engine_peak_bytes": self.peak_bytes,
        }


@dataclass
class SyncCounters:
    """What the sync in progress has done so far, from begin() to end()."""

    start: float  # time.perf_counter() at begin()
    transfer_s: float = 0.0
    bytes: int = 0
    buckets: int = 0
    peak: int = 0


class PausedSync:
    """pause -> transfer -> flush -> continue on every server; subclasses supply the transfer
    (``_begin_transfer``, ``_send`` one bucket, ``_end_transfer``)."""

    transport = ""  # hyrl.config.weight_transport's name of the subclass's transfer
    # SGLang 0.5.23 loads tensor and distributed updates only inside a session
    # (/begin_weight_update ... /end_weight_update); a disk update restores and post-processes
    # the weights itself and needs none.
    session = True

    def __init__(
        self, clients: Sequence[SGLangClient], buffer_bytes: int, pause_mode: str = "abort"
    ):
        if not clients:
            raise ValueError("weight sync needs at least one SGLang server client")
        self.clients = list(clients)
        self.buffer_bytes = buffer_bytes
        self.pause_mode = pause_mode
        self.version = 0  # syncs done; sent as weight_version
        self._open: SyncCounters | None = None  # the sync in progress: its counters
        self._sessions: list[SGLangClient] = []  # servers with a weight-update session open

    def sync(self, named: Iterable[tuple[str, torch.Tensor]]) -> SyncStats:
        return self.sync_buckets(iter_buckets(named, self.buffer_bytes))

    def sync_buckets(self, buckets: Iterable[NamedTensors]) -> SyncStats:
        self.begin()
        succeeded = False
        try:
            for bucket in buckets:
                self.send(bucket)
                del bucket
            succeeded = True
        finally:
            stats = self.end(succeeded)
        return stats

    def begin(self) -> None:
        self.version += 1
        self._open = SyncCounters(start=time.perf_counter())
        self._on_all(lambda c: c.pause_generation(self.pause_mode))
        try:
            if self.session:
                for client in self.clients:
                    client.begin_weight_update()
                    self._sessions.append(client)
            self._begin_transfer()
        except BaseException:
            try:
                self._end_sessions(report=False)
            finally:
                self._on_all(lambda c: c.continue_generation())
            raise

    def send(self, bucket: NamedTensors) -> None:
        start = time.perf_counter()
        copies = self._send(bucket, str(self.version))
        opened = self._opened()
        opened.transfer_s += time.perf_counter() - start
        opened.bytes += sum(tensor_bytes(t) for _, t in bucket)
        opened.buckets += 1
        opened.peak = max(opened.peak, copies)

    def end(self, succeeded: bool = True) -> SyncStats:
        """Close the sessions, flush (after a complete transfer) and continue; always closes the
        sessions begin() opened and always continues."""
        opened, self._open = self._opened(), None
        try:
            try:
                if succeeded:
                    start = time.perf_counter()
                    self._end_transfer(str(self.version))
                    opened.transfer_s += time.perf_counter() - start
            except BaseException:
                succeeded = False
                raise
            finally:  # a session left open would refuse the next sync's /begin_weight_update
                self._end_sessions(report=succeeded)
            if succeeded:
                self._on_all(lambda c: c.flush_cache())
        finally:
            try:
                self._on_all(lambda c: c.continue_generation())
            except SGLangError:
                if succeeded:
                    raise  # otherwise the transfer's error, already propagating, is the one to see
        return SyncStats(
            transport=self.transport,
            elapsed_s=time.perf_counter() - opened.start,
            transfer_s=opened.transfer_s,
            buckets=opened.buckets,
            tensor_bytes=opened.bytes,
            peak_bytes=opened.peak,
        )

    def _opened(self) -> SyncCounters:
        """The counters of the sync that begin() opened; sends and end() come after it."""
        assert self._open is not None, "a sync is sent and ended only after begin()"
        return self._open

    def _end_sessions(self, report: bool) -> None:
        """/end_weight_update on every server whose session begin() opened; with ``report`` the
        first refusal is raised once all were asked (otherwise another error is on its way)."""
        opened, self._sessions = self._sessions, []
        first: SGLangError | None = None
        for client in opened:
            try:
                client.end_weight_update()
            except SGLangError as err:
                first = first or err
        if report and first is not None:
            raise first

    def _on_all(self, call: Callable[[SGLangClient], object]) -> None:
        for client in self.clients:
            call(client)

    def _begin_transfer(self) -> None:
        pass

    def _send(self, bucket: NamedTensors, weight_version: str) -> int:
        """Send one bucket; return the bytes of the copies it made (freed on return)."""
        raise NotImplementedError

    def _end_transfer(self, weight_version: str) -> None:
        pass


def post_to_all(clients: Sequence[SGLangClient], call: Callable[[SGLangClient], object]) -> None:
    """``call(client)`` on every server at once (one thread each), returning once every call
    has returned: a server still reading a bucket's tensors must not see them freed, so a
    failure is raised only after all have answered (the first failing server's, in order)."""
    if len(clients) == 1:
        call(clients[0])
        return
    with ThreadPoolExecutor(len(clients), thread_name_prefix="sglang-post") as pool:
        posts = [pool.submit(call, client) for client in clients]
        wait(posts)
    for post in posts:
        error = post.exception()
        if error is not None:
            raise error


def copied_bytes(original: NamedTensors, sent: NamedTensors) -> int:
    """Bytes of the tensors in ``sent`` that are copies (another storage) of ``original``'s."""
    return sum(
        tensor_bytes(s)
        for (_, o), (_, s) in zip(original, sent)
        if s.untyped_storage().data_ptr() != o.untyped_storage().data_ptr()
    )
