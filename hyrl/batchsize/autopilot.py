"""The batch-size autopilot (`--batch-schedule auto`): responses per optimizer step B follow the
measured gradient noise scale during a run.

    target = the largest allowed B <= k x B_noise (the smallest allowed B when none is)
The allowed B are the multiples of the unit that P, G, DP and the micro-batches leave, within
[--autopilot-min, --autopilot-max] (`hyrl.config.autopilot_batches`); B_noise is the EMA'd
B_simple the backend logs (`actor/noise_scale`, `critic/noise_scale`). With k = 1 the target is
the critical batch of McCandlish et al. 2018, where their optimizer steps S = S_min(1 +
B_noise/B) and examples E = E_min(1 + B/B_noise) (hyrl's samples) cost each other equally.

Hysteresis keeps B from chasing noise: B changes only after `warmup` measurements (before the
first change and again after each change), and only to a target that differs from it by more
than the factor `hysteresis`. The critic has its own controller on its own noise scale; its
allowed batches must also divide the rollout's responses, which move with the actor's B, so
when they no longer admit its B it moves at once (a forced change, counted like any other): to
its target when warm, else to the nearest allowed B below.

Pure Python (no torch): the loop (`hyrl.trainer`) calls `RunAutopilot.observe` once per
rollout step on rank 0 and broadcasts `state_dict`, which also goes into the checkpoint so a
resumed run continues with the same B, counters and last measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hyrl.config import RunConfig, autopilot_batches, critic_autopilot_batches


@dataclass(frozen=True)
class AutopilotSettings:
    k: float  # B = k x B_noise (dimensionless, > 0)
    hysteresis: float  # change only when target / B or B / target exceeds this (>= 1)
    warmup: int  # noise-scale measurements before the first change and between changes (>= 1)

    @classmethod
    def from_flags(cls, cfg: RunConfig) -> AutopilotSettings:
        return cls(cfg.autopilot_k, cfg.autopilot_hysteresis, cfg.autopilot_warmup)


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


class BatchAutopilot:
    """One batch size (the actor's or the critic's) following one noise scale."""

    def __init__(self, settings: AutopilotSettings, start: int):
        self.settings = settings
        self.current = int(start)  # the B in use
        self.target: int | None = None  # the last target (None before a measurement)
        self.noise_scale: float | None = None  # the last measurement used
        self.measured = 0  # measurements since the start or the last change
        self.changes = 0

    def update(self, noise_scale: float | None, allowed: Sequence[int]) -> int:
        """Take one rollout step's noise scale (None, nan or <= 0: no measurement) and the
        batch sizes allowed next; the B to use next."""
        if noise_scale is not None and math.isfinite(noise_scale) and noise_scale > 0:
            self.noise_scale = float(noise_scale)
            self.measured += 1
        if self.noise_scale is not None:
            self.target = fit(self.settings.k * self.noise_scale, allowed)
        warm = self.target is not None and self.measured >= self.settings.warmup
        if warm and self._ratio() > self.settings.hysteresis:
            assert self.target is not None, "warm implies a target"
            self._change(self.target)
        elif self.current not in allowed:  # forced: the allowed sizes moved under it
            self._change(self.target if warm and self.target else fit(self.current, allowed))
        return self.current

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
    and, under PPO, the critic's B, each on its own noise scale."""

    def __init__(
        self,
        settings: AutopilotSettings,
        actor_start: int,
        actor_allowed: Sequence[int],
        steps_per_rollout: int,
        samples_per_prompt: int,
        critic_start: int | None = None,
        critic_allowed: Callable[[int], Sequence[int]] | None = None,
    ):
        self.actor = BatchAutopilot(settings, actor_start)
        self.actor_allowed = list(actor_allowed)
        self.steps_per_rollout, self.samples_per_prompt = steps_per_rollout, samples_per_prompt
        self.critic = None if critic_start is None else BatchAutopilot(settings, critic_start)
        self.critic_allowed = critic_allowed  # responses per rollout -> the critic's allowed B

    @classmethod
    def from_flags(cls, cfg: RunConfig, world_size: int) -> RunAutopilot:
        """The autopilot of a validated, resolved config with --batch-schedule auto."""
        assert cfg.global_batch_size is not None, "resolve filled --global-batch-size"
        critic_start = cfg.critic_global_batch_size
        return cls(
            AutopilotSettings.from_flags(cfg),
            cfg.global_batch_size,
            autopilot_batches(cfg, world_size),
            cfg.optimizer_steps_per_rollout,
            cfg.n_samples_per_prompt,
            critic_start,
            None
            if critic_start is None
            else (lambda responses: critic_autopilot_batches(cfg, world_size, responses)),
        )

    @property
    def responses_per_step(self) -> int:
        return self.actor.current

    @property
    def prompts_per_step(self) -> int:
        return self.actor.current * self.steps_per_rollout // self.samples_per_prompt

    @property
    def critic_responses_per_step(self) -> int | None:
        return None if self.critic is None else self.critic.current

    def observe(self, actor_noise_scale: float | None, critic_noise_scale: float | None) -> list:
        """One rollout step's noise scales -> the batch sizes of the next; the changes made,
        as (name, old B, new B) tuples."""
        made = []
        old = self.actor.current
        new = self.actor.update(actor_noise_scale, self.actor_allowed)
        if new != old:
            made.append(("actor", old, new))
        if self.critic is not None:
            assert self.critic_allowed is not None, "set together with the critic's start"
            old = self.critic.current
            responses = self.actor.current * self.steps_per_rollout
            new = self.critic.update(critic_noise_scale, self.critic_allowed(responses))
            if new != old:
                made.append(("critic", old, new))
        return made

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
        if self.critic is not None:
            out["batch/critic_responses_per_step"] = self.critic.current
        return out

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": None if self.critic is None else self.critic.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        if self.critic is not None and state.get("critic") is not None:
            self.critic.load_state_dict(state["critic"])
