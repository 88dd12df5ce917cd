"""Collectives of the RL loop between trainer ranks, outside the model's own.

Two kinds of groups:
- the world and megatron's groups (NCCL on GPU, gloo on CPU) time out after
  --distributed-timeout-minutes;
- the *wait group* (gloo, host memory, WAIT_TIMEOUT) is where ranks wait for rank 0 while it
  generates, scores and evaluates, which at 30B takes longer than any sensible NCCL timeout.
  The rollout payload and the routing ids travel over it too: they are host data.
"""

from __future__ import annotations

import datetime

import torch

# How long ranks wait in the wait group for rank 0's generation, rewards and evaluation of one
# rollout step (a rank 0 that dies is seen sooner: torchrun then stops every rank).
WAIT_TIMEOUT = datetime.timedelta(hours=24)

_wait_group = None


def create_wait_group() -> None:
    """The gloo group of all ranks with WAIT_TIMEOUT (collective: every rank calls it once,
    after init_process_group)."""
    global _wait_group
    if _wait_group is None:
        _wait_group = torch.distributed.new_group(backend="gloo", timeout=WAIT_TIMEOUT)


def wait_group():
    if _wait_group is None:
        raise RuntimeError("hyrl bug: the wait group is used before init_distributed")
    return _wait_group


def forget_wait_group() -> None:
    """After destroy_process_group (which destroys every group)."""
    global _wait_group
    _wait_group = None


def wait_for_rank_0() -> None:
    """Every rank waits here until rank 0 arrives, however long it works alone (collective)."""
    torch.distributed.barrier(group=wait_group())


def collective_device(group) -> torch.device:
    """Where a tensor must be for a collective over `group`: NCCL reduces GPU memory only,
    gloo host memory only."""
    backend = str(torch.distributed.get_backend(group))
    if backend == "nccl":
        return torch.device("cuda")  # the current device, set per rank by init_distributed
    if backend == "gloo":
        return torch.device("cpu")
    raise RuntimeError(
        f"hyrl: no known device for collectives over a {backend!r} group (gloo or nccl)"
    )


def all_gather_rows(tensors: tuple[torch.Tensor, ...], group) -> tuple[torch.Tensor, ...]:
    """Each rank's [n, ...] tensors concatenated in group-rank order along dim 0, on every
    rank, returned where they came from (every rank holds the same n and shapes)."""
    device = collective_device(group)
    size = torch.distributed.get_world_size(group)
    gathered = []
    for tensor in tensors:
        local = tensor.to(device).contiguous()
        parts = [torch.empty_like(local) for _ in range(size)]
        torch.distributed.all_gather(parts, local, group=group)
        gathered.append(torch.cat(parts).to(tensor.device))
    return tuple(gathered)


def send_rows(
    rows_of: dict[int, dict[int, torch.Tensor]], dtype: torch.dtype = torch.int16
) -> dict[int, torch.Tensor]:
    """This rank sends rank r the rows rows_of[r] ({row index: [positions, ...] tensor}, every
    row of the same trailing shape and `dtype`) as one flat tensor with its lengths, over the
    wait group (host memory); it keeps its own rows_of entry, if any (returned). Ranks whose
    rows are the same object get them packed once. Call recv_rows(this rank) on the others."""
    me = torch.distributed.get_rank()
    # id(rows) -> packed (see _pack): the ranks of one DP rank get the same rows
    packed_for: dict[int, list[torch.Tensor]] = {}
    for rank in sorted(rows_of):
        if rank == me:
            continue
        rows = rows_of[rank]
        if id(rows) not in packed_for:
            packed_for.clear()  # one DP rank's rows staged at a time
            packed_for[id(rows)] = _pack(rows, dtype)
        for tensor in packed_for[id(rows)]:
            if tensor.numel():  # recv_rows skips an empty payload too
                torch.distributed.send(tensor, dst=rank, group=wait_group())
    return rows_of.get(me, {})


def recv_rows(source: int = 0, dtype: torch.dtype = torch.int16) -> dict[int, torch.Tensor]:
    """This rank's rows from `source`'s send_rows: {row index: [positions, ...] tensor}."""
    group = wait_group()
    header = torch.empty(3, dtype=torch.int64)
    torch.distributed.recv(header, src=source, group=group)
    num_rows, num_positions, trailing_dims = header.tolist()
    if num_rows == 0:
        return {}
    meta = torch.empty(trailing_dims + 2 * num_rows, dtype=torch.int64)
    torch.distributed.recv(meta, src=source, group=group)
    trailing = meta[:trailing_dims].tolist()
    row_ids, lengths = meta[trailing_dims:].view(2, num_rows).tolist()
    flat = torch.empty([num_positions, *trailing], dtype=dtype)
    if flat.numel():
        torch.distributed.recv(flat, src=source, group=group)
    return dict(zip(row_ids, torch.split(flat, lengths)))


def _pack(rows: dict[int, torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """[header (rows, positions, trailing dims), meta (trailing shape, row ids, lengths),
    payload]: the tensors send_rows sends and recv_rows expects, in that order."""
    row_ids = sorted(rows)
    if not row_ids:
        return [torch.tensor([0, 0, 0], dtype=torch.int64)]
    trailing = tuple(rows[row_ids[0]].shape[1:])
    for i in row_ids:
        if rows[i].dtype != dtype or tuple(rows[i].shape[1:]) != trailing:
            raise RuntimeError(
                f"hyrl bug: row {i} is {rows[i].dtype} {tuple(rows[i].shape)}; "
                f"every row sent must be {dtype} [positions, *{trailing}]"
            )
    lengths = [rows[i].shape[0] for i in row_ids]
    header = torch.tensor([len(row_ids), sum(lengths), len(trailing)], dtype=torch.int64)
    meta = torch.tensor([*trailing, *row_ids, *lengths], dtype=torch.int64)
    payload = torch.cat([rows[i] for i in row_ids]).contiguous()
    return [header, meta, payload]
