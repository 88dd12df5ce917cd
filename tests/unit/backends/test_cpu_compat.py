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


def test_without_transformer_engine_on_cuda_the_router_gemm_runs_and_the_adam_load_is_fixed():
    """On an H100 without TE every MoE forward raised NameError: 0.16.1's router GEMM reads
    `te_general_gemm`, bound only when TE imports. Without TE or Apex megatron also runs torch's
    Adam there, whose `step` its distributed-optimizer load mishandles (KeyError 'step' on a
    resume, then one shared `step` tensor). apply() on a CUDA machine (on_cpu False) must fix
    both and leave the CPU-only patches out."""
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
        from megatron.core.tensor_parallel import layers
        from megatron.core.transformer.dot_product_attention import DotProductAttention
        # the CPU kernels (torch's linear and attention) stay off: megatron's own run on CUDA
        assert not hasattr(layers.linear_with_grad_accumulation_and_async_allreduce, "_hyrl_plain")
        assert not hasattr(DotProductAttention.forward, "_hyrl_torch_kernel")
        from megatron.core.transformer.moe.router import TopKRouter
        count = TopKRouter._apply_expert_bias  # compiled, at its first call (hyrl defers it)
        assert hasattr(count, "_torchdynamo_orig_callable") or hasattr(count, "__wrapped__")
        from megatron.core.models.common.embeddings import rope_utils
        assert not hasattr(rope_utils._apply_rotary_pos_emb_bshd, "_hyrl_cached_cos_sin")
        from megatron.core.transformer.moe.experts import SequentialMLP
        assert not hasattr(SequentialMLP.forward, "_hyrl_grouped")
        from megatron.core import utils
        from megatron.core.optimizer import clip_grads
        assert clip_grads.l2_norm_impl is utils.local_multi_tensor_l2_norm
        from megatron.core.transformer.moe import router
        assert not hasattr(router.router_gating_linear, "_hyrl_plain")
        from megatron.core.optimizer import distrib_optimizer
        optimizer = distrib_optimizer.DistributedOptimizer
        assert not distrib_optimizer.HAVE_APEX_OR_TE, "Apex is installed"
        assert optimizer._set_main_param_and_optimizer_states._hyrl_skips_step
        from megatron.core.transformer.moe import moe_utils
        inp = torch.arange(12.0).reshape(3, 4)
        weight = torch.ones(2, 4)
        logits = moe_utils.router_gating_linear(inp, weight, None, torch.float32)
        print(logits.tolist())
        """
    )
    if "TE is installed" in proc.stderr or "Apex is installed" in proc.stderr:
        pytest.skip("Transformer Engine or Apex is installed: megatron has what it needs")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # rows of inp summed: 0+1+2+3 = 6, 4+5+6+7 = 22, 8+9+10+11 = 38, once per expert
    assert proc.stdout.strip() == "[[6.0, 6.0], [22.0, 22.0], [38.0, 38.0]]"
