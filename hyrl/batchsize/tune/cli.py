"""`hyrl tune RECIPE --out DIR [...] [-- FLAGS]`: the parser and the command (the checks are
`hyrl.batchsize.tune.plan`, the procedure `hyrl.batchsize.tune.run`, the model
`hyrl.batchsize.tune.model`)."""

from __future__ import annotations

import argparse
import sys

from hyrl.batchsize.tune.plan import (
    DEFAULT_FRACTION,
    DEFAULT_MULTS,
    DEFAULT_PASS1_STEPS,
    DEFAULT_PROBE_ROUNDS,
    DEFAULT_PROBE_STEPS,
    TuneError,
    check_tune,
)
from hyrl.batchsize.tune.report import summary_lines
from hyrl.batchsize.tune.run import run_tune
from hyrl.config.parser import parse_or_exit_code


def main(argv: list[str]) -> int:
    """`hyrl tune`: 0 with the report written, 1 when a step failed (a run, the profile, the
    model), 2 on a refused argument (nothing started), 130 when interrupted."""
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="hyrl tune",
        allow_abbrev=False,
        description="Predict the fastest batch size of RECIPE from one short run (noise scale, "
        "stage costs), a decode profile and a few update steps per candidate, instead of a full "
        "sweep. Writes DIR/report.md, report.json and plots. Re-running the same command skips "
        "the finished steps.",
        epilog="Flags after `--` go to every run of RECIPE (before tune's own flags).",
    )
    parser.add_argument("recipe", metavar="RECIPE", help="recipe script, e.g. recipes/tiny/grpo.sh")
    parser.add_argument("--out", required=True, metavar="DIR", help="where every step goes")
    parser.add_argument(
        "--batch-mults",
        default=DEFAULT_MULTS,
        metavar="M,M,...",
        help=f"candidate multipliers of the recipe's batch, including 1 (default {DEFAULT_MULTS})",
    )
    parser.add_argument(
        "--budget-samples",
        default=None,
        metavar="N",
        help=f"responses of pass 1 at the reference batch (default {DEFAULT_PASS1_STEPS} "
        "rollout steps' worth; at least 4)",
    )
    parser.add_argument(
        "--probe-steps",
        default=str(DEFAULT_PROBE_STEPS),
        metavar="K",
        help=f"rollout steps of each update probe, the first untimed (default "
        f"{DEFAULT_PROBE_STEPS}; >= 2)",
    )
    parser.add_argument(
        "--probe-rounds",
        default=str(DEFAULT_PROBE_ROUNDS),
        metavar="R",
        help=f"rounds of update probes, every candidate and x1 in each, each candidate "
        f"measured against its round's x1 so load drift between rounds cancels; the rounds' "
        f"spread is reported (default {DEFAULT_PROBE_ROUNDS})",
    )
    parser.add_argument(
        "--lr-scaling",
        default="sqrt",
        choices=("sqrt", "linear", "none"),
        help="lr of a candidate: lr0 x (B / B0)^k, k = 1/2, 1, 0 (default sqrt)",
    )
    parser.add_argument(
        "--verify",
        default="0",
        metavar="K",
        help="then run the recommendation, the reference and K neighbours as a sweep with "
        "equal sample budgets and compare predicted with measured ratios (default 0: no)",
    )
    parser.add_argument(
        "--verify-samples",
        default=None,
        metavar="N",
        help="responses per verify member (default: the recipe's --num-steps x P0 x G)",
    )
    parser.add_argument(
        "--align-check",
        default="on",
        choices=("on", "off"),
        help="after predicting, run the reference until its metric is --align-fraction of the "
        "way to the recipe's --target, then the recommendation and its larger neighbour from "
        "the same start, and reject a candidate whose curve against samples departs from the "
        "reference's (default on; needs the recipe's --target and --eval-interval)",
    )
    parser.add_argument(
        "--align-fraction",
        default=str(DEFAULT_FRACTION),
        metavar="F",
        help=f"how far towards the target the check runs, from the start (0 < F < 1; default "
        f"{DEFAULT_FRACTION})",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress: neither the live display (on a terminal) nor the flushed line as "
        "each run starts and ends, with its result and an ETA (off a terminal)",
    )
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    try:
        plan = check_tune(
            args.recipe,
            args.out,
            batch_mults=args.batch_mults,
            budget_samples=args.budget_samples,
            verify=args.verify,
            verify_samples=args.verify_samples,
            lr_scaling=args.lr_scaling,
            probe_steps=args.probe_steps,
            probe_rounds=args.probe_rounds,
            extra_args=extra,
            align_check=args.align_check == "on",
            align_fraction=args.align_fraction,
        )
    except TuneError as err:
        print(f"hyrl tune: error: {err}", file=sys.stderr)
        return 2
    try:
        report = run_tune(plan, show_progress=not args.no_progress)
    except TuneError as err:
        print(f"hyrl tune: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"hyrl tune: interrupted; run the same command again to resume (finished steps in "
            f"{args.out} are kept).",
            file=sys.stderr,
        )
        return 130
    for line in summary_lines(report):
        print(line)
    print(f"report: {plan.out / 'report.md'}")
    return 0
