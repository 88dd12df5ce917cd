"""What the compatibility module does on a machine with CUDA: only the fix megatron-core 0.16.1
needs wherever Transformer Engine is missing. Each case runs in a fresh interpreter, since
`apply()` patches megatron-core's modules once per process."""

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_the_router_gemm_runs_without_transformer_engine_when_cuda_is_there():
    """On an H100 without TE every MoE forward raised NameError: 0.16.1's router GEMM reads
    `te_general_gemm`, bound only when TE imports. apply() on a CUDA machine (on_cpu False)
    must define it and leave the CPU-only patches out."""
    pytest.importorskip("megatron.core")
    proc = _run(
        """
        import importlib.util, torch
        assert importlib.util.find_spec("transformer_engine") is None, "TE is installed"
        from hyrl.backends.megatron import cpu_compat
        cpu_compat.on_cpu = lambda: False  # as on a machine with CUDA
        current_device = torch.cuda.current_device
        cpu_compat.apply()
        assert torch.cuda.current_device is current_device, "a CPU-only patch was applied"
        from megatron.core.transformer.moe import moe_utils
        inp = torch.arange(12.0).reshape(3, 4)
        weight = torch.ones(2, 4)
        logits = moe_utils.router_gating_linear(inp, weight, None, torch.float32)
        print(logits.tolist())
        """
    )
    if "TE is installed" in proc.stderr:
        pytest.skip("Transformer Engine is installed: megatron binds te_general_gemm itself")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # rows of inp summed: 0+1+2+3 = 6, 4+5+6+7 = 22, 8+9+10+11 = 38, once per expert
    assert proc.stdout.strip() == "[[6.0, 6.0], [22.0, 22.0], [38.0, 38.0]]"
