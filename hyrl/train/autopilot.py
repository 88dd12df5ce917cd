"""The batch-size autopilot (`--batch-schedule auto`): responses per optimizer step B follow the
measured gradient noise scale during a run.

The actor's target, by `--autopilot-objective`:
    goodput (default): the allowed B of largest goodput G(B) = R(B) / (1 + B / B_noise), the
        batch of least time to target (`hyrl.batchsize.goodput`: R(B) from the run's own
        step timings at the B it has visited, and for the others from them and an optional
        `--autopilot-profile`), when its G beats the B in use by the factor
        `--autopilot-min-gain` (else the B in use: a gain inside R's noise moves nothing);
    critical: the largest allowed B <= k x B_noise (the smallest allowed B when none is). With
        k = 1 this is the critical batch of McCandlish et al. 2018, where their optimizer
        steps S = S_min(1 + B_noise/B) and examples E = E_min(1 + B/B_noise) (hyrl's samples)
        cost each other equally: a compromise between steps and samples, not the least time.
The critic's batch does not change the rollout, so throughput cannot choose it: it always
follows k x its own noise scale (k = `--autopilot-k`, the critic's compromise between its
optimizer steps and samples).
The allowed B are the multiples of the unit that P, G, DP and the micro-batches leave, within
[--autopilot-min, --autopilot-max] (`hyrl.config.autopilot_batches`); B_noise is the EMA'd
B_simple the backend logs (`actor/noise_scale`, `critic/noise_scale`).

Hysteresis keeps B from chasing noise: B changes only after `warmup` measurements (before the
first change and again after each change), and only to a target that differs from it by more
than the factor `hysteresis`. The critic's allowed batches must also divide the rollout's
responses, which move with the actor's B, so when they no longer admit its B it moves at once
(a forced change, counted like any other): to its target when warm, else to the nearest
allowed B below.

Without a profile the goodput objective also explores (`hyrl.train.explore`): once the actor is
warm at a timed B, the nearest B the hysteresis lets it move to is run for a short probe when its
R is not measured and even an optimistic R (step seconds that never fall as B grows) cannot
rule out a gain of --autopilot-min-gain; then the usual decision is made from the B it left,
now with the neighbour measured. Exploring steps stay within --autopilot-explore-budget of the
rollout steps (so far, and of --num-steps), and a probe's moves are not counted as changes.

Pure Python (no torch): the loop (`hyrl.train.trainer`) calls `RunAutopilot.observe_step` once
per rollout step on rank 0 and broadcasts `state_dict`, which also goes into the checkpoint so
a resumed run continues with the same B, counters, last measurement, throughput table and
exploration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyrl.batchsize.goodput import StepTiming, ThroughputModel, goodput, load_profile
from hyrl.train.explore import PROBE_STEPS, Exploration, budget_allows, explore_target

if TYPE_CHECKING:
    from hyrl.config.concerns.autopilot import AutopilotView
    from hyrl.config.concerns.batch import BatchView
    from hyrl.config.concerns.critic import CriticView
    from hyrl.config.concerns.rollout import RolloutView
    from hyrl.config.concerns.run import RunView


@dataclass(frozen=True)
class AutopilotSettings:
    k: float  # critical: B = k x B_noise (dimensionless, > 0); the critic's always
    hysteresis: float  # change only when target / B or B / target exceeds this (>= 1)
    warmup: int  # noise-scale measurements before the first change and between changes (>= 1)
    objective: str = "goodput"  # the actor's target (module docstring)
    min_gain: float = 1.05  # goodput: move only for a predicted G(target) / G(B) >= this
    explore_budget: float = 0.05  # goodput, no profile: exploring steps / rollout steps <= this

    @classmethod
    def of(cls, autopilot: AutopilotView) -> AutopilotSettings:
        return cls(
            autopilot.autopilot_k,
            autopilot.autopilot_hysteresis,
            autopilot.autopilot_warmup,
            autopilot.autopilot_objective,
            autopilot.autopilot_min_gain,
            autopilot.autopilot_explore_budget,
        )


def measurement(metrics: dict, prefix: str) -> float | None:
    """`<prefix>/noise_scale` of a step's metrics, or None when the step measured nothing: no
    estimate, or a zero gradient (every advantage 0), which scales both EMAs alike and leaves
    the last B_simple standing as if it were new."""
    noise_scale = metrics.get(f"{prefix}/noise_scale")
    if noise_scale is None or not metrics.get(f"{prefix}/grad_norm"):
        return None
    return float(noise_scale)


def fit(size: float, allowed: Sequence[int]) -> int:
    """The largest allowed batch <= size (rounded down), or the smallest allowed one (clamped)."""
    if not allowed:
        raise ValueError("no allowed batch size")
    below = [b for b in allowed if b <= size]
    return max(below) if below else min(allowed)


Chooser = Callable[[float, Sequence[int]], int]  # (B_noise, allowed B) -> the target


class BatchAutopilot:
    """One batch size (the actor's or the critic's) following one noise scale; its target is
    `choose(B_noise, allowed)`, by default the largest allowed B <= k x B_noise."""

    def __init__(self, settings: AutopilotSettings, start: int, choose: Chooser | None = None):
        self.settings = settings
        self.choose = choose or (lambda noise, allowed: fit(settings.k * noise, allowed))
        self.current = int(start)  # the B in use
        self.target: int | None = None  # the last target (None before a measurement)
        self.noise_scale: float | None = None  # the last measurement used
        self.measured = 0  # measurements since the start or the last change
        self.changes = 0

    def update(self, noise_scale: float | None, allowed: Sequence[int]) -> int:
        """Take one rollout step's noise scale (None, nan or <= 0: no measurement) and the
        batch sizes allowed next; the B to use next."""
        self.take(noise_scale)
        if self.noise_scale is not None:
            self.target = self.choose(self.noise_scale, allowed)
        warm = self.target is not None and self.measured >= self.settings.warmup
        if warm and self._ratio() > self.settings.hysteresis:
            assert self.target is not None, "warm implies a target"
            self._change(self.target)
        elif self.current not in allowed:  # forced: the allowed sizes moved under it
            self._change(self.target if warm and self.target else fit(self.current, allowed))
        return self.current

    def take(self, noise_scale: float | None) -> None:
        """Record one rollout step's noise scale (None, nan or <= 0: no measurement) without
        deciding anything."""
        if noise_scale is not None and math.isfinite(noise_scale) and noise_scale > 0:
            self.noise_scale = float(noise_scale)
            self.measured += 1

    @property
    def warm(self) -> bool:
        """A noise scale is known and the warm-up since the start or the last change is done."""
        return self.noise_scale is not None and self.measured >= self.settings.warmup

    def _ratio(self) -> float:
        assert self.target is not None, "called with a target"
        return max(self.target / self.current, self.current / self.target)

    def _change(self, size: int) -> None:
        self.current, self.measured = size, 0
        self.changes += 1

    def state_dict(self) -> dict:
        return {
            "current": self.current,
            "target": self.target,
            "noise_scale": self.noise_scale,
            "measured": self.measured,
            "changes": self.changes,
        }

    def load_state_dict(self, state: dict) -> None:
        self.current = int(state["current"])
        self.target = None if state["target"] is None else int(state["target"])
        self.noise_scale = None if state["noise_scale"] is None else float(state["noise_scale"])
        self.measured = int(state["measured"])
        self.changes = int(state["changes"])


class RunAutopilot:
    """A run's autopilot: the actor's B (P follows: P = B x optimizer steps per rollout / G)
    and, under PPO, the critic's B, each on its own noise scale. `throughput` (the goodput
    objective): the actor's R(B); None under the critical objective. `total_steps`: the run's
    --num-steps, the second bound of the exploration budget (None: none)."""

    def __init__(
        self,
        settings: AutopilotSettings,
        actor_start: int,
        actor_allowed: Sequence[int],
        steps_per_rollout: int,
        samples_per_prompt: int,
        critic_start: int | None = None,
        critic_allowed: Callable[[int], Sequence[int]] | None = None,
        throughput: ThroughputModel | None = None,
        total_steps: int | None = None,
    ):
        if (settings.objective == "goodput") != (throughput is not None):
            raise ValueError("the goodput objective needs a throughput model, and only it")
        self.throughput = throughput
        self.goodput_table: dict[int, float] = {}  # the last target's goodput per allowed B
        self.actor = BatchAutopilot(
            settings, actor_start, None if throughput is None else self._goodput_target
        )
        self.fresh = True  # the actor's B has not been timed since the start or a change
        self.actor_allowed = list(actor_allowed)
        self.steps_per_rollout, self.samples_per_prompt = steps_per_rollout, samples_per_prompt
        self.critic = None if critic_start is None else BatchAutopilot(settings, critic_start)
        self.critic_allowed = critic_allowed  # responses per rollout -> the critic's allowed B
        # goodput without a profile: probes of a neighbouring B (hyrl.train.explore)
        explores = (
            throughput is not None and throughput.profile is None and settings.explore_budget > 0
        )
        self.exploration = Exploration(settings.explore_budget, total_steps) if explores else None
        self.notes: list[str] = []  # exploration lines for rank 0 to print (observe_step)

    @classmethod
    def of(
        cls,
        autopilot: AutopilotView,
        batch: BatchView,
        critic: CriticView | None,
        rollout: RolloutView,
        run: RunView,
        actor_allowed: Sequence[int],
        critic_allowed: Callable[[int], Sequence[int]],
    ) -> RunAutopilot:
        """The autopilot of a validated run with --batch-schedule auto: the actor's B starts at
        the batch's B, the critic's (under gae; none under grpo) at its own. actor_allowed: the
        B the actor may take (`hyrl.config.autopilot_batches`); critic_allowed: those the
        critic may take in a rollout of so many responses (`hyrl.config.critic_autopilot_batches`,
        used only with a critic). The goodput objective's throughput model reads
        --rollout-concurrency and --autopilot-profile, the exploration budget --num-steps."""
        critic_start = None if critic is None else critic.responses_per_step
        throughput = None
        if autopilot.autopilot_objective == "goodput":
            path = autopilot.autopilot_profile
            profile = None if path is None else load_profile(path)
            throughput = ThroughputModel(
                batch.optimizer_steps_per_rollout, int(rollout.rollout_concurrency), profile
            )
        return cls(
            AutopilotSettings.of(autopilot),
            batch.responses_per_step,
            actor_allowed,
            batch.optimizer_steps_per_rollout,
            batch.n_samples_per_prompt,
            critic_start,
            None if critic_start is None else critic_allowed,
            throughput,
            run.num_steps,
        )

    def _goodput_target(self, noise_scale: float, allowed: Sequence[int]) -> int:
        """The allowed B of largest goodput when it beats the B in use by at least `min_gain`
        (a gain inside the noise of R is no reason to move); else the B in use, and before any
        step is timed the B in use too (there is nothing to compare)."""
        assert self.throughput is not None, "the goodput objective"
        target, self.goodput_table = self.throughput.best(noise_scale, allowed)
        here = self.goodput_table.get(self.actor.current)
        if not self.goodput_table:
            return self.actor.current
        if here and self.goodput_table[target] < self.actor.settings.min_gain * here:
            return self.actor.current
        return target

    @property
    def responses_per_step(self) -> int:
        return self.actor.current

    @property
    def prompts_per_step(self) -> int:
        return self.actor.current * self.steps_per_rollout // self.samples_per_prompt

    @property
    def critic_responses_per_step(self) -> int | None:
        return None if self.critic is None else self.critic.current

    def observe(
        self,
        actor_noise_scale: float | None,
        critic_noise_scale: float | None,
        record: dict | None = None,
    ) -> list:
        """One rollout step's noise scales (and under goodput its last record: stage timers and
        response length) -> the batch sizes of the next; the changes made, as (name, old B, new
        B) tuples."""
        made = []
        old, changes = self.actor.current, self.actor.changes
        if self.throughput is not None and record is not None:
            timing = StepTiming.from_record(old, record)
            if timing is not None:
                self.throughput.observe(timing, counts=not self.fresh)
                self.fresh = False
        decided_from, new = self._actor_step(actor_noise_scale)
        if self.actor.changes != changes:  # a decision (a probe's moves are not changes)
            made.append(("actor", decided_from, new))
        if new != old:  # the next step at another B warms up (a probe's first step too)
            self.fresh = True
        if self.critic is not None:
            assert self.critic_allowed is not None, "set together with the critic's start"
            old = self.critic.current
            responses = self.actor.current * self.steps_per_rollout
            new = self.critic.update(critic_noise_scale, self.critic_allowed(responses))
            if new != old:
                made.append(("critic", old, new))
        return made

    def _actor_step(self, noise_scale: float | None) -> tuple[int, int]:
        """The actor's part of `observe`: (the B the decision was made from, the next B). A
        probe's steps only take the noise scale; its last one returns to the B it left and
        decides from there as usual; a step without a probe decides, and when that keeps B,
        may start one (`hyrl.train.explore`)."""
        explore = self.exploration
        if explore is None:
            return self.actor.current, self.actor.update(noise_scale, self.actor_allowed)
        last = explore.step()
        if explore.active and not last:
            self.actor.take(noise_scale)
            return self.actor.current, self.actor.current
        if last:
            assert explore.home is not None, "a probe under way has a home"
            probe, home = self.actor.current, explore.home
            explore.end()
            self.actor.current = home
            new = self.actor.update(noise_scale, self.actor_allowed)
            self.notes.append(self._explored_line(probe, home, new))
            return home, new
        old = self.actor.current
        new = self.actor.update(noise_scale, self.actor_allowed)
        if new == old:
            self._maybe_explore()
        return old, self.actor.current

    def _maybe_explore(self) -> None:
        """Start a probe when the actor is warm at a timed B, the budget allows one and the
        neighbour's gain cannot be ruled out (`explore_target`)."""
        explore, throughput, actor = self.exploration, self.throughput, self.actor
        assert explore is not None and throughput is not None, "exploration is goodput's"
        if not actor.warm or actor.current not in throughput.measured:
            return
        if not budget_allows(
            explore.steps, explore.rollout_steps, explore.budget, explore.total_steps
        ):
            return
        assert actor.noise_scale is not None, "warm implies a noise scale"
        settings = actor.settings
        found = explore_target(
            actor.current,
            self.actor_allowed,
            settings.hysteresis,
            throughput.measured,
            actor.noise_scale,
            settings.min_gain,
        )
        if found is None:
            return
        target, gain = found
        explore.start(actor.current, target)
        self.notes.append(
            f"hyrl: autopilot: exploring B {target} for {PROBE_STEPS} rollout steps from B "
            f"{actor.current}: R not measured there, and at B_noise {actor.noise_scale:.4g} "
            f"an optimistic goodput gain of {gain:.3g}x cannot be ruled out (min gain "
            f"{settings.min_gain:.3g}; exploring steps so far {explore.steps} of "
            f"{explore.rollout_steps})"
        )
        actor.current = target

    def _explored_line(self, probe: int, home: int, new: int) -> str:
        """The line printed at a probe's end: what was measured and where B goes."""
        assert self.throughput is not None, "exploration is goodput's"
        r_probe = self.throughput.responses_per_s(probe)
        r_home = self.throughput.responses_per_s(home)
        if probe in self.throughput.measured and r_probe and r_home:
            noise = self.actor.noise_scale
            gains = ""
            if noise is not None:
                ratio = goodput(r_probe, probe, noise) / goodput(r_home, home, noise)
                gains = f", goodput {ratio:.3g}x at B_noise {noise:.4g}"
            measured = f"R {r_probe / r_home:.3g}x that of B {home}{gains}"
        else:
            measured = "no timed step there (R still predicted)"
        verdict = f"back to B {home}" if new == home else f"B {new} next"
        return f"hyrl: autopilot: explored B {probe}: {measured}; {verdict}"

    def observe_step(self, rollout_metrics: dict, last_record: dict) -> list[str]:
        """`observe` of one rollout step: the actor's noise scale from its last record, the
        critic's from the rollout's metrics, the step's timers and response length from both;
        the changes made, as the lines the loop prints."""
        made = self.observe(
            measurement(last_record, "actor"),
            measurement(rollout_metrics, "critic"),
            {**rollout_metrics, **last_record},
        )
        lines, self.notes = self.notes, []
        return lines + [
            f"hyrl: autopilot: the {part}'s B {b} -> {new} responses" for part, b, new in made
        ]

    def steer(
        self, rollout_metrics: dict, last_record: dict, rank: int, broadcast_from_rank_0: Callable
    ) -> None:
        """One rollout step seen: rank 0 observes it (`observe_step`) and prints the changes;
        every rank then takes rank 0's state, so the next step's batch sizes agree (a
        collective: broadcast_from_rank_0 is the backend's)."""
        if rank == 0:
            for line in self.observe_step(rollout_metrics, last_record):
                print(line, flush=True)
        self.load_state_dict(broadcast_from_rank_0(self.state_dict()))

    def metrics(self) -> dict[str, float]:
        """autopilot/* (and batch/critic_responses_per_step) for the rollout step's record."""
        out: dict[str, float] = {}
        parts = [("", self.actor)] + ([("critic_", self.critic)] if self.critic else [])
        for prefix, part in parts:
            out[f"autopilot/{prefix}changes"] = part.changes
            if part.target is not None:
                out[f"autopilot/{prefix}target_b"] = part.target
            if part.noise_scale is not None:
                out[f"autopilot/{prefix}noise_scale_used"] = part.noise_scale
        if self.throughput is not None:
            rate = self.throughput.responses_per_s(self.actor.current)
            if rate is not None:  # R(B) at the B in use, as the model holds it
                out["autopilot/responses_per_s"] = rate
            target = self.actor.target
            explore = self.exploration
            home = explore.home if explore is not None and explore.home else self.actor.current
            here = self.goodput_table.get(home)  # a probe's decision is made from its home
            if target is not None and here and target in self.goodput_table:
                out["autopilot/goodput_gain"] = self.goodput_table[target] / here
        if self.exploration is not None:
            out.update(self.exploration.metrics())
        if self.critic is not None:
            out["batch/critic_responses_per_step"] = self.critic.current
        return out

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": None if self.critic is None else self.critic.state_dict(),
            "throughput": None if self.throughput is None else self.throughput.state_dict(),
            "goodput_table": {str(b): g for b, g in self.goodput_table.items()},
            "fresh": self.fresh,
            "exploration": None if self.exploration is None else self.exploration.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        if self.critic is not None and state.get("critic") is not None:
            self.critic.load_state_dict(state["critic"])
        if self.throughput is not None and state.get("throughput") is not None:
            self.throughput.load_state_dict(state["throughput"])
        self.goodput_table = {int(b): float(g) for b, g in state.get("goodput_table", {}).items()}
        self.fresh = bool(state.get("fresh", True))
        if self.exploration is not None and state.get("exploration") is not None:
            self.exploration.load_state_dict(state["exploration"])

    def resumed(self) -> None:
        """After loading a checkpoint's state: the next step runs in a new process and warms up
        like one after a change, so its time does not count."""
        self.fresh = True
