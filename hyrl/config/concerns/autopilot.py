"""--batch-schedule auto: the range and settings of the autopilot that moves B with the measured
gradient noise scale (the controller itself is `hyrl.train.autopilot`), the batch sizes it
may choose for the actor and the critic, and the checks that it can run: the lr it re-derives
and a noise scale it can measure at every B."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hyrl.config.concerns.batch import (
    BatchFlags,
    batch_ramp_unit,
    batch_schedule,
    optimizer_steps_per_rollout,
)
from hyrl.config.errors import _fail, flag_name, not_resolved
from hyrl.config.kinds import AppliesOnlyWith, _changed, _opt

if TYPE_CHECKING:
    from hyrl.config.concerns.batch import MicroBatchFlags
    from hyrl.config.concerns.critic import CriticFlags
    from hyrl.config.concerns.optimizer import OptimizerFlags
    from hyrl.config.concerns.parallel import ParallelFlags


@dataclass
class AutopilotFlags:
    autopilot_objective: str = _opt(
        "goodput",
        "with --batch-schedule auto: what the actor's B maximises (name): goodput = the B of "
        "least predicted time to target, largest R(B) / (1 + B / B_noise) with R(B) measured "
        "in the run (and --autopilot-profile); critical = k x the noise scale (McCandlish's "
        "steps/samples compromise, --autopilot-k)",
        "batch",
        choices=("goodput", "critical"),
    )
    autopilot_min_gain: float = _opt(
        1.05,
        "with --batch-schedule auto and the goodput objective: B moves only to a batch whose "
        "predicted goodput is at least this factor above the B in use's (dimensionless, >= 1; "
        "a gain inside the noise of the measured throughput is no reason to move)",
        "batch",
    )
    autopilot_profile: str | None = _opt(
        None,
        "with --batch-schedule auto and the goodput objective: how throughput changes with B "
        "where the run has not measured it (path): a `hyrl tune` --out (its report.json) or a "
        "`hyrl profile-rollout` --out (its profile.json); none = from the run's own timings "
        "(fixed costs amortise, the rest per token)",
        "batch",
    )
    autopilot_explore_budget: float = _opt(
        0.05,
        "with --batch-schedule auto, the goodput objective and no --autopilot-profile: the "
        "largest fraction of rollout steps (so far, and of --num-steps) spent exploring, i.e. "
        "running a neighbouring B for a 3-step probe when its throughput is not measured and "
        "an optimistic bound cannot rule out a gain of --autopilot-min-gain (fraction in "
        "[0, 1]; 0 = never explore)",
        "batch",
    )
    autopilot_k: float = _opt(
        1.0,
        "with --batch-schedule auto: the critic's target B is k x its measured noise scale "
        "critic/noise_scale, and under --autopilot-objective critical the actor's is k x "
        "actor/noise_scale (dimensionless, > 0)",
        "batch",
    )
    autopilot_min: int | None = _opt(
        None,
        "with --batch-schedule auto: the smallest B the autopilot may choose (responses; "
        "required, a multiple of the batch unit)",
        "batch",
    )
    autopilot_max: int | None = _opt(
        None,
        "with --batch-schedule auto: the largest B the autopilot may choose (responses; "
        "required, a multiple of the batch unit)",
        "batch",
    )
    autopilot_hysteresis: float = _opt(
        1.5,
        "with --batch-schedule auto: B changes only to a target more than this factor away "
        "from it (dimensionless, >= 1; 1 = any difference)",
        "batch",
    )
    autopilot_warmup: int = _opt(
        5,
        "with --batch-schedule auto: noise-scale measurements (rollout steps) before the "
        "first change and again after each change (count >= 1)",
        "batch",
    )


@dataclass(frozen=True)
class AutopilotView:
    """The autopilot concern's settings, resolved (`ResolvedConfig.autopilot`): how B follows
    the measured noise scale under --batch-schedule auto."""

    autopilot_objective: str
    autopilot_min_gain: float
    autopilot_profile: str | None
    autopilot_explore_budget: float
    autopilot_k: float
    autopilot_min: int | None
    autopilot_max: int | None
    autopilot_hysteresis: float
    autopilot_warmup: int


POSITIVE_COUNTS = ("autopilot_min", "autopilot_max", "autopilot_warmup")

# Flags that apply only under a condition (see hyrl.config.conditional_flags): the autopilot's
# settings, the critic's range included, only with --batch-schedule auto.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[Any], ...] = (
    AppliesOnlyWith[BatchFlags](
        (
            "autopilot_objective",
            "autopilot_profile",
            "autopilot_min_gain",
            "autopilot_explore_budget",
            "autopilot_k",
            "autopilot_min",
            "autopilot_max",
            "autopilot_hysteresis",
            "autopilot_warmup",
            "critic_autopilot_min",
            "critic_autopilot_max",
        ),
        "--batch-schedule auto",
        lambda c: c.batch_schedule == "auto",
        "only used by the batch-size autopilot, which is off (--batch-schedule is not auto)",
        "add --batch-schedule auto, or remove it",
        _changed,
    ),
)


def autopilot_batches(
    c: AutopilotFlags, world_size: int, *, batch: BatchFlags, parallel: ParallelFlags
) -> list[int]:
    """The actor's B the autopilot may choose: multiples of `batch_ramp_unit` within
    [--autopilot-min, --autopilot-max] (validated multiples of it)."""
    assert c.autopilot_min is not None and c.autopilot_max is not None, "validated under auto"
    unit = batch_ramp_unit(batch, world_size, parallel=parallel)
    first = -(-c.autopilot_min // unit) * unit
    return list(range(first, c.autopilot_max + 1, unit))


def critic_autopilot_range(c: AutopilotFlags, *, critic: CriticFlags) -> tuple[int, int]:
    """[smallest, largest] critic B of the autopilot: --critic-autopilot-min/max, else the
    actor's --autopilot-min/max."""
    low = (
        critic.critic_autopilot_min if critic.critic_autopilot_min is not None else c.autopilot_min
    )
    high = (
        critic.critic_autopilot_max if critic.critic_autopilot_max is not None else c.autopilot_max
    )
    assert low is not None and high is not None, "validated under auto"
    return low, high


