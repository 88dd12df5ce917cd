"""Goodput: the batch of least time to target, as the autopilot chooses it (pure Python: no
torch, no processes; the profile is read from a file by `load_profile`).

Time to target T(B) = S(B) / R(B): samples to target over throughput. With hyrl's S = the
examples E of McCandlish et al. 2018 (eq. 2.11, their S is optimizer steps),
    S(B) = S_min (1 + B / B_noise),
so T is least where the goodput
    G(B) = R(B) / (1 + B / B_noise)        (throughput x statistical efficiency per sample)
is largest (Pollux, Qiao et al., OSDI 2021, eq. 1 and sec. 3.1; S_min cancels). Relative to a
batch B0: G(B) / G(B0) = [R(B) / R(B0)] x (1 + B0/B_noise) / (1 + B/B_noise) = 1 / T ratio, the
`hyrl tune` model's T(B)/T(B0) (`hyrl.batchsize.tune.model.samples_ratio`) inverted.

R(B), responses per second of the loop at B (`ThroughputModel`):
- at a B the run has measured (every rollout step there but the first after a change, which
  warms up; the last `WINDOW`): the step's time split into fixed stages (weight sync,
  offload, overhead: `FIXED_STAGES`, seconds per rollout step) and the rest (generation, reward,
  log-probs, values, updates: seconds per response token u), so a B measured while responses
  were shorter is judged at today's length L:
      t(B) = t_fixed(B) + u(B) x N(B) x L,    R(B) = N(B) / t(B),   N = B x optimizer steps
      per rollout;
- at a B it has not measured, once two B are measured (and no tune report is given): on the
  straight line of step seconds against N through the two measured B nearest on a log scale
  (slope >= 0), which tells fixed costs from per-response ones by measurement;
- at a B it has not measured, with one B measured, from it (the anchor a):
      no profile:      t(B) = t_fixed(a) + u(a) x N(B) x L   (only the fixed stages
                       amortise: a stage's own fixed part, e.g. an optimizer step that costs
                       the same at any B, is not known until a second B is measured);
      a decode profile (`hyrl profile-rollout`'s profile.json, responses/s r at concurrency C):
                       generation's share of u scaled by r(C(a)) / r(C(B)), C = min(N,
                       --rollout-concurrency), r interpolated on log-log between its rows and
                       held flat beyond them;
      a `hyrl tune` report (report.json): R(B) = R(a) x R_tune(B) / R_tune(a), its
                       predicted responses/s interpolated the same way.
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyrl.batchsize.tune.model import (
    DECODE_STAGES,
    FIXED_STAGES,
    STAGES,
    TuneModelError,
    decode_rates,
)

WINDOW = 8  # measurements kept per batch size (the latest: the load and lengths drift)


class ProfileError(ValueError):
    """An --autopilot-profile the autopilot cannot use; the message says what is wrong."""


def goodput(responses_per_s: float, B: float, b_noise: float) -> float:
    """G(B) = R(B) / (1 + B / B_noise) (module docstring): R(B) for an unbounded noise scale
    (every batch is as efficient per sample), R(B) / B for one <= 0 (pure noise)."""
    if math.isinf(b_noise):
        return responses_per_s
    if b_noise <= 0:
        return responses_per_s / B
    return responses_per_s / (1 + B / b_noise)


def _interp_loglog(points: Mapping[float, float], x: float) -> float:
    """y at x, linear in (log x, log y) between the nearest points, flat beyond them."""
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]]
    if x >= xs[-1]:
        return points[xs[-1]]
    i = bisect.bisect_left(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    y0, y1 = points[x0], points[x1]
    w = math.log(x / x0) / math.log(x1 / x0)
    return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))


@dataclass(frozen=True)
class Profile:
    """How R changes with the batch where the run has not measured it: `kind` "decode"
    (responses/s per concurrency) or "tune" (predicted responses/s per responses per step)."""

    kind: str
    points: dict[float, float]
    source: str

    def decode_factor(self, c_from: int, c_to: int) -> float:
        """r(C_from) / r(C_to): how generation's seconds per response change from C_from."""
        return _interp_loglog(self.points, c_from) / _interp_loglog(self.points, c_to)

    def throughput_factor(self, b_from: int, b_to: int) -> float:
        """R_tune(B_to) / R_tune(B_from)."""
        return _interp_loglog(self.points, b_to) / _interp_loglog(self.points, b_from)


