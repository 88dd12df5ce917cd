"""``--update-weight-transport distributed``, SGLang's side: the servers on other GPUs or nodes
receive each bucket by NCCL broadcast from this process.

``DistributedWeightSync``: ``connect()`` (run by the first sync) posts
``/init_weights_update_group`` to every server, giving server k ranks
``1 + sum(tp sizes before k)``.., and makes this process rank 0 of a new process group of
``1 + sum(tp sizes)`` ranks (NCCL on GPU; ``backend="gloo"`` for tests) - created the way SGLang
creates its side (``init_weight_update_group``), so the default process group is untouched. Per
bucket it posts ``/update_weights_from_distributed`` (names, dtypes, shapes,
``load_format="flattened_bucket"``) to every server concurrently, broadcasts the bucket as one
flat uint8 tensor (``flat_bucket``: one broadcast per bucket, not one per tensor) and then waits
once: for the servers' answers, which come after they received and loaded the bucket. A server
that answers with an error aborts the sync instead of hanging on its broadcast. The session
around the transfer is ``session.py``'s.
"""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, cast

import torch

from hyrl.config.weight_transport import DISTRIBUTED
from hyrl.models.weight_buckets import NamedTensors, tensor_bytes
from hyrl.rollout.sglang.client import SGLangClient, SGLangError
from hyrl.rollout.sglang.receive.payload import FLATTENED_BUCKET
from hyrl.rollout.sglang.receive.session import PausedSync
from hyrl.rollout.sglang.server import free_port

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.distributed_c10d import GroupName


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


class DistributedWeightSync(PausedSync):
    transport = DISTRIBUTED

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
        ordered, flat = flat_bucket(bucket, self.device)
        names = [n for n, _ in ordered]
        dtypes = [str(t.dtype).removeprefix("torch.") for _, t in ordered]
        shapes = [list(t.shape) for _, t in ordered]
        posts = [
            self._pool.submit(
                c.update_weights_from_distributed,
                names,
                dtypes,
                shapes,
                self.group_name,
                False,  # flush_cache: the sync flushes once, after every bucket
                weight_version,
                FLATTENED_BUCKET,
            )
            for c in self.clients
        ]
        group = self.group
        assert group is not None, "_begin_transfer connected before the first bucket"
        work = group.broadcast(flat, 0)  # the whole bucket: one broadcast
        # A server answers after it has received and loaded the whole bucket, so waiting for the
        # answers is waiting for the broadcast; the first error ends the wait.
        done, _ = wait(posts, return_when=FIRST_EXCEPTION)
        for post in done:
            error = post.exception()
            if error is not None:
                raise error
        work.wait()
        shares = flat.untyped_storage().data_ptr() == ordered[0][1].untyped_storage().data_ptr()
        return 0 if shares else tensor_bytes(flat)


def flat_bucket(bucket: NamedTensors, device: torch.device) -> tuple[NamedTensors, torch.Tensor]:
    """A bucket as SGLang 0.5.23 receives a flattened one (the model runner's
    ``_receive_bucketed_weights_from_distributed``, which allocates
    ``FlattenedTensorBucket.empty(names, dtypes, shapes)``): every tensor's bytes back to back
    in one uint8 tensor, in the order of the names, without padding. SGLang refuses a tensor
    whose byte offset is not a multiple of its element size, so the widest dtypes go first (a
    stable sort by element size; the sizes are powers of two, so each offset is a multiple of
    every later size). Returns the bucket in that order and the flat tensor on ``device``: a
    copy, or the tensor itself when the bucket is one contiguous tensor already there."""
    if not bucket:
        raise ValueError("an empty bucket has nothing to send (SGLang refuses one)")
    ordered = sorted(bucket, key=lambda item: -item[1].element_size())
    first = ordered[0][1].detach()
    if len(ordered) == 1 and first.device == device and first.is_contiguous():
        return ordered, first.reshape(-1).view(torch.uint8)
    flat = torch.empty(sum(tensor_bytes(t) for _, t in ordered), dtype=torch.uint8, device=device)
    start = 0
    for _, tensor in ordered:
        end = start + tensor_bytes(tensor)
        flat[start:end].view(tensor.dtype).view(tensor.shape).copy_(tensor.detach())
        start = end
    return ordered, flat
