"""Token-level policy-gradient losses shared by GRPO (now) and PPO (later).

All token tensors are [*, T]; `mask` is 1 on response tokens and 0 elsewhere. Every per-token
quantity is reduced with `masked_token_mean`, the token-level mean of DAPO (Yu et al. 2025).
"""

from __future__ import annotations

import torch
from torch import Tensor

KL_KINDS = ("k1", "low_var_kl")


def policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    eps_clip: float,
    eps_clip_high: float | None = None,
) -> tuple[Tensor, Tensor]:
    """PPO-clip surrogate per token, and where its clipped branch was the active one.

    advantages: same shape as log_probs, or broadcastable to it (e.g. [B, 1]).
    eps_clip_high: upper clip offset (DAPO's "clip-higher"); None means eps_clip.
    Returns (loss_per_token, clip_frac_per_token); the second is 1.0 where the min chose the
    clipped term and it differs from the unclipped one (no gradient flows there), else 0.0.
    """
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = torch.exp(log_probs - old_log_probs)  # r_t = pi / pi_old
    surrogate = ratio * advantages
    surrogate_clipped = torch.clamp(ratio, 1 - eps_clip, 1 + eps_high) * advantages
    loss = -torch.minimum(surrogate, surrogate_clipped)  # Schulman 2017, eq. 7
    clipped = (surrogate_clipped < surrogate).to(loss.dtype)
    return loss, clipped


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, kind: str) -> Tensor:
    """Per-token sample estimate of KL(pi || pi_ref) for tokens drawn from pi.

    "k1": log pi - log pi_ref (unbiased, high variance, can be negative).
    "low_var_kl": k3 = r - log r - 1 with r = pi_ref / pi (Schulman, "Approximating KL
        divergence", 2020): unbiased, never negative; clamped to [-10, 10] for stability.
    """
    if kind == "k1":
        return log_probs - ref_log_probs  # k1 = -log r
    if kind == "low_var_kl":
        # log r is clamped first so exp cannot overflow to inf (inf * 0 grad would give NaN).
        log_r = torch.clamp(ref_log_probs - log_probs, min=-20.0, max=20.0)
        k3 = torch.exp(log_r) - log_r - 1  # k3 = r - log r - 1
        return torch.clamp(k3, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; allowed: {', '.join(KL_KINDS)}")


def masked_token_mean(values: Tensor, mask: Tensor, total_tokens: float | None = None) -> Tensor:
    """sum(values * mask) / total_tokens, the token-level mean (DAPO).

    total_tokens defaults to mask.sum() (at least 1). A data-parallel caller passes the number
    of response tokens in the WHOLE global batch, so that the results summed over micro-batches
    and ranks (and so their gradients) equal the mean over every token of the global batch.
    """
    total: Tensor | float
    if total_tokens is None:
        total = mask.sum().clamp(min=1)
    else:
        if not total_tokens > 0:
            raise ValueError(f"total_tokens must be positive, got {total_tokens}")
        total = total_tokens
    return (values * mask).sum() / total


def grpo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_clip: float,
    eps_clip_high: float | None = None,
    ref_log_probs: Tensor | None = None,
    kl_loss_coef: float = 0.0,
    kl_loss_type: str = "low_var_kl",
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    total_tokens: float | None = None,
    pg_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO objective (DeepSeekMath eq. 3, with the token-level mean of DAPO), to minimise:

        L = mean_t[pg_t] + kl_loss_coef * mean_t[KL_t(pi || pi_ref)] - entropy_coef * mean_t[H_t]

    log_probs, old_log_probs, mask, ref_log_probs, entropy: [B, T]; advantages: [B] or [B, T].
    Every mean is masked_token_mean over the same total_tokens, so with an explicit global total
    the loss and each stat are this micro-batch's share of the global mean (sum them up).
    pg_weights: [B, T] constant per-token factors of the policy-gradient term (importance
    weights against the rollout policy, hyrl.algorithms.mismatch); the KL and entropy terms
    are not weighted.
    stats (detached scalars): pg_loss, clip_frac, approx_kl (k3 between pi_old and pi, for
    monitoring), kl (only with ref_log_probs), entropy (only with entropy).
    """
    mask = mask.to(log_probs.dtype)
    if advantages.dim() == log_probs.dim() - 1:
        advantages = advantages.unsqueeze(-1)  # [B] -> [B, 1]
    advantages = advantages.to(log_probs.dtype)

    def mean(values: Tensor) -> Tensor:
        return masked_token_mean(values, mask, total_tokens)

    pg, clipped = policy_loss(log_probs, old_log_probs, advantages, eps_clip, eps_clip_high)
    if pg_weights is not None:
        pg = pg * pg_weights.detach().to(pg.dtype)
    pg_loss = mean(pg)
    loss = pg_loss
    stats = {
        "pg_loss": pg_loss.detach(),
        "clip_frac": mean(clipped).detach(),
        "approx_kl": mean(kl_penalty(log_probs.detach(), old_log_probs, "low_var_kl")),
    }
    if ref_log_probs is not None:
        kl = mean(kl_penalty(log_probs, ref_log_probs, kl_loss_type))
        loss = loss + kl_loss_coef * kl
        stats["kl"] = kl.detach()
    if entropy is not None:
        mean_entropy = mean(entropy)
        loss = loss - entropy_coef * mean_entropy
        stats["entropy"] = mean_entropy.detach()
    return loss, stats
