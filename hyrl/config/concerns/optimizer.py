"""The optimizer and its learning rate: Adam, weight decay, clipping, the warmup and decay
schedule, and the peak rate, given (--lr) or scaled from a base recipe's (--base-lr at B0, to the
resolved B by --lr-scaling). The critic's optimizer (`critic`, flags --critic-*) resolves and
checks its rate with the same functions, under the prefix "critic_"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hyrl.config.errors import _fail, flag_name, not_resolved
from hyrl.config.kinds import _opt
from hyrl.config.schedules import LR_SCALING_EXPONENTS, LrSchedule, scaled_lr

if TYPE_CHECKING:
    from hyrl.config.concerns.batch import BatchFlags
    from hyrl.config.concerns.run import RunFlags

# Peak learning rate when neither --lr nor --base-lr is given (per optimizer step).
DEFAULT_LR = 3e-4


@dataclass
class OptimizerFlags:
    lr: float | None = _opt(
        None,
        "peak learning rate (per optimizer step); none = 3e-4, or --base-lr scaled to B "
        "(see --lr-scaling) when --base-lr is given",
        "optimizer",
    )
    lr_scaling: str = _opt(
        "none",
        "how --base-lr scales with the global batch (name): lr = LR0 x (B / B0)^k with "
        "k = 1/2 for sqrt, 1 for linear, 0 for none",
        "optimizer",
        choices=tuple(LR_SCALING_EXPONENTS),
    )
    base_lr: float | None = _opt(
        None,
        "peak learning rate LR0 of the base recipe, the one tuned at B0, that the learning "
        "rate is scaled from (per optimizer step); when given, the learning rate is "
        "LR0 x (B / B0)^k instead of --lr; none = use --lr",
        "optimizer",
    )
    base_global_batch_size: int | None = _opt(
        None,
        "responses per optimizer step of the base recipe, B0 (responses); needs "
        "--base-lr; none = B (no scaling)",
        "optimizer",
    )
    min_lr: float = _opt(0.0, "learning rate at the end of decay (per optimizer step)", "optimizer")
    lr_warmup_steps: int = _opt(0, "linear warmup length (optimizer steps)", "optimizer")
    lr_decay_style: str = _opt(
        "constant",
        "learning-rate decay after warmup (name)",
        "optimizer",
        choices=("constant", "linear", "cosine"),
    )
    weight_decay: float = _opt(
        0.0, "decoupled weight decay coefficient (per optimizer step)", "optimizer"
    )
    adam_beta1: float = _opt(0.9, "Adam first-moment decay (dimensionless, in [0, 1))", "optimizer")
    adam_beta2: float = _opt(
        0.999, "Adam second-moment decay (dimensionless, in [0, 1))", "optimizer"
    )
    adam_eps: float = _opt(1e-8, "Adam denominator epsilon (dimensionless)", "optimizer")
    clip_grad: float = _opt(
        1.0, "clip the global gradient norm to this (L2 norm; 0 = no clipping)", "optimizer"
    )


@dataclass(frozen=True)
class OptimizerView:
    """The actor's optimizer settings, resolved (`ResolvedConfig.optimizer`); `lr_schedule` is
    the learning-rate schedule they make (the rate given, or scaled from a base recipe's)."""

    lr: float
    lr_scaling: str
    base_lr: float | None
    base_global_batch_size: int | None
    min_lr: float
    lr_warmup_steps: int
    lr_decay_style: str
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    clip_grad: float
    lr_schedule: LrSchedule


POSITIVE_COUNTS = ("base_global_batch_size",)
# Flags that exclude each other (see hyrl.config.parser.EXCLUSIVE_FLAGS): the fixed rate or the
# base recipe it is scaled from.
EXCLUSIVE_FLAGS = ((("lr",), ("base_lr", "base_global_batch_size", "lr_scaling")),)


def check_given(c: OptimizerFlags, *, run: RunFlags) -> None:
    """The optimizer's settings as given (--min-lr against the resolved rate: `check_min_lr`)."""
    for name in ("lr", "base_lr"):
        value = getattr(c, name)
        if value is not None and not value > 0:
            _fail(name, value, "the learning rate must be positive", "a number > 0")
    if not c.min_lr >= 0:
        _fail("min_lr", c.min_lr, "must not be negative", "a number >= 0")
    if c.lr_warmup_steps < 0:
        _fail("lr_warmup_steps", c.lr_warmup_steps, "must not be negative", "an integer >= 0")
    if not c.lr_warmup_steps < run.num_steps:
        _fail(
            "lr_warmup_steps",
            c.lr_warmup_steps,
            f"warmup must end before the run does (--num-steps={run.num_steps})",
            f"0 <= lr_warmup_steps < {run.num_steps}",
        )
    if not c.weight_decay >= 0:
        _fail("weight_decay", c.weight_decay, "must not be negative", "a number >= 0")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(c, name) < 1:
            _fail(name, getattr(c, name), "an Adam beta must lie in [0, 1)", "0 <= beta < 1")
    if not c.adam_eps > 0:
        _fail("adam_eps", c.adam_eps, "must be positive", "a number > 0")
    if not c.clip_grad >= 0:
        _fail("clip_grad", c.clip_grad, "must not be negative", "a number >= 0 (0 = no clipping)")


def resolve_rate(cfg: object, prefix: str, batch: int, fallback: float) -> tuple[float, int | None]:
    """(learning rate, reference batch B0) of the actor (prefix "") or the critic ("critic_").

    With --base-lr: LR0 x (B / B0)^k (see `scaled_lr`), B0 = B when not given; a --lr given as
    well is an error unless it equals that value (as in a resolved config). Without: --lr, or
    `fallback` when not given; --lr-scaling other than none or a --base-global-batch-size are
    errors then (nothing to scale).
    """
    lr_name, rule_name = prefix + "lr", prefix + "lr_scaling"
    ref_name, ref_b_name = prefix + "base_lr", prefix + "base_global_batch_size"
    lr, base_lr, ref_b = getattr(cfg, lr_name), getattr(cfg, ref_name), getattr(cfg, ref_b_name)
    rule = getattr(cfg, rule_name) or "none"
    lr_flag, rule_flag = flag_name(lr_name), flag_name(rule_name)
    ref_flag, ref_b_flag = flag_name(ref_name), flag_name(ref_b_name)
    if base_lr is None:
        if rule != "none":
            _fail(
                rule_name,
                rule,
                f"scales the reference learning rate {ref_flag}, which is not given",
                f"add {ref_flag} LR0 and {ref_b_flag} B0, or {rule_flag} none",
            )
        if ref_b is not None:
            _fail(
                ref_b_name,
                ref_b,
                f"the reference batch B0 only applies to {ref_flag}, which is not given",
                f"add {ref_flag} LR0, or remove {ref_b_flag}",
            )
        return (fallback if lr is None else lr), None
    if not base_lr > 0:
        _fail(ref_name, base_lr, "the learning rate must be positive", "a number > 0")
    if ref_b is None:
        ref_b = batch
    elif ref_b < 1:
        _fail(ref_b_name, ref_b, "must be a positive count", "an integer >= 1")
    rate = scaled_lr(base_lr, batch, ref_b, rule)
    if lr is not None and not math.isclose(lr, rate, rel_tol=1e-9):
        _fail(
            lr_name,
            lr,
            f"given together with {ref_flag}={base_lr}, which sets the learning rate "
            f"({base_lr} x ({batch} / {ref_b})^{LR_SCALING_EXPONENTS[rule]:g} = {rate:.6g}, "
            f"{rule_flag} {rule})",
            f"one of them: {lr_flag} for a fixed rate, or {ref_flag} with {rule_flag}",
        )
    return rate, ref_b


def resolve(c: OptimizerFlags, *, batch: BatchFlags) -> dict[str, Any]:
    """The actor's rate on a config whose B is resolved: --lr, or --base-lr scaled to B from
    --base-global-batch-size (B0 <- B when not given), else DEFAULT_LR (`resolve_rate`)."""
    if batch.global_batch_size is None:
        raise ValueError("the rate is scaled to the resolved B: resolve the batch first")
    lr, base_batch = resolve_rate(c, "", batch.global_batch_size, DEFAULT_LR)
    return {"lr": lr, "base_global_batch_size": base_batch}


def lr_schedule(c: object, prefix: str) -> LrSchedule:
    """The learning-rate schedule a resolved config gives the actor (prefix "") or, under gae,
    the critic ("critic_"), with its fields' resolved types. Raises ValueError when resolve
    has not filled them (a config not resolved, or the critic's under grpo)."""
    schedule = ("lr", "min_lr", "lr_warmup_steps", "lr_decay_style", "lr_scaling")
    names = [prefix + n for n in schedule]
    lr, min_lr, warmup, decay, scaling = (getattr(c, n) for n in names)
    base_lr, base_batch = (
        getattr(c, prefix + "base_lr"),
        getattr(c, prefix + "base_global_batch_size"),
    )
    missing = [n for n in names if getattr(c, n) is None]
    if base_lr is not None and base_batch is None:
        missing.append(prefix + "base_global_batch_size")
    if missing:
        raise not_resolved(missing)
    return LrSchedule(
        lr=lr,
        min_lr=min_lr,
        warmup_steps=warmup,
        decay_style=decay,
        base=None if base_lr is None else (base_lr, base_batch),
        scaling=scaling,
    )


def rate_origin(
    c: object,
    given: object,
    prefix: str,
    *,
    batch: BatchFlags,
    critic_global_batch_size: int | None,
) -> str:
    """Where the resolved learning rate of the actor ("") or the critic ("critic_") came from
    (`critic_global_batch_size`: the critic's B, read for the critic only)."""
    lr = getattr(c, prefix + "lr")
    if getattr(given, prefix + "lr") is not None:
        return f"{flag_name(prefix + 'lr')}={lr}"
    base_lr = getattr(given, prefix + "base_lr")
    if base_lr is not None:
        to_batch = batch.global_batch_size if not prefix else critic_global_batch_size
        return (
            f"{lr:.6g} ({flag_name(prefix + 'base_lr')}={base_lr} scaled "
            f"{getattr(c, prefix + 'lr_scaling')} from B0="
            f"{getattr(c, prefix + 'base_global_batch_size')} to B={to_batch})"
        )
    if prefix:
        actor = rate_origin(c, given, "", batch=batch, critic_global_batch_size=None)
        return f"{lr} (from the actor's learning rate, {actor})"
    return f"{lr} (the default --lr)"


def check_min_lr(c: OptimizerFlags, given: OptimizerFlags, *, batch: BatchFlags) -> None:
    """--min-lr against the resolved peak rate (after scaling; `given`: as parsed)."""
    if c.lr is None:
        raise not_resolved(["lr"])
    if not 0 <= c.min_lr <= c.lr:
        origin = rate_origin(c, given, "", batch=batch, critic_global_batch_size=None)
        _fail(
            "min_lr",
            c.min_lr,
            f"must lie between 0 and the learning rate {origin}",
            f"0 <= min_lr <= {c.lr}",
        )


def check_rate_given_once(given: object, prefix: str) -> None:
    """On the command line a rate of the actor (prefix "") or the critic ("critic_") is either
    fixed (--lr) or derived (--base-lr), never both.

    (A resolved config carries both, the derived lr next to its reference, which is why
    validation itself only refuses a pair that disagrees, in `resolve_rate`.)
    """
    lr_name, ref_name = prefix + "lr", prefix + "base_lr"
    if getattr(given, lr_name) is not None and getattr(given, ref_name) is not None:
        _fail(
            lr_name,
            getattr(given, lr_name),
            f"given together with {flag_name(ref_name)}={getattr(given, ref_name)}",
            f"one of them: {flag_name(lr_name)} for a fixed rate, or {flag_name(ref_name)} "
            "with its scaling rule",
        )
