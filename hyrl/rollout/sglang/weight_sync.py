"""Actor -> SGLang weight sync: the three transfer strategies, fed one bucket at a time.

    sync = TensorWeightSync([client], buffer_bytes=1 << 30, tp_size=1, device="cuda:0")
    stats = sync.sync_buckets(actor_buckets)       # a stream of buckets -> SyncStats
    stats = sync.sync(checkpoint_named_tensors(hf_state_dict))   # or (name, tensor) pairs

Semantics, common to all strategies:

* Tensors are (name, tensor) pairs in the *checkpoint* layout SGLang's ``load_weights`` reads
  (what ``save_pretrained`` writes): one tensor per expert, ``mlp.experts.{e}.{gate,up,down}_
  proj.weight``. The trainer streams them in that layout (``hf_mapping.megatron_to_hf_checkpoint``);
  ``checkpoint_named_tensors`` splits a state dict with fused experts into it.
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

Strategies:

* ``TensorWeightSync`` (colocated: trainer and server on the same node): each bucket is moved to
  ``device`` (the engine's GPU; no copy when it is there already), serialized - by SGLang's
  ``MultiprocessingSerializer``, which sends CUDA IPC handles, not bytes - and posted to
  ``/update_weights_from_tensor`` of every server at once (``post_to_all``) with one copy of the
  payload per TP rank. The server has copied
  the tensors when the call returns, so the bucket is freed before the next one is moved.
  SGLang's serializer sends a bucket flattened (``load_format="flattened_bucket"``: one flat
  copy of the bucket, one handle; ``flatten_bucket``) unless made with ``flattened=False``.
  With ``device=None`` CPU tensors travel as file-descriptor handles, which only a process
  sharing the trainer's multiprocessing auth key can open (a child it forked: the contract
  tier's scheduler); hyrl's engines always pass their GPU.
  Tests inject a plain serializer.
* ``DistributedWeightSync`` (servers on other GPUs/nodes): ``connect()`` (run by the first sync)
  posts ``/init_weights_update_group`` to every server, giving server k ranks
  ``1 + sum(tp sizes before k)``.., and makes this process rank 0 of a new process group of
  ``1 + sum(tp sizes)`` ranks (NCCL on GPU; ``backend="gloo"`` for tests) - created the way SGLang
  creates its side, so the default process group is untouched. Per bucket it posts
  ``/update_weights_from_distributed`` (names, dtypes, shapes) to every server concurrently,
  starts every broadcast of the bucket (asynchronous, in the order of the names) and then waits
  once: for the servers' answers, which come after they received and loaded the bucket. A server
  that answers with an error aborts the sync instead of hanging on its broadcasts.
* ``DiskWeightSync`` (anything else, e.g. a server that shares only a file system): writes each
  bucket as it arrives as one safetensors shard into ``directory`` (the previous shards removed
  first), then ``model.safetensors.index.json`` (+ ``config.json`` when given), then posts
  ``/update_weights_from_disk``. The trainer does better (``sync_written``): every trainer rank
  writes the buckets it owns (``write_shard``), rank 0 the index (``write_index``) after
  gathering the shard names, and the sync only posts ``/update_weights_from_disk`` of that
  directory.
"""

from __future__ import annotations

import datetime
import inspect
import json
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.weight_buckets import NamedTensors, iter_buckets, tensor_bytes
from hyrl.rollout.sglang.client import SGLangClient, SGLangError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.distributed_c10d import GroupName

Serializer = Callable[[NamedTensors], str]


def checkpoint_named_tensors(hf_state_dict: Mapping[str, torch.Tensor]) -> NamedTensors:
    """hyrl's HF state dict (fused experts) -> the per-expert checkpoint names SGLang loads."""
    return hf_mapping.split_fused_experts(hf_state_dict)


def bucket_named_tensors(
    named: Iterable[tuple[str, torch.Tensor]], buffer_bytes: int
) -> list[NamedTensors]:
    """Consecutive buckets of <= buffer_bytes each; an oversize tensor is a bucket by itself."""
    return list(iter_buckets(named, buffer_bytes))


FLATTENED_BUCKET = "flattened_bucket"  # SGLang's load_format for one flat tensor per bucket
_FLAT_ALIGN = 16  # bytes: each tensor of a flat bucket starts at a multiple of this


