"""Seed-mean learning curves of a member (runs that differ only by seed) and their bootstrap.

- Grid: the union of the x values (cumulative `samples`, or `elapsed_s`) at which the member's
  runs evaluated the metric, from the latest first evaluation of its runs on (the mean starts
  where every run has started).
- A run's value at a grid point x is the linear interpolation of its curve between the two
  evaluations around x. Past its last evaluation the run is undefined, unless it ended because
  it reached the target (summary.json "ended" == "target", --stop-at-target): its last value
  is then carried forward.
- The seed-mean at x: mean_x = (1/n) * sum over the n seeds of v_seed(x), defined while every
  seed is, so the member's mean curve stops where the first of its runs stops.
- A bootstrap resample draws n seeds with replacement. As counts c (c_j = how often seed j was
  drawn, sum_j c_j = n) its mean is (1/n) * sum_j c_j v_j(x), defined while every drawn seed
  is. `first_crossings` finds where each resample's mean first reaches a level, by
  `hyrl.batchsize.curves.samples_to_reach`'s rule (linear interpolation between the two grid
  points around the crossing), vectorised.

Pure: numpy and `Run`s only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hyrl.batchsize.curves import metric_curve
from hyrl.batchsize.runs import Run

Axis = Literal["samples", "elapsed_s"]
ENDED_AT_TARGET = "target"  # summary.json "ended" of a run that --stop-at-target ended


def ended_at_target(run: Run) -> bool:
    """Whether the run stopped because it reached the target (summary.json "ended")."""
    return isinstance(run.summary, dict) and run.summary.get("ended") == ENDED_AT_TARGET


def run_points(run: Run, metric: str, axis: Axis) -> tuple[np.ndarray, np.ndarray]:
    """(x, values) of the run's evaluations of `metric`, x strictly increasing: evaluations
    without a finite x are dropped, and of several at one x the last is kept."""
    samples, elapsed, _, values = metric_curve(run, metric)
    xs = samples if axis == "samples" else elapsed
    by_x: dict[float, float] = {}
    for x, v in zip(xs, values):
        if math.isfinite(x) and math.isfinite(v):
            by_x[float(x)] = float(v)
    x_sorted = sorted(by_x)
    return np.array(x_sorted, dtype=float), np.array([by_x[x] for x in x_sorted], dtype=float)


@dataclass(frozen=True)
class SeedCurves:
    """A member's runs on one grid: `values[j, i]` is seed j's value at `x[i]`, NaN where the
    run is undefined (past its last evaluation, not carried)."""

    x: np.ndarray
    values: np.ndarray

    @property
    def n_seeds(self) -> int:
        return int(self.values.shape[0])

    def means(self, counts: np.ndarray) -> np.ndarray:
        """Mean curves of resamples: `counts` (n_resamples, n_seeds) -> (n_resamples, n_grid),
        mean = counts @ values / n_seeds, NaN from the first grid point where a drawn seed is
        undefined on (the curve stops there)."""
        counts = np.asarray(counts, dtype=float)
        undefined = ~np.isfinite(self.values)
        defined = ((counts > 0).astype(float) @ undefined.astype(float)) == 0
        defined = np.logical_and.accumulate(defined, axis=1)
        mean = counts @ np.where(undefined, 0.0, self.values) / self.n_seeds
        return np.where(defined, mean, np.nan)

    def mean(self) -> np.ndarray:
        """The seed-mean curve over all seeds (each drawn once)."""
        return self.means(np.ones((1, self.n_seeds)))[0]

    def end(self) -> int:
        """Grid points of the seed-mean curve: it is defined on x[:end]."""
        return int(np.sum(np.isfinite(self.mean())))

    def spread(self) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) over seeds at each grid point of the seed-mean curve (x[:end])."""
        end = self.end()
        window = self.values[:, :end]
        return window.min(axis=0), window.max(axis=0)


def seed_curves(runs: Sequence[Run], metric: str, axis: Axis) -> SeedCurves | None:
    """The member's runs interpolated on its grid (module docstring); None when no run has an
    evaluation with a finite x. Runs without one are left out (the caller notes them)."""
    points = [run_points(run, metric, axis) for run in runs]
    kept = [(run, xs, vs) for run, (xs, vs) in zip(runs, points) if xs.size]
    if not kept:
        return None
    start = max(float(xs[0]) for _, xs, _ in kept)
    grid = np.unique(np.concatenate([xs for _, xs, _ in kept]))
    grid = grid[grid >= start]
    rows = []
    for run, xs, vs in kept:
        row = np.interp(grid, xs, vs)
        if not ended_at_target(run):
            row[grid > xs[-1]] = np.nan
        rows.append(row)
    return SeedCurves(x=grid, values=np.vstack(rows))


def resample_counts(indices: np.ndarray, n_seeds: int) -> np.ndarray:
    """Seed indices drawn (n_resamples, n_seeds) -> how often each seed was drawn, per row."""
    counts = np.zeros((indices.shape[0], n_seeds), dtype=float)
    rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
    np.add.at(counts, (rows, indices.ravel()), 1.0)
    return counts


def first_crossings(
    x: np.ndarray, means: np.ndarray, level: float, higher_is_better: bool = True
) -> np.ndarray:
    """x at which each row of `means` (n_rows, n_grid; NaN past its stop) first reaches
    `level`: x_j when the first point reaching it is j = 0, else
    x_(j-1) + (level - m_(j-1)) / (m_j - m_(j-1)) * (x_j - x_(j-1)); +inf where the row never
    reaches it (censored). The same rule as `curves.samples_to_reach`."""
    means = np.atleast_2d(means)
    with np.errstate(invalid="ignore"):
        hit = means >= level if higher_is_better else means <= level
    out = np.full(means.shape[0], np.inf)
    rows = np.nonzero(hit.any(axis=1))[0]
    first = hit.argmax(axis=1)[rows]
    at_start = first == 0
    out[rows[at_start]] = x[0]
    r, j = rows[~at_start], first[~at_start]
    v0, v1 = means[r, j - 1], means[r, j]
    out[r] = x[j - 1] + (level - v0) / (v1 - v0) * (x[j] - x[j - 1])
    return out


def curve_ends(x: np.ndarray, means: np.ndarray) -> np.ndarray:
    """x of the last defined point of each row of `means` (where its curve stops; the sample
    budget a censored crossing is 'never within'); NaN for a row with none."""
    means = np.atleast_2d(means)
    n_defined = np.isfinite(means).sum(axis=1)
    out = np.full(means.shape[0], np.nan)
    has = n_defined > 0
    out[has] = x[n_defined[has] - 1]
    return out
