"""The loop's collectives between trainer ranks (hyrl.backends.megatron.collectives): gathers on
the device the group's backend needs, ranks that wait for rank 0 in a gloo group no
--distributed-timeout-minutes applies to, routing rows sent as int16 tensors."""

import json
import time

import pytest
import torch
from recipe_runs import records, run_recipe
from subprocess_hooks import hook_env
from testpaths import HELPERS
from torchrun_worker import run_ranks

from hyrl.backends.megatron import collectives

WORKER = HELPERS / "collectives_worker.py"


@pytest.mark.parametrize("backend, device", [("nccl", "cuda"), ("gloo", "cpu")])
def test_collectives_go_on_the_device_the_groups_backend_reduces(monkeypatch, backend, device):
    # NCCL reduces GPU memory only: the log-probs (host tensors) must move there for DP > 1
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: backend)
    assert collectives.collective_device(object()) == torch.device(device)


def test_a_backend_without_a_known_device_is_refused(monkeypatch):
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: "mpi")
    with pytest.raises(RuntimeError, match="'mpi'"):
        collectives.collective_device(object())


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives")
    run_ranks(WORKER, 2, out)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_dp2_gathers_every_ranks_rows_on_the_real_groups_device(two_ranks):
    for result in two_ranks:
        assert result["dp_size"] == 2
        # the real DP group's backend decides the device (gloo here: host memory)
        assert result["dp_backend"] == "gloo" and result["dp_device"] == "cpu"
        assert result["gathered"][0] == [[0.0] * 3] * 2 + [[1.0] * 3] * 2
        assert result["gathered"][1] == [
            [0.0, 1.0, 2.0],
            [3.0, 4.0, 5.0],
            [10.0, 11.0, 12.0],
            [13.0, 14.0, 15.0],
        ]
        assert result["gathered_devices"] == ["cpu", "cpu"]  # back where they came from


@pytest.mark.slow
def test_rank_1_outwaits_a_rank_0_longer_than_the_world_timeout_in_the_wait_group(two_ranks):
    from collectives_worker import DELAY_S, TIMEOUT_S

    rank1 = two_ranks[1]
    assert DELAY_S > TIMEOUT_S
    assert rank1["waited_s"] >= DELAY_S - 0.5 and rank1["payload"] == {"responses": [[5, 6], [7]]}
    assert rank1["barrier_waited_s"] >= DELAY_S - 0.5
    # the control: the same wait in the world group times out after TIMEOUT_S
    assert "Timed out" in rank1["world_wait_error"]
    assert TIMEOUT_S - 0.5 <= rank1["world_waited_s"] < DELAY_S


@pytest.mark.slow
def test_each_rank_receives_exactly_its_routing_rows_as_int16(two_ranks):
    rank0, rank1 = two_ranks

    def row(i, n):  # what rank 0 holds for row i: n positions x 2 layers x top-2
        return [[n, 2, 2], "torch.int16", list(range(i, i + n * 4))]

    assert rank0["rows"] == {"0": row(0, 3), "3": row(3, 2)}  # rank 0 keeps its own
    assert rank1["rows"] == {"1": row(1, 5), "2": row(2, 1)}
    assert rank1["empty"] == {}


@pytest.mark.slow
def test_training_outwaits_rank_0s_generation_and_evaluation_beyond_the_timeout(tmp_path):
    # world timeout 6 s; every generation (rollout and evaluation) takes 9 s longer on rank 0;
    # EP=2 gives DP=2, so the log-prob gather runs over DP ranks too
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "1",
        "--expert-model-parallel-size",
        "2",
        "--eval-interval",
        "1",
        "--distributed-timeout-minutes",
        "0.1",
        nproc=2,
        extra_env=hook_env(HYRL_TEST_GENERATION_DELAY_S="9"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [r["step"] for r in rows] == [0, 1]
    assert "eval/accuracy" in rows[0] and "eval/accuracy" in rows[1]
    assert rows[1]["perf/rollout_s"] >= 9


@pytest.mark.slow
def test_a_weight_sync_that_fails_on_rank_0_ends_every_rank_with_its_message(tmp_path):
    """Rank 0's engine fails in the 2nd weight sync after one bucket, while rank 1 is in the
    expert gathers (EP=2). Rank 0 still takes part in the rest of the gathers, then every rank
    raises rank 0's message. Before, rank 0 left the gathers: here (gloo) rank 1 then failed
    with gloo's "Connection closed by peer" once rank 0's process exited, which names no cause;
    under NCCL it waits in the gather until the collective timeout."""
    run_dir = tmp_path / "run"
    started = time.monotonic()
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "3",
        "--expert-model-parallel-size",
        "2",
        "--distributed-timeout-minutes",
        "3",
        nproc=2,
        extra_env=hook_env(HYRL_TEST_FAIL_WEIGHT_SYNC="2"),
    )
    assert time.monotonic() - started < 150  # well inside the 3-minute collective timeout
    assert proc.returncode != 0
    said = "rank 0 failed in the weight sync: RuntimeError: test hook: the engine refused"
    output = proc.stdout + proc.stderr
    # each rank's own traceback ends with rank 0's words (torchrun prefixes the rank)
    for rank in (0, 1):
        assert any(said in line for line in output.splitlines() if f"[rank{rank}]" in line), output[
            -4000:
        ]
    assert json.loads((run_dir / "summary.json").read_text())["ended"] == "error"