def flatten_bucket(bucket: NamedTensors, metadata_type: Callable[..., Any]) -> dict[str, Any]:
    """One bucket as SGLang 0.5.23's ``load_format="flattened_bucket"`` payload: one uint8
    tensor on the bucket's device holding every tensor's bytes, and per tensor a
    ``metadata_type(name, shape, dtype, start_idx, end_idx, numel)`` (SGLang's
    ``FlattenedTensorMetadata``), which the server turns back into tensors by slicing
    [start_idx:end_idx], viewing it as dtype and reshaping (``FlattenedTensorBucket.
    reconstruct_tensors``). Each tensor starts at a multiple of 16 bytes: a view as a wider
    dtype needs an aligned offset, which a bf16 tensor of odd size before an fp32 one would
    break. One copy of the bucket (one serialized handle instead of one per tensor)."""
    if not bucket:
        raise ValueError("an empty bucket has nothing to flatten")
    starts, total = [], 0
    for _, tensor in bucket:
        start = -(-total // _FLAT_ALIGN) * _FLAT_ALIGN
        starts.append(start)
        total = start + tensor_bytes(tensor)
    flat = torch.empty(total, dtype=torch.uint8, device=bucket[0][1].device)
    metadata = []
    for (name, tensor), start in zip(bucket, starts):
        end = start + tensor_bytes(tensor)
        flat[start:end].view(tensor.dtype).view(tensor.shape).copy_(tensor.detach())
        metadata.append(metadata_type(name, tensor.shape, tensor.dtype, start, end, end - start))
    return {"flattened_tensor": flat, "metadata": metadata}


class SGLangSerializer:
    """SGLang's own serializer (``MultiprocessingSerializer``): CUDA tensors travel as IPC
    handles (GPU, same node only). ``load_format``: what the server must be told the payload
    is, None (a list of named tensors, one handle each) or ``"flattened_bucket"`` (with
    ``flattened``, the default: ``flatten_bucket``, one handle per bucket). The flat copy is
    kept until ``release()`` (the server reads it in place), or the next bucket."""

    def __init__(self, cuda: bool | None = None, flattened: bool = True):
        try:
            from sglang.srt.utils import MultiprocessingSerializer
            from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions
            from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorMetadata
        except ImportError as err:
            raise SGLangError(
                "weight_sync='tensor' needs sglang importable in the trainer process (its "
                "MultiprocessingSerializer makes the CUDA IPC handles): pip install "
                "sglang==0.5.23, or use weight_sync='distributed' or 'disk'"
            ) from err
        if cuda if cuda is not None else torch.cuda.is_available():
            monkey_patch_torch_reductions()  # idempotent
        self._serialize = MultiprocessingSerializer.serialize
        self._metadata_type = FlattenedTensorMetadata
        self.load_format = FLATTENED_BUCKET if flattened else None
        self.held: dict[str, Any] | None = None  # the flat bucket the server may still read

    def __call__(self, named: NamedTensors) -> str:
        self.release()
        if self.load_format is None:
            return self._serialize(named, output_str=True)
        self.held = flatten_bucket(named, self._metadata_type)
        return self._serialize(self.held, output_str=True)

    def release(self) -> None:
        """Drop the flat copy of the last bucket (once the servers have copied it)."""
        self.held = None


def sglang_serializer(cuda: bool | None = None, flattened: bool = True) -> SGLangSerializer:
    """SGLang's own serializer (``SGLangSerializer``).

    With ``cuda`` (None: whenever this machine has CUDA) it first applies SGLang's torch
    reduction patch (``sglang.srt.utils.patch_torch.monkey_patch_torch_reductions``), as SGLang's
    own senders do: a handle then names its GPU by UUID instead of this process's device
    ordinal, which means another GPU in a server that sees other CUDA_VISIBLE_DEVICES (an
    engine smaller than the node). The patch is process-wide and cannot reduce CPU tensors (it
    rewrites an argument only CUDA reductions have), so CPU-only processes go without it.
    """
    return SGLangSerializer(cuda, flattened)


def load_format_of(serializer: Serializer, given: str | None) -> str | None:
    """The load_format a post must name for ``serializer``'s payloads: its own (SGLang's
    serializer says whether it flattens), else ``given``; a conflict is refused."""
    own = getattr(serializer, "load_format", given)
    if given is not None and own != given:
        raise ValueError(
            f"load_format={given!r} with a serializer whose payloads are {own!r}: pass "
            f"sglang_serializer(flattened={given == FLATTENED_BUCKET}) or load_format={own!r}"
        )
    return own


def release_payload(serializer: Serializer) -> None:
    """The servers have copied the bucket: the serializer may drop what it held for them."""
    release = getattr(serializer, "release", None)
    if release is not None:
        release()


@dataclass
class SyncStats:
    mode: str
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
class _SyncCounters:
    """What the sync in progress has done so far, from begin() to end()."""

    start: float  # time.perf_counter() at begin()
    transfer_s: float = 0.0
    bytes: int = 0
    buckets: int = 0
    peak: int = 0


class _PausedSync:
    """pause -> transfer -> flush -> continue on every server; subclasses supply the transfer
    (``_begin_transfer``, ``_send`` one bucket, ``_end_transfer``)."""

    mode = ""
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
        self._open: _SyncCounters | None = None  # the sync in progress: its counters
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
        self._open = _SyncCounters(start=time.perf_counter())
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
            mode=self.mode,
            elapsed_s=time.perf_counter() - opened.start,
            transfer_s=opened.transfer_s,
            buckets=opened.buckets,
            tensor_bytes=opened.bytes,
            peak_bytes=opened.peak,
        )

    def _opened(self) -> _SyncCounters:
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


