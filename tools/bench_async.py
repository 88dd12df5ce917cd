"""Synchronous against --async-rollout on the tiny GRPO recipe, side by side.

    python tools/bench_async.py [--num-steps 30] [--seeds 1,2,3] [--max-staleness 1]
        [--engines 2] [--modes sync,sync-separate,async] [--json] [--plot PNG]
        [-- EXTRA RECIPE FLAGS]

Runs recipes/tiny/grpo.sh with --engines hf engines on Ray (--rollout-num-engines; 0 = the
in-process engine, whose generation thread shares the trainer's CPU cores; EXTRA flags are
appended) for each seed, in turn: synchronous (sync), synchronous with the old log-probs from a
separate pass as async needs them (sync-separate, --recompute-old-log-probs: the same model
passes as async, so async / sync-separate is the overlap alone) and --async-rollout (async);
it reads metrics.jsonl only. Per run, over the rollout steps after the first WARMUP_STEPS:
- wall-clock per rollout step: the median of perf/step_s;
- trainer idle share: the time rank 0's trainer waited for a rollout / the wall-clock
  (synchronous: perf/rollout_s + perf/reward_s, it waits for the whole generation and scoring;
  async: perf/trainer_idle_s);
- rollout-side idle share: the time nothing generated or scored / the wall-clock
  (synchronous: the rest of the step; async: perf/engine_idle_s, the worker's idle gaps);
- reward: train/reward_mean over every step, and over the last WARMUP_STEPS steps; both runs of
  a seed consume the same number of responses per step, so these are rewards over the same
  samples.
Then the medians over seeds and the ratios of the step time to sync's. --plot PNG draws each
run's train/reward_mean (a moving average over 10% of the steps) against samples, one colour
per mode, one line per seed: the reward curves over the same samples. Not a timed test: a
measurement, printed with the machine it ran on (a shared machine's load moves it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 3


def run_once(run_dir: Path, num_steps: int, seed: int, flags: list[str]) -> list[dict]:
    from bench_trainer_step import recipe_records  # tools/ is this script's folder

    return recipe_records(ROOT, run_dir, num_steps, ["--seed", str(seed), *flags])


def summarize(rows: list[dict], asynchronous: bool) -> dict[str, float]:
    """One run's step time, idle shares and rewards (see the module doc)."""
    timed = [r for r in rows if r["rollout_step"] > WARMUP_STEPS]
    wall_s = sum(r["perf/step_s"] for r in timed)
    if asynchronous:
        trainer_idle_s = sum(r["perf/trainer_idle_s"] for r in timed)
        side_idle_s = sum(r["perf/engine_idle_s"] for r in timed)
    else:
        trainer_idle_s = sum(r["perf/rollout_s"] + r["perf/reward_s"] for r in timed)
        side_idle_s = wall_s - trainer_idle_s
    rewards = [r["train/reward_mean"] for r in rows]
    return {
        "step_s": statistics.median(r["perf/step_s"] for r in timed),
        # the trainer's own stages: slower when generation competes for the same cores
        "actor_train_s": statistics.median(r["perf/actor_train_s"] for r in timed),
        "logprob_s": statistics.median(r.get("perf/logprob_s", 0.0) for r in timed),
        "trainer_idle_share": trainer_idle_s / wall_s,
        "rollout_side_idle_share": side_idle_s / wall_s,
        "reward_mean_all_steps": statistics.fmean(rewards),
        "reward_mean_last_steps": statistics.fmean(rewards[-WARMUP_STEPS:]),
        "samples": rows[-1]["samples"],
    }


def plot_rewards(curves: dict, path: Path, title: str) -> None:
    """Reward (moving average over 10% of the steps) against samples, per mode and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for colour, (name, runs) in zip(("tab:blue", "tab:orange", "tab:green"), curves.items()):
        for index, (_seed, samples, rewards) in enumerate(runs):
            window = max(1, len(rewards) // 10)
            smooth = [
                statistics.fmean(rewards[max(0, i - window + 1) : i + 1])
                for i in range(len(rewards))
            ]
            ax.plot(samples, smooth, color=colour, alpha=0.8, label=name if index == 0 else None)
    ax.set_xlabel("samples (responses consumed by actor updates)")
    ax.set_ylabel("train/reward_mean (moving average)")
    ax.set_title(f"tiny GRPO recipe, sync against async: {title}")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1 :], argv[: argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-steps", type=int, default=30)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, one pair each")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--engines", type=int, default=2, help="hf engines on Ray; 0: in-process")
    parser.add_argument("--modes", default="sync,sync-separate,async")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--plot", type=Path, help="PNG of the reward curves over samples")
    args = parser.parse_args(argv)
    fleet = (
        ["--rollout-num-engines", str(args.engines), "--rollout-concurrency", "64"]
        if args.engines
        else []
    )
    if args.num_steps <= 2 * WARMUP_STEPS:
        parser.error(f"--num-steps {args.num_steps}: must exceed {2 * WARMUP_STEPS}")
    seeds = [int(s) for s in args.seeds.split(",")]
    all_modes = {
        "sync": [*fleet, *extra],
        "sync-separate": [*fleet, "--recompute-old-log-probs", *extra],
        "async": [*fleet, "--async-rollout", "--max-staleness", str(args.max_staleness), *extra],
    }
    names = args.modes.split(",")
    unknown = [n for n in names if n not in all_modes]
    if unknown or "sync" not in names:
        parser.error(f"--modes {args.modes}: sync and any of {', '.join(all_modes)}")
    modes = {name: all_modes[name] for name in names}
    runs: dict[str, list[dict]] = {name: [] for name in modes}
    curves: dict[str, list[tuple[int, list[int], list[float]]]] = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for name, flags in modes.items():
                rows = run_once(Path(tmp) / f"{name}-{seed}", args.num_steps, seed, flags)
                runs[name].append({"seed": seed, **summarize(rows, name == "async")})
                curves[name].append(
                    (seed, [r["samples"] for r in rows], [r["train/reward_mean"] for r in rows])
                )
                print(f"{name} seed {seed}: {runs[name][-1]}", file=sys.stderr, flush=True)
    if args.plot is not None:
        plot_rewards(curves, args.plot, f"{args.num_steps} steps, K = {args.max_staleness}")
    keys = [k for k in runs["sync"][0] if k not in ("seed", "samples")]
    medians = {
        name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()
    }
    from bench_vs_trl import cpu_model  # tools/ is this script's folder

    result = {
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "num_steps": args.num_steps,
        "warmup_steps": WARMUP_STEPS,
        "seeds": seeds,
        "max_staleness": args.max_staleness,
        "engines_on_ray": args.engines,
        "extra_flags": extra,
        "runs": runs,
        "median_over_seeds": medians,
        "step_s_ratio_over_sync": {
            name: medians[name]["step_s"] / medians["sync"]["step_s"] for name in modes
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"machine: {result['machine']}; {len(seeds)} seeds x {args.num_steps} steps")
        for name in modes:
            m = medians[name]
            print(
                f"{name}: step {m['step_s'] * 1e3:.1f} ms, trainer idle "
                f"{m['trainer_idle_share']:.1%}, rollout side idle "
                f"{m['rollout_side_idle_share']:.1%}, reward (all steps) "
                f"{m['reward_mean_all_steps']:.3f}"
            )
        for name, ratio in result["step_s_ratio_over_sync"].items():
            print(f"step time {name} / sync: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
