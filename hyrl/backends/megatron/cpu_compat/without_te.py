"""What megatron-core 0.16.1 gets wrong wherever Transformer Engine is missing, on a CPU and on
a GPU alike: the local spec's unbound router GEMM name and its torch norms under sequence
parallelism."""

from __future__ import annotations

import torch


def define_te_general_gemm_without_te() -> None:
    """0.16.1's router GEMM (moe_utils.RouterGatingLinearFunction) tests `te_general_gemm is
    not None`, a name bound only when Transformer Engine imports: without TE every MoE forward
    raised NameError, on CPU and on CUDA alike. None sends it to its torch.mm branch."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def allow_sequence_parallel_torch_norm() -> None:
    """Let the local spec's torch norms run under sequence parallelism (no Transformer Engine).

    megatron's WrappedTorchNorm refuses sequence_parallel. The norm itself is correct on a
    sequence shard; only its weight gradient must be summed across TP ranks, which happens when
    the weight carries `sequence_parallel` (see `sequence_parallel_grads_need_tp_sum`). Needed
    wherever the local spec runs with TP > 1: on CPU always, on GPU without TE.
    """
    from megatron.core.transformer import torch_norm

    if getattr(torch_norm.WrappedTorchNorm, "_hyrl_patched", False):
        return

    def _new(
        cls,
        config,
        hidden_size,
        eps=1e-5,
        persist_layer_norm=False,
        zero_centered_gamma=False,
        normalization="LayerNorm",
    ):
        norm_cls = torch.nn.RMSNorm if config.normalization == "RMSNorm" else torch.nn.LayerNorm
        norm = norm_cls(normalized_shape=hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel  # type: ignore[attr-defined]
        return norm

    torch_norm.WrappedTorchNorm.__new__ = staticmethod(_new)
    torch_norm.WrappedTorchNorm._hyrl_patched = True
