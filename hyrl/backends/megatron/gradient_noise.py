"""The gradient noise scale measured while a model trains (the estimator itself:
hyrl/metrics/noise_scale.py). McCandlish et al. (2018) compare a "small batch" gradient with
the step's "big batch" one: the small batches are each micro-batch's own gradient at DP = 1,
or each DP rank's gradient before the reduction (DP > 1), each rescaled from its share of the
global batch's loss to the loss over its own part (`loss_share`); the big batch is the reduced
gradient the optimizer steps with (`update`). Norms of unreduced gradients come from megatron's
gradient buffers (hyrl.backends.megatron.grads)."""

from __future__ import annotations

import math

import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.backends.megatron.ddp_optimizer import holds_experts, sub_optimizers
from hyrl.metrics.noise_scale import GradientNoiseScale

# (|g_b|^2 of each small batch, b: the examples in one): what accumulation measured for the step
SmallBatches = tuple[list[float], float]


def includes_experts() -> bool:
    """Whether the estimate covers the experts' parameters: under EP an expert's local gradient
    mixes tokens of every EP rank, so it is no per-rank (small-batch) gradient, and the noise
    scale then covers the dense parameters."""
    from megatron.core import parallel_state

    return parallel_state.get_expert_model_parallel_world_size() == 1


def loss_share(
    part: TokenBatch, whole: TokenBatch | None, total_tokens: float, device: torch.device
) -> float:
    """The share of the global batch's loss `part` carries, such that its gradient divided
    by it is the gradient of the loss taken over `part` alone (the noise scale's small
    batch on the loss's own normalisation): its response tokens over total_tokens under
    token-mean; under the seq-mean-* --loss-agg-modes (loss_weights set), its sequences over
    those of the global batch, which is `whole` (DP = 1) or, with whole None, every DP
    rank's `part` (collective over DP)."""
    from megatron.core import parallel_state

    if part.loss_weights is None:
        return part.num_response_tokens / total_tokens
    mine = float((part.loss_mask.sum(dim=-1) > 0).sum())  # padding rows carry no loss
    if whole is not None:
        return mine / float((whole.loss_mask.sum(dim=-1) > 0).sum())
    total = torch.tensor([mine], dtype=torch.float64, device=device)
    if parallel_state.get_data_parallel_world_size() > 1:
        torch.distributed.all_reduce(total, group=parallel_state.get_data_parallel_group())
    return mine / float(total)


def per_rank_small_batches(
    batch: TokenBatch, total_tokens: float, squared_norm, device: torch.device
) -> SmallBatches | None:
    """Under DP > 1, every DP rank's |g|^2 before the reduction (`squared_norm()`: this rank's),
    rescaled from its share of the global token mean to a mean over its own tokens, with
    b = this rank's rows (collective over DP); None at DP = 1."""
    from megatron.core import parallel_state

    dp_size = parallel_state.get_data_parallel_world_size()
    if dp_size == 1:
        return None
    share = loss_share(batch, None, total_tokens, device)
    local = torch.tensor([squared_norm() / share**2], dtype=torch.float64, device=device)
    parts = [torch.empty_like(local) for _ in range(dp_size)]
    torch.distributed.all_gather(parts, local, group=parallel_state.get_data_parallel_group())
    return [float(p) for p in parts], float(len(batch))


def update(
    noise_scale: GradientNoiseScale,
    small_batches: SmallBatches,
    grad_norm: float,
    optimizer,
    prefix: str,
) -> dict[str, float]:
    """Feed this step's small-batch norms and the reduced step gradient to the estimator; its
    measurements as `<prefix>/noise_*` metrics.

    grad_norm: the norm of the whole reduced gradient (megatron's, before clipping); under
    EP > 1 the estimate covers the dense parameters, whose reduced norm the dense part of
    the optimizer gives (the experts' part is a separate optimizer over expert-DP)."""
    small_sq, b_small = small_batches
    if includes_experts():
        big_sq = grad_norm**2
    else:
        big_sq = sum(
            float(sub.get_grad_norm()) ** 2
            for sub in sub_optimizers(optimizer)
            if not holds_experts(sub)
        )
    b_big = b_small * len(small_sq)  # micro-batches of one rank, or one share per DP rank
    if not all(math.isfinite(x) for x in (*small_sq, big_sq)):
        return {}  # a non-finite step would poison the moving averages for good
    noise_scale.update(small_sq, big_sq, b_small, b_big)
    measured = {
        f"{prefix}/noise_scale": noise_scale.b_simple,
        f"{prefix}/noise_grad_sq": noise_scale.grad_sq,
        f"{prefix}/noise_trace_sigma": noise_scale.trace_sigma,
        # this step's own unbiased estimates: hyrl tune's ratio of means and its bootstrap
        f"{prefix}/noise_grad_sq_step": noise_scale.step_grad_sq,
        f"{prefix}/noise_trace_sigma_step": noise_scale.step_trace_sigma,
    }
    # B_simple is undefined while the averaged |G|^2 is not positive: not measured, left out
    return {k: v for k, v in measured.items() if math.isfinite(v)}
