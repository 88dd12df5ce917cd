"""The critic of PPO (--advantage-estimator gae): its batch, micro batch and optimizer, each
taking the actor's value when not given, its value clipping, its own initial weights, and the
steps it trains alone. Its learning rate is resolved and checked by `optimizer`'s functions
under the prefix "critic_"; its --batch-schedule auto range is checked by `autopilot`."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from hyrl.config.concerns.algorithm import AlgorithmFlags
from hyrl.config.concerns.optimizer import lr_schedule, rate_origin, resolve_rate
from hyrl.config.errors import _fail, divisors, not_resolved
from hyrl.config.kinds import AppliesOnlyWith, _changed, _opt, view
from hyrl.config.schedules import LR_SCALING_EXPONENTS, LrSchedule

if TYPE_CHECKING:
    from hyrl.config.concerns.batch import BatchFlags
    from hyrl.config.concerns.optimizer import OptimizerFlags
    from hyrl.config.concerns.parallel import ParallelFlags
    from hyrl.config.concerns.run import RunFlags


@dataclass
class CriticFlags:
    critic_global_batch_size: int | None = _opt(
        None,
        "responses per critic optimizer step (responses); none = --global-batch-size",
        "critic",
    )
    critic_autopilot_min: int | None = _opt(
        None,
        "with --batch-schedule auto: the smallest critic B the autopilot may choose "
        "(responses); none = --autopilot-min",
        "critic",
    )
    critic_autopilot_max: int | None = _opt(
        None,
        "with --batch-schedule auto: the largest critic B the autopilot may choose "
        "(responses); none = --autopilot-max",
        "critic",
    )
    critic_micro_batch_size: int | None = _opt(
        None,
        "critic responses per forward/backward pass on one data-parallel rank (responses); "
        "none = --micro-batch-size",
        "critic",
    )
    critic_lr: float | None = _opt(
        None,
        "critic peak learning rate (per critic optimizer step); none = --lr (the actor's "
        "resolved rate), or --critic-base-lr scaled to the critic batch when that is given",
        "critic",
    )
    critic_lr_scaling: str | None = _opt(
        None,
        "how --critic-base-lr scales with the critic batch (name): critic lr = LR0 x "
        "(critic B / B0)^k, k as for --lr-scaling; none = none",
        "critic",
        choices=tuple(LR_SCALING_EXPONENTS),
    )
    critic_base_lr: float | None = _opt(
        None,
        "critic peak learning rate LR0 of the base recipe at its critic B0 (per "
        "critic optimizer step); when given, the critic learning rate is LR0 x (critic B / "
        "B0)^k instead of --critic-lr; none = use --critic-lr",
        "critic",
    )
    critic_base_global_batch_size: int | None = _opt(
        None,
        "responses per critic optimizer step of the base recipe, B0 (responses); "
        "needs --critic-base-lr; none = the critic batch (no scaling)",
        "critic",
    )
    critic_min_lr: float | None = _opt(
        None,
        "critic learning rate at the end of decay (per critic optimizer step); none = --min-lr",
        "critic",
    )
    critic_lr_warmup_steps: int | None = _opt(
        None,
        "critic linear warmup length (critic optimizer steps); none = --lr-warmup-steps",
        "critic",
    )
    critic_lr_decay_style: str | None = _opt(
        None,
        "critic learning-rate decay after warmup (name); none = --lr-decay-style",
        "critic",
        choices=("constant", "linear", "cosine"),
    )
    critic_weight_decay: float | None = _opt(
        None,
        "critic decoupled weight decay coefficient (per critic optimizer step); "
        "none = --weight-decay",
        "critic",
    )
    critic_clip_grad: float | None = _opt(
        None,
        "clip the critic's global gradient norm to this (L2 norm; 0 = no clipping); "
        "none = --clip-grad",
        "critic",
    )
    num_critic_only_steps: int = _opt(
        0, "rollout steps at the start in which only the critic trains (rollout steps)", "critic"
    )
    value_clip: float | None = _opt(
        None,
        "clip range of the value update around the old values (value units; 0 disables); "
        "none = 0.2 under gae",
        "critic",
    )
    critic_load: str | None = _opt(
        None,
        "local Hugging Face Qwen3-MoE directory whose weights initialise the critic trunk "
        "(path); none = the actor's initial weights",
        "critic",
    )


POSITIVE_COUNTS = (
    "critic_global_batch_size",
    "critic_micro_batch_size",
    "critic_base_global_batch_size",
    "critic_autopilot_min",
    "critic_autopilot_max",
)
# Flags that exclude each other (see hyrl.config.parser.EXCLUSIVE_FLAGS): as the actor's.
EXCLUSIVE_FLAGS = (
    (("critic_lr",), ("critic_base_lr", "critic_base_global_batch_size", "critic_lr_scaling")),
)
# Under gae each critic setting not given takes the actor's value: the batch's (`batch`) and
# the optimizer's (`optimizer`).
_FROM_ACTOR_BATCH = {
    "critic_global_batch_size": "global_batch_size",
    "critic_micro_batch_size": "micro_batch_size",
}
_FROM_ACTOR_OPTIMIZER = {
    "critic_lr": "lr",
    "critic_min_lr": "min_lr",
    "critic_lr_warmup_steps": "lr_warmup_steps",
    "critic_lr_decay_style": "lr_decay_style",
    "critic_weight_decay": "weight_decay",
    "critic_clip_grad": "clip_grad",
}
CRITIC_FROM_ACTOR = {**_FROM_ACTOR_BATCH, **_FROM_ACTOR_OPTIMIZER}
# Under gae these take a fixed value when not given.
GAE_DEFAULTS = {"value_clip": 0.2}

# The critic's flags, and the algorithm's that only PPO uses besides them (`algorithm`).
_CRITIC_FLAGS = tuple(f.name for f in fields(CriticFlags))
_PPO_ALGORITHM_FLAGS = ("gamma", "lambd", "normalize_advantages", "kl_coef")
# Flags that apply only under a condition (see hyrl.config.conditional_flags): the critic's flags
# and the algorithm's PPO-only ones, only under gae.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[Any], ...] = (
    AppliesOnlyWith[AlgorithmFlags](
        _PPO_ALGORITHM_FLAGS + _CRITIC_FLAGS,
        "--advantage-estimator gae",
        lambda c: c.advantage_estimator != "grpo",
        "only used by PPO (--advantage-estimator gae); --advantage-estimator is grpo here",
        "remove it, or use --advantage-estimator gae",
        _changed,
    ),
)


@dataclass(frozen=True)
class CriticView:
    """The critic's settings under gae, resolved (`ResolvedConfig.critic`; None under grpo):
    each --critic-* setting, or the actor's value it took, without the prefix. B of the
    critic's optimizer step is `responses_per_step`, as the actor's."""

    responses_per_step: int
    micro_batch_size: int
    lr_schedule: LrSchedule
    autopilot_min: int | None
    autopilot_max: int | None
    weight_decay: float
    clip_grad: float
    num_critic_only_steps: int
    value_clip: float
    load: str | None


def critic_view(c: CriticFlags, *, algorithm: AlgorithmFlags) -> CriticView | None:
    """The critic's settings of a resolved config, typed; None under grpo (no critic). Raises
    ValueError under gae when resolve has not filled them."""
    if algorithm.advantage_estimator != "gae":
        return None
    missing = [flag for flag in _RESOLVED.values() if getattr(c, flag) is None]
    if missing:
        raise not_resolved(missing)
    return view(
        CriticView,
        c,
        **{name: getattr(c, flag) for name, flag in _RESOLVED.items()},
        lr_schedule=lr_schedule(c, "critic_"),
        autopilot_min=c.critic_autopilot_min,
        autopilot_max=c.critic_autopilot_max,
        load=c.critic_load,
    )


# The critic view's fields that resolve fills under gae, and the flag each is read from.
_RESOLVED = {
    "responses_per_step": "critic_global_batch_size",
    "micro_batch_size": "critic_micro_batch_size",
    "weight_decay": "critic_weight_decay",
    "clip_grad": "critic_clip_grad",
    "value_clip": "value_clip",
}


def check_given(c: CriticFlags, *, run: RunFlags) -> None:
    """The critic's settings as given (None: not given, resolved from the actor's value and
    checked there)."""
    for name in ("critic_lr", "critic_base_lr"):
        value = getattr(c, name)
        if value is not None and not value > 0:
            _fail(name, value, "the learning rate must be positive", "a number > 0")
    if c.critic_min_lr is not None and not c.critic_min_lr >= 0:
        _fail("critic_min_lr", c.critic_min_lr, "must not be negative", "a number >= 0")
    if c.critic_lr_warmup_steps is not None and c.critic_lr_warmup_steps < 0:
        _fail(
            "critic_lr_warmup_steps",
            c.critic_lr_warmup_steps,
            "must not be negative",
            "an integer >= 0",
        )
    if c.critic_weight_decay is not None and not c.critic_weight_decay >= 0:
        _fail("critic_weight_decay", c.critic_weight_decay, "must not be negative", "a number >= 0")
    if c.critic_clip_grad is not None and not c.critic_clip_grad >= 0:
        _fail(
            "critic_clip_grad",
            c.critic_clip_grad,
            "must not be negative",
            "a number >= 0 (0 = no clipping)",
        )
    if c.value_clip is not None and not c.value_clip >= 0:
        _fail("value_clip", c.value_clip, "must not be negative", ">= 0; 0 disables clipping")
    if c.num_critic_only_steps < 0:
        _fail(
            "num_critic_only_steps",
            c.num_critic_only_steps,
            "must not be negative",
            "an integer >= 0",
        )
    if not c.num_critic_only_steps < run.num_steps:
        _fail(
            "num_critic_only_steps",
            c.num_critic_only_steps,
            f"the actor must train in at least one of the --num-steps={run.num_steps} rollout "
            "steps",
            f"0 <= num_critic_only_steps < {run.num_steps}",
        )


def resolve(
    c: CriticFlags, *, algorithm: AlgorithmFlags, batch: BatchFlags, optimizer: OptimizerFlags
) -> dict[str, Any]:
    """Under --advantage-estimator gae, on a config whose actor side is resolved: each
    --critic-* setting not given takes the actor's value (CRITIC_FROM_ACTOR: --critic-lr <- the
    resolved --lr, the critic batch <- B, ...), except that --critic-base-lr, when given, sets
    the critic's rate as --base-lr does the actor's, from the critic batch (--critic-lr-scaling
    <- none, --critic-base-global-batch-size <- the critic batch); --value-clip <- 0.2;
    --critic-load stays none (the actor's initial weights). Under grpo: nothing (all stay
    None). Raises ConfigError as `resolve_rate` does, for the --critic-* forms, and
    ValueError when the actor's B or rate is not resolved."""
    if algorithm.advantage_estimator != "gae":
        return {}
    if batch.global_batch_size is None:
        raise not_resolved(["global_batch_size"])
    if optimizer.lr is None:
        raise not_resolved(["lr"])
    updates: dict[str, Any] = {
        name: getattr(actor, actor_name)
        for actor, from_actor in ((batch, _FROM_ACTOR_BATCH), (optimizer, _FROM_ACTOR_OPTIMIZER))
        for name, actor_name in from_actor.items()
        if getattr(c, name) is None
    }
    critic_batch = (
        batch.global_batch_size
        if c.critic_global_batch_size is None
        else c.critic_global_batch_size
    )
    updates["critic_lr"], updates["critic_base_global_batch_size"] = resolve_rate(
        c, "critic_", critic_batch, optimizer.lr
    )
    updates["critic_lr_scaling"] = c.critic_lr_scaling or "none"
    updates.update({k: v for k, v in GAE_DEFAULTS.items() if getattr(c, k) is None})
    return updates


