"""GRPO's group-relative advantage (Shao et al. 2024, DeepSeekMath, section 4.1.2).

Each prompt is answered G times; a response's advantage is its reward measured against the
other answers to the same prompt, so no value network is needed.
"""

from __future__ import annotations

import torch


def group_advantages(
    rewards: torch.Tensor, group_size: int, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Outcome advantage A_i of each of N = num_prompts * G responses, one per response.

    rewards: [N] laid out group-contiguous: rows 0..G-1 answer prompt 0, rows G..2G-1 prompt 1...
    normalize_std: divide by the group's population standard deviation (unbiased=False, i.e.
        divided by G, not G-1); without it (Dr. GRPO, Liu et al. 2025) A_i = r_i - mean(r).
    A group whose rewards are all equal carries no learning signal and gets exactly 0.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.float().view(-1, group_size)  # [num_prompts, G]
    r_mean = r.mean(dim=1, keepdim=True)
    if normalize_std:
        r_std = r.std(dim=1, unbiased=False, keepdim=True)
        A = (r - r_mean) / (r_std + eps)  # DeepSeekMath 4.1.2, outcome supervision
    else:
        A = r - r_mean  # Dr. GRPO: no std division
    all_equal = (r == r[:, :1]).all(dim=1, keepdim=True)  # guards rounding in r - mean(r)
    return torch.where(all_equal, torch.zeros_like(A), A).view(-1)
