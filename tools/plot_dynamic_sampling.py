#!/usr/bin/env python
"""A --dynamic-sampling run against a plain one: the policy's reward against samples consumed
and against samples generated, and the filtered-group fraction.

    python tools/plot_dynamic_sampling.py DYNAMIC_RUN_DIR [PLAIN_RUN_DIR] --out PNG [--window 20]

Reads only the run directories' metrics.jsonl. The policy's reward is train/reward_mean over
every response generated: under --dynamic-sampling train/reward_mean_generated (train/
reward_mean is that of the kept groups, biased toward mixed groups), else train/reward_mean.
Prints, per run, the samples consumed and generated when the `window`-step mean of that reward
first reaches 0.9, and the filtered fraction over the run's tenths.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyrl.metrics.run_dir import read_metrics

TARGET = 0.9


def policy_reward(record: dict) -> float:
    return record.get("train/reward_mean_generated", record["train/reward_mean"])


def smooth(values: list[float], window: int) -> list[float]:
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def first_reaching(xs: list[float], ys: list[float], target: float) -> float | None:
    return next((x for x, y in zip(xs, ys) if y >= target), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dynamic_run")
    parser.add_argument("plain_run", nargs="?")
    parser.add_argument("--out", required=True, help="PNG path")
    parser.add_argument("--window", type=int, default=20, help="steps in the running mean")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_consumed, by_generated) = plt.subplots(1, 2, figsize=(11, 3.8))
    for run_dir, label in ((args.dynamic_run, "--dynamic-sampling"), (args.plain_run, "plain")):
        if run_dir is None:
            continue
        rows = [r for r in read_metrics(run_dir) if "train/reward_mean" in r]
        reward = smooth([policy_reward(r) for r in rows], args.window)
        consumed = [r["samples"] for r in rows]
        generated = [r.get("samples_generated", r["samples"]) for r in rows]
        by_consumed.plot(consumed, reward, label=label)
        by_generated.plot(generated, reward, label=label)
        at_consumed = first_reaching(consumed, reward, TARGET)
        at_generated = first_reaching(generated, reward, TARGET)
        print(
            f"{label}: {len(rows)} steps in {rows[-1]['elapsed_s']:.0f} s; reward "
            f"{args.window}-step mean >= {TARGET} at {at_consumed} samples consumed, "
            f"{at_generated} generated; final samples {consumed[-1]}, generated {generated[-1]}"
        )
        if "train/filtered_groups_frac" in rows[0]:
            filtered = [r["train/filtered_groups_frac"] for r in rows]
            tenth = max(1, len(rows) // 10)
            shares = [
                sum(filtered[i : i + tenth]) / len(filtered[i : i + tenth])
                for i in range(0, len(rows), tenth)
            ]
            print(
                "  filtered fraction by tenth of the run: " + ", ".join(f"{x:.2f}" for x in shares)
            )
            twin = by_consumed.twinx()
            twin.plot(consumed, smooth(filtered, args.window), color="gray", lw=0.8, ls="--")
            twin.set_ylabel("filtered groups (fraction, dashed)")
            twin.set_ylim(0, 1.02)
    for ax, label in ((by_consumed, "samples consumed"), (by_generated, "samples generated")):
        ax.set_xlabel(label)
        ax.set_ylabel(f"policy reward ({args.window}-step mean)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    by_generated.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