def critic_autopilot_batches(
    c: AutopilotFlags,
    world_size: int,
    responses: int,
    *,
    parallel: ParallelFlags,
    critic: CriticFlags,
) -> list[int]:
    """The critic B the autopilot may choose for a rollout of `responses`: multiples of the
    critic micro batch x DP that divide it, within critic_autopilot_range."""
    assert critic.critic_micro_batch_size is not None, "resolve fills it under gae"
    unit = critic.critic_micro_batch_size * parallel.data_parallel_size(world_size)
    low, high = critic_autopilot_range(c, critic=critic)
    sizes = range(unit, min(high, responses) + 1, unit)
    return [b for b in sizes if responses % b == 0 and b >= low]


def check_autopilot(
    c: AutopilotFlags,
    world_size: int,
    *,
    batch: BatchFlags,
    micro_batch: MicroBatchFlags,
    parallel: ParallelFlags,
    optimizer: OptimizerFlags,
    critic: CriticFlags,
) -> None:
    """Under --batch-schedule auto: the autopilot's range, its settings, the lr it re-derives
    and a noise scale it can measure at every B (the critic's too under PPO)."""
    if batch_schedule(batch) != "auto":
        return
    if c.autopilot_min is None or c.autopilot_max is None:
        name = "autopilot_min" if c.autopilot_min is None else "autopilot_max"
        _fail(
            name,
            None,
            "required with --batch-schedule auto (the range B may move in)",
            f"{flag_name(name)} N (responses)",
        )
    if not c.autopilot_k > 0:
        _fail("autopilot_k", c.autopilot_k, "must be positive", "a number > 0")
    if not c.autopilot_min_gain >= 1:
        _fail(
            "autopilot_min_gain",
            c.autopilot_min_gain,
            "a factor below 1 would move to a batch predicted to be slower",
            "a number >= 1 (1 = move for any predicted gain)",
        )
    budget = c.autopilot_explore_budget
    if not 0 <= budget <= 1:  # nan too
        _fail(
            "autopilot_explore_budget",
            budget,
            "a fraction of the rollout steps spent exploring lies between 0 and 1",
            "a number in [0, 1] (0 = never explore; 0.05 = at most 5% of the rollout steps)",
        )
    if c.autopilot_profile is not None and c.autopilot_objective != "goodput":
        _fail(
            "autopilot_profile",
            c.autopilot_profile,
            f"only the goodput objective reads a throughput profile (--autopilot-objective "
            f"is {c.autopilot_objective})",
            "--autopilot-objective goodput, or no --autopilot-profile",
        )
    if not c.autopilot_hysteresis >= 1:
        _fail(
            "autopilot_hysteresis",
            c.autopilot_hysteresis,
            "a factor below 1 would change B back and forth",
            "a number >= 1 (1 = change on any difference)",
        )
    b, low, high = batch.global_batch_size, c.autopilot_min, c.autopilot_max
    if high < low:
        _fail("autopilot_max", high, f"below --autopilot-min={low}", f"an integer >= {low}")
    unit = batch_ramp_unit(batch, world_size, parallel=parallel)
    for name, value in (("autopilot_min", low), ("autopilot_max", high)):
        if value % unit:
            _fail(
                name,
                value,
                f"not a multiple of {unit} (data-parallel size x micro batch, and whole "
                "prompt groups)",
                f"a multiple of {unit}",
            )
    if b is None:
        raise not_resolved(["global_batch_size"])
    if not low <= b <= high:
        _fail(
            "autopilot_min" if b < low else "autopilot_max",
            low if b < low else high,
            f"the run starts at B={b} (--global-batch-size), outside [{low}, {high}]",
            f"a range that holds B={b}",
        )
    rederive = "the autopilot re-derives the learning rate at every change of B"
    if optimizer.base_lr is None:
        _fail(
            "batch_schedule",
            batch.batch_schedule,
            f"{rederive} from --base-lr, which is not given",
            "--base-lr LR0 (with --base-global-batch-size B0 and --lr-scaling RULE) instead "
            "of --lr",
        )
    if micro_batch.noise_scale_beta is None:
        _fail(
            "noise_scale_beta",
            micro_batch.noise_scale_beta,
            "--batch-schedule auto follows the gradient noise scale, which this switches off",
            "an EMA decay in [0, 1) (default 0.99)",
        )
    dp = parallel.data_parallel_size(world_size)
    _check_noise_measurable(
        dp,
        "autopilot_min",
        low,
        batch.micro_batch_size,
        "--micro-batch-size",
        batch=batch,
        micro_batch=micro_batch,
        parallel=parallel,
    )
    if critic.critic_global_batch_size is None:
        return  # GRPO: no critic
    if critic.critic_base_lr is None:
        _fail(
            "batch_schedule",
            batch.batch_schedule,
            f"{rederive} and the critic's at every change of its batch, from --critic-base-lr, "
            "which is not given",
            "--critic-base-lr LR0 (with --critic-base-global-batch-size and "
            "--critic-lr-scaling) instead of --critic-lr",
        )
    c_low, c_high = critic_autopilot_range(c, critic=critic)
    c_name = "critic_autopilot_min" if critic.critic_autopilot_min is not None else "autopilot_min"
    if c_high < c_low:
        _fail(
            "critic_autopilot_max",
            c_high,
            f"below the critic's smallest batch {c_low}",
            f"an integer >= {c_low}",
        )
    cb = critic.critic_global_batch_size
    if not c_low <= cb <= c_high:
        _fail(
            "critic_autopilot_min" if cb < c_low else "critic_autopilot_max",
            c_low if cb < c_low else c_high,
            f"the critic starts at B={cb} (--critic-global-batch-size), outside "
            f"[{c_low}, {c_high}]",
            f"a range that holds {cb}",
        )
    assert critic.critic_micro_batch_size is not None, "resolve fills it under gae"
    _check_noise_measurable(
        dp,
        c_name,
        c_low,
        critic.critic_micro_batch_size,
        "--critic-micro-batch-size",
        batch=batch,
        micro_batch=micro_batch,
        parallel=parallel,
    )
    steps = optimizer_steps_per_rollout(batch)
    for actor_b in autopilot_batches(c, world_size, batch=batch, parallel=parallel):
        responses = actor_b * steps
        if not critic_autopilot_batches(c, world_size, responses, parallel=parallel, critic=critic):
            unit = critic.critic_micro_batch_size * dp
            fits = [b for b in range(unit, responses + 1, unit) if responses % b == 0]
            _fail(
                c_name,
                c_low,
                f"at actor B={actor_b} a rollout has {responses} responses, and no critic "
                f"batch in [{c_low}, {c_high}] divides it in multiples of critic micro batch "
                f"x DP = {critic.critic_micro_batch_size * dp}",
                f"a critic range (--critic-autopilot-min/--critic-autopilot-max) holding one "
                f"of {fits} and a divisor of every other possible rollout, or a smaller "
                "--critic-micro-batch-size",
            )


def _check_noise_measurable(
    dp: int,
    name: str,
    low: int,
    micro: int,
    micro_flag: str,
    *,
    batch: BatchFlags,
    micro_batch: MicroBatchFlags,
    parallel: ParallelFlags,
) -> None:
    """With one data-parallel rank the noise scale compares micro-batches: every B needs two."""
    if dp > 1:
        return
    if micro_batch.use_dynamic_batch_size or parallel.pipeline_model_parallel_size > 1:
        _fail(
            "batch_schedule",
            batch.batch_schedule,
            "with one data-parallel rank the noise scale needs micro-batches of one size, "
            "without a pipeline (--use-dynamic-batch-size or PP > 1 here)",
            "more data-parallel ranks, or no --use-dynamic-batch-size and PP = 1",
        )
    if low < 2 * micro:
        _fail(
            name,
            low,
            f"with one data-parallel rank the noise scale compares micro-batches, and B={low} "
            f"holds fewer than two of {micro_flag}={micro}",
            f"an integer >= {2 * micro}, or more data-parallel ranks",
        )
