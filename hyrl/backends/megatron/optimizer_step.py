"""One optimizer step on megatron-core's machinery (hyrl.backends.megatron.ddp_optimizer), in
the order of megatron's own ChainedOptimizer.step (reduce and copy to main grads, grad norm,
clip, Adam step, params back) with hyrl's numerical guard between the norm and the clip: when
the loss or the gradient norm is not finite on any rank, every rank skips the update
(`all_ranks_finite`). The trained model (hyrl.backends.megatron.trained_model) calls these in
that order and keeps the step counters."""

from __future__ import annotations

import math

import torch

from hyrl.backends.megatron.ddp_optimizer import sub_optimizers


def reduce_grads(ddp_chunks: list, optimizer) -> tuple[bool, float]:
    """The accumulated gradients reduced and copied into the optimizer's main grads (collective);
    (found_inf, the global gradient norm before clipping). found_inf is fp16's check only."""
    from megatron.core.distributed import finalize_model_grads

    # DP (or the distributed optimizer's reduce-scatter) and expert-DP reductions, the TP
    # sums of sequence-parallel norms, router and q/k norms, embedding grads across PP
    finalize_model_grads(ddp_chunks)
    found_inf = optimizer.prepare_grads()  # main grads (fp32 under bf16); fp16 only
    return found_inf, float(optimizer.get_grad_norm())


def all_ranks_finite(local_loss: torch.Tensor, grad_norm: float, device: torch.device) -> bool:
    """True when no rank saw a non-finite loss share or gradient norm (collective: one
    all-reduce over the world group, so every rank decides alike)."""
    bad = torch.tensor(
        [0.0 if torch.isfinite(local_loss).all() and math.isfinite(grad_norm) else 1.0],
        device=device,
    )
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(bad)  # a sum over the world: every rank decides alike
    return float(bad) == 0.0


def clip(optimizer, clip_grad: float, grad_norm: float) -> None:
    """Scale every main grad by clip / norm when the norm exceeds --clip-grad (megatron's
    clip_grad_by_total_norm_fp32, with the norm computed once for the guard); 0: no clipping."""
    from megatron.core.optimizer import clip_grads

    if clip_grad <= 0:
        return
    for sub in sub_optimizers(optimizer):
        params = sub.get_parameters()
        if params:
            clip_grads.clip_grad_by_total_norm_fp32(params, clip_grad, grad_norm)


def adam_step(optimizer, lr: float) -> None:
    """The update at learning rate `lr` from the main grads as they are (reduced, clipped), and
    the new main params copied back into the model's weights."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step_with_ready_grads()


def summed_over_dp(sums: dict[str, torch.Tensor], device: torch.device) -> dict[str, float]:
    """Each of this rank's statistics summed over the DP ranks (collective over DP): each rank's
    is a share of the global token mean, so the sum is the global batch's."""
    from megatron.core import parallel_state

    keys = sorted(sums)
    totals = torch.stack([sums[k].reshape(()) for k in keys]).to(device)
    if parallel_state.get_data_parallel_world_size() > 1:
        torch.distributed.all_reduce(totals, group=parallel_state.get_data_parallel_group())
    return {k: float(v) for k, v in zip(keys, totals.cpu())}
