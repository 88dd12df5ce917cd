"""`hyrl sweep RECIPE --out DIR [--dry-run] [...] [-- EXTRA RECIPE FLAGS]`: the parser and the
command.

The sweep itself (probe, plan, validate, run, resume) is `hyrl.batchsize.sweep.run`; --dry-run
stops after the validation, prints the plan and writes nothing.
"""

from __future__ import annotations

import argparse
import sys

from hyrl.batchsize.sweep.run import SweepError, check_sweep, run_sweep
from hyrl.batchsize.sweep.summary import (
    dry_run_lines,
    dry_run_summary,
    failed_members,
    print_summary,
)
from hyrl.batchsize.sweep.throughput import DEFAULT_SAMPLES, MIN_STEPS
from hyrl.config.parser import parse_or_exit_code


def main(argv: list[str]) -> int:
    """`hyrl sweep`: 0 when every member finished (with --dry-run: when every member passed
    its dry run), 1 when one failed, 2 on a refused argument or member (nothing launched),
    130 when interrupted."""
    # Everything after the first `--` goes to the recipe, untouched.
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="hyrl sweep",
        allow_abbrev=False,
        description="Run RECIPE at batch sizes B0 x m (prompts P0 x m, G kept) with the "
        "learning rate re-derived from the recipe's (B0, lr0) by --lr-scaling; record the runs in "
        "DIR/sweep.json for `hyrl analyze DIR`. Re-running the same command resumes: finished "
        "members are skipped, unfinished ones are moved aside (never deleted) and rerun.",
        epilog="Flags after `--` are passed to every run of RECIPE (before the sweep's own "
        "batch, lr, seed and run-dir flags, which win). NPROC and the rest of the environment "
        "reach the recipe unchanged.",
    )
    parser.add_argument("recipe", metavar="RECIPE", help="recipe script, e.g. recipes/tiny/grpo.sh")
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="sweep directory: sweep.json, one run directory and log per member",
    )
    parser.add_argument(
        "--batch-mults",
        default="1,2,4,8,16",
        metavar="M,M,...",
        help="batch multipliers, positive integers including 1 (default 1,2,4,8,16)",
    )
    parser.add_argument(
        "--lr-scaling",
        "--lr-rule",  # its earlier name, still accepted
        dest="lr_rule",
        default="sqrt",
        choices=("sqrt", "linear", "none"),
        help="lr = lr0 x (B / B0)^k, k = 1/2, 1, 0, as hyrl train's --lr-scaling (default sqrt; "
        "--lr-rule is its earlier name)",
    )
    parser.add_argument(
        "--fixed-lr-control",
        default=None,
        metavar="M",
        help="also run multiplier M (an integer >= 2, in --batch-mults or not) at "
        "the reference lr: the fixed-lr ablation",
    )
    parser.add_argument(
        "--seeds",
        default=None,
        metavar="S,S,...",
        help="seeds; every member runs once per seed (default: the recipe's)",
    )
    parser.add_argument(
        "--max-samples",
        default=None,
        metavar="N",
        help="run every member for ceil(N / (P x G)) rollout steps, so all "
        "consume the same responses (default: the recipe's --num-steps)",
    )
    parser.add_argument(
        "--eval-every-samples",
        default=None,
        metavar="N",
        help="give every member --eval-interval max(1, round(N / (P x G))) rollout steps, so "
        "all evaluate about every N responses and their curves compare at the same sample "
        "spacing (default: the recipe's --eval-interval for all, in rollout steps)",
    )
    parser.add_argument(
        "--throughput-rounds",
        default="0",
        metavar="N",
        help="after the members, measure each member's throughput alone, N rounds of every "
        "member of the first seed back to back (the reference first in odd rounds, last in even "
        "ones), evaluation off; `hyrl "
        "analyze` then takes each R ratio as the median over rounds of the round's own ratio, "
        "so a change of the machine's load cancels (default 0: R from the runs themselves)",
    )
    parser.add_argument(
        "--throughput-samples",
        default=str(DEFAULT_SAMPLES),
        metavar="N",
        help="responses each throughput probe measures: ceil(N / (P x G)) rollout steps after "
        f"a warm-up step, at least {MIN_STEPS} in all (default {DEFAULT_SAMPLES})",
    )
    parser.add_argument(
        "--max-parallel", default="1", metavar="N", help="members running at once (default 1)"
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress: neither the live display (on a terminal) nor the flushed line as "
        "each member starts and ends, with its result and an ETA (off a terminal)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="probe, plan and dry-run every member as a real sweep does before "
        "it launches, print one line per member (its resolved values and the "
        "flags the sweep appends) and stop: nothing runs, nothing is written",
    )
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    if args.dry_run:
        return _dry_run(args, extra)
    try:
        sweep = run_sweep(**_sweep_arguments(args, extra), show_progress=not args.no_progress)
    except SweepError as err:
        print(f"hyrl sweep: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"hyrl sweep: interrupted; the running members were stopped. Run the same command "
            f"again to resume (finished members in {args.out} are kept).",
            file=sys.stderr,
        )
        return 130
    print_summary(sweep, args.out)
    return 1 if failed_members(sweep) else 0


def _sweep_arguments(args: argparse.Namespace, extra: list[str]) -> dict:
    """The command line as the arguments of check_sweep and run_sweep (the same for both)."""
    return {
        "recipe": args.recipe,
        "out_dir": args.out,
        "batch_mults": args.batch_mults,
        "lr_rule": args.lr_rule,
        "fixed_lr_control": args.fixed_lr_control,
        "seeds": args.seeds,
        "max_samples": args.max_samples,
        "max_parallel": args.max_parallel,
        "eval_every_samples": args.eval_every_samples,
        "throughput_rounds": args.throughput_rounds,
        "throughput_samples": args.throughput_samples,
        "extra_args": extra,
    }


def _dry_run(args: argparse.Namespace, extra: list[str]) -> int:
    """The checks of a real sweep (same arguments, same messages), then the plan on stdout."""
    try:
        checked = check_sweep(**_sweep_arguments(args, extra))
    except SweepError as err:
        print(f"hyrl sweep: error: {err}", file=sys.stderr)
        return 2
    for line in dry_run_lines(checked):
        print(line)
    print(dry_run_summary(checked), file=sys.stderr)
    return 0
