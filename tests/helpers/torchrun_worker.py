"""A test's worker script on several gloo ranks: torchrun on this machine, one OpenMP thread a
rank; a failed rank fails the test with the end of its stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_ranks(worker: Path, nproc: int, *args: object, timeout: float = 300) -> None:
    """Run `worker ARGS...` on `nproc` ranks (the worker writes what the test reads)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            str(worker),
            *(str(a) for a in args),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
