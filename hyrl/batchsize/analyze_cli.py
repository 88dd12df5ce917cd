"""`hyrl analyze PATH... --target METRIC=VALUE --out DIR`: the report of a sweep's runs.

The parser and the command; the analysis is `hyrl.batchsize.analyze`, the files
`hyrl.batchsize.report` (matplotlib, imported once the flags are good).
"""

from __future__ import annotations

import argparse
import sys

from hyrl.batchsize.analyze import (
    BOOTSTRAP_RANGE,
    AnalysisError,
    analyze,
    collect_runs,
    parse_target,
)
from hyrl.batchsize.over_seeds import DEFAULT_BOOTSTRAP, DEFAULT_CONFIDENCE
from hyrl.config.parser import parse_or_exit_code


def main(argv: list[str]) -> int:
    """`hyrl analyze`: 0 with the report written, 2 on a bad flag, path or unwritable --out."""
    parser = argparse.ArgumentParser(
        prog="hyrl analyze",
        description="Samples, throughput and time to a validation target; "
        "alignment against a reference run; critical batch; fastest valid run; with several "
        "seeds per member, seed-mean curves and bootstrapped verdicts.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run directories (metrics.jsonl) or sweep directories (sweep.json)",
    )
    parser.add_argument(
        "--target", required=True, metavar="METRIC=VALUE", help="e.g. eval/accuracy=0.77"
    )
    parser.add_argument(
        "--reference",
        default=None,
        metavar="NAME",
        help="reference run name (default: sweep.json's, else the smallest B)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.2,
        help="alignment band: samples ratios within 1 +/- this (default 0.2); over seeds, the "
        "floor of the material margin tau",
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=DEFAULT_BOOTSTRAP,
        metavar="N",
        help="resamples of the seeds for the verdicts over seeds, from "
        f"{BOOTSTRAP_RANGE[0]} to {BOOTSTRAP_RANGE[1]} (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        metavar="C",
        help="share of seed bootstraps a verdict over seeds needs, above 0.5 and below 1 "
        f"(default {DEFAULT_CONFIDENCE})",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="where the report goes")
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    from hyrl.batchsize.report import print_summary, write_report

    try:
        target = parse_target(args.target)
        runs, sweep_reference, notes = collect_runs(args.paths)
        result = analyze(
            runs,
            target,
            args.reference or sweep_reference,
            args.tolerance,
            n_boot=args.bootstrap,
            confidence=args.confidence,
        )
        result["notes"] = notes + result["notes"]
    except AnalysisError as err:
        print(f"hyrl analyze: error: {err}", file=sys.stderr)
        return 2
    try:
        written = write_report(result, runs, args.out)
    except OSError as err:
        print(
            f"hyrl analyze: error: --out {args.out}: cannot write the report ({err})",
            file=sys.stderr,
        )
        return 2
    print_summary(result, written)
    return 0
