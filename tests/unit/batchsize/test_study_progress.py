"""hyrl.batchsize.sweep.progress: the lines `hyrl sweep` and `hyrl tune` print off a terminal,
their ETA arithmetic (checked by hand in the comments) and the result read from a run directory.
The sweep's own lines, through a real (faked) sweep in a subprocess, are in test_sweep.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hyrl.batchsize.sweep.progress import (
    RunsProgress,
    StudyLog,
    duration,
    run_result,
    study_eta,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Recorder(io.StringIO):
    """A stream that is no terminal and notes whether everything written was flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.unflushed = 0

    def write(self, text: str) -> int:
        self.unflushed += 1
        return super().write(text)

    def flush(self) -> None:
        self.unflushed = 0
        super().flush()


def test_eta_is_the_budget_left_at_the_measured_seconds_per_sample_over_the_parallel_slots():
    # two runs of 1,000 samples done in 10 s and 30 s: 40 s / 2,000 samples = 0.02 s per sample
    done = [(1000.0, 10.0), (1000.0, 30.0)]
    left = [(2000.0, 0.0)] * 3  # 40 s each
    assert study_eta(done, left, 1) == pytest.approx(120.0)  # one after the other
    assert study_eta(done, left, 2) == pytest.approx(80.0)  # two side by side, then the third
    assert study_eta(done, left, 3) == pytest.approx(40.0)
    assert study_eta(done, left, 8) == pytest.approx(40.0)  # more slots than runs
    # the first has run 15 s already: 25 s left of it; one at a time 25 + 40 + 40 = 105 s;
    # two at a time: 25 | 40, then the third after the first, 25 + 40 = 65 s
    running = [(2000.0, 15.0), (2000.0, 0.0), (2000.0, 0.0)]
    assert study_eta(done, running, 1) == pytest.approx(105.0)
    assert study_eta(done, running, 2) == pytest.approx(65.0)
    # a run past its estimate has nothing left, not less than nothing
    assert study_eta(done, [(2000.0, 100.0)], 1) == 0.0
    assert study_eta([], left, 1) is None  # before the first run ends: unknown
    assert study_eta(done, [], 1) == 0.0  # nothing left


def test_off_a_terminal_each_start_and_end_is_one_flushed_line_with_result_and_eta():
    clock, out = FakeClock(), Recorder()
    log = StudyLog("hyrl sweep", out=out, tty=False, now=clock)
    runs = RunsProgress(log, [("a", 1000), ("b", 1000), ("c", 2000)], max_parallel=1)
    written: list[str] = []

    def line() -> str:
        # every line is whole and flushed at once, not held until the end
        assert out.unflushed == 0 and out.getvalue().endswith("\n")
        text = out.getvalue().splitlines()[len(written)]
        written.append(text)
        return text

    runs.started("a", "B=128, lr 3.00e-04, 1,000 samples")
    assert line() == "hyrl sweep: [1/3] a started (B=128, lr 3.00e-04, 1,000 samples)"
    clock.t += 10.0
    runs.ended("a", True, "eval/accuracy=0.9 reached at 512 samples, 8.0 s")
    # 10 s per 1,000 samples: b 10 s + c 20 s = 30 s left
    assert line() == (
        "hyrl sweep: [1/3] a done in 10 s: eval/accuracy=0.9 reached at 512 samples, 8.0 s | "
        "1 done, 0 failed, 2 to go | study 0:00:10 elapsed, ETA 0:00:30"
    )
    runs.started("b")
    clock.t += 4.0
    assert line() == "hyrl sweep: [2/3] b started"
    # b has run 4 s of its 10 s: 6 s + c 20 s
    assert runs.eta_text() == "ETA 0:00:26"
    clock.t += 26.0
    runs.ended("b", False, "failed (exit 3, log: b.log)")
    # a failed run is no measure of a run's length: still 10 s per 1,000 samples, c 20 s
    assert line() == (
        "hyrl sweep: [2/3] b ended in 30 s: failed (exit 3, log: b.log) | "
        "1 done, 1 failed, 1 to go | study 0:00:40 elapsed, ETA 0:00:20"
    )


