"""Policy-gradient losses shared by GRPO and PPO: PPO-clip on token ratios, or GSPO on sequence
ratios; aggregated over tokens by --loss-agg-mode.

All token tensors are [*, T]; `mask` is 1 on response tokens and 0 elsewhere. By default every
per-token quantity is reduced with `masked_token_mean`, the token-level mean of DAPO (Yu et al.
2025); `loss_weights` gives the other aggregations.
"""

from __future__ import annotations

import torch
from torch import Tensor

KL_KINDS = ("k1", "low_var_kl")
POLICY_LOSSES = ("ppo", "gspo")
# How per-token terms become one loss (verl's loss_agg_mode names): token-mean (DAPO) over every
# response token of the global batch; the seq-mean-* ones average over sequences, of each one's
# token mean, token sum, or token sum over a constant (Dr.GRPO, Liu et al. 2025, arXiv 2503.20783).
LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


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


def sequence_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_clip: float,
    eps_clip_high: float,
) -> tuple[Tensor, Tensor]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071, eq. 7 and its token form, eq. 13): the
    importance ratio of a whole response, s_i = exp(mean_t (log pi - log pi_old)) over its
    response tokens, clipped to [1 - eps_clip, 1 + eps_clip_high] (the paper: 3e-4, 4e-4).
    Per token s_i,t = sg[s_i] * pi_t / sg[pi_t]: the value s_i, the gradient s_i grad log pi_t,
    so with the sequence mean of token means the gradient is GSPO's. log s_i is capped at 10
    (verl does the same) so exp cannot overflow.
    Returns (loss_per_token, clip_frac_per_token) as policy_loss."""
    mask = mask.to(log_probs.dtype)
    lengths = mask.sum(dim=-1).clamp(min=1)
    log_s = ((log_probs - old_log_probs) * mask).sum(dim=-1) / lengths  # [B]
    log_ratio = log_probs - log_probs.detach() + log_s.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(log_ratio, max=10.0))
    surrogate = ratio * advantages
    surrogate_clipped = torch.clamp(ratio, 1 - eps_clip, 1 + eps_clip_high) * advantages
    loss = -torch.minimum(surrogate, surrogate_clipped)
    clipped = (surrogate_clipped < surrogate).to(loss.dtype)
    return loss, clipped


def loss_weights(mask: Tensor, mode: str, max_response_len: int | None = None) -> Tensor | None:
    """Per-token factors w [N, L] over a whole global batch (mask: its [N, L] response mask) so
    that the loss is sum_t w_t x_t; None for token-mean, which divides by the batch's token
    count (masked_token_mean). With N sequences of L_i response tokens each:
        seq-mean-token-mean      w = 1 / (N L_i)     (mean over sequences of token means)
        seq-mean-token-sum       w = 1 / N           (mean over sequences of token sums)
        seq-mean-token-sum-norm  w = 1 / (N L_max)   (Dr.GRPO: a constant, L_max the longest
                                                      response the rollout allows)"""
    if mode == "token-mean":
        return None
    mask = mask.float()
    n = mask.shape[0]
    if mode == "seq-mean-token-mean":
        return mask / mask.sum(dim=-1, keepdim=True).clamp(min=1) / n
    if mode == "seq-mean-token-sum":
        return mask / n
    if mode == "seq-mean-token-sum-norm":
        if not max_response_len or max_response_len < 1:
            raise ValueError(
                f"seq-mean-token-sum-norm needs the longest response, got {max_response_len}"
            )
        return mask / (n * max_response_len)
    raise ValueError(f"unknown loss aggregation {mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}")


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
    policy_loss_kind: str = "ppo",
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO objective (DeepSeekMath eq. 3, with the token-level mean of DAPO), to minimise:

        L = mean_t[pg_t] + kl_loss_coef * mean_t[KL_t(pi || pi_ref)] - entropy_coef * mean_t[H_t]

    log_probs, old_log_probs, mask, ref_log_probs, entropy: [B, T]; advantages: [B] or [B, T].
    Every mean is masked_token_mean over the same total_tokens, so with an explicit global total
    the loss and each stat are this micro-batch's share of the global mean (sum them up).
    pg_weights: [B, T] constant per-token factors of the policy-gradient term (importance
    weights against the rollout policy, hyrl.algorithms.mismatch); the KL and entropy terms
    are not weighted.
    policy_loss_kind: "ppo" (token ratios, policy_loss) or "gspo" (sequence ratios,
    sequence_policy_loss, with eps_clip / eps_clip_high its own range).
    weights: loss_weights() of these rows (--loss-agg-mode other than token-mean): the loss's
    three terms are then sum_t w_t x_t instead of token means; the stats stay token means.
    stats (detached scalars): pg_loss, clip_frac, approx_kl (k3 between pi_old and pi, for
    monitoring), kl (only with ref_log_probs), entropy (only with entropy).
    """
    mask = mask.to(log_probs.dtype)
    if advantages.dim() == log_probs.dim() - 1:
        advantages = advantages.unsqueeze(-1)  # [B] -> [B, 1]
    advantages = advantages.to(log_probs.dtype)

    def mean(values: Tensor) -> Tensor:
        return masked_token_mean(values, mask, total_tokens)

    def aggregate(values: Tensor) -> Tensor:  # the loss's terms, by --loss-agg-mode
        return mean(values) if weights is None else (values * weights.to(values.dtype)).sum()

    if policy_loss_kind == "gspo":
        high = eps_clip if eps_clip_high is None else eps_clip_high
        pg, clipped = sequence_policy_loss(
            log_probs, old_log_probs, advantages, mask, eps_clip, high
        )
    elif policy_loss_kind == "ppo":
        pg, clipped = policy_loss(log_probs, old_log_probs, advantages, eps_clip, eps_clip_high)
    else:
        raise ValueError(
            f"unknown policy loss {policy_loss_kind!r}; allowed: {', '.join(POLICY_LOSSES)}"
        )
    if pg_weights is not None:
        pg = pg * pg_weights.detach().to(pg.dtype)
    pg_loss = aggregate(pg)
    loss = pg_loss
    stats = {
        "pg_loss": pg_loss.detach(),
        "clip_frac": mean(clipped).detach(),
        "approx_kl": mean(kl_penalty(log_probs.detach(), old_log_probs, "low_var_kl")),
    }
    if ref_log_probs is not None:
        kl = aggregate(kl_penalty(log_probs, ref_log_probs, kl_loss_type))
        loss = loss + kl_loss_coef * kl
        stats["kl"] = kl.detach()
    if entropy is not None:
        mean_entropy = aggregate(entropy)
        loss = loss - entropy_coef * mean_entropy
        stats["entropy"] = mean_entropy.detach()
    return loss, stats
