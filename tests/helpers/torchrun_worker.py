"""A test's worker script on several gloo ranks of this machine, one OpenMP thread a rank; a
failed rank fails the test with the end of its stderr.

The ranks are forked from one process that imported torch and megatron once
(tests/helpers/fork_ranks.py), with the environment torchrun gives them: the ranks' code is the
same, the launch costs one interpreter's imports instead of one per rank. The runs themselves
(`hyrl train`, tests/e2e) go through torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FORK_RANKS = Path(__file__).with_name("fork_ranks.py")


def run_ranks(worker: Path, nproc: int, *args: object, timeout: float = 300) -> None:
    """Run `worker ARGS...` on `nproc` ranks (the worker writes what the test reads)."""
    proc = subprocess.run(
        [sys.executable, str(FORK_RANKS), str(nproc), str(worker), *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
