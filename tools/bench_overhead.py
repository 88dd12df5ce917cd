"""How much of hyrl's step time is not model work: perf/overhead_s against the step.

    python tools/bench_overhead.py [--num-steps 200] [--repeats 3] [--json]

Runs the tiny GRPO recipe (recipes/tiny/grpo.sh) `--repeats` times for `--num-steps` rollout
steps each, in fresh run directories under a temporary folder, and reads metrics.jsonl only.
perf/overhead_s is the trainer's own account: a rollout step's wall time minus its timed stages
(generation, reward, log-prob/value passes, training, weight sync). Reported per run: the
median over steps of overhead_s / step time and of each stage's share, then the median over
runs. The first 10 steps (warm-up) are left out. Not a timed test: a measurement, with the
machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "grpo.sh"
STAGES = ("rollout", "reward", "logprob", "value", "critic_train", "actor_train", "weight_sync")
WARMUP_STEPS = 10


def step_shares(rows: list[dict]) -> dict[str, float]:
    """Median over rollout steps of each stage's and the overhead's share of the step time."""
    shares: dict[str, list[float]] = {}
    for row in rows:
        if "perf/overhead_s" not in row or row.get("rollout_step", 0) <= WARMUP_STEPS:
            continue
        step_s = row["perf/step_s"]
        if step_s <= 0:
            continue
        for stage in (*STAGES, "overhead"):
            value = row.get(f"perf/{stage}_s")
            if value is not None:
                shares.setdefault(stage, []).append(value / step_s)
    return {stage: statistics.median(values) for stage, values in shares.items()}


def run_once(num_steps: int, run_dir: Path) -> dict[str, float]:
    env = {
        **os.environ,
        "NPROC": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        [
            "bash",
            str(RECIPE),
            "--num-steps",
            str(num_steps),
            "--run-dir",
            str(run_dir),
            "--no-progress",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench_overhead: the recipe failed:\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return step_shares(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-steps", type=int, default=200, help="rollout steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.num_steps <= WARMUP_STEPS:
        parser.error(f"--num-steps {args.num_steps}: must exceed the {WARMUP_STEPS} warm-up steps")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: must be >= 1")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.repeats):
            print(f"run {index + 1}/{args.repeats}: {args.num_steps} steps", file=sys.stderr)
            runs.append(run_once(args.num_steps, Path(tmp) / f"run{index}"))
    stages = sorted({stage for run in runs for stage in run})
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "num_steps": args.num_steps,
        "repeats": args.repeats,
        "median_share": {s: statistics.median(r[s] for r in runs if s in r) for s in stages},
        "runs": runs,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"tiny GRPO recipe, {args.num_steps} steps x {args.repeats} runs ({result['machine']})"
        )
        for stage, share in sorted(result["median_share"].items(), key=lambda kv: -kv[1]):
            print(f"  {stage:<12} {100 * share:5.1f}% of step time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
