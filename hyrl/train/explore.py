"""Exploration for the goodput autopilot (`hyrl.train.autopilot`): without a profile it measures
a neighbouring batch once its model cannot rule out a gain there.

Why: with one measured B and no `--autopilot-profile`, `hyrl.batchsize.goodput.ThroughputModel`
lets only the fixed stages amortise, so a cost that is the same at any B (an optimizer step,
a launch) looks per-response, R looks flat, and B never leaves where it started. Measuring one
other B gives the model the straight line of step seconds against N that tells the two apart.

The neighbour of the B in use (`neighbour`): the nearest allowed B the hysteresis lets the
autopilot move to, the smallest allowed B' > h x B (h = --autopilot-hysteresis), or at the top
of the range the largest allowed B' < B / h.

The bound (`optimistic_gain`): step seconds t(N) never fall as the rollout's responses N grow
(t = fixed + slope x N with fixed, slope >= 0), so R(N) = N / t(N) lies between
    R(B) and R(B) x N'/N    above B (N' > N),    R(B) x N'/N and R(B)    below it,
and the most goodput B' can have against B = a is, with G(B) = R(B) / (1 + B / B_noise),
    G_opt(B') / G(a) = rho x (1 + a / B_noise) / (1 + B' / B_noise),
    rho = B' / a above a (every second of the step fixed), 1 below it (every second per
    response).
Above a this is > 1 for any B_noise > 0; it reaches --autopilot-min-gain only when B_noise is
large enough: at a = 128, B' = 208, B_noise = 10 it is 1.625 x 13.8 / 21.8 = 1.03, below the
default 1.05, and no measurement at 208 could make a move worth it; at B_noise = 1000 it is
1.625 x 1.128 / 1.208 = 1.52.

The rule (`explore_target`): explore B' when its R is not measured (predicted from one B, or
on the line through two others) and G_opt(B') / G(B) >= --autopilot-min-gain: the model cannot
rule out a gain worth moving for. A probe runs B' for `PROBE_STEPS` rollout steps (the first
warms up and is not timed, like every step after a change), then the autopilot decides as
usual from the B it left, now with B' measured: back to it, or on to the B of largest goodput.
A measured neighbour is not explored again.

The budget (`budget_allows`, --autopilot-explore-budget b, 0 turns exploration off): a probe
starts only when, with E exploring steps and S rollout steps so far and T = --num-steps,
    E + PROBE_STEPS <= b x (S + PROBE_STEPS)    and    E + PROBE_STEPS <= b x T,
so at every step of the run E <= b x S and E <= b x T (during a probe at its j-th step,
E + j <= b (S + PROBE_STEPS) - (PROBE_STEPS - j) <= b (S + j) for b <= 1). At b = 0.05 the
first probe can start after 57 rollout steps (3 <= 0.05 x 60).

Pure Python, state in `Exploration.state_dict` (checkpointed with the autopilot's).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hyrl.batchsize.goodput import goodput

PROBE_STEPS = 3  # rollout steps of one probe: the first warms up, the other two are timed


def neighbour(current: int, allowed: Sequence[int], hysteresis: float) -> int | None:
    """The nearest allowed B the autopilot could move to from `current` (responses): the
    smallest allowed B' > hysteresis x current, else (at the top of the range) the largest
    allowed B' < current / hysteresis; None when neither exists."""
    above = [b for b in allowed if b > hysteresis * current]
    if above:
        return min(above)
    below = [b for b in allowed if b * hysteresis < current]
    return max(below) if below else None


def optimistic_gain(current: int, candidate: int, b_noise: float) -> float:
    """The largest G(candidate) / G(current) that step seconds never falling with N allow (the
    module docstring): R scaled by candidate / current above current, held flat below it."""
    rho = candidate / current if candidate > current else 1.0
    return goodput(rho, candidate, b_noise) / goodput(1.0, current, b_noise)


def explore_target(
    current: int,
    allowed: Sequence[int],
    hysteresis: float,
    measured: Collection[int],
    b_noise: float,
    min_gain: float,
) -> tuple[int, float] | None:
    """(the neighbour B' to explore, its optimistic gain) when B' is not among the `measured`
    batches and G_opt(B') / G(current) >= min_gain; None when there is nothing to explore (no
    neighbour, one already measured, or a gain even the bound rules out)."""
    candidate = neighbour(current, allowed, hysteresis)
    if candidate is None or candidate in measured:
        return None
    gain = optimistic_gain(current, candidate, b_noise)
    return (candidate, gain) if gain >= min_gain else None


def budget_allows(
    explore_steps: int, rollout_steps: int, budget: float, total_steps: int | None
) -> bool:
    """Whether a probe of PROBE_STEPS may start after `rollout_steps` rollout steps of which
    `explore_steps` explored: E + k <= b x (S + k) and, given --num-steps T, E + k <= b x T."""
    if not budget > 0:
        return False
    spent = explore_steps + PROBE_STEPS
    if spent > budget * (rollout_steps + PROBE_STEPS):
        return False
    return total_steps is None or spent <= budget * total_steps


@dataclass
class Exploration:
    """The exploration's state: the budget (fraction of rollout steps) and --num-steps, and its
    counts: rollout steps seen, exploring steps among them, and the probe under way (home:
    the B it left, target: the B it runs, left: its steps still to run)."""

    budget: float
    total_steps: int | None = None
    rollout_steps: int = 0  # rollout steps observed
    steps: int = 0  # exploring rollout steps among them
    probes: int = 0  # probes started
    home: int | None = None  # the B a probe left (None: no probe under way)
    target: int | None = None  # the B it runs
    left: int = 0  # its rollout steps still to run

    @property
    def active(self) -> bool:
        return self.home is not None

    def start(self, home: int, target: int) -> None:
        self.home, self.target, self.left = home, target, PROBE_STEPS
        self.probes += 1

    def step(self) -> bool:
        """Count one observed rollout step (an exploring one while a probe is under way); True
        when it was a probe's last."""
        self.rollout_steps += 1
        if not self.active:
            return False
        self.steps += 1
        self.left -= 1
        return self.left == 0

    def end(self) -> None:
        self.home, self.target, self.left = None, None, 0

    def metrics(self) -> dict[str, float]:
        """autopilot/explore_* of the rollout step about to run (it counts itself): active
        (0/1), the exploring steps and their fraction of the rollout steps up to it, and the B
        it explores while a probe runs."""
        active = int(self.active)
        out: dict[str, float] = {
            "autopilot/explore_active": active,
            "autopilot/explore_steps": self.steps + active,
            "autopilot/explore_fraction": (self.steps + active) / (self.rollout_steps + 1),
        }
        if self.target is not None:
            out["autopilot/explore_target_batch"] = self.target
        return out

    def state_dict(self) -> dict:
        return {
            "rollout_steps": self.rollout_steps,
            "steps": self.steps,
            "probes": self.probes,
            "home": self.home,
            "target": self.target,
            "left": self.left,
        }

    def load_state_dict(self, state: Mapping) -> None:
        self.rollout_steps, self.steps = int(state["rollout_steps"]), int(state["steps"])
        self.probes, self.left = int(state["probes"]), int(state["left"])
        self.home = None if state["home"] is None else int(state["home"])
        self.target = None if state["target"] is None else int(state["target"])
