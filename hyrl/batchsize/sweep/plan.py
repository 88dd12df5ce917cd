"""A sweep's members, planned (pure): the arguments checked, then one member per seed and batch
multiplier with its learning rate re-derived by the rule (step 2 of `hyrl.batchsize.sweep.run`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from hyrl.config.schedules import LR_SCALING_EXPONENTS, scaled_lr

DEFAULT_MULTS = (1, 2, 4, 8, 16)
DEFAULT_RULE = "sqrt"
RULES = tuple(LR_SCALING_EXPONENTS)  # none, sqrt, linear


class SweepError(ValueError):
    """A sweep that cannot start: names the flag or member, the value and what is allowed."""


def positive_int(value, flag: str, what: str = "a positive integer") -> int:
    if isinstance(value, bool):
        raise SweepError(f"{flag} {value!r}: not an integer; allowed: {what}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SweepError(f"{flag} {value!r}: not an integer; allowed: {what}") from None
    if not isinstance(value, int) or value < 1:
        raise SweepError(f"{flag} {value!r}: must be >= 1; allowed: {what}")
    return value


def _int_list(text, flag: str, minimum: int, allowed: str) -> list[int]:
    """'1,2,4' or [1, 2, 4] -> [1, 2, 4]; each an integer >= minimum, no repeats."""
    if isinstance(text, str):
        items = [t.strip() for t in text.split(",")]
    elif isinstance(text, Iterable):
        items = list(text)
    else:
        raise SweepError(f"{flag} {text!r}: expected a comma-separated list; allowed: {allowed}")
    if not items or items == [""]:
        raise SweepError(f"{flag}: empty list; allowed: {allowed}")
    out: list[int] = []
    for item in items:
        try:
            if isinstance(item, bool) or isinstance(item, float):
                raise ValueError
            value = int(item)
        except (TypeError, ValueError):
            raise SweepError(
                f"{flag} {text!r}: {item!r} is not an integer; allowed: {allowed}"
            ) from None
        if value < minimum:
            raise SweepError(f"{flag} {text!r}: {value} is below {minimum}; allowed: {allowed}")
        if value in out:
            raise SweepError(f"{flag} {text!r}: {value} appears twice; allowed: {allowed}")
        out.append(value)
    return out


def parse_mults(text) -> list[int]:
    """--batch-mults: positive integers including 1 (the reference), sorted ascending."""
    allowed = "comma-separated positive integers including 1, e.g. 1,2,4,8,16"
    mults = _int_list(text, "--batch-mults", 1, allowed)
    if 1 not in mults:
        raise SweepError(
            f"--batch-mults {','.join(map(str, mults))}: must include 1 (the "
            f"base recipe's batch); allowed: {allowed}"
        )
    return sorted(mults)


def parse_seeds(text) -> list[int]:
    """--seeds: integers >= 0, no repeats, in the order given (the first seed's m = 1 member is
    the reference)."""
    return _int_list(text, "--seeds", 0, "comma-separated integers >= 0, e.g. 1234,5678")


def check_eval_every(value) -> int:
    """--eval-every-samples: a positive number of responses."""
    return positive_int(
        value, "--eval-every-samples", "a positive number of responses between evaluations"
    )


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise SweepError(f"--lr-scaling {rule!r}: unknown rule; allowed: {', '.join(RULES)}")
    return rule


def check_fixed(fixed, mults: Sequence[int], rule: str) -> int | None:
    """--fixed-lr-control M: any integer >= 2 (M = 1 would repeat the reference). Under
    --lr-scaling none it would repeat the member at M when M is one of --batch-mults."""
    if fixed is None:
        return None
    allowed = "an integer >= 2 (the batch multiplier run at the reference lr)"
    fixed = positive_int(fixed, "--fixed-lr-control", allowed)
    if fixed == 1:
        raise SweepError(
            "--fixed-lr-control 1: at m = 1 the fixed lr is the reference member "
            f"itself; allowed: {allowed}"
        )
    if rule == "none" and fixed in mults:
        raise SweepError(
            f"--fixed-lr-control {fixed}: under --lr-scaling none the member at "
            f"multiplier {fixed} already runs at the reference lr; allowed: a "
            "multiplier not in --batch-mults, or another --lr-scaling"
        )
    return fixed


def base_numbers(base: dict) -> tuple[int, int, int, float]:
    try:
        P0, G, B0, lr = base["P0"], base["G"], base["B0"], base["lr"]
    except KeyError as missing:
        raise SweepError(f"base: missing {missing}; expected P0, G, B0 and lr") from None
    for key, value in (("P0", P0), ("G", G), ("B0", B0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SweepError(f"base {key}={value!r}: expected an integer >= 1")
    if (
        isinstance(lr, bool)
        or not isinstance(lr, (int, float))
        or not (math.isfinite(lr) and lr > 0)
    ):
        raise SweepError(f"base lr={lr!r}: expected a finite number > 0")
    if (P0 * G) % B0 != 0:
        raise SweepError(f"base: P0 x G = {P0} x {G} is not a multiple of B0 = {B0}")
    return P0, G, B0, float(lr)


def member_name(B: int, kind: str, seed: int) -> str:
    """b{B}-{kind}-s{seed}; kind is the lr rule, 'ref' (m = 1) or 'fixed' (the control)."""
    return f"b{B}-{kind}-s{seed}"


def plan_members(
    base: dict,
    mults: Sequence[int] = DEFAULT_MULTS,
    rule: str = DEFAULT_RULE,
    fixed_lr_control: int | None = None,
    seeds: Sequence[int] = (1234,),
    max_samples: int | None = None,
    eval_every_samples: int | None = None,
) -> list[dict]:
    """The sweep's members, pure. `base`: {"P0", "G", "B0", "lr"} of the base recipe.

    For each seed (in order) and multiplier m (ascending): P = P0 m prompts and B = B0 m
    responses per optimizer step (G kept, so the optimizer steps per rollout are kept too),
    lr = scaled_lr(lr0, B, B0, rule). Then, with `fixed_lr_control` = M, a member at P0 M, B0 M
    and lr0 (lr_scaling "none"). With `max_samples` = N, num_steps = ceil(N / (P G)) rollout
    steps, else None (the recipe's own). With `eval_every_samples` = E, eval_interval =
    max(1, round(E / (P G))) rollout steps, so every member evaluates about every E responses
    and the curves compare at the same sample spacing, else None (the recipe's
    --eval-interval, in rollout steps: a larger member then evaluates less often per sample).
    Each member: name, mult, prompts_per_step, responses_per_step, responses_per_rollout, lr,
    lr_scaling, seed, fixed_lr_control, is_reference, num_steps, eval_interval, run_dir
    (relative to the sweep directory), status "pending", returncode None, wall_s None.
    Raises SweepError naming the flag on a bad argument.
    """
    P0, G, B0, lr0 = base_numbers(base)
    mults = parse_mults(mults)
    rule = check_rule(rule)
    fixed = check_fixed(fixed_lr_control, mults, rule)
    seeds = parse_seeds(seeds)
    if max_samples is not None:
        max_samples = positive_int(max_samples, "--max-samples", "a positive number of responses")
    if eval_every_samples is not None:
        eval_every_samples = check_eval_every(eval_every_samples)

    def member(m: int, seed: int, fixed_lr: bool) -> dict:
        P, B = P0 * m, B0 * m
        scaling = "none" if fixed_lr else rule
        kind = "fixed" if fixed_lr else ("ref" if m == 1 else rule)
        name = member_name(B, kind, seed)
        return {
            "name": name,
            "mult": m,
            "prompts_per_step": P,
            "responses_per_step": B,
            "responses_per_rollout": P * G,
            "lr": scaled_lr(lr0, B, B0, scaling),
            "lr_scaling": scaling,
            "seed": seed,
            "fixed_lr_control": fixed_lr,
            "is_reference": False,
            "num_steps": None if max_samples is None else math.ceil(max_samples / (P * G)),
            "eval_interval": (
                None if eval_every_samples is None else max(1, round(eval_every_samples / (P * G)))
            ),
            "run_dir": name,
            "status": "pending",
            "returncode": None,
            "wall_s": None,
        }

    members = []
    for seed in seeds:
        members += [member(m, seed, False) for m in mults]
        if fixed is not None:
            members.append(member(fixed, seed, True))
    members[0]["is_reference"] = True  # first seed, m = 1 (mults are sorted and include 1)
    return members


def member_flags(member: dict, base: dict, run_dir) -> list[str]:
    """The flags the sweep appends (after EXTRA) to the recipe for one member."""
    flags = [
        "--rollout-batch-size",
        str(member["prompts_per_step"]),
        "--global-batch-size",
        str(member["responses_per_step"]),
        "--lr",
        "none",
        "--base-lr",
        repr(float(base["lr"])),
        "--base-global-batch-size",
        str(base["B0"]),
        "--lr-scaling",
        member["lr_scaling"],
        "--seed",
        str(member["seed"]),
    ]
    if member.get("num_steps") is not None:
        flags += ["--num-steps", str(member["num_steps"])]
    if member.get("eval_interval") is not None:
        flags += ["--eval-interval", str(member["eval_interval"])]
    return flags + wandb_flags(member, base, run_dir) + ["--run-dir", str(run_dir), "--no-progress"]


def wandb_flags(member: dict, base: dict, run_dir) -> list[str]:
    """Under the recipe's --log-wandb: the member in the sweep's wandb group (the recipe's
    --wandb-group, else the sweep directory's name) and tagged with its B, lr, lr rule and
    seed (after the recipe's own tags)."""
    wandb = base.get("wandb")
    if not wandb:
        return []
    ours = (
        f"B={member['responses_per_step']},lr={member['lr']:.3g},"
        f"rule={member['lr_scaling']},seed={member['seed']}"
    )
    tags = f"{wandb['tags']},{ours}" if wandb.get("tags") else ours
    return ["--wandb-group", wandb.get("group") or Path(run_dir).parent.name, "--wandb-tags", tags]
