"""The routing ids reach every rank once per DP rank from rank 0 (hyrl.train.data_parallel):
rank 0 sends one copy to each DP rank's first rank, which passes it on to the other ranks of
its DP rank. Before, rank 0 sent every rank its own copy (world size copies, at 30B each a
DP rank's share of about 2 GB of int16 ids). Four gloo ranks here, TP = 2 x DP = 2."""

import os

import pytest
import torch
import torch.multiprocessing as mp

from hyrl.backends.megatron import collectives
from hyrl.rollout.sglang.server import free_port
from hyrl.train.data_parallel import routing_senders, scatter_routing


def test_rank_0_sends_one_copy_per_dp_rank_and_leaders_pass_it_on():
    # TP 2 x DP 2: ranks 0, 1 are DP rank 0; 2, 3 DP rank 1
    assert routing_senders([0, 0, 1, 1]) == {0: [2, 1], 2: [3]}
    # DP 4 (EP carved out of it): every rank its own DP rank, all from rank 0
    assert routing_senders([0, 1, 2, 3]) == {0: [1, 2, 3]}
    # TP 4 x DP 2, DP rank interleaved by rank order
    assert routing_senders([0, 1, 0, 1, 0, 1, 0, 1]) == {0: [1, 2, 4, 6], 1: [3, 5, 7]}


class Rows:
    """DataParallelRows.needed for 2 DP ranks of 4 rows: DP rank d uses rows d and d + 2."""

    def needed(self, dp_rank, num_rows, responses_per_step):
        return {dp_rank, dp_rank + 2}


class Backend:
    def __init__(self, rank, dp_rank_of, sent):
        self.rank, self.world_size, self.dp_rank_of, self.sent = rank, 4, dp_rank_of, sent

    def send_rows(self, rows_of_rank):
        self.sent.extend(sorted(rows_of_rank))
        collectives.send_rows(rows_of_rank)

    def recv_rows(self, source=0):
        return collectives.recv_rows(source)


def _rank(rank, port, results):
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4
    )
    collectives._wait_group = torch.distributed.group.WORLD
    try:
        routed = [torch.full((3, 2, 2), i, dtype=torch.int16) for i in range(4)]
        sent: list[int] = []
        held = scatter_routing(
            routed if rank == 0 else None, 4, 4, Rows(), Backend(rank, [0, 0, 1, 1], sent)
        )
        results[rank] = {
            "sent_to": sent,
            "held": [None if t is None else int(t[0, 0, 0]) for t in held],
        }
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_four_ranks_get_their_dp_ranks_rows_with_two_copies_from_rank_0():
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_rank, args=(free_port(), results), nprocs=4, join=True)
        results = dict(results)
    assert results[0]["held"] == [0, None, 2, None] == results[1]["held"]
    assert results[2]["held"] == [None, 1, None, 3] == results[3]["held"]
    assert results[0]["sent_to"] == [1, 2]  # its peer and DP rank 1's leader (3 before: 1, 2, 3)
    assert results[2]["sent_to"] == [3] and results[1]["sent_to"] == results[3]["sent_to"] == []
