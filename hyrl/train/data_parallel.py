"""Which rollout rows each data-parallel rank works on. The rollout's N rows are the same on
every rank; a DP rank takes a contiguous share of them in the no-grad passes (log-probs,
values) and its slice of every optimizer step's global batch in training."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.backends.base import TrainBackend


@dataclass(frozen=True)
class DataParallelRows:
    dp_rank: int  # this rank's
    dp_size: int
    optimizer_steps_per_rollout: int

    def share(self, num_rows: int, dp_rank: int | None = None) -> slice:
        """A DP rank's (this one's by default) contiguous share of the rollout in the no-grad
        passes."""
        dp_rank = self.dp_rank if dp_rank is None else dp_rank
        share = num_rows // self.dp_size
        return slice(dp_rank * share, (dp_rank + 1) * share)

    def of_step(
        self, step_in_rollout: int, responses_per_step: int, dp_rank: int | None = None
    ) -> slice:
        """A DP rank's rows (this one's by default) of optimizer step k (of B =
        `responses_per_step` responses) in the rollout: B / DP of them."""
        dp_rank = self.dp_rank if dp_rank is None else dp_rank
        per_rank = responses_per_step // self.dp_size
        start = step_in_rollout * responses_per_step + dp_rank * per_rank
        return slice(start, start + per_rank)

    def needed(self, dp_rank: int, num_rows: int, responses_per_step: int) -> set[int]:
        """Rollout rows DP rank dp_rank works on: its share of the no-grad passes and its rows
        of every optimizer step."""
        rows = set(range(num_rows)[self.share(num_rows, dp_rank)])
        for k in range(self.optimizer_steps_per_rollout):
            rows.update(range(num_rows)[self.of_step(k, responses_per_step, dp_rank)])
        return rows


def all_rows(fn: Callable, batch: TokenBatch, rows: DataParallelRows, backend: TrainBackend):
    """Run a no-grad pass on this DP rank's share of the rollout, gather every row on every
    rank (collective). fn(local_batch) returns one [n, L] tensor or a tuple of them."""
    outputs = fn(batch.select(rows.share(len(batch))))
    single = isinstance(outputs, torch.Tensor)
    outputs = backend.gather_rows((outputs,) if single else outputs)
    return outputs[0] if single else outputs


def routing_senders(dp_rank_of: list[int]) -> dict[int, list[int]]:
    """Who sends the routing ids to whom: {sender: receivers}. Rank 0 sends one copy per DP
    rank, to that DP rank's first rank (its leader; rank 0 leads its own), and each leader
    passes its copy on to the other ranks of its DP rank (TP, PP peers: often on its own
    node). Rank 0's outbound copies are the DP size, not the world size."""
    leaders: dict[int, int] = {}
    for rank, dp_rank in enumerate(dp_rank_of):
        leaders.setdefault(dp_rank, rank)
    senders: dict[int, list[int]] = {0: [r for r in leaders.values() if r != 0]}
    for rank, dp_rank in enumerate(dp_rank_of):
        leader = leaders[dp_rank]
        if rank != leader:
            senders.setdefault(leader, []).append(rank)
    return senders


def scatter_routing(
    routed: list | None,
    num_rows: int,
    responses_per_step: int,
    rows: DataParallelRows,
    backend: TrainBackend,
) -> list:
    """Each rank gets the routing of the rows its log-prob pass and its optimizer steps
    use, None for the others: the ids are the rollout's largest part (layers x top-k per
    token), so no rank but 0 holds them all. They go as int16 tensors (one flat tensor and
    the row lengths per rank) over the gloo wait group: host memory, no GPU staging
    (collective), one copy per DP rank from rank 0 and on from there (``routing_senders``).
    routed: rank 0's every row."""
    if backend.world_size == 1:  # the one rank works on every row
        assert routed is not None, "rank 0 generated the rollout"
        return routed
    dp_rank_of = backend.dp_rank_of
    senders = routing_senders(dp_rank_of)
    source = next((s for s, receivers in senders.items() if backend.rank in receivers), None)
    if backend.rank == 0:
        assert routed is not None, "rank 0 generated the rollout"
        rows_of_dp_rank = {}  # one dict per DP rank: its ranks share it (packed once)
        for dp_rank in sorted(set(dp_rank_of)):
            rows_of_dp_rank[dp_rank] = {
                i: routed[i] for i in rows.needed(dp_rank, num_rows, responses_per_step)
            }
        held = rows_of_dp_rank[dp_rank_of[0]]
        outbound = {rank: rows_of_dp_rank[dp_rank_of[rank]] for rank in senders[0]}
    else:
        assert source is not None, "every rank but 0 receives from one sender"
        held = backend.recv_rows(source)
        outbound = {}
    # a leader passes its copy on to the other ranks of its DP rank
    outbound.update({rank: held for rank in senders.get(backend.rank, []) if rank not in outbound})
    if outbound:
        backend.send_rows(outbound)
    return [held.get(i) for i in range(num_rows)]
