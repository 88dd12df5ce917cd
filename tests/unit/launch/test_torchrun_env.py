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
    args = _torchrun_args(tmp_path, {"NPROC": "2", "SHUTDOWN_GRACE_S": "900"})
    assert args.shutdown_timeout == 900
    assert set(args.signals_to_handle.split(",")) >= {"SIGTERM", "SIGUSR1"}
    assert args.nproc_per_node == "2" and args.module and args.training_script == "hyrl"


@pytest.mark.parametrize("master_port", [None, "29601"])
def test_one_node_rendezvous_binds_its_own_port_unless_the_job_names_one(tmp_path, master_port):
    # Unset MASTER_PORT: torchrun --standalone binds its store to a port the kernel picks before
    # the ranks start. The launcher used to pick a free port itself and hand it on; under
    # parallel tests another job's connection took it before torchrun bound it (EADDRINUSE).
    extra = {"NPROC": "2"} | ({"MASTER_PORT": master_port} if master_port else {})
    args = _torchrun_args(tmp_path, extra)
    assert args.standalone is (master_port is None)
    assert args.master_port == (int(master_port) if master_port else None)
    assert args.nnodes == "1" and args.nproc_per_node == "2"


def _torchrun_args(tmp_path, extra_env):
    """What torchrun (torch's own parser, as pinned) makes of the launcher's arguments; a
    stand-in PYTHON prints them."""
    from torch.distributed.run import get_args_parser

    python = tmp_path / "python"
    python.write_text(
        '#!/bin/sh\nif [ "$1" = -c ]; then echo 29555; else printf "%s\\n" "$@"; fi\n'
    )
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "MASTER_PORT"}
    env.update(PYTHON=str(python), **extra_env)
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
    return get_args_parser().parse_args(argv[2:])
