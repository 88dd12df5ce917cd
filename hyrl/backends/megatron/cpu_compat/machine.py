"""Whether this process runs on a CPU-only machine, and what follows from it: the device,
the process-group backend and the MoE token dispatcher."""

from __future__ import annotations

import torch


def on_cpu() -> bool:
    return not torch.cuda.is_available()


def device() -> torch.device:
    """The device parameters and batches live on for this process."""
    if on_cpu():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def distributed_backend() -> str:
    return "gloo" if on_cpu() else "nccl"


def default_token_dispatcher() -> str:
    # alltoall builds a CUDA stream and passes split sizes as tensors, which gloo rejects.
    return "allgather" if on_cpu() else "alltoall"