def check_min_lr(
    c: CriticFlags, given: CriticFlags, *, batch: BatchFlags, optimizer: OptimizerFlags
) -> None:
    """The critic's minimum learning rate against its resolved peak rate (after scaling;
    `given`: as parsed)."""
    if c.critic_lr is None or c.critic_min_lr is None:
        return  # no critic
    if 0 <= c.critic_min_lr <= c.critic_lr:
        return
    origin = rate_origin(
        c, given, "critic_", batch=batch, critic_global_batch_size=c.critic_global_batch_size
    )
    if given.critic_min_lr is not None:
        _fail(
            "critic_min_lr",
            c.critic_min_lr,
            f"must lie between 0 and the critic's learning rate {origin}",
            f"0 <= critic_min_lr <= {c.critic_lr}",
        )
    if given.critic_lr is not None:
        _fail(
            "critic_lr",
            c.critic_lr,
            f"below the critic's minimum learning rate {c.critic_min_lr}, taken from --min-lr",
            f"a number >= {c.critic_min_lr}, or set --critic-min-lr",
        )
    if given.critic_base_lr is not None:
        _fail(
            "critic_base_lr",
            given.critic_base_lr,
            f"scales to the critic learning rate {origin}, below "
            f"the critic's minimum learning rate {c.critic_min_lr}, taken from --min-lr",
            f"a larger --critic-base-lr, or set --critic-min-lr (0 <= critic_min_lr <= "
            f"{c.critic_lr})",
        )
    _fail(
        "min_lr",
        optimizer.min_lr,
        f"must lie between 0 and the critic's learning rate {origin}",
        f"0 <= min_lr <= {c.critic_lr}",
    )


