"""The one place that knows megatron-core 0.16.1 can run without CUDA.

Every CPU-only workaround lives in this package, each function's docstring saying what it
works around, grouped by concern: the machine (`machine`: device, process-group backend, token
dispatcher), torch's kernels for megatron's local-spec paths (`kernels`), the CUDA-as-CPU mode
(`cuda_as_cpu`) under which megatron's optimizers (`optimizers`) and pipeline schedules
(`pipeline`) run, the model-parallel RNG streams (`rng`), the optimizer states of a checkpoint
load (`checkpoint_load`) and what the local spec lacks without Transformer Engine
(`without_te`). Callers import this package only.

On a machine with CUDA, `apply()` only fixes what 0.16.1 gets wrong
wherever Transformer Engine (and Apex) are missing, as on CPU: the router GEMM's unbound
`te_general_gemm` (found on an H100 without TE) and torch Adam's `step` in the distributed
optimizer's load; with TE the rest of hyrl runs megatron-core untouched.
"""

from __future__ import annotations

import torch

from hyrl.backends.megatron.cpu_compat import (
    checkpoint_load,
    kernels,
    optimizers,
    pipeline,
    rng,
    without_te,
)
from hyrl.backends.megatron.cpu_compat.checkpoint_load import prepare_optimizer_states_for_load
from hyrl.backends.megatron.cpu_compat.machine import (
    default_token_dispatcher,
    device,
    distributed_backend,
    on_cpu,
)
from hyrl.backends.megatron.cpu_compat.rng import seed_model_parallel_rng
from hyrl.backends.megatron.cpu_compat.without_te import allow_sequence_parallel_torch_norm

__all__ = [
    "allow_sequence_parallel_torch_norm",
    "apply",
    "default_token_dispatcher",
    "device",
    "distributed_backend",
    "on_cpu",
    "prepare_optimizer_states_for_load",
    "seed_model_parallel_rng",
]

_applied = False


def apply() -> None:
    """Neutralise megatron-core's CUDA assumptions on a CPU-only machine, and on any machine
    without Transformer Engine fix what 0.16.1 gets wrong there (idempotent)."""
    global _applied
    if _applied:
        return
    _applied = True
    without_te.define_te_general_gemm_without_te()
    from megatron.core.optimizer import distrib_optimizer

    # Without TE or Apex (any device) megatron runs torch's Adam, whose per-parameter `step`
    # its distributed-optimizer load mishandles.
    if not distrib_optimizer.HAVE_APEX_OR_TE:
        checkpoint_load.skip_torch_adam_step_in_reshardable_load()
    if not on_cpu():
        return

    # Small float32 models hit denormals on these CPUs: steps slow down 30-100x without this.
    torch.set_flush_denormal(True)

    # Rotary embeddings place inv_freq with torch.cuda.current_device(); a device name, not
    # torch's int index, is what makes them place it on the CPU.
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment, return-value]

    # The torch_dist checkpoint writer stages tensors with torch.cuda.synchronize().
    torch.cuda.synchronize = lambda device=None: None

    rng.cpu_generator_for_rng_tracker()
    optimizers.run_optimizers_on_cpu()
    pipeline.run_pipeline_schedules_on_cpu()
    kernels.apply_cpu_kernels()
