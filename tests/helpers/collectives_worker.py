"""Run by torchrun (2 ranks) from tests/e2e/test_collectives.py: the loop's collectives on the real
groups init_distributed makes, with a world timeout of TIMEOUT_S.

Usage: torchrun --nproc-per-node 2 tests/helpers/collectives_worker.py OUT_DIR
Writes OUT_DIR/rank{r}.json.
"""

import json
import os
import sys
import time

import torch

from hyrl.backends.megatron import collectives
from hyrl.backends.megatron.model import ParallelLayout, init_distributed

TIMEOUT_S = 5.0  # the world group's (--distributed-timeout-minutes 1/12)
DELAY_S = 1.6 * TIMEOUT_S  # rank 0 working alone (generating) longer than that


def main(out_dir: str) -> None:
    from megatron.core import parallel_state

    init_distributed(ParallelLayout(), seed=1, timeout_minutes=TIMEOUT_S / 60)
    rank = torch.distributed.get_rank()
    result = {}

    # DP = 2: each rank's rows gathered on the DP group's device, back in host memory
    dp_group = parallel_state.get_data_parallel_group()
    result["dp_size"] = torch.distributed.get_world_size(dp_group)
    result["dp_backend"] = str(torch.distributed.get_backend(dp_group))
    result["dp_device"] = str(collectives.collective_device(dp_group))
    log_probs = torch.full((2, 3), float(rank))
    entropy = torch.arange(6, dtype=torch.float32).view(2, 3) + 10 * rank
    gathered = collectives.all_gather_rows((log_probs, entropy), dp_group)
    result["gathered"] = [g.tolist() for g in gathered]
    result["gathered_devices"] = [str(g.device) for g in gathered]

    # rank 0 generates for DELAY_S while rank 1 waits in the wait group (payload, routing ids)
    began = time.perf_counter()
    payload = [None]
    if rank == 0:
        time.sleep(DELAY_S)
        payload = [{"responses": [[5, 6], [7]]}]
    torch.distributed.broadcast_object_list(payload, src=0, group=collectives.wait_group())
    result["waited_s"] = time.perf_counter() - began
    result["payload"] = payload[0]
    if rank == 0:
        rows = {
            i: torch.arange(n * 4, dtype=torch.int16).view(n, 2, 2) + i
            for i, n in enumerate((3, 5, 1, 2))
        }
        held = collectives.send_rows({0: {0: rows[0], 3: rows[3]}, 1: {2: rows[2], 1: rows[1]}})
        collectives.send_rows({0: {}, 1: {}})  # a rank with no rows
    else:
        held = collectives.recv_rows()
        result["empty"] = collectives.recv_rows()
    result["rows"] = {
        i: [list(t.shape), str(t.dtype), t.flatten().tolist()] for i, t in sorted(held.items())
    }

    # another long rank-0 section (an evaluation), then a barrier in the wait group
    began = time.perf_counter()
    if rank == 0:
        time.sleep(DELAY_S)
    collectives.wait_for_rank_0()
    result["barrier_waited_s"] = time.perf_counter() - began

    # control: the same wait in the world group times out (so the delay above would have)
    began = time.perf_counter()
    try:
        if rank == 0:
            time.sleep(DELAY_S)
        torch.distributed.broadcast(torch.zeros(1), src=0)
        result["world_wait_error"] = None
    except RuntimeError as err:
        result["world_wait_error"] = str(err)[:300]
    result["world_waited_s"] = time.perf_counter() - began
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    os._exit(0)  # the world group is broken now: no teardown


if __name__ == "__main__":
    main(sys.argv[1])
