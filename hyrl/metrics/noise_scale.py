"""The simple gradient noise scale B_simple (McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training", appendix A), from gradient norms measured at two batch sizes.

    B_simple = tr(Sigma) / |G|^2
G: the true (full-data) gradient; Sigma: the covariance of the per-example gradients. A batch of
b examples has E|g_b|^2 = |G|^2 + tr(Sigma) / b, so two batch sizes b < B give unbiased
estimates of both terms (two_batch_estimates). Each is noisy: both are smoothed with a
bias-corrected exponential moving average (as Adam's moments) and B_simple is the ratio of the
smoothed values, not a smoothed ratio (the ratio of two noisy estimates is biased).

Per optimizer step, the small batches are the micro-batches or data-parallel ranks (their
|g_b|^2 are averaged) and the big batch is the accumulated / all-reduced step gradient.
"""

from __future__ import annotations

import math


def _check_batch_sizes(b_small: float, b_big: float) -> None:
    if not b_small > 0:
        raise ValueError(f"b_small must be > 0, got {b_small}")
    if not b_big > 0:
        raise ValueError(f"b_big must be > 0, got {b_big}")
    if not b_small < b_big:
        raise ValueError(f"b_small must be < b_big, got b_small={b_small}, b_big={b_big}")


def _check_beta(beta: float) -> None:
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta}")


def two_batch_estimates(
    small_sq: float, big_sq: float, b_small: float, b_big: float
) -> tuple[float, float]:
    """Unbiased one-step estimates (|G|^2, tr(Sigma)) from |g_b|^2 = small_sq, |g_B|^2 = big_sq.

    Either can come out negative on a noisy step; that is what keeps them unbiased.
    """
    _check_batch_sizes(b_small, b_big)
    b, B = float(b_small), float(b_big)
    grad_sq = (B * big_sq - b * small_sq) / (B - b)  # McCandlish 2018, app. A.1
    trace_sigma = (small_sq - big_sq) / (1.0 / b - 1.0 / B)  # McCandlish 2018, app. A.1
    return grad_sq, trace_sigma


class GradientNoiseScale:
    """Bias-corrected EMAs of the two-batch estimates of |G|^2 and tr(Sigma), and their ratio."""

    def __init__(self, beta: float = 0.99):
        _check_beta(beta)
        self.beta = float(beta)
        self.step = 0
        self._ema_grad_sq = 0.0
        self._ema_trace_sigma = 0.0
        # the last step's unbiased one-step estimates, before the averages (hyrl tune reads them)
        self.step_grad_sq = math.nan
        self.step_trace_sigma = math.nan

    def update(self, small_sq_norms, big_sq_norm: float, b_small: float, b_big: float) -> None:
        """small_sq_norms: iterable of |g_b|^2 (each for a batch of b_small examples);
        big_sq_norm: |g_B|^2 for b_big examples."""
        small = [float(x) for x in small_sq_norms]
        if not small:
            raise ValueError("small_sq_norms must hold at least one squared norm")
        small_sq = sum(small) / len(small)  # mean over micro-batches
        grad_sq, trace_sigma = two_batch_estimates(small_sq, float(big_sq_norm), b_small, b_big)
        self.step += 1
        self.step_grad_sq, self.step_trace_sigma = grad_sq, trace_sigma
        self._ema_grad_sq = self.beta * self._ema_grad_sq + (1 - self.beta) * grad_sq
        self._ema_trace_sigma = self.beta * self._ema_trace_sigma + (1 - self.beta) * trace_sigma

    def _corrected(self, ema: float) -> float:
        if self.step == 0:
            return math.nan
        return ema / (1 - self.beta**self.step)  # Kingma & Ba 2015, alg. 1

    @property
    def grad_sq(self) -> float:
        return self._corrected(self._ema_grad_sq)

    @property
    def trace_sigma(self) -> float:
        return self._corrected(self._ema_trace_sigma)

    @property
    def b_simple(self) -> float:
        grad_sq = self.grad_sq
        if not grad_sq > 0:  # also nan before a step
            return math.nan
        return self.trace_sigma / grad_sq  # McCandlish 2018, sec. 2.2

    def state_dict(self) -> dict:
        return {
            "beta": self.beta,
            "step": self.step,
            "ema_grad_sq": self._ema_grad_sq,
            "ema_trace_sigma": self._ema_trace_sigma,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores everything, beta included, so a resumed run continues identically."""
        _check_beta(state["beta"])
        self.beta = float(state["beta"])
        self.step = int(state["step"])
        self._ema_grad_sq = float(state["ema_grad_sq"])
        self._ema_trace_sigma = float(state["ema_trace_sigma"])
