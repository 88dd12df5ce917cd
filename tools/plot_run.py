#!/usr/bin/env python
"""Plot one run directory's curves and print what they show.

    python tools/plot_run.py RUN_DIR [--out RUN_DIR/reward.png] [--window 10]

Reads only RUN_DIR/metrics.jsonl (a step re-logged after a resume counts once, its later
line winning; a skipped optimizer step is a record of its own). Writes reward.png (the reward
against optimizer steps and wall-clock) and curves.png: against samples (responses consumed),
one panel per quantity the run logged of reward, eval accuracy, response length, entropy, KL,
gradient norm and throughput (responses/s of each step). Prints steps, wall-clock, the mean
train/reward_mean over the first and the last `window` rollout steps, and the panels drawn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyrl.metrics.run_dir import read_metrics


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", help="PNG path (default RUN_DIR/reward.png)")
    parser.add_argument("--window", type=int, default=10, help="rollout steps averaged at each end")
    args = parser.parse_args()

    records = [r for r in read_metrics(args.run_dir) if "train/reward_mean" in r]
    if not records:
        print(f"{args.run_dir}/metrics.jsonl: no train/reward_mean records", file=sys.stderr)
        return 1
    steps = [r["step"] for r in records]
    rewards = [r["train/reward_mean"] for r in records]
    elapsed = [r["elapsed_s"] for r in records]
    window = min(args.window, len(rewards))
    first, last = sum(rewards[:window]) / window, sum(rewards[-window:]) / window

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, xs, label in ((by_step, steps, "optimizer step"), (by_time, elapsed, "wall-clock (s)")):
        ax.plot(xs, rewards, lw=0.8, alpha=0.5, label="per step")
        ends = [rewards[max(0, i - window + 1) : i + 1] for i in range(len(rewards))]
        smooth = [sum(end) / len(end) for end in ends]
        ax.plot(xs, smooth, lw=1.8, label=f"{window}-step mean")
        ax.set_xlabel(label)
        ax.set_ylabel("train/reward_mean")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    by_step.legend(loc="lower right")
    fig.suptitle(f"{Path(args.run_dir).name}: {len(records)} steps in {elapsed[-1]:.0f} s")
    fig.tight_layout()
    out = Path(args.out) if args.out else Path(args.run_dir) / "reward.png"
    fig.savefig(out, dpi=110)
    setup_s = records[0].get("perf/setup_s", 0)
    print(f"steps {len(records)}, wall-clock {elapsed[-1]:.1f} s (after {setup_s:.1f} s setup)")
    print(f"train/reward_mean: first {window} steps {first:.3f}, last {window} steps {last:.3f}")
    print(f"plot: {out}")
    drawn = plot_curves(read_metrics(args.run_dir), out.with_name("curves.png"), plt)
    print(f"curves against samples: {', '.join(drawn)} ({out.with_name('curves.png')})")
    return 0


# (panel title, the record keys it plots: the first one a run logged)
CURVES = (
    ("reward", ("train/reward_mean",)),
    ("eval accuracy", ("eval/accuracy",)),
    ("response length", ("train/response_len_mean",)),
    ("entropy", ("train/entropy", "actor/entropy")),
    ("KL", ("actor/kl", "actor/approx_kl")),
    ("gradient norm", ("actor/grad_norm",)),
)


def _throughput(records: list[dict]) -> list[tuple[float, float]]:
    """(samples, responses/s of the step that reached them): samples gained over perf/step_s."""
    points, before = [], 0
    for r in records:
        if "samples" not in r:
            continue
        gained, before = r["samples"] - before, r["samples"]
        if r.get("perf/step_s") and gained > 0:
            points.append((r["samples"], gained / r["perf/step_s"]))
    return points


def plot_curves(records: list[dict], out: Path, plt) -> list[str]:
    """curves.png: each quantity the records hold against samples; the panels drawn."""
    panels = []
    for title, keys in CURVES:
        key = next(
            (k for k in keys if any(isinstance(r.get(k), (int, float)) for r in records)), None
        )
        if key is not None:
            points = [
                (r["samples"], r[key])
                for r in records
                if isinstance(r.get(key), (int, float)) and "samples" in r
            ]
            panels.append((title, key, points))
    if points := _throughput(records):
        panels.append(("throughput", "responses/s", points))
    if not panels:
        return []
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (title, key, points) in zip(axes.flat, panels):
        ax.plot(
            [x for x, _ in points],
            [y for _, y in points],
            lw=1.2,
            marker="." if len(points) < 30 else None,
        )
        ax.set_title(title)
        ax.set_xlabel("samples (responses consumed)")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return [title for title, _, _ in panels]


if __name__ == "__main__":
    sys.exit(main())
