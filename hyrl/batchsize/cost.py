"""What a cut in time-to-target is worth: GPU-hours and dollars of a fleet, and the saving.

gpu_hours = N * H, usd = N * H * P, saved_gpu_hours = N * H * F, saved_usd = N * H * F * P,
where N = GPUs, H = hours of the job, P = dollars per GPU-hour, F = the fraction of time cut
(0.1 for a 10% shorter time to target). 10,000 GPUs for 30 days (720 h) at $3 with a 10% cut
save 720,000 GPU-hours, $2.16M.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from hyrl.config.parser import parse_or_exit_code


class CostError(ValueError):
    """A bad input; the message names the flag and what is allowed."""


def _number(flag: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CostError(f"{flag} {value!r}: must be a finite number")
    return float(value)


def cost(gpus, hours, usd_per_gpu_hour, time_reduction) -> dict:
    """GPU-hours and dollars of N GPUs for H hours at P $/GPU-hour, and what a cut F saves."""
    if isinstance(gpus, float) and gpus.is_integer():
        gpus = int(gpus)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise CostError(f"--gpus {gpus!r}: must be a whole number of GPUs >= 1")
    hours = _number("--hours", hours)
    if hours <= 0:
        raise CostError(f"--hours {hours!r}: must be > 0 (hours of the job, e.g. 720 for 30 days)")
    price = _number("--usd-per-gpu-hour", usd_per_gpu_hour)
    if price < 0:
        raise CostError(f"--usd-per-gpu-hour {price!r}: must be >= 0 (dollars per GPU-hour)")
    cut = _number("--time-reduction", time_reduction)
    if not 0 <= cut < 1:
        raise CostError(
            f"--time-reduction {cut!r}: must be a fraction with 0 <= F < 1 "
            "(0.1 for a 10% shorter time)"
        )
    gpu_hours = gpus * hours
    saved = gpu_hours * cut
    return {
        "gpus": gpus,
        "hours": hours,
        "usd_per_gpu_hour": price,
        "time_reduction": cut,
        "gpu_hours": gpu_hours,
        "usd": gpu_hours * price,
        "saved_gpu_hours": saved,
        "saved_usd": saved * price,
        "gpu_hours_after": gpu_hours - saved,
        "usd_after": (gpu_hours - saved) * price,
    }


def _usd(x: float) -> str:
    if abs(x) >= 1e6:
        return f"${x / 1e6:,.2f}M (${x:,.0f})"
    return f"${x:,.2f}"


def format_table(result: dict) -> str:
    """The cost as aligned plain text."""
    rows = [
        ("GPUs", f"{result['gpus']:,}"),
        ("hours", f"{result['hours']:,.6g} ({result['hours'] / 24:,.4g} days)"),
        ("USD per GPU-hour", f"${result['usd_per_gpu_hour']:,.4g}"),
        ("time reduction", f"{result['time_reduction'] * 100:.4g}%"),
        ("GPU-hours", f"{result['gpu_hours']:,.0f}"),
        ("cost", _usd(result["usd"])),
        ("saved GPU-hours", f"{result['saved_gpu_hours']:,.0f}"),
        ("saved", _usd(result["saved_usd"])),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str]) -> int:
    """`hyrl cost`: the table (or --json), 0; 2 on a bad flag or value."""
    parser = argparse.ArgumentParser(
        prog="hyrl cost", description="GPU-hours and dollars of a job, and what a cut saves."
    )
    parser.add_argument("--gpus", type=int, required=True, metavar="N", help="GPUs (>= 1)")
    parser.add_argument("--hours", type=float, required=True, metavar="H", help="hours (> 0)")
    parser.add_argument(
        "--usd-per-gpu-hour",
        type=float,
        required=True,
        metavar="P",
        help="dollars per GPU-hour (>= 0)",
    )
    parser.add_argument(
        "--time-reduction",
        type=float,
        required=True,
        metavar="F",
        help="fraction of time cut, 0 <= F < 1 (0.1 = 10%%)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    try:
        result = cost(args.gpus, args.hours, args.usd_per_gpu_hour, args.time_reduction)
    except CostError as err:
        print(f"hyrl cost: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else format_table(result))
    return 0
