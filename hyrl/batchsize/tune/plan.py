"""`hyrl tune`'s step 0: what is asked, checked before anything runs (`check_tune` -> `TunePlan`),
and the members every later step runs (the probes, the alignment check's), each dry-run through
the recipe there so that no step starts with one the recipe refuses."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hyrl.batchsize.sweep.plan import check_rule, parse_mults, plan_members, positive_int
from hyrl.batchsize.sweep.probe import validate_members
from hyrl.batchsize.sweep.run import SweepError, base_from_config, check_sweep, probe

DEFAULT_MULTS = "1,2,4,8,16"
DEFAULT_PASS1_STEPS = 24  # rollout steps of pass 1 when --budget-samples is not given
DEFAULT_PROBE_STEPS = 3  # the first warms up; the others are timed
DEFAULT_PROBE_ROUNDS = 2  # rounds of probes, every candidate and x1 in each
DEFAULT_FRACTION = 0.5  # --align-fraction: the alignment check runs halfway to the target


class TuneError(ValueError):
    """A tune that cannot go on: names the flag, file or step, the value and what is allowed."""


@dataclass
class TunePlan:
    """Everything checked before anything runs."""

    recipe: Path
    out: Path
    mults: list[int]
    rule: str
    budget_samples: int
    probe_steps: int
    verify: int
    verify_samples: int | None
    extra_args: list[str]
    env: dict
    config: dict
    base: dict
    align_check: bool = False
    align_fraction: float = DEFAULT_FRACTION
    probe_rounds: int = 1

    @property
    def probe_args(self) -> list[str]:
        # after the user's flags, so they win: a few steps, no evaluation (only timers are read);
        # PPO's critic-only warm-up off, as every probe step must time the actor's update too
        steps = ["--num-steps", str(self.probe_steps)]
        if self.config.get("num_critic_only_steps"):
            steps += ["--num-critic-only-steps", "0"]
        return [*self.extra_args, *steps, "--eval-interval", "0", "--target", "none"]


def _count(value, flag: str) -> int:
    """An integer >= 0 from the command line (a string) or a caller (an int)."""
    allowed = "an integer >= 0"
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise SweepError(f"{flag} {value!r}: not an integer >= 0; allowed: {allowed}")


def check_tune(
    recipe,
    out_dir,
    batch_mults=DEFAULT_MULTS,
    budget_samples=None,
    verify=0,
    verify_samples=None,
    lr_scaling: str = "sqrt",
    probe_steps=DEFAULT_PROBE_STEPS,
    extra_args: Sequence[str] = (),
    env: dict | None = None,
    align_check: bool = True,
    align_fraction=DEFAULT_FRACTION,
    probe_rounds=DEFAULT_PROBE_ROUNDS,
) -> TunePlan:
    """Step 0: raises TuneError naming the flag and value, or the member the recipe refuses."""
    recipe_path = Path(recipe)
    if not recipe_path.is_file():
        raise TuneError(
            f"RECIPE {recipe}: no such file; allowed: a recipe script such as recipes/tiny/grpo.sh"
        )
    out = Path(out_dir).resolve()
    if out.exists() and not out.is_dir():
        raise TuneError(f"--out {out_dir}: exists and is not a directory; allowed: a directory")
    try:
        mults = parse_mults(batch_mults)
        rule = check_rule(lr_scaling)
        probe_steps = positive_int(probe_steps, "--probe-steps", "an integer >= 2")
        probe_rounds = positive_int(probe_rounds, "--probe-rounds", "an integer >= 1")
        if budget_samples is not None:
            budget_samples = positive_int(
                budget_samples, "--budget-samples", "a positive number of responses"
            )
        if verify_samples is not None:
            verify_samples = positive_int(
                verify_samples, "--verify-samples", "a positive number of responses"
            )
        verify = _count(verify, "--verify")
    except SweepError as err:
        raise TuneError(str(err)) from None
    if probe_steps < 2:
        raise TuneError(
            f"--probe-steps {probe_steps}: the first step warms up and is not timed; "
            "allowed: an integer >= 2"
        )
    if len(mults) < 2:
        raise TuneError(
            f"--batch-mults {','.join(map(str, mults))}: one candidate leaves nothing to "
            "choose; allowed: 1 and at least one more multiplier, e.g. 1,2,4,8,16"
        )
    if verify > len(mults) - 1:
        raise TuneError(
            f"--verify {verify}: allowed: an integer from 0 (no verification) to "
            f"{len(mults) - 1} (the other candidates of --batch-mults)"
        )
    extra_args = [str(a) for a in extra_args]
    env = dict(os.environ if env is None else env)
    try:
        config = probe(recipe_path, extra_args, out, env)
        base = base_from_config(config, recipe)
    except SweepError as err:
        raise TuneError(str(err)) from None
    if config.get("noise_scale_beta") is None:
        raise TuneError(
            f"RECIPE {recipe}: it resolves --noise-scale-beta none, so no noise scale is "
            "measured; allowed: a value in [0, 1), e.g. add `-- --noise-scale-beta 0.99`"
        )
    micro, dp = config.get("micro_batch_size"), config.get("data_parallel_size") or 1
    if isinstance(micro, int) and dp == 1 and base["B0"] <= micro:
        raise TuneError(
            f"RECIPE {recipe}: --micro-batch-size {micro} holds the whole batch "
            f"(--global-batch-size {base['B0']}) on one rank, so the noise scale has no small "
            "batch to compare with; allowed: a --micro-batch-size below the global batch"
        )
    for key in ("rollout_engine", "rollout_concurrency", "rollout_max_response_len"):
        if config.get(key) is None:
            raise TuneError(f"RECIPE {recipe}: the dry run's configuration lacks {key}")
    if config["rollout_engine"] == "sglang" and not config.get("hf_checkpoint"):
        raise TuneError(
            f"RECIPE {recipe}: --rollout-engine sglang without --hf-checkpoint: the decode "
            "profile starts a server from it; allowed: a recipe with --hf-checkpoint DIR"
        )
    N0 = base["P0"] * base["G"]
    if budget_samples is None:
        budget_samples = DEFAULT_PASS1_STEPS * N0
    if budget_samples < 4 * N0:
        raise TuneError(
            f"--budget-samples {budget_samples}: under 4 rollout steps of the reference "
            f"({N0} responses each), too few for a noise-scale estimate; allowed: >= {4 * N0}"
        )
    try:
        align_fraction = float(align_fraction)
    except (TypeError, ValueError):
        align_fraction = math.nan
    if not 0 < align_fraction < 1:
        raise TuneError(
            f"--align-fraction {align_fraction}: allowed: a number between 0 and 1 (the share "
            "of the way from the start to the target the check runs to, e.g. 0.5)"
        )
    for flag, wanted, off in (
        ("--align-check on", align_check, "--align-check off"),
        (f"--verify {verify}", verify, "--verify 0"),
    ):
        if not wanted:
            continue
        if not config.get("target"):
            raise TuneError(
                f"{flag}: RECIPE {recipe} has no --target, so no curve can be measured against "
                f"it; allowed: {off}, or add `-- --target eval/accuracy=VALUE --eval-interval N`"
            )
        if not config.get("eval_interval") and str(config["target"]).startswith("eval/"):
            raise TuneError(
                f"{flag}: the target {config['target']} needs evaluations but "
                f"--eval-interval is 0; allowed: {off}, or add `-- --eval-interval N` (N >= 1)"
            )
    if verify:
        if verify_samples is None:
            verify_samples = int(config.get("num_steps") or 1) * N0
    plan = TunePlan(
        recipe_path.resolve(),
        out,
        mults,
        rule,
        budget_samples,
        probe_steps,
        verify,
        verify_samples,
        extra_args,
        env,
        config,
        base,
        bool(align_check),
        align_fraction,
        probe_rounds,
    )
    try:  # every member any step may run, dry-run now so nothing starts with a bad one
        validate_members(plan.recipe, probe_members(plan), base, plan.probe_args, out, env)
        if align_check:
            validate_members(
                plan.recipe, align_plan(plan, mults), base, align_args(plan, None), out, env
            )
        if verify:
            check_sweep(
                plan.recipe,
                out / "verify",
                mults,
                rule,
                max_samples=verify_samples,
                extra_args=extra_args,
                env=env,
            )
    except SweepError as err:
        raise TuneError(str(err)) from None
    return plan


def probe_members(plan: TunePlan) -> list[dict]:
    """The probes, round after round (--probe-rounds), each round every multiplier, x1 first,
    run for --probe-steps rollout steps (the flag comes in `probe_args`): a candidate's costs are
    taken relative to the x1 probe of its own round, a few seconds apart, so a change of the
    machine's load between rounds cancels, and the rounds' spread shows what is left. Names:
    the sweep's, with -r{round}."""
    members = plan_members(plan.base, plan.mults, plan.rule, seeds=[_seed(plan)])
    out = []
    for r in range(1, plan.probe_rounds + 1):
        for m in members:
            name = f"{m['name']}-r{r}"
            out.append({**m, "name": name, "run_dir": name, "round": r})
    return out


def _seed(plan: TunePlan) -> int:
    seed = plan.base.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 1234


def align_plan(plan: TunePlan, mults: Sequence[int]) -> list[dict]:
    """The check's members at these multipliers (x1 included when asked), at tune's seed."""
    return plan_members(plan.base, sorted(set(mults)), plan.rule, seeds=[_seed(plan)])


def align_args(plan: TunePlan, level_value: float | None) -> list[str]:
    """After the user's flags: the check's level as the target, stopping there, no progress
    bar (None: the recipe's own target, for the dry run before the level is known)."""
    target = str(plan.config["target"])
    if level_value is not None:
        target = f"{target.split('=', 1)[0]}={level_value!r}"
    return [*plan.extra_args, "--target", target, "--stop-at-target"]
