"""launch/torchrun.sh gives the training ranks CUDA_DEVICE_MAX_CONNECTIONS=1 (megatron's
sequence-parallel and async tensor-parallel overlap rely on it: megatron/core/tensor_parallel/
layers.py); at c42290d nothing set it. A stand-in PYTHON records the environment it ran with."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("preset", "expected"), [(None, "1"), ("4", "4")])
def test_the_ranks_get_one_cuda_connection_unless_the_job_says_otherwise(
    tmp_path, preset, expected
):
    python = tmp_path / "python"
    python.write_text(
        '#!/bin/sh\necho "CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS"\n'
    )
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    env.update(PYTHON=str(python), NPROC="1")
    if preset is not None:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = preset
    done = subprocess.run(
        ["bash", str(ROOT / "launch" / "torchrun.sh"), "--num-steps", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"CUDA_DEVICE_MAX_CONNECTIONS={expected}"


def test_torchrun_forwards_sigusr1_and_gives_the_ranks_the_grace_to_save(tmp_path):
    # What torchrun (torch 2.13's own parser, as pinned) makes of the launcher's arguments: it
    # forwards SIGUSR1 as well as SIGTERM and waits SHUTDOWN_GRACE_S before its SIGKILL (its
    # default of 30 s cuts a 30B step and its save short).
    from torch.distributed.run import get_args_parser

    python = tmp_path / "python"
    python.write_text(
        '#!/bin/sh\nif [ "$1" = -c ]; then echo 29555; else printf "%s\\n" "$@"; fi\n'
    )
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "NPROC": "2", "SHUTDOWN_GRACE_S": "900"}
    done = subprocess.run(
        ["bash", str(ROOT / "launch" / "torchrun.sh"), "--num-steps", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    argv = done.stdout.splitlines()
    assert argv[:2] == ["-m", "torch.distributed.run"]
    args = get_args_parser().parse_args(argv[2:])
    assert args.shutdown_timeout == 900
    assert set(args.signals_to_handle.split(",")) >= {"SIGTERM", "SIGUSR1"}
    assert args.nproc_per_node == "2" and args.module and args.training_script == "hyrl"
