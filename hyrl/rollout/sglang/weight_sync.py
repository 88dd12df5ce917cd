"""Actor -> SGLang weight sync: bucketing and the three transfer strategies.

    sync = TensorWeightSync([client], buffer_bytes=1 << 30, tp_size=1, device="cuda:0")
    stats = sync.sync(checkpoint_named_tensors(hf_state_dict))   # -> SyncStats

Semantics, common to all strategies:

* Input is (name, tensor) pairs in the *checkpoint* layout SGLang's ``load_weights`` reads (what
  ``save_pretrained`` writes): ``checkpoint_named_tensors`` turns hyrl's HF state dict, whose
  experts are fused (``mlp.experts.gate_up_proj`` [E, 2F, H], ``mlp.experts.down_proj``
  [E, H, F]), into per-expert ``mlp.experts.{e}.{gate,up,down}_proj.weight`` views.
* ``bucket_named_tensors`` cuts the pairs, in order, into buckets of at most ``buffer_bytes``
  bytes; a tensor larger than ``buffer_bytes`` is a bucket by itself. One bucket = one HTTP call
  per server (and, for distributed, one round of broadcasts), so ``buffer_bytes`` bounds the extra
  memory a transfer holds at once.
* ``sync`` runs, on every server: ``/pause_generation`` -> the transfer (one call per bucket,
  each with ``flush_cache=false``) -> ``/flush_cache`` once (KV cached under the old weights must
  not be reused) -> ``/continue_generation``. ``/continue_generation`` is sent also when the
  transfer fails (try/finally), so a failed sync never leaves a server paused; the transfer's
  error is the one raised. Each call carries ``weight_version`` = the number of syncs so far, so
  ``/get_model_info`` shows which weights a server holds.
* ``sync`` returns ``SyncStats``: wall time of the whole sync and of the transfer alone, bytes
  and buckets sent (per server).

Strategies:

* ``TensorWeightSync`` (colocated: trainer and server on the same node): each bucket is moved to
  ``device`` (the engine's GPU), serialized - by SGLang's ``MultiprocessingSerializer``, which
  sends CUDA IPC handles, not bytes - and posted to ``/update_weights_from_tensor`` with one copy
  of the payload per TP rank. The bucket's GPU tensors are kept alive until the sync returns.
  With ``device=None`` CPU tensors travel as shared-memory handles: same node, but slower.
  Tests inject a plain serializer.
* ``DistributedWeightSync`` (servers on other GPUs/nodes): ``connect()`` (run by the first sync)
  posts ``/init_weights_update_group`` to every server, giving server k ranks
  ``1 + sum(tp sizes before k)``.., and makes this process rank 0 of a new process group of
  ``1 + sum(tp sizes)`` ranks (NCCL on GPU; ``backend="gloo"`` for tests) - created the way SGLang
  creates its side, so the default process group is untouched. Per bucket it posts
  ``/update_weights_from_distributed`` (names, dtypes, shapes) to every server concurrently and
  broadcasts the tensors, in that order, from rank 0. A server that answers with an error while
  the broadcasts wait aborts the sync instead of hanging.
* ``DiskWeightSync`` (anything else, e.g. a server that shares only a file system): writes the
  buckets as HF safetensors shards + ``model.safetensors.index.json`` (+ ``config.json`` when
  given) into ``directory``, replacing the previous shards, then posts ``/update_weights_from_disk``.
"""

from __future__ import annotations

import datetime
import inspect
import json
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from hyrl.rollout.sglang.client import SGLangClient, SGLangError

NamedTensors = list[tuple[str, torch.Tensor]]
Serializer = Callable[[NamedTensors], str]

FUSED_GATE_UP = ".mlp.experts.gate_up_proj"  # [experts, 2 * ffn, hidden], rows [gate; up]
FUSED_DOWN = ".mlp.experts.down_proj"  # [experts, hidden, ffn]


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def checkpoint_named_tensors(hf_state_dict: Mapping[str, torch.Tensor]) -> NamedTensors:
    """hyrl's HF state dict (fused experts) -> the per-expert checkpoint names SGLang loads."""
    named: NamedTensors = []
    for name, tensor in hf_state_dict.items():
        if name.endswith(FUSED_GATE_UP):
            prefix = name[: -len(".gate_up_proj")]
            ffn = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                named.append((f"{prefix}.{e}.gate_proj.weight", tensor[e, :ffn]))
                named.append((f"{prefix}.{e}.up_proj.weight", tensor[e, ffn:]))
        elif name.endswith(FUSED_DOWN):
            prefix = name[: -len(".down_proj")]
            named += [(f"{prefix}.{e}.down_proj.weight", tensor[e]) for e in range(tensor.shape[0])]
        else:
            named.append((name, tensor))
    return named


