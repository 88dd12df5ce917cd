"""hyrl.backends.megatron.checkpoint_writer against megatron-core's own save path: the writer
helper that megatron's torch_dist save keeps for the life of a rank survives a SIGTERM to the
rank's whole process group, and dies when its rank is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testpaths import HELPERS

from hyrl.backends.megatron import checkpoint_writer
from hyrl.train.stopping import PREEMPTION_SIGNALS

WORKER = HELPERS / "checkpoint_writer_worker.py"


def _session(sid: int) -> list[int]:
    """The pids of the live processes (zombies not counted) in session `sid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def worker(tmp_path):
    """The worker in a session of its own (its pid is the session and group id), up to its
    first save; (the process, the writer helper's pid)."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    line = proc.stdout.readline()
    assert line.startswith("writer "), proc.stderr.read()[-3000:] if not line else line
    yield proc, int(line.split()[1])
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def test_the_writer_ignores_every_signal_hyrl_acts_on():
    assert set(PREEMPTION_SIGNALS) <= set(checkpoint_writer.IGNORED_SIGNALS)


def test_a_sigterm_to_the_whole_process_group_leaves_the_next_save_whole(worker, tmp_path):
    proc, writer = worker
    before = set(_session(proc.pid))  # the rank, its writer helper, the resource tracker
    assert writer in before and len(before) == 3
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(1.0)  # the rank is still finishing its step (2 s)
    assert set(_session(proc.pid)) == before
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and stdout.strip() == "saved", stderr[-3000:]
    assert (tmp_path / "step_2" / "optimizer" / ".metadata").is_file()


def test_a_sigkilled_rank_leaves_no_process_behind(worker):
    proc, writer = worker
    assert writer in _session(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)  # the rank alone
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session(proc.pid) == []