def check_critic_batch(
    c: CriticFlags,
    given: CriticFlags,
    world_size: int,
    *,
    batch: BatchFlags,
    parallel: ParallelFlags,
) -> None:
    """The critic batch divides P x G and splits over the data-parallel ranks in whole critic
    micro-batches (`given`: as parsed, to say where a size came from)."""
    cb, cm = c.critic_global_batch_size, c.critic_micro_batch_size
    if cb is None:
        return  # no critic
    assert cm is not None, "resolve fills both critic batch sizes under gae"
    p, g = batch.rollout_batch_size, batch.n_samples_per_prompt
    n = p * g
    origin = "" if given.critic_global_batch_size is not None else " (from --global-batch-size)"
    if n % cb != 0:
        _fail(
            "critic_global_batch_size",
            cb,
            f"P x G = {p} x {g} = {n} responses per rollout must be a multiple of the critic "
            f"batch {cb}{origin}",
            f"a divisor of {n}: {divisors(n)}",
        )
    dp = parallel.data_parallel_size(world_size)
    if cb % dp != 0:
        _fail(
            "critic_global_batch_size",
            cb,
            f"the critic batch {cb}{origin} does not split evenly over data-parallel size {dp}",
            f"a multiple of {dp} that divides {n}",
        )
    if cb % (cm * dp) != 0:
        m_origin = "" if given.critic_micro_batch_size is not None else " (from --micro-batch-size)"
        _fail(
            "critic_micro_batch_size",
            cm,
            f"critic micro batch {cm}{m_origin} x data-parallel size {dp} = {cm * dp} does "
            f"not divide the critic batch {cb}{origin}",
            f"a divisor of critic B / DP = {cb // dp}: {divisors(cb // dp)}",
        )


def check_critic_load(c: CriticFlags, files: bool = True) -> None:
    """--critic-load names a Hugging Face model directory; `files`: whether it must exist here."""
    if not files or c.critic_load is None:
        return
    allowed = "a local Hugging Face model directory (holding config.json and the weights)"
    if not os.path.isdir(c.critic_load):
        _fail("critic_load", c.critic_load, "not an existing directory", allowed)
    if not os.path.isfile(os.path.join(c.critic_load, "config.json")):
        _fail("critic_load", c.critic_load, "has no config.json", allowed)