def bucket_named_tensors(named: Iterable[tuple[str, torch.Tensor]], buffer_bytes: int) -> list[NamedTensors]:
    """Consecutive buckets of <= buffer_bytes each; an oversize tensor is a bucket by itself."""
    if buffer_bytes < 1:
        raise ValueError(f"buffer_bytes must be >= 1, got {buffer_bytes}")
    buckets: list[NamedTensors] = []
    current: NamedTensors = []
    current_bytes = 0
    for name, tensor in named:
        size = tensor_bytes(tensor)
        if current and current_bytes + size > buffer_bytes:
            buckets.append(current)
            current, current_bytes = [], 0
        current.append((name, tensor))
        current_bytes += size
    if current:
        buckets.append(current)
    return buckets


def sglang_serializer() -> Serializer:
    """SGLang's own serializer: CUDA tensors travel as IPC handles (GPU, same node only)."""
    try:
        from sglang.srt.utils import MultiprocessingSerializer
    except ImportError as err:
        raise SGLangError(
            "weight_sync='tensor' needs sglang importable in the trainer process (its "
            "MultiprocessingSerializer makes the CUDA IPC handles): pip install sglang==0.5.23, "
            "or use weight_sync='distributed' or 'disk'") from err
    return lambda named: MultiprocessingSerializer.serialize(named, output_str=True)


@dataclass
class SyncStats:
    mode: str
    elapsed_s: float  # pause -> continue, all servers
    transfer_s: float  # the weight calls / broadcasts alone
    tensor_bytes: int  # sent to each server
    buckets: int


class _PausedSync:
    """pause -> transfer -> flush -> continue on every server; subclasses supply the transfer."""

    mode = ""

    def __init__(self, clients: Sequence[SGLangClient], buffer_bytes: int, pause_mode: str = "abort"):
        if not clients:
            raise ValueError("weight sync needs at least one SGLang server client")
        self.clients = list(clients)
        self.buffer_bytes = buffer_bytes
        self.pause_mode = pause_mode
        self.version = 0  # syncs done; sent as weight_version

    def sync(self, named: Iterable[tuple[str, torch.Tensor]]) -> SyncStats:
        buckets = bucket_named_tensors(named, self.buffer_bytes)
        self.version += 1
        start = time.perf_counter()
        self._on_all(lambda c: c.pause_generation(self.pause_mode))
        succeeded = False
        try:
            transfer_start = time.perf_counter()
            self._transfer(buckets, str(self.version))
            transfer_s = time.perf_counter() - transfer_start
            self._on_all(lambda c: c.flush_cache())
            succeeded = True
        finally:
            try:
                self._on_all(lambda c: c.continue_generation())
            except SGLangError:
                if succeeded:
                    raise  # otherwise the transfer's error, already propagating, is the one to see
        return SyncStats(mode=self.mode, elapsed_s=time.perf_counter() - start,
                         transfer_s=transfer_s, buckets=len(buckets),
                         tensor_bytes=sum(tensor_bytes(t) for b in buckets for _, t in b))

    def _on_all(self, call: Callable[[SGLangClient], object]) -> None:
        for client in self.clients:
            call(client)

    def _transfer(self, buckets: list[NamedTensors], weight_version: str) -> None:
        raise NotImplementedError