def load_profile(path: str | Path) -> Profile:
    """--autopilot-profile DIR (or a file in it): a `hyrl tune` --out (report.json) or a `hyrl
    profile-rollout` --out (profile.json). Raises ProfileError naming what is missing."""
    p = Path(path)
    candidates = [p] if p.is_file() else [p / "report.json", p / "profile.json"]
    found = next((f for f in candidates if f.is_file()), None)
    if found is None:
        raise ProfileError(
            f"no report.json (hyrl tune --out) or profile.json (hyrl profile-rollout --out) in {p}"
        )
    try:
        content = json.loads(found.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ProfileError(f"{found}: not readable JSON ({err})") from None
    if isinstance(content, Mapping) and "candidates" in content:
        points = {}
        for cand in content["candidates"] or []:
            B, r = cand.get("responses_per_step"), cand.get("responses_per_s")
            if isinstance(B, int) and isinstance(r, (int, float)) and B > 0 and r > 0:
                points[float(B)] = float(r)
        if len(points) < 2:
            raise ProfileError(
                f"{found}: a hyrl tune report with fewer than two candidates that have "
                "responses_per_step and a positive responses_per_s"
            )
        return Profile("tune", points, str(found))
    try:
        rates = decode_rates(content)
    except TuneModelError as err:
        raise ProfileError(f"{found}: {err}") from None
    return Profile("decode", {float(c): r for c, r in rates.items()}, str(found))


@dataclass(frozen=True)
class StepTiming:
    """One rollout step at batch B: its stage seconds (perf/<stage>_s of `STAGES`) and the mean
    response length in tokens."""

    B: int
    stage_s: Mapping[str, float]
    response_tokens: float

    @classmethod
    def from_record(cls, B: int, record: Mapping) -> StepTiming | None:
        """From a rollout step's last record (its stage timers cover the whole rollout step) and
        the response length its metrics carry; None when it has no timers, no length, or no
        actor update (PPO's critic-only warm-up: not a step at this B's full cost)."""
        stage_s = {}
        for name in STAGES:
            v = record.get(f"perf/{name}_s")
            if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0:
                stage_s[name] = float(v)
        length = record.get("train/response_len_mean")
        if "actor_train" not in stage_s or not isinstance(length, (int, float)) or not length > 0:
            return None
        return cls(int(B), stage_s, float(length))


class ThroughputModel:
    """R(B) from the run's own step timings and an optional profile (module docstring)."""

    def __init__(self, steps_per_rollout: int, concurrency_cap: int, profile: Profile | None):
        self.steps_per_rollout = steps_per_rollout
        self.concurrency_cap = concurrency_cap
        self.profile = profile
        # B -> [(fixed seconds, generation s/token, other s/token, tokens), ...] latest last
        self.measured: dict[int, list[tuple[float, float, float, float]]] = {}
        self.response_tokens: float | None = None  # the latest length

    def responses(self, B: int) -> int:
        return B * self.steps_per_rollout

    def observe(self, step: StepTiming, counts: bool) -> None:
        """Take one rollout step's timing; `counts` False (the first step at a B) keeps only
        its response length."""
        self.response_tokens = step.response_tokens
        if not counts:
            return
        tokens = self.responses(step.B) * step.response_tokens
        fixed = sum(t for s, t in step.stage_s.items() if s in FIXED_STAGES)
        gen = sum(t for s, t in step.stage_s.items() if s in DECODE_STAGES) / tokens
        other = (
            sum(t for s, t in step.stage_s.items() if s not in FIXED_STAGES + DECODE_STAGES)
            / tokens
        )
        rows = self.measured.setdefault(step.B, [])
        rows.append((fixed, gen, other, step.response_tokens))
        del rows[:-WINDOW]

    def _medians(self, B: int) -> tuple[float, float, float]:
        rows = self.measured[B]
        return tuple(statistics.median(r[i] for r in rows) for i in range(3))  # type: ignore[return-value]

    def anchor(self, B: int) -> int | None:
        """The measured B nearest to B on a log scale (the larger on a tie); None before any."""
        if not self.measured:
            return None
        return min(self.measured, key=lambda a: (abs(math.log(B / a)), -a))

    def responses_per_s(self, B: int) -> float | None:
        """R(B) at today's response length; None before any measurement."""
        a = self.anchor(B)
        if a is None or self.response_tokens is None:
            return None
        fixed, gen, other = self._medians(a)
        if a != B and self.profile is not None and self.profile.kind == "tune":
            return self._rate(a, fixed, gen, other) * self.profile.throughput_factor(a, B)
        if a != B and len(self.measured) >= 2:
            return self._line(B)
        if a != B and self.profile is not None:  # decode: generation's rate at B's concurrency
            gen *= self.profile.decode_factor(self._concurrency(a), self._concurrency(B))
        return self._rate(B, fixed, gen, other)

    def _seconds(self, B: int) -> float:
        """A measured B's step seconds at today's response length."""
        assert self.response_tokens is not None, "checked by the caller"
        fixed, gen, other = self._medians(B)
        return fixed + (gen + other) * self.responses(B) * self.response_tokens

    def _line(self, B: int) -> float:
        """R(B) on the straight line of step seconds against N through the two measured B
        nearest on a log scale (its slope at least 0: more responses never take less time)."""
        a, b = sorted(self.measured, key=lambda m: (abs(math.log(B / m)), -m))[:2]
        t_a, t_b = self._seconds(a), self._seconds(b)
        n_a, n_b = self.responses(a), self.responses(b)
        slope = max(0.0, (t_b - t_a) / (n_b - n_a))
        seconds = t_a + slope * (self.responses(B) - n_a)
        if not seconds > 0:  # below both on a steep line: the nearer one's time
            seconds = t_a
        return self.responses(B) / seconds

    def _rate(self, B: int, fixed: float, gen: float, other: float) -> float:
        """N(B) / t(B) at today's response length."""
        assert self.response_tokens is not None, "checked by the caller"
        N = self.responses(B)
        return N / (fixed + (gen + other) * N * self.response_tokens)

    def _concurrency(self, B: int) -> int:
        return min(self.responses(B), self.concurrency_cap)

    def best(self, b_noise: float, allowed: Sequence[int]) -> tuple[int, dict[int, float]]:
        """The allowed B of largest goodput at this noise scale (ties: the smaller) and every
        allowed B's goodput; (the smallest allowed, {}) before any measurement."""
        table = {}
        for B in allowed:
            R = self.responses_per_s(B)
            if R is not None:
                table[B] = goodput(R, B, b_noise)
        if not table:
            return min(allowed), {}
        return max(table, key=lambda B: (table[B], -B)), table

    def state_dict(self) -> dict:
        return {
            "measured": {str(B): [list(r) for r in rows] for B, rows in self.measured.items()},
            "response_tokens": self.response_tokens,
        }

    def load_state_dict(self, state: Mapping) -> None:
        self.measured = {
            int(B): [tuple(float(x) for x in r) for r in rows]  # type: ignore[misc]
            for B, rows in state["measured"].items()
        }
        tokens = state["response_tokens"]
        self.response_tokens = None if tokens is None else float(tokens)
