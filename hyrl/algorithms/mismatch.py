"""Train-inference mismatch: how far the trainer's log-probs are from the rollout engine's, and
the importance-sampling corrections against the rollout policy.

The engine samples token y_t from its own pi_rollout; the trainer's log-prob pass before the
update, with the same weights, gives pi_old (called pi_old_train below). In exact arithmetic
they are equal. Different kernels make them differ slightly; a token routed to other experts
(MoE), a broken weight sync or a wrong name mapping makes them differ a lot. Per token:

    log_ratio_t = log pi_old_train(y_t) - log pi_rollout(y_t),   ratio_t = exp(log_ratio_t)

All tensors are [N, L] in the layout of batch.py; `mask` is 1 on response positions. Pure
functions; the trainer applies them to the whole rollout batch before it is split into steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from hyrl.algorithms.batch import TokenBatch

if TYPE_CHECKING:
    from hyrl.config.concerns.mismatch import MismatchView

# exp() of a log-ratio beyond this would overflow float32; ratios this far out are all "huge".
_MAX_LOG_RATIO = 20.0


def usable(train_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor) -> Tensor:
    """Response tokens whose two log-probs are both finite (an engine can return -inf or nan
    for a token it should not have sampled); the others cannot be compared or weighted."""
    return (mask > 0) & torch.isfinite(train_log_probs) & torch.isfinite(rollout_log_probs)


def _log_ratio(train_log_probs: Tensor, rollout_log_probs: Tensor, m: Tensor) -> Tensor:
    """log pi_old_train - log pi_rollout where m (the `usable` tokens), 0 elsewhere, clamped
    to +-20."""
    diff = train_log_probs.double() - rollout_log_probs.double()
    diff = diff.where(m, torch.zeros((), dtype=torch.float64))
    return diff.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def mismatch_metrics(
    train_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor
) -> dict[str, float]:
    """The mismatch/* metrics of one rollout batch, over its response tokens.

    logprob_abs_diff_mean / _max: |log pi_old_train - log pi_rollout|;
    kl: mean over tokens of k3 = r - log r - 1 with r = pi_old_train / pi_rollout, the
        low-variance estimator of KL(pi_rollout || pi_old_train) for tokens drawn from
        pi_rollout (Schulman 2020); never negative;
    is_ratio_max / _min: the extreme ratios pi_old_train / pi_rollout;
    nonfinite_tokens: response tokens left out because a log-prob was -inf or nan.
    An empty mask gives {} (nothing to compare).
    """
    m = usable(train_log_probs, rollout_log_probs, mask)
    nonfinite = int((mask > 0).sum()) - int(m.sum())
    if not bool(m.any()):
        return {"mismatch/nonfinite_tokens": nonfinite} if nonfinite else {}
    abs_diff = (train_log_probs.double() - rollout_log_probs.double()).abs()[m]
    log_r = _log_ratio(train_log_probs, rollout_log_probs, m)[m]
    k3 = torch.exp(log_r) - log_r - 1
    ratio = torch.exp(log_r)
    return {
        "mismatch/nonfinite_tokens": nonfinite,
        "mismatch/logprob_abs_diff_mean": float(abs_diff.mean()),
        "mismatch/logprob_abs_diff_max": float(abs_diff.max()),
        "mismatch/kl": float(k3.mean()),
        "mismatch/is_ratio_max": float(ratio.max()),
        "mismatch/is_ratio_min": float(ratio.min()),
    }


def tis_weights(
    train_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, clip: float
) -> tuple[Tensor, float]:
    """Truncated importance sampling (--use-tis): w_t = min(pi_old_train / pi_rollout, clip).

    The policy-gradient term of token t is multiplied by w_t (a constant: no gradient flows
    through it), which corrects the off-policy gap between the engine that sampled and the
    trainer that learns, with the variance bounded by `clip` (Yao et al. 2025, "Your efficient
    RL framework secretly brings you off-policy RL training"). Returns (weights [N, L] float32,
    zero outside the mask and on tokens with a non-finite log-prob, which are dropped; the
    share of response tokens whose ratio exceeded clip).
    """
    if not clip >= 1:
        raise ValueError(f"tis clip must be >= 1, got {clip}")
    m = usable(train_log_probs, rollout_log_probs, mask)
    ratio = torch.exp(_log_ratio(train_log_probs, rollout_log_probs, m))
    weights = torch.clamp(ratio, max=clip).where(m, torch.zeros((), dtype=ratio.dtype))
    tokens = int((mask > 0).sum())
    clipped = int((ratio[m] > clip).sum())
    return weights.float(), clipped / tokens if tokens else 0.0


def mis_keep(
    train_log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    low: float,
    high: float,
    level: str = "token",
) -> tuple[Tensor, float]:
    """Masked importance sampling (--use-mis): which tokens stay in the policy-gradient loss.

    level "token": token t stays when low <= ratio_t <= high.
    level "sequence": a response stays (all its tokens) when its geometric-mean ratio
        exp(mean_t log_ratio_t) over its response tokens is within [low, high].
    A token with a non-finite log-prob is dropped, and so is its whole response at level
    "sequence". Returns (keep [N, L] float32 of 0/1, zero outside the mask; the share of
    response tokens dropped). Dropped tokens still count in the token-mean's denominator, so
    dropping some does not up-weight the others.
    """
    if not 0 <= low < 1 < high:
        raise ValueError(f"mis range must satisfy 0 <= low < 1 < high, got [{low}, {high}]")
    m = mask > 0
    ok = usable(train_log_probs, rollout_log_probs, mask)
    log_r = _log_ratio(train_log_probs, rollout_log_probs, ok)
    if level == "token":
        ratio = torch.exp(log_r)
        keep = (ratio >= low) & (ratio <= high) & ok
    elif level == "sequence":
        lengths = m.sum(dim=1)
        mean_log_r = log_r.sum(dim=1) / lengths.clamp(min=1)
        geo = torch.exp(mean_log_r)
        keep_row = (geo >= low) & (geo <= high) & (ok == m).all(dim=1)
        keep = keep_row[:, None] & m
    else:
        raise ValueError(f"unknown mis level {level!r}; allowed: token, sequence")
    tokens = int(m.sum())
    dropped = tokens - int(keep.sum())
    return keep.float(), dropped / tokens if tokens else 0.0


def corrections(
    train_log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    *,
    use_tis: bool,
    tis_clip: float,
    use_mis: bool,
    mis_low: float,
    mis_high: float,
    mis_level: str,
    with_metrics: bool = True,
) -> tuple[dict[str, float], Tensor | None]:
    """The mismatch/* metrics of a rollout batch and the policy-gradient weights its flags ask
    for: --use-tis clipped ratios, --use-mis a keep mask, both multiplied; None without
    either. with_metrics=False leaves out the metrics that need the whole batch (a
    micro-batch's weights inside the update: each metric is a host sync on a GPU)."""
    metrics = mismatch_metrics(train_log_probs, rollout_log_probs, mask) if with_metrics else {}
    weights = None
    if use_tis:
        weights, metrics["mismatch/tis_clipped_frac"] = tis_weights(
            train_log_probs, rollout_log_probs, mask, tis_clip
        )
    if use_mis:
        keep, metrics["mismatch/mis_masked_frac"] = mis_keep(
            train_log_probs, rollout_log_probs, mask, mis_low, mis_high, mis_level
        )
        weights = keep if weights is None else weights * keep
    return metrics, weights


@dataclass(frozen=True)
class Corrections:
    """The corrections a run's flags ask for (--use-tis, --tis-clip, --use-mis, --mis-low,
    --mis-high, --mis-level), applied by `corrections`."""

    use_tis: bool
    tis_clip: float
    use_mis: bool
    mis_low: float
    mis_high: float
    mis_level: str

    @classmethod
    def of(cls, mismatch: MismatchView) -> Corrections:
        return cls(
            mismatch.use_tis,
            mismatch.tis_clip,
            mismatch.use_mis,
            mismatch.mis_low,
            mismatch.mis_high,
            mismatch.mis_level,
        )

    @property
    def weighs(self) -> bool:
        """Whether the policy gradient takes weights (--use-tis or --use-mis)."""
        return self.use_tis or self.use_mis

    def __call__(
        self, train_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, with_metrics=True
    ) -> tuple[dict[str, float], Tensor | None]:
        """`corrections` of these rows under the run's flags."""
        return corrections(
            train_log_probs,
            rollout_log_probs,
            mask,
            use_tis=self.use_tis,
            tis_clip=self.tis_clip,
            use_mis=self.use_mis,
            mis_low=self.mis_low,
            mis_high=self.mis_high,
            mis_level=self.mis_level,
            with_metrics=with_metrics,
        )

    def of_old_log_probs(self, batch: TokenBatch, entropy: Tensor) -> dict[str, float]:
        """train/entropy (every row's, [N, L], averaged over response tokens) and the mismatch/*
        metrics of the batch's old log-probs against the engine's; sets batch.pg_weights, the
        importance weights of --use-tis / --use-mis (None without either)."""
        assert batch.old_log_probs is not None, "the log-prob pass or the update computed them"
        assert batch.rollout_log_probs is not None, "a RolloutBatch carries the engine's"
        mask = batch.loss_mask
        metrics = {"train/entropy": float((entropy * mask).sum() / mask.sum().clamp(min=1))}
        mismatch, batch.pg_weights = self(batch.old_log_probs, batch.rollout_log_probs, mask)
        metrics.update(mismatch)
        return metrics