class TensorWeightSync(_PausedSync):
    mode = "tensor"

    def __init__(self, clients: Sequence[SGLangClient], buffer_bytes: int, tp_size: int = 1,
                 device: str | torch.device | None = None, serializer: Serializer | None = None,
                 load_format: str | None = None, pause_mode: str = "abort"):
        super().__init__(clients, buffer_bytes, pause_mode)
        self.tp_size = tp_size
        self.device = device
        self.serializer = serializer
        self.load_format = load_format

    def _transfer(self, buckets: list[NamedTensors], weight_version: str) -> None:
        serialize = self.serializer or sglang_serializer()
        alive: list[NamedTensors] = []  # the server copies from these via IPC; free them only after
        for bucket in buckets:
            if self.device is not None:
                bucket = [(n, t.detach().to(self.device)) for n, t in bucket]
            alive.append(bucket)
            payload = serialize(bucket)
            for client in self.clients:
                client.update_weights_from_tensor([payload] * self.tp_size,
                                                  load_format=self.load_format, flush_cache=False,
                                                  weight_version=weight_version)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def init_weight_update_group(backend: str, master_address: str, master_port: int, world_size: int,
                             rank: int, group_name: str, timeout_s: float):
    """A process group outside the default one, made exactly as SGLang's receiving side makes it.

    SGLang's ``init_weights_update_group`` rendezvouses at tcp://master_address:master_port (rank 0,
    this process, hosts the store), prefixes the store with ``group_name`` and builds the group with
    torch's ``_new_process_group_helper``; the same calls here give the same store keys.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    timeout = datetime.timedelta(seconds=timeout_s)
    store, _, _ = next(dist.rendezvous(f"tcp://{master_address}:{master_port}", rank, world_size,
                                       timeout=timeout))
    store = dist.PrefixStore(group_name, store)
    helper = c10d._new_process_group_helper
    options = {"timeout": timeout}
    if "group_desc" in inspect.signature(helper).parameters:
        options["group_desc"] = group_name
    group, _ = helper(world_size, rank, [], dist.Backend(backend), store, group_name=group_name,
                      **options)
    c10d._world.pg_group_ranks[group] = {r: r for r in range(world_size)}  # lets destroy() find it
    return group


class DistributedWeightSync(_PausedSync):
    mode = "distributed"

    def __init__(self, clients: Sequence[SGLangClient], buffer_bytes: int,
                 master_address: str = "127.0.0.1", master_port: int | None = None,
                 backend: str = "nccl", group_name: str = "hyrl_weight_update",
                 tp_sizes: Sequence[int] | int = 1, device: str | torch.device | None = None,
                 timeout_s: float = 600.0, pause_mode: str = "abort"):
        super().__init__(clients, buffer_bytes, pause_mode)
        tp_sizes = [tp_sizes] * len(self.clients) if isinstance(tp_sizes, int) else list(tp_sizes)
        if len(tp_sizes) != len(self.clients):
            raise ValueError(f"tp_sizes has {len(tp_sizes)} entries for {len(self.clients)} servers")
        self.tp_sizes = tp_sizes
        self.master_address = master_address
        self.master_port = master_port
        self.backend = backend
        self.group_name = group_name
        self.device = torch.device(device if device is not None else
                                   ("cuda" if backend == "nccl" else "cpu"))
        self.timeout_s = timeout_s
        self.group = None
        self._pool = ThreadPoolExecutor(max_workers=len(self.clients),
                                        thread_name_prefix="sglang-weight-sync")

    @property
    def world_size(self) -> int:
        return 1 + sum(self.tp_sizes)

    def connect(self) -> None:
        """Form the broadcast group with every server; a no-op once connected."""
        if self.group is not None:
            return
        port = self.master_port or free_port(self.master_address)
        offsets = [1 + sum(self.tp_sizes[:k]) for k in range(len(self.clients))]
        joins = [self._pool.submit(c.init_weights_update_group, self.master_address, port, offset,
                                   self.world_size, self.group_name, self.backend)
                 for c, offset in zip(self.clients, offsets)]
        try:
            self.group = init_weight_update_group(self.backend, self.master_address, port,
                                                  self.world_size, 0, self.group_name,
                                                  self.timeout_s)
        except Exception as err:
            errors = [str(f.exception()) for f in joins if f.done() and f.exception()]
            raise SGLangError(
                f"Could not form weight-update group {self.group_name!r} at "
                f"{self.master_address}:{port} with {len(self.clients)} server(s) "
                f"(world size {self.world_size}): {err}. Server errors: {errors or 'none'}. "
                "Check that the servers can reach this address.") from err
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

    def _transfer(self, buckets: list[NamedTensors], weight_version: str) -> None:
        self.connect()
        for bucket in buckets:
            tensors = [t.detach().to(self.device).contiguous() for _, t in bucket]
            names = [n for n, _ in bucket]
            dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors]
            shapes = [list(t.shape) for t in tensors]
            posts = [self._pool.submit(c.update_weights_from_distributed, names, dtypes, shapes,
                                       self.group_name, False, weight_version)
                     for c in self.clients]
            for tensor in tensors:  # the servers receive in the order of `names`
                self._wait(self.group.broadcast(tensor, 0), posts)
            for post in posts:
                post.result()

    def _wait(self, work, posts: list[Future]) -> None:
        """Wait for one broadcast, but give up as soon as a server's call has failed."""
        while not work.is_completed():
            for post in posts:
                if post.done() and post.exception() is not None:
                    raise post.exception()
            time.sleep(0.001)
        work.wait()


class DiskWeightSync(_PausedSync):
    mode = "disk"

    def __init__(self, clients: Sequence[SGLangClient], buffer_bytes: int, directory: str | Path,
                 config_json: Mapping | None = None, load_format: str | None = None,
                 pause_mode: str = "abort"):
        super().__init__(clients, buffer_bytes, pause_mode)
        self.directory = Path(directory)
        self.config_json = dict(config_json) if config_json is not None else None
        self.load_format = load_format

    def write_checkpoint(self, buckets: list[NamedTensors]) -> None:
        from safetensors.torch import save_file

        self.directory.mkdir(parents=True, exist_ok=True)
        for old in [*self.directory.glob("*.safetensors"), *self.directory.glob("*.index.json")]:
            old.unlink()  # the server loads every shard in the directory
        weight_map, total_bytes = {}, 0
        for k, bucket in enumerate(buckets):
            file_name = f"model-{k + 1:05d}-of-{len(buckets):05d}.safetensors"
            # clone(): split expert views share storage, which safetensors refuses to write.
            save_file({n: t.detach().cpu().clone() for n, t in bucket}, self.directory / file_name,
                      metadata={"format": "pt"})
            weight_map.update({n: file_name for n, _ in bucket})
            total_bytes += sum(tensor_bytes(t) for _, t in bucket)
        index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
        (self.directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
        if self.config_json is not None:
            (self.directory / "config.json").write_text(json.dumps(self.config_json, indent=1))

    def _transfer(self, buckets: list[NamedTensors], weight_version: str) -> None:
        self.write_checkpoint(buckets)
        for client in self.clients:
            client.update_weights_from_disk(str(self.directory), load_format=self.load_format,
                                            weight_version=weight_version)
