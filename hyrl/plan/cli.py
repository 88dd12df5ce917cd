"""`hyrl plan`: the command line; the plan of a recipe (read through its dry run) or of flags."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from hyrl.config import ConfigError, RunConfig, files_not_checked, load
from hyrl.config.recipe_dry_run import dry_run, error_lines
from hyrl.plan.make import check_fit, make_plan
from hyrl.plan.render import format_plan, with_template_lead
from hyrl.plan.step_time import THROUGHPUT_FLAGS, Throughput
from hyrl.plan.sync import LINK_FLAGS, Links


class PlanError(ValueError):
    """A plan that cannot be made (bad recipe, dry run failed): says why."""


USAGE = (
    """usage: hyrl plan RECIPE.sh [--json] [LINK OPTIONS] [-- EXTRA RECIPE FLAGS]
       hyrl plan [--json] [LINK OPTIONS] [--world-size N] -- TRAIN FLAGS [--world-size N]

Rank layout, GPUs and per-GPU memory of a run, on any machine (no GPU), the predicted time
of one weight sync (a model from link bandwidths, not a measurement), of one rollout step and
one checkpoint save (estimates from assumed throughputs), and the preemption lead time they
need beside the one launch/sbatch.template gives (SBATCH_SIGNAL, else its #SBATCH --signal).
With a recipe, its dry run (`bash RECIPE --dry-run EXTRA...`, one process at the recipe's
intended world size) gives the resolved flags. Data, tokenizer and checkpoint files need not
exist here; the ones not checked are named. Exit status 1 when the plan does not fit (the
error names the flag), 2 when the flags are refused.

Link options (the weight-sync model's bandwidths; defaults: H100/H200 SXM nodes):
"""
    + "\n".join(
        f"  {flag} X{' ' * (16 - len(flag))}{text}, default {getattr(Links(), field):g}"
        for flag, (field, text) in LINK_FLAGS.items()
    )
    + """

Throughput options (what the step and save estimates assume; also PLAN_ASSUMPTIONS of
launch/sbatch.template):
"""
    + "\n".join(
        f"  {flag} X\n      {text}, default {getattr(Throughput(), field):g}"
        for flag, (field, text) in THROUGHPUT_FLAGS.items()
    )
)

RECIPE_TIMEOUT_S = 600


def config_from_dry_run(resolved: dict) -> tuple[RunConfig, int]:
    """(RunConfig, world size) from the JSON `hyrl train --dry-run` prints."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    missing = names - set(resolved)
    if missing or "world_size" not in resolved:
        raise PlanError(
            "the dry run's JSON lacks "
            + ", ".join(sorted(missing or {"world_size"}))
            + " (is the recipe's hyrl older than this one?)"
        )
    return RunConfig(**{n: resolved[n] for n in names}), int(resolved["world_size"])


def recipe_dry_run(recipe: str, extra: list[str]) -> dict:
    """The resolved config of `bash RECIPE --dry-run EXTRA...`; PlanError with its error."""
    if not Path(recipe).is_file():
        raise PlanError(f"{recipe}: no such recipe file")
    env = dict(os.environ)
    env.setdefault("PYTHON", sys.executable)
    # A run directory that never exists, so the dry run never refuses an existing one.
    probe = ["--run-dir", os.path.join(env.get("TMPDIR", "/tmp"), f"hyrl-plan-{os.getpid()}-none")]
    try:
        done = dry_run(recipe, [*extra, *probe], env, RECIPE_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise PlanError(f"{shlex.join(err.cmd)}: no answer in {RECIPE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise PlanError(error_lines(done.stderr, 5) or f"exit {done.returncode}")
    if done.config is None:
        raise PlanError(
            f"{recipe} --dry-run printed no JSON on stdout (does it pass --dry-run "
            "on to hyrl.train.cli?)"
        )
    return done.config


def _split_option(args: list[str], name: str) -> tuple[list[str], str | None]:
    """`args` without `name VALUE` / `name=VALUE`, and the last VALUE given (None: none)."""
    out, found = [], None
    i = 0
    while i < len(args):
        flag, sep, value = args[i].partition("=")
        if flag == name:
            if not sep:
                if i + 1 >= len(args):
                    raise PlanError(f"{name} needs a value")
                value, i = args[i + 1], i + 1
            found = value
        else:
            out.append(args[i])
        i += 1
    return out, found


def _split_world_size(args: list[str]) -> tuple[list[str], int | None]:
    out, value = _split_option(args, "--world-size")
    if value is None:
        return out, None
    try:
        return out, int(value)
    except ValueError:
        raise PlanError(f"--world-size={value}: not an integer") from None


def _split_numbers(args: list[str], flags: dict) -> tuple[list[str], dict[str, float]]:
    """The options `flags` names (flag -> (field, text)) out of `args`: {field: number > 0}."""
    given = {}
    for flag, (field, _) in flags.items():
        args, value = _split_option(args, flag)
        if value is None:
            continue
        try:
            number = float(value)
        except ValueError:
            raise PlanError(f"{flag}={value}: not a number") from None
        if not 0 < number < float("inf"):
            raise PlanError(f"{flag}={value}: must be a finite number > 0")
        given[field] = number
    return args, given


def _split_links(args: list[str]) -> tuple[list[str], Links]:
    """The link options (LINK_FLAGS) out of `args`, as Links; each a number > 0."""
    args, given = _split_numbers(args, LINK_FLAGS)
    return args, Links(**given)


def split_throughput(args: list[str]) -> tuple[list[str], Throughput]:
    """The throughput options (THROUGHPUT_FLAGS) out of `args`, as Throughput; each a number
    > 0, --mfu at most 1."""
    args, given = _split_numbers(args, THROUGHPUT_FLAGS)
    if given.get("mfu", 0) > 1:
        raise PlanError(f"--mfu={given['mfu']:g}: a utilisation is at most 1")
    return args, Throughput(**given)


def main(argv: list[str] | None = None) -> int:
    """`hyrl plan`; returns 0 when it fits, 1 when it does not, 2 on refused flags."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv[: argv.index("--") if "--" in argv else None]):
        print(USAGE)
        return 0
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    try:
        argv, world = _split_world_size(argv)
        argv, links = _split_links(argv)
        argv, throughput = split_throughput(argv)
        recipes = [a for a in argv if not a.startswith("-")]
        unknown = [a for a in argv if a.startswith("-")]
        if unknown or len(recipes) > 1:
            raise PlanError(f"unexpected {' '.join(unknown + recipes[1:])}\n{USAGE}")
        if recipes:
            if world is not None:
                raise PlanError(
                    "--world-size: a recipe states its own world size (NNODES x "
                    "GPUS_PER_NODE, or NPROC); set those instead"
                )
            cfg, world = config_from_dry_run(recipe_dry_run(recipes[0], extra))
        else:
            if not extra:
                raise PlanError(f"nothing to plan\n{USAGE}")
            extra, world_in_flags = _split_world_size(extra)
            world = world_in_flags or world or int(os.environ.get("WORLD_SIZE", "1"))
            cfg = load(extra, world, check_files=False)  # a plan is made on any machine
            unchecked = files_not_checked(cfg)
            if unchecked:
                print(f"hyrl plan: not checked: {unchecked}", file=sys.stderr)
        plan = with_template_lead(make_plan(cfg, world, links, throughput))
    except ConfigError as err:
        print(f"hyrl plan: error: {err}", file=sys.stderr)
        return 2
    except PlanError as err:
        print(f"hyrl plan: error: {err}", file=sys.stderr)
        return 2
    problems = check_fit(plan)
    if as_json:
        print(json.dumps({**plan, "problems": problems}, indent=2))
    else:
        print(format_plan(plan))
    for problem in problems:
        print(f"hyrl plan: error: {problem}", file=sys.stderr)
    return 1 if problems else 0
