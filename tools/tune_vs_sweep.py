"""Predicted against measured: `hyrl tune`'s S, R and T ratios for every candidate next to a
sweep's medians over seeds (each run against its own seed's reference), as a markdown table.

    python tools/tune_vs_sweep.py TUNE_DIR SWEEP_DIR --target eval/accuracy=0.9

TUNE_DIR holds tune's report.json; SWEEP_DIR is a `hyrl sweep` directory (analysed here with
`hyrl.batchsize.analyze`). A member is matched to a candidate by its responses per step and lr
rule (the sweep's fixed-lr control has no candidate). The T error is predicted / measured - 1,
given for members whose median over seeds reached the target.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hyrl.batchsize.analyze import analyze, parse_target


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _spread(median, bounds) -> str:
    if median is None:
        return "never"
    low = "never" if bounds[0] is None else f"{bounds[0]:.2f}"
    high = "never" if bounds[1] is None else f"{bounds[1]:.2f}"
    return f"{median:.2f}x ({low}-{high})"


def rows(tune: dict, analysis: dict) -> list[str]:
    by_b = {c["responses_per_step"]: c for c in tune["candidates"]}
    rec = tune["recommendation"]["responses_per_step"]
    out = [
        "| member | B | S ratio pred | S ratio meas | R ratio pred | R ratio meas | "
        "T ratio pred | T ratio meas | T error |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in analysis.get("groups") or []:
        c = by_b.get(g["responses_per_step"])
        if c is None or g["group"].split("-")[1] == "fixed":
            continue
        t_meas = g["time_ratio_median"]
        error = f"{100 * (c['time_ratio'] / t_meas - 1):+.0f}%" if t_meas else "-"
        mark = " (recommended)" if c["responses_per_step"] == rec else ""
        out.append(
            f"| {g['group']}{mark} | {int(g['responses_per_step'])} | {_x(c['samples_ratio'])} | "
            f"{_spread(g['samples_ratio_median'], g['samples_ratio_range'])} | "
            f"{_x(c['throughput_ratio'])} | "
            f"{_spread(g['throughput_ratio_median'], g['throughput_ratio_range'])} | "
            f"{_x(c['time_ratio'])} | {_spread(t_meas, g['time_ratio_range'])} | {error} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tune_dir", type=Path)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--target", required=True)
    args = parser.parse_args()
    tune = json.loads((args.tune_dir / "report.json").read_text())
    analysis = analyze([args.sweep_dir], parse_target(args.target))
    print("\n".join(rows(tune, analysis)))


if __name__ == "__main__":
    main()
