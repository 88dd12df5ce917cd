"""Step time of the tiny GRPO recipe at this checkout against another git revision, side by side.

    python tools/bench_trainer_step.py --baseline REV [--num-steps 200] [--repeats 3] [--json]
        [-- EXTRA RECIPE FLAGS]

Checks REV out into a temporary git worktree, then runs recipes/tiny/grpo.sh there and here in
turn (baseline, current, baseline, ...), `--repeats` times each for `--num-steps` rollout steps,
and reads metrics.jsonl only. Per run: the median over steps (the first 10 left out as warm-up)
of perf/step_s and of perf/actor_train_s; then the median over runs, and the current/baseline
ratios. Alternating keeps slow drifts of a shared machine out of the ratio. Not a timed test: a
measurement, printed with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 10
KEYS = ("perf/step_s", "perf/actor_train_s", "perf/logprob_s")


def recipe_records(checkout: Path, run_dir: Path, num_steps: int, flags: list[str]) -> list[dict]:
    """`bash CHECKOUT/recipes/tiny/grpo.sh --run-dir RUN_DIR --num-steps N FLAGS` on one rank
    (torchrun's variables of an enclosing run removed, one OpenMP thread unless set), its
    metrics.jsonl records. Shared with tools/bench_async.py."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(
        PYTHONPATH=str(checkout),
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    argv = ["--run-dir", str(run_dir), "--no-progress", "--num-steps", str(num_steps), *flags]
    proc = subprocess.run(
        ["bash", str(checkout / "recipes/tiny/grpo.sh"), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"{checkout}: the recipe failed ({' '.join(flags)}):\n{proc.stderr[-3000:]}"
        )
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run_once(checkout: Path, run_dir: Path, num_steps: int, extra: list[str]) -> dict[str, float]:
    rows = recipe_records(checkout, run_dir, num_steps, extra)
    rows = [r for r in rows if r.get("rollout_step", 0) > WARMUP_STEPS]
    return {key: statistics.median(r[key] for r in rows if key in r) for key in KEYS}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1 :], argv[: argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare against")
    parser.add_argument("--num-steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.num_steps <= WARMUP_STEPS:
        parser.error(f"--num-steps {args.num_steps}: must exceed the {WARMUP_STEPS} warm-up steps")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.baseline],
            check=True,
            capture_output=True,
        )
        try:
            runs: dict[str, list[dict]] = {"baseline": [], "current": []}
            for repeat in range(args.repeats):
                for name, checkout in (("baseline", base), ("current", ROOT)):
                    runs[name].append(
                        run_once(checkout, Path(tmp) / f"{name}-{repeat}", args.num_steps, extra)
                    )
                    print(
                        f"{name} run {repeat + 1}/{args.repeats}: "
                        + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in runs[name][-1].items()),
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                capture_output=True,
            )
    medians = {
        name: {k: statistics.median(r[k] for r in rs) for k in KEYS} for name, rs in runs.items()
    }
    from bench_vs_trl import cpu_model  # tools/ is this script's folder

    result = {
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "baseline": args.baseline,
        "num_steps": args.num_steps,
        "repeats": args.repeats,
        "extra_flags": extra,
        "median_s": medians,
        "ratio_current_over_baseline": {
            k: medians["current"][k] / medians["baseline"][k] for k in KEYS
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"machine: {result['machine']}; {args.repeats} x {args.num_steps} steps each")
        for key in KEYS:
            print(
                f"{key}: baseline {medians['baseline'][key] * 1e3:.1f} ms, current "
                f"{medians['current'][key] * 1e3:.1f} ms, ratio "
                f"{result['ratio_current_over_baseline'][key]:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