def test_eta_unknown_before_a_run_is_done_and_by_count_when_a_budget_is_unknown():
    clock = FakeClock()
    log = StudyLog("hyrl tune", out=io.StringIO(), tty=False, scope="tune", now=clock)
    runs = RunsProgress(log, [("a", None), ("b", 4000), ("c", 9000)], label="probe",
                        eta_label="probes")  # fmt: skip
    runs.started("a")
    clock.t += 5.0
    runs.ended("a", False, "failed (exit 1, log: a.log)")
    assert "probes ETA unknown" in log.out.getvalue()
    assert log.out.getvalue().startswith("hyrl tune: probe [1/3] a started")
    assert "| tune 0:00:05 elapsed, probes ETA unknown" in log.out.getvalue()
    runs.started("b")
    clock.t += 12.0
    runs.ended("b", True, "ok")
    # a's budget is unknown, so each run counts as one: 12 s per run, c 12 s
    assert runs.eta_text() == "probes ETA 0:00:12"


def test_skipped_runs_count_as_done_and_their_earlier_time_in_the_rate():
    log = StudyLog("hyrl sweep", out=io.StringIO(), tty=False, now=FakeClock())
    runs = RunsProgress(log, [("a", 100), ("b", 300)])
    runs.skipped("a", "eval/accuracy=0.9 reached at 64 samples, 1.0 s", wall_s=7.0)
    assert log.out.getvalue() == (
        "hyrl sweep: [1/2] a skipped: finished earlier (eval/accuracy=0.9 reached at 64 "
        "samples, 1.0 s)\n"
    )
    assert runs.eta_text() == "ETA 0:00:21"  # 7 s per 100 samples x 300


def test_nothing_is_printed_on_a_terminal_or_when_disabled():
    for log in (
        StudyLog("hyrl sweep", out=io.StringIO(), tty=True),
        StudyLog("hyrl sweep", out=io.StringIO(), tty=False, enabled=False),
    ):
        runs = RunsProgress(log, [("a", 1)])
        runs.started("a")
        runs.ended("a", True, "ok")
        log.line("x")
        assert log.out.getvalue() == ""
        assert runs.eta_text() == "ETA 0:00:00"  # the rich display may still show it


def test_durations():
    assert duration(0.04) == "0.0 s" and duration(3.25) == "3.2 s"
    assert duration(52.4) == "52 s" and duration(125) == "0:02:05"
    assert duration(3 * 3600 + 7) == "3:00:07"


def _summary(path: Path, **content) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "summary.json").write_text(json.dumps(content))
    return path


def test_run_result_reads_the_target_outcome_and_the_best_value(tmp_path):
    target = {"metric": "eval/accuracy", "value": 0.9}
    reached = _summary(tmp_path / "r", target=target, reached=True, samples_to_target=40960,
                       time_to_target_s=31.24, samples=128000, elapsed_s=90.0)  # fmt: skip
    assert run_result(reached) == "eval/accuracy=0.9 reached at 40,960 samples, 31.2 s"
    missed = _summary(tmp_path / "m", target=target, reached=False, samples_to_target=None)
    (missed / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "eval/accuracy": v}) + "\n"
            for s, v in ((1, 0.5), (2, 0.88), (3, None), (4, 0.7))
        )
    )
    assert run_result(missed) == "eval/accuracy=0.9 not reached (best 0.88)"
    never = _summary(tmp_path / "n", target=target, reached=False)
    assert run_result(never) == "eval/accuracy=0.9 not reached (never evaluated)"
    plain = _summary(tmp_path / "p", target=None, reached=False, samples=2048, elapsed_s=12.8)
    assert run_result(plain) == "2,048 samples in 12.8 s (160.0 resp/s)"
    assert run_result(tmp_path / "nothing") == "no summary.json"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{not json")
    assert run_result(tmp_path / "bad").startswith("summary.json unreadable")
