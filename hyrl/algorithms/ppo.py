"""PPO with a learned critic (Schulman et al. 2017), as used for RLHF (Ouyang et al. 2022).

Token tensors are [N, L] in the layout of batch.py: position t predicts token t+1, `mask` is 1
exactly where the target is a response token the model sampled: contiguous in a single turn,
with gaps where an environment wrote tokens between turns.
A value V[n, t] is the critic's value of the state that has seen tokens 0..t, so rewards,
values, advantages and returns all live on the same positions as the log-probs.
The actor needs no separate loss here: `losses.grpo_loss` already takes advantages of shape
[N, L], and PPO's actor objective is that same clipped surrogate fed with the GAE advantages.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from hyrl.algorithms.losses import masked_token_mean


def token_rewards(
    scores: Tensor, mask: Tensor, kl: Tensor | None = None, kl_coef: float = 0.0
) -> Tensor:
    """Per-token reward r_t [N, L] (float32) from one score per sequence and a KL penalty.

    scores: [N], placed on the LAST masked position of each row (terminal reward).
    kl: [N, L] per-token KL(pi || pi_ref) estimate (detached here: rewards are constants);
        kl_coef * kl is subtracted at every masked position. Required when kl_coef != 0.
    Zero outside the mask; a row with an empty mask gets no reward at all (its score is dropped).
    """
    if kl is None and kl_coef != 0.0:
        raise ValueError("kl_coef is nonzero but no kl was given")
    m = mask.to(torch.float32)
    N, L = m.shape
    positions = torch.arange(1, L + 1, device=m.device, dtype=torch.float32)
    last = (positions * m).argmax(dim=1)  # last masked index per row
    has_any = (m.sum(dim=1) > 0).to(torch.float32)
    rewards = torch.zeros_like(m)
    rewards[torch.arange(N, device=m.device), last] = scores.detach().to(torch.float32) * has_any
    if kl is not None:
        rewards = rewards - kl_coef * kl.detach().to(torch.float32)  # Ziegler 2019, eq. 2
    return rewards * m


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lambd: float
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016) over each row's masked positions.

    rewards, values, mask: [N, L]. Computed right to left over the masked positions only, t'
    the next masked position after t:
        delta_t = r_t + gamma * V_t' - V_t
        A_t     = delta_t + gamma * lambd * A_t'
        R_t     = A_t + V_t
    with V_t' = A_t' = 0 after the last masked position, so the episode ends there (bootstrap
    0). A position outside the mask inside a row (a token an environment wrote between two of
    the model's turns) is skipped, not an end: the model's token before it bootstraps from the
    model's token after it. With one contiguous masked span (a single turn) t' = t + 1.
    Returns (advantages, returns), [N, L], zero outside the mask, with no gradient (rewards and
    values are detached).
    """
    dtype = torch.promote_types(rewards.dtype, values.dtype)
    r = rewards.detach().to(dtype)
    V = values.detach().to(dtype)
    m = mask.to(dtype)
    on = mask > 0
    N, L = m.shape
    advantages = torch.zeros_like(V)
    next_value = torch.zeros(N, dtype=dtype, device=V.device)  # V_t' of the next masked t'
    next_adv = torch.zeros(N, dtype=dtype, device=V.device)  # A_t'
    for t in reversed(range(L)):
        delta = r[:, t] + gamma * next_value - V[:, t]  # GAE paper, eq. 10
        A_t = (delta + gamma * lambd * next_adv) * m[:, t]  # GAE paper, eq. 16
        advantages[:, t] = A_t
        next_value = torch.where(on[:, t], V[:, t], next_value)
        next_adv = torch.where(on[:, t], A_t, next_adv)
    returns = (advantages + V) * m  # lambda-return target
    return advantages, returns


def masked_whiten(
    values: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the masked entries, zero outside the mask.

    mean and var are the masked mean and POPULATION variance (divided by the count, not count-1).
    shift_mean=False adds the mean back, rescaling only (as in TRL). An empty mask gives zeros.
    """
    m = mask.to(values.dtype)
    count = m.sum().clamp(min=1)
    mean = (values * m).sum() / count
    var = (((values - mean) * m) ** 2).sum() / count
    whitened = (values - mean) * torch.rsqrt(var + eps)  # standard score
    if not shift_mean:
        whitened = whitened + mean
    return whitened * m


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    value_clip: float,
    total_tokens: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Clipped value loss of OpenAI baselines' PPO2, to minimise, and its clip fraction.

    values: [N, L] the critic's current output (gradient flows here only); old_values: the
    critic's output at rollout time; returns: GAE targets R_t. With c = value_clip > 0:
        V_clip = V_old + clamp(V - V_old, -c, c)
        loss_t = 0.5 * max((V - R)^2, (V_clip - R)^2)
    and loss_t = 0.5 * (V - R)^2 when c == 0. Reduced with masked_token_mean(total_tokens).
    clip_frac: the same token mean of 1[(V_clip - R)^2 > (V - R)^2] (0 when c == 0); detached.
    """
    m = mask.to(values.dtype)
    old_values = old_values.detach().to(values.dtype)
    returns = returns.detach().to(values.dtype)
    unclipped = (values - returns) ** 2
    if value_clip > 0:
        v_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        clipped = (v_clipped - returns) ** 2
        per_token = 0.5 * torch.maximum(unclipped, clipped)  # PPO2 (baselines) vf loss
        clip_ind = (clipped > unclipped).to(values.dtype)
    else:
        per_token = 0.5 * unclipped
        clip_ind = torch.zeros_like(unclipped)
    loss = masked_token_mean(per_token, m, total_tokens)
    clip_frac = masked_token_mean(clip_ind, m, total_tokens).detach()
    return loss, clip_frac


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var[R - V] / Var[R] over the masked entries (population variances), for monitoring.

    1 is a perfect critic, 0 one no better than predicting the mean return, < 0 worse than that.
    Returns nan when Var[R] is (numerically) zero — all masked returns equal, e.g. every reward
    0, where R = A + V carries only rounding noise — or the mask is empty: undefined.
    """
    keep = mask > 0
    R = returns.detach()[keep].double()
    V = values.detach()[keep].double()
    if R.numel() == 0:
        return math.nan
    var_R = torch.var(R, unbiased=False)
    if var_R <= 1e-12 * max(1.0, float(R.abs().max()) ** 2):
        return math.nan
    var_residual = torch.var(R - V, unbiased=False)
    return float(1 - var_residual / var_R)  # baselines explained_var
