"""tests/helpers/fork_ranks.py, the launcher of the multi-rank unit tests: each rank sees
torchrun's environment and a gloo group forms; a failing rank fails the launch at once, with its
traceback, and takes the waiting ranks down with it."""

import json
import time

import pytest
from torchrun_worker import run_ranks

WORKER = """
import json, os, sys, time
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
import socket
with socket.socket() as probe:  # the store is up before any rank starts: nothing can take its port
    listening = probe.connect_ex(("127.0.0.1", int(os.environ["MASTER_PORT"]))) == 0
if sys.argv[2] == "fail":
    if rank == 1:
        raise RuntimeError("rank 1 gives up")
    time.sleep(120)  # rank 0 would wait for rank 1 this long
dist.init_process_group("gloo")
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
with open(f"{sys.argv[1]}.{rank}", "w") as f:
    got = {n: os.environ[n] for n in names}
    json.dump({**got, "sum": total.item(), "main": __name__, "listening": listening}, f)
dist.destroy_process_group()
"""


def test_every_rank_gets_torchruns_environment_and_a_gloo_group(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    out = tmp_path / "out"
    run_ranks(worker, 2, out, "ok")
    got = [json.loads((tmp_path / f"out.{rank}").read_text()) for rank in (0, 1)]
    assert got == [
        {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
         "sum": 3.0, "main": "__main__", "listening": True}
        for r in (0, 1)
    ]  # fmt: skip


def test_a_failing_rank_fails_the_launch_with_its_traceback_and_ends_the_others(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    started = time.monotonic()
    with pytest.raises(AssertionError, match="rank 1 gives up"):
        run_ranks(worker, 2, tmp_path / "out", "fail", timeout=100)
    assert time.monotonic() - started < 60  # rank 0's sleep was cut short
