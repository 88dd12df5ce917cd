"""A torch function mode under which megatron's CUDA-placing code runs on the CPU, and the
wrappers that put a function under it (or take torch's own optimizer step out of it)."""

from __future__ import annotations

import functools

import torch
from torch.overrides import TorchFunctionMode


class CudaAsCpu(TorchFunctionMode):
    """While active, megatron's `device='cuda'` tensors are made on the CPU, `.cuda()` returns
    the tensor itself and `Tensor.type()` names CPU tensors as their CUDA twins (the optimizers
    check `param.type() == 'torch.cuda.FloatTensor'`). Only megatron's optimizer code runs
    under it (`optimizers`), and its pipeline schedules with PP > 1 (`pipeline`): the model's
    forward and backward never do otherwise."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # Runs for every torch call in megatron's optimizer methods (529 per update of the tiny
        # recipe, counted; mostly attribute reads without keywords): that case is decided first.
        if func is _TENSOR_CUDA:
            return args[0]
        if kwargs:
            if _names_cuda(kwargs.get("device")):
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)
        if func is _TENSOR_TYPE and len(args) == 1:
            name = func(*args)
            return (
                name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
            )
        return func(*args)


_TENSOR_CUDA = torch.Tensor.cuda
_TENSOR_TYPE = torch.Tensor.type


def _names_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)  # an ordinal: a CUDA device


def under_cuda_as_cpu(function):
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        # one mode on the stack: the wrapped methods call each other, and every mode on the
        # stack would see every torch call once more
        if isinstance(torch.overrides._get_current_function_mode(), CudaAsCpu):
            return function(*args, **kwargs)
        with CudaAsCpu():
            return function(*args, **kwargs)

    wrapped._hyrl_cuda_as_cpu = True  # type: ignore[attr-defined]  # a marker on a function
    return wrapped


def outside_cuda_as_cpu(step):
    """torch's own optimizer step under megatron's wrapped methods: it places nothing on
    'cuda' (its states follow the parameters), yet under CudaAsCpu each of its attribute reads
    and grad-mode switches went through the mode's Python. It runs with the mode taken off the
    stack, and put back after."""
    if getattr(step, "_hyrl_outside_cuda_as_cpu", False):
        return step

    @functools.wraps(step)
    def run(*args, **kwargs):
        if not isinstance(torch.overrides._get_current_function_mode(), CudaAsCpu):
            return step(*args, **kwargs)
        with torch.overrides._pop_mode_temporarily():
            return step(*args, **kwargs)

    run._hyrl_outside_cuda_as_cpu = True  # type: ignore[attr-defined]  # a marker
    return run
