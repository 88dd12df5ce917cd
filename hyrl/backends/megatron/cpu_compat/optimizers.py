"""megatron-core's optimizers on a CPU-only machine: their methods under the CUDA-as-CPU mode,
and torch's fused CPU Adam where megatron falls back to torch's loop."""

from __future__ import annotations

import functools
import inspect

import torch

from hyrl.backends.megatron.cpu_compat.cuda_as_cpu import (
    outside_cuda_as_cpu,
    under_cuda_as_cpu,
)


def run_optimizers_on_cpu() -> None:
    """megatron-core's optimizers (FP32, bf16 with fp32 main params, distributed) create their
    scalars, norms and shards with device='cuda' and check CUDA tensor types: every method of
    theirs, and the factory, runs under CudaAsCpu on a CPU-only machine."""
    from megatron.core import optimizer as mcore_optimizer
    from megatron.core.optimizer import clip_grads, distrib_optimizer
    from megatron.core.optimizer import optimizer as optimizer_classes

    classes = [
        optimizer_classes.MegatronOptimizer,
        optimizer_classes.MixedPrecisionOptimizer,
        optimizer_classes.Float16OptimizerWithFloat16Params,
        optimizer_classes.FP32Optimizer,
        optimizer_classes.ChainedOptimizer,
        distrib_optimizer.DistributedOptimizer,
    ]
    for cls in classes:
        for name, attr in list(vars(cls).items()):
            if inspect.isfunction(attr) and not getattr(attr, "_hyrl_cuda_as_cpu", False):
                setattr(cls, name, under_cuda_as_cpu(attr))
    factory = mcore_optimizer.get_megatron_optimizer
    if not getattr(factory, "_hyrl_cuda_as_cpu", False):
        mcore_optimizer.get_megatron_optimizer = with_fused_adam(under_cuda_as_cpu(factory))
    for module, name in (
        (clip_grads, "clip_grad_by_total_norm_fp32"),
        (clip_grads, "get_grad_norm_fp32"),
        (optimizer_classes, "clip_grad_by_total_norm_fp32"),
        (optimizer_classes, "get_grad_norm_fp32"),
    ):
        if not getattr(getattr(module, name), "_hyrl_cuda_as_cpu", False):
            setattr(module, name, under_cuda_as_cpu(getattr(module, name)))


def with_fused_adam(factory):
    """Without TE or Apex megatron falls back to torch's Adam(W) with neither `foreach` nor
    `fused` set, which on CPU tensors is a Python loop over parameters with ~10 ops each. torch's
    fused CPU kernel does one call per parameter: the tiny recipe's optimizer step 3.0 -> 1.0 ms
    (measured with tools/profile_step.py's actor); results agree to float32 rounding (one ulp
    after five steps; tests/unit/backends/test_cpu_step_speed.py pins it)."""

    @functools.wraps(factory)
    def build(*args, **kwargs):
        optimizer = factory(*args, **kwargs)
        for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
            inner = getattr(sub, "optimizer", None)
            if isinstance(inner, torch.optim.Adam | torch.optim.AdamW):
                for group in inner.param_groups:
                    if not group.get("foreach") and group.get("fused") is None:
                        group["fused"] = True
                inner.step = outside_cuda_as_cpu(inner.step)  # type: ignore[method-assign]
        return optimizer

    build._hyrl_cuda_as_cpu = True  # type: ignore[attr-defined]  # a marker on a function
    return build
