"""megatron-core's pipeline schedules on a CPU-only machine."""

from __future__ import annotations

from hyrl.backends.megatron.cpu_compat.cuda_as_cpu import under_cuda_as_cpu


def run_pipeline_schedules_on_cpu() -> None:
    """megatron-core's pipeline schedules count tokens and size their send/receive buffers with
    device='cuda': on a CPU-only machine they run under CudaAsCpu (the model's forward and
    backward inside them too; only PP > 1 takes this path)."""
    from megatron.core.pipeline_parallel import schedules

    for name in (
        "forward_backward_pipelining_without_interleaving",
        "forward_backward_pipelining_with_interleaving",
    ):
        function = getattr(schedules, name)
        if not getattr(function, "_hyrl_cuda_as_cpu", False):
            setattr(schedules, name, under_cuda_as_cpu(function))
