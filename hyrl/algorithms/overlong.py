"""Over-long responses (DAPO, Yu et al. 2025, arXiv 2503.14476, section 3.4): a soft penalty on
the reward in the last L tokens before the length limit, and filtering truncated responses out
of the loss, so that a cut-off answer is not punished (or rewarded) for its content."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.rollout import RolloutView


def overlong_penalty(lengths: Tensor, max_len: int, buffer_len: int, factor: float = 1.0) -> Tensor:
    """DAPO's soft over-long punishment (its eq. 13), per response of `lengths` tokens:
        0                                    for |y| <= L_max - L_cache
        factor x ((L_max - L_cache) - |y|) / L_cache   inside the buffer (down to -factor)
    with L_max = max_len, L_cache = buffer_len; added to the reward. (The engine stops at
    L_max, so |y| never exceeds it.)"""
    if not 1 <= buffer_len <= max_len:
        raise ValueError(f"buffer_len must be in [1, {max_len}], got {buffer_len}")
    exceed = (lengths.double() - (max_len - buffer_len)).clamp(min=0)
    return -factor * exceed / buffer_len


def truncated_rows(finish_reasons: list[str]) -> Tensor:
    """[N] bool: the responses cut at the length limit (finish_reason "length")."""
    return torch.tensor([reason == "length" for reason in finish_reasons], dtype=torch.bool)


def shape_overlong(
    rewards: Tensor,
    lengths: list[int],
    finish_reasons: list[str],
    loss_mask: Tensor,
    max_len: int,
    buffer_len: int | None,
    penalty_factor: float,
    filtering: bool,
) -> tuple[Tensor, dict[str, float]]:
    """The rewards the advantages take and their metrics: with `buffer_len`
    (--overlong-buffer-len) the soft penalty added (train/overlong_penalty_mean,
    train/overlong_penalized_frac); with `filtering` (--overlong-filtering) the truncated
    responses' rows of `loss_mask` zeroed in place (train/overlong_filtered_frac)."""
    metrics: dict[str, float] = {}
    if buffer_len is not None:
        penalty = overlong_penalty(torch.tensor(lengths), max_len, buffer_len, penalty_factor)
        rewards = rewards + penalty.to(rewards.dtype)
        metrics["train/overlong_penalty_mean"] = float(penalty.mean())
        metrics["train/overlong_penalized_frac"] = float((penalty < 0).double().mean())
    if filtering:
        truncated = truncated_rows(finish_reasons)
        loss_mask[truncated] = 0.0
        metrics["train/overlong_filtered_frac"] = float(truncated.double().mean())
    return rewards, metrics


@dataclass(frozen=True)
class OverlongShaping:
    """`shape_overlong` under a run's flags (--rollout-max-response-len, --overlong-buffer-len,
    --overlong-penalty-factor, --overlong-filtering)."""

    max_len: int
    buffer_len: int | None
    penalty_factor: float
    filtering: bool

    @classmethod
    def of(cls, algorithm: AlgorithmView, rollout: RolloutView) -> OverlongShaping:
        """The algorithm's over-long settings, at the rollout's response length limit
        (--rollout-max-response-len)."""
        return cls(
            rollout.rollout_max_response_len,
            algorithm.overlong_buffer_len,
            algorithm.overlong_penalty_factor,
            algorithm.overlong_filtering,
        )

    def __call__(
        self, rewards: Tensor, lengths: list[int], finish_reasons: list[str], loss_mask: Tensor
    ) -> tuple[Tensor, dict[str, float]]:
        return shape_overlong(
            rewards,
            lengths,
            finish_reasons,
            loss_mask,
            self.max_len,
            self.buffer_len,
            self.penalty_factor,
            self.filtering,
        )
