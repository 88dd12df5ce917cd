"""Colocated tensor sync (hyrl/weight_sync/tensor.py ``send_by_cuda_ipc`` on every training rank,
hyrl/rollout/sglang/receive/tensor.py ``ColocatedTensorSync`` on rank 0): each engine TP rank
is fed by the training rank on its own GPU, through rank 0, one bucket at a time.

On CPU: two gloo ranks and tests/helpers/fake_sglang_server.py (a protocol double, TP 2), with a
pickle serializer standing in for SGLang's CUDA IPC handles (tests/gpu has the real serializer).
"""

import json
from pathlib import Path

import pytest
from testpaths import HELPERS
from torchrun_worker import run_ranks

from hyrl.rollout.sglang.receive.tensor import match_engine_ranks

WORKER = HELPERS / "ipc_stream_worker.py"


def run(tmp_path: Path, scenario: str) -> list[dict]:
    out = tmp_path / scenario
    run_ranks(WORKER, 2, out, scenario)
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(2)]


def test_each_engine_tp_rank_gets_the_copy_of_the_training_rank_on_its_gpu(tmp_path):
    rank0, rank1 = run(tmp_path, "ok")
    assert rank0["error"] is None and rank1["error"] is None
    assert rank0["engine_ranks"] == [[1, 0]]  # TP rank 0 on GPU 0 = training rank 1
    # 4 buckets (see test_sglang_protocol), each posted once with [rank 1's, rank 0's] entry;
    # the expert bucket carries the shift: 3 from rank 1's copy, 2 from rank 0's
    assert rank0["buckets"] == 4
    assert rank0["entry_shifts"] == [[0, 0], [3, 2], [0, 0], [0, 0]]
    assert rank0["routes"] == (
        ["/pause_generation", "/begin_weight_update"]
        + ["/update_weights_from_tensor"] * 4
        + ["/end_weight_update", "/flush_cache", "/continue_generation"]
    )
    assert rank0["shift"] == 3  # the fake loads TP rank 0's entry


def test_a_failing_server_stops_every_rank_and_leaves_the_server_running(tmp_path):
    rank0, rank1 = run(tmp_path, "fail")
    assert "injected failure" in rank0["error"]
    assert rank1["error"].startswith("RuntimeError: weight sync by CUDA IPC failed on rank 0")
    assert rank0["routes"] == [
        "/pause_generation",
        "/begin_weight_update",
        "/update_weights_from_tensor",
        "/end_weight_update",
        "/continue_generation",
    ]


def test_an_engine_gpu_without_a_training_rank_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"engine 1 runs on GPU\(s\) \[\('b', 0\)\]"):
        match_engine_ranks([("a", 0), ("a", 1)], [[("a", 0)], [("b", 0)]])
