"""tools/bench_weight_sync.py: the derived columns on hand-computed numbers, and one run of a
tiny model in one process that reports every column consistently. No timing is asserted: the
benchmark itself is run by hand (docs/rollout.md)."""

import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from testpaths import ROOT

TOOL = ROOT / "tools" / "bench_weight_sync.py"
sys.path.insert(0, str(TOOL.parent))  # the tool imports its neighbours (bench_vs_trl)
_spec = importlib.util.spec_from_file_location("bench_weight_sync", TOOL)
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_weight_sync"] = bench
_spec.loader.exec_module(bench)

MIB = 2**20


def test_speed_and_peak_by_hand():
    row = {
        "sync_bytes": 400 * MIB,
        "elapsed_s": 2.0,
        "buffer_bytes": 64 * MIB,
        "counted_peak_bytes": 80 * MIB,
        "rss_peak_growth_bytes": 96 * MIB,
    }
    got = bench.speed_and_peak(row, memcpy_bytes_per_s=10e9)
    assert got["sync_bytes_per_s"] == 400 * MIB / 2.0  # 209,715,200 B/s
    assert got["sync_over_memcpy"] == pytest.approx(209_715_200 / 10e9)
    assert got["counted_peak_over_bucket"] == 80 / 64
    assert got["rss_peak_over_bucket"] == 96 / 64
    full = bench.speed_and_peak({**row, "buffer_bytes": None}, memcpy_bytes_per_s=10e9)
    assert full["counted_peak_over_bucket"] is None and full["rss_peak_over_bucket"] is None


def test_memcpy_copies_the_bytes_asked_in_whole_elements():
    got = bench.memcpy_rate(1001, torch.float32, torch.device("cpu"), repeats=3)
    assert got["bytes"] == 1000 and got["dtype"] == "float32"  # 250 elements of 4 B
    assert len(got["times_s"]) == 3 and got["median_s"] == sorted(got["times_s"])[1]
    assert got["bytes_per_s"] == 1000 / got["median_s"]


def test_counting_adds_each_buckets_bytes_and_passes_the_buckets_on():
    buckets = [
        [("a", torch.zeros(4)), ("b", torch.zeros(2, dtype=torch.bfloat16))],
        [("c", torch.zeros(8))],
    ]
    tally = {"bytes": 0}
    assert [[n for n, _ in b] for b in bench.counting(iter(buckets), tally)] == [["a", "b"], ["c"]]
    assert tally["bytes"] == 16 + 4 + 32


@pytest.mark.slow
def test_one_process_run_reports_speed_against_memcpy_and_peak_against_bucket():
    tiny = ("--layers", "2", "--hidden", "64", "--experts", "4", "--ffn", "32", "--vocab", "256")
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--json", *tiny, "--buffer-mib", "0.01,1", "--repeats", "2"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    memcpy = report["memcpy"]
    assert memcpy["bytes"] == report["model_bytes"] and memcpy["dtype"] == report["dtype"]
    assert memcpy["repeats"] == 10 and memcpy["bytes_per_s"] > 0
    assert [row["path"] for row in report["rows"]] == ["stream", "stream", "full dict"]
    for row in report["rows"]:
        assert row["sync_bytes"] == report["model_bytes"]  # every byte reached the engine
        assert len(row["times_s"]) == 2
        assert row["sync_bytes_per_s"] == report["model_bytes"] / row["elapsed_s"]
        assert row["sync_over_memcpy"] == pytest.approx(
            row["sync_bytes_per_s"] / memcpy["bytes_per_s"]
        )
        if row["buffer_bytes"] is not None:
            assert row["counted_peak_over_bucket"] == pytest.approx(
                row["counted_peak_bytes"] / row["buffer_bytes"]
            )