def _copied_bytes(original: NamedTensors, sent: NamedTensors) -> int:
    return sum(
        tensor_bytes(s)
        for (_, o), (_, s) in zip(original, sent)
        if s.untyped_storage().data_ptr() != o.untyped_storage().data_ptr()
    )


class TensorWeightSync(_PausedSync):
    mode = "tensor"

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
        payload = serialize(moved)
        # every server at once; each call returns once the server has copied the bucket
        try:
            post_to_all(
                self.clients,
                lambda client: client.update_weights_from_tensor(
                    [payload] * self.tp_size,
                    load_format=load_format,
                    flush_cache=False,
                    weight_version=weight_version,
                ),
            )
        finally:
            release_payload(serialize)
        flat = sum(tensor_bytes(t) for _, t in moved) if load_format == FLATTENED_BUCKET else 0
        return _copied_bytes(bucket, moved) + flat  # the device moves and the flat copy


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def init_weight_update_group(
    backend: str,
    master_address: str,
    master_port: int,
    world_size: int,
    rank: int,
    group_name: str,
    timeout_s: float,
):
    """A process group outside the default one, made exactly as SGLang's receiving side makes it.

    SGLang's ``init_weights_update_group`` rendezvouses at tcp://master_address:master_port (rank 0,
    this process, hosts the store), prefixes the store with ``group_name`` and builds the group with
    torch's ``_new_process_group_helper``; the same calls here give the same store keys.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    timeout = datetime.timedelta(seconds=timeout_s)
    store, _, _ = next(
        dist.rendezvous(f"tcp://{master_address}:{master_port}", rank, world_size, timeout=timeout)
    )
    store = dist.PrefixStore(group_name, store)
    helper = c10d._new_process_group_helper
    options: dict[str, Any] = {"timeout": timeout}
    if "group_desc" in inspect.signature(helper).parameters:
        options["group_desc"] = group_name
    group, _ = helper(
        world_size,
        rank,
        [],
        dist.Backend(backend),
        store,
        group_name=cast("GroupName", group_name),  # torch's NewType of str, in newer versions
        **options,
    )
    c10d._world.pg_group_ranks[group] = {r: r for r in range(world_size)}  # lets destroy() find it
    return group


class DistributedWeightSync(_PausedSync):
    mode = "distributed"

    def __init__(
        self,
        clients: Sequence[SGLangClient],
        buffer_bytes: int,
        master_address: str = "127.0.0.1",
        master_port: int | None = None,
        backend: str = "nccl",
        group_name: str = "hyrl_weight_update",
        tp_sizes: Sequence[int] | int = 1,
        device: str | torch.device | None = None,
        timeout_s: float = 600.0,
        pause_mode: str = "abort",
    ):
        super().__init__(clients, buffer_bytes, pause_mode)
        tp_sizes = [tp_sizes] * len(self.clients) if isinstance(tp_sizes, int) else list(tp_sizes)
        if len(tp_sizes) != len(self.clients):
            raise ValueError(
                f"tp_sizes has {len(tp_sizes)} entries for {len(self.clients)} servers"
            )
        self.tp_sizes = tp_sizes
        self.master_address = master_address
        self.master_port = master_port
        self.backend = backend
        self.group_name = group_name
        self.device = torch.device(
            device if device is not None else ("cuda" if backend == "nccl" else "cpu")
        )
        self.timeout_s = timeout_s
        self.group: ProcessGroup | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=len(self.clients), thread_name_prefix="sglang-weight-sync"
        )

    @property
    def world_size(self) -> int:
        return 1 + sum(self.tp_sizes)

    def connect(self) -> None:
        """Form the broadcast group with every server; a no-op once connected."""
        if self.group is not None:
            return
        port = self.master_port or free_port(self.master_address)
        offsets = [1 + sum(self.tp_sizes[:k]) for k in range(len(self.clients))]
        joins = [
            self._pool.submit(
                c.init_weights_update_group,
                self.master_address,
                port,
                offset,
                self.world_size,
                self.group_name,
                self.backend,
            )
            for c, offset in zip(self.clients, offsets)
        ]
        try:
            self.group = init_weight_update_group(
                self.backend,
                self.master_address,
                port,
                self.world_size,
                0,
                self.group_name,
                self.timeout_s,
            )
        except Exception as err:
            errors = [str(f.exception()) for f in joins if f.done() and f.exception()]
            raise SGLangError(
                f"Could not form weight-update group {self.group_name!r} at "
                f"{self.master_address}:{port} with {len(self.clients)} server(s) "
                f"(world size {self.world_size}): {err}. Server errors: {errors or 'none'}. "
                "Check that the servers can reach this address."
            ) from err
        for join in joins:
            join.result()

    def close(self) -> None:
        """Leave the group on both sides (servers first: they may still be reachable)."""
        if self.group is None:
            return
        import torch.distributed as dist

        for client in self.clients:
            try:
                client.destroy_weights_update_group(self.group_name)
            except SGLangError:
                pass  # a dead server has no group left to destroy
        dist.destroy_process_group(self.group)
        self.group = None

    def _begin_transfer(self) -> None:
        self.connect()

    def _send(self, bucket: NamedTensors, weight_version: str) -> int:
        tensors = [t.detach().to(self.device).contiguous() for _, t in bucket]
        names = [n for n, _ in bucket]
        dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors]
        shapes = [list(t.shape) for t in tensors]
        posts = [
            self._pool.submit(
                c.update_weights_from_distributed,
                names,
                dtypes,
                shapes,
                self.group_name,
                False,
                weight_version,
            )
            for c in self.clients
        ]
        group = self.group
        assert group is not None, "_begin_transfer connected before the first bucket"
        # every broadcast of the bucket at once, in the order of `names` (as the servers receive)
        works = [group.broadcast(tensor, 0) for tensor in tensors]
        # A server answers after it has received and loaded the whole bucket, so waiting for the
        # answers is waiting for the broadcasts; the first error ends the wait.
        done, _ = wait(posts, return_when=FIRST_EXCEPTION)
        for post in done:
            error = post.exception()
            if error is not None:
                raise error
        for work in works:
            work.wait()
        return _copied_bytes(bucket, list(zip(names, tensors)))


def write_shard(bucket: NamedTensors, path: str | Path) -> dict[str, str]:
    """One bucket as one safetensors file; returns its part of the index's weight_map."""
    from safetensors.torch import save_file

    path = Path(path)
    # clone(): split expert views share storage, which safetensors refuses to write.
    save_file({n: t.detach().cpu().clone() for n, t in bucket}, path, metadata={"format": "pt"})
    return {n: path.name for n, _ in bucket}


def write_index(
    directory: str | Path,
    weight_map: Mapping[str, str],
    total_bytes: int,
    config_json: Mapping | None = None,
) -> None:
    """``model.safetensors.index.json`` (SGLang loads only the shards it names) (+ config.json)."""
    directory = Path(directory)
    index = {"metadata": {"total_size": total_bytes}, "weight_map": dict(weight_map)}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    if config_json is not None:
        (directory / "config.json").write_text(json.dumps(dict(config_json), indent=1))


class DiskWeightSync(_PausedSync):
    mode = "disk"
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
