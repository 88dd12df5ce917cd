#!/usr/bin/env python
"""Benchmark hyrl's tiny GRPO recipe against TRL's GRPOTrainer on the same task, model and batch.

    .venv/bin/python tools/bench_vs_trl.py [--seeds 3] [--target 0.7] [--window 10]
        [--max-steps 1500] [--threads 1] [--out DIR] [--json]

Per seed, one tiny Qwen3-MoE (hyrl.models.qwen3_moe.config.TINY, initialised by
torch.manual_seed(seed) and saved once as a Hugging Face checkpoint) is trained on arith_mod10
("a+b=" -> (a+b) mod 10, then eos; reward 1 iff the stripped response equals the label and ended
with eos) twice, alternating hyrl, TRL, hyrl, TRL, ...:
  hyrl: `bash recipes/tiny/grpo.sh --hf-checkpoint DIR --seed S ...` (the .venv interpreter);
  TRL:  trl.GRPOTrainer on CPU with transformers' generate (no vLLM), in a separate process run
        by the .venv-bench interpreter, fed the same prompt stream in the same order.
Both: 16 prompts x 8 responses = 128 responses per rollout = one optimizer step (4 micro-batches
of 32), Adam lr 3e-4 constant, betas (0.9, 0.999), no weight decay, gradient clip 1.0, up to 2
response tokens, temperature 1.0, clip eps 0.2 / 0.28, no KL, token-mean (DAPO) loss, advantage
normalised by the group's reward std.

Time to target is computed here, by one rule for both, from the per-step training reward: the
first step whose mean reward over the last `--window` steps (a full window) is >= `--target`.
Clocks: both count from the start of the training loop (hyrl's elapsed_s; TRL's
on_train_begin), so start-up (imports, model build) is outside; `process_s` is the whole child
process. A run stops once the target is reached, or after `--max-steps` (then "not reached").
Peak RSS is the child's ru_maxrss from os.wait4. Both children run with `--threads` OpenMP
threads (default 1): on a shared 2-core machine two threads per process oversubscribe the cores
and made steps 10x slower and erratic; one thread each keeps the comparison steady.

Known differences that TRL does not let us configure away:
  - group std: TRL divides by the unbiased std (n-1) + 1e-4, hyrl by the population std (n)
    + 1e-6, so at G=8 TRL's advantages are sqrt(7/8) = 0.935x hyrl's;
  - both skip the old-log-prob forward pass when rollouts are on-policy (one optimizer step per
    rollout): the update's own log-probs, detached, ratio 1 (hyrl: unless
    --recompute-old-log-probs; before that, hyrl ran the pass: perf/logprob_s);
  - the numerics of the two models differ (Megatron's MoE layers vs transformers'), so equal
    seeds give different trajectories; compare over seeds;
  - TRL's reward function sees completion_ids truncated after the first eos, so "ended with eos"
    is completion_ids[-1] == eos (hyrl: finish_reason == "stop"): the same rule.

The TRL environment (.venv-bench, git-ignored; from the repository root):
    python3 -m venv .venv-bench
    .venv-bench/bin/pip install 'torch==2.13.0+cpu' transformers==5.24.0 tokenizers==0.23.3 \\
        safetensors==0.8.0 numpy==2.4.6 rich==15.0.0 psutil==7.2.2 trl==1.16.0
(torch's +cpu wheel comes from the same place as requirements-cpu.txt's; pip install -e '.[bench]'
names the same trl pin.)

This file is the driver (arguments, the runs in turn, the report); the hyrl side is
bench_vs_trl_hyrl.py, the TRL side (and its worker) bench_vs_trl_trl.py, what both use
bench_vs_trl_common.py, all beside it in tools/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:  # its two sides and what they share, beside it in tools/
    sys.path.insert(0, str(TOOLS))

# The names the neighbours read as bench_vs_trl.X (bench.py, bench_floor.py, the cpu_model of
# bench_*.py and profile_step.py, the tests) stay here: "X as X" marks those it does not use.
from bench_vs_trl_common import (  # noqa: E402
    REPO,
    REWARD_METRIC,
    GrpoSettings,
    step_reaching_target,
)
from bench_vs_trl_common import MetricsTail as MetricsTail  # noqa: E402
from bench_vs_trl_common import thread_env as thread_env  # noqa: E402
from bench_vs_trl_hyrl import HYRL_BIN as HYRL_BIN  # noqa: E402
from bench_vs_trl_hyrl import run_hyrl, write_initial_checkpoint, write_prompt_stream  # noqa: E402
from bench_vs_trl_trl import SETUP_HINT as SETUP_HINT  # noqa: E402
from bench_vs_trl_trl import check_bench_env, run_trl, trl_env_versions, trl_worker  # noqa: E402

# -- pure parts: arguments, a run's outcome, ratios, the report -------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/bench_vs_trl.py",
        description="hyrl vs TRL GRPOTrainer: time to a reward target on the tiny task (CPU)",
    )
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds (runs per framework)")
    parser.add_argument("--first-seed", type=int, default=1, help="seeds are FIRST, FIRST+1, ...")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of both training processes (the same for both)",
    )
    parser.add_argument(
        "--target",
        type=float,
        default=0.7,
        help=f"{REWARD_METRIC} averaged over --window steps to reach (0..1]",
    )
    parser.add_argument("--window", type=int, default=10, help="steps averaged by the target rule")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=1500,
        help="optimizer steps after which a run that has not reached the target stops",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write DIR/bench.json, DIR/bench.md and keep the runs in DIR/runs-*",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as one JSON object on stdout"
    )
    parser.add_argument("--trl-worker", type=Path, help=argparse.SUPPRESS)  # internal: one TRL run
    args = parser.parse_args(argv)
    if args.trl_worker is None:
        if args.seeds < 1:
            parser.error(f"--seeds {args.seeds}: allowed: an integer >= 1")
        if args.first_seed < 0:
            parser.error(f"--first-seed {args.first_seed}: allowed: an integer >= 0")
        if not 0.0 < args.target <= 1.0:
            parser.error(f"--target {args.target}: allowed: a reward in (0, 1]")
        if args.threads < 1:
            parser.error(f"--threads {args.threads}: allowed: an integer >= 1")
        if args.window < 1:
            parser.error(f"--window {args.window}: allowed: an integer >= 1")
        if args.max_steps < args.window:
            parser.error(
                f"--max-steps {args.max_steps}: allowed: at least --window ({args.window})"
            )
    return args


def run_outcome(records: list[dict], target: float, window: int) -> dict:
    """What one run measured, from its per-step records (step, samples, elapsed_s, reward)."""
    records = [r for r in records if REWARD_METRIC in r]
    rewards = [float(r[REWARD_METRIC]) for r in records]
    reached = step_reaching_target(rewards, target, window)
    at = records[reached - 1] if reached else None
    last = records[-1] if records else {}
    elapsed_s = float(last.get("elapsed_s", 0.0))
    samples = int(last.get("samples", 0))
    return {
        "reached": at is not None,
        "steps_to_target": at["step"] if at else None,
        "samples_to_target": at["samples"] if at else None,
        "time_to_target_s": at["elapsed_s"] if at else None,
        "steps": last.get("step", 0),
        "samples": samples,
        "elapsed_s": elapsed_s,
        "responses_per_s": samples / elapsed_s if elapsed_s > 0 else None,
        "final_window_reward": (sum(rewards[-window:]) / len(rewards[-window:]))
        if rewards
        else None,
    }


def stage_shares(records: list[dict], elapsed_s: float) -> dict[str, float]:
    """Each perf/*_s stage's summed seconds over the loop's wall-clock (hyrl's metrics.jsonl
    keys)."""
    if elapsed_s <= 0:
        return {}
    seconds: dict[str, float] = {}
    for record in records:
        for key, value in record.items():
            if (
                key.startswith("perf/")
                and key.endswith("_s")
                and not key.endswith("_per_s")
                and key not in ("perf/step_s", "perf/setup_s", "perf/eval_s")
            ):
                seconds[key[len("perf/") : -len("_s")]] = seconds.get(
                    key[len("perf/") : -len("_s")], 0.0
                ) + float(value)
    return {stage: s / elapsed_s for stage, s in sorted(seconds.items())}


def ratios(numerators: list[float | None], denominators: list[float | None]) -> list[float | None]:
    """Per-seed numerator / denominator; None where either is missing or the denominator is 0."""
    return [
        n / d if n is not None and d is not None and d != 0 else None
        for n, d in zip(numerators, denominators, strict=True)
    ]


def target_ratios(hyrl: list[float | None], trl: list[float | None]) -> list[float | None]:
    """Per-seed hyrl / TRL of a to-target quantity (None: that side did not reach the target
    within --max-steps). A seed only one side reached counts as that side's win, not as a
    missing value: inf when hyrl missed, 0.0 when TRL missed; None when both missed. (Leaving
    hyrl's misses out would report the median of its lucky seeds only.)"""

    def ratio(h: float | None, t: float | None) -> float | None:
        if h is None and t is None:
            return None
        if h is None:
            return math.inf
        if t is None:
            return 0.0
        return h / t

    return [ratio(h, t) for h, t in zip(hyrl, trl, strict=True)]


def spread(values: list[float | None]) -> dict:
    """min, median and max of the values that exist, and how many exist."""
    present = [v for v in values if v is not None]
    if not present:
        return {"min": None, "median": None, "max": None, "count": 0}
    return {
        "min": min(present),
        "median": statistics.median(present),
        "max": max(present),
        "count": len(present),
    }


def build_report(
    *,
    seeds: list[int],
    runs: list[dict],
    machine: dict,
    settings: GrpoSettings,
    target: float,
    window: int,
    max_steps: int,
    threads: int,
    command: str,
) -> dict:
    """The JSON object --json prints and bench.json holds."""

    def column(framework: str, key: str) -> list:
        by_seed = {r["seed"]: r for r in runs if r["framework"] == framework}
        return [by_seed[s].get(key) if s in by_seed else None for s in seeds]

    report = {
        "benchmark": (
            "hyrl recipes/tiny/grpo.sh vs trl.GRPOTrainer (CPU), tiny Qwen3-MoE, arith_mod10"
        ),
        "command": command,
        "machine": machine,
        "settings": {**asdict(settings), "responses_per_step": settings.responses_per_step},
        "target": {
            "metric": REWARD_METRIC,
            "value": target,
            "window_steps": window,
            "rule": f"first step whose mean {REWARD_METRIC} over the last {window} steps "
            f">= {target}",
        },
        "max_steps": max_steps,
        "threads_per_process": threads,
        "seeds": seeds,
        "runs": runs,
    }
    for key in (
        "time_to_target_s",
        "steps_to_target",
        "samples_to_target",
        "responses_per_s",
        "peak_rss_mib",
        "process_s",
    ):
        for framework in ("hyrl", "trl"):
            report[f"{framework}_{key}"] = column(framework, key)
    report["ratios_hyrl_over_trl"] = {
        name: {**spread(per_seed), "per_seed": per_seed}
        for name, per_seed in (
            (
                "time_to_target",
                target_ratios(report["hyrl_time_to_target_s"], report["trl_time_to_target_s"]),
            ),
            (
                "steps_to_target",
                target_ratios(report["hyrl_steps_to_target"], report["trl_steps_to_target"]),
            ),
            ("throughput", ratios(report["hyrl_responses_per_s"], report["trl_responses_per_s"])),
            ("peak_rss", ratios(report["hyrl_peak_rss_mib"], report["trl_peak_rss_mib"])),
        )
    }
    report["time_to_target_ratio_median"] = report["ratios_hyrl_over_trl"]["time_to_target"][
        "median"
    ]
    report["throughput_ratio_median"] = report["ratios_hyrl_over_trl"]["throughput"]["median"]
    for framework in ("hyrl", "trl"):
        shares = [
            r["stage_share"] for r in runs if r["framework"] == framework and r.get("stage_share")
        ]
        stages = sorted({stage for share in shares for stage in share})
        report[f"{framework}_stage_share_median"] = {
            stage: statistics.median(share.get(stage, 0.0) for share in shares) for stage in stages
        }
    return report


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "not reached"
    if value == math.inf:
        return "inf (hyrl not reached)"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render_markdown(report: dict) -> str:
    """bench.md: the machine, one row per run, the hyrl/TRL ratios, where hyrl's time goes."""
    m = report["machine"]
    lines = [
        f"Machine: {m['cpu_model']}, {m['cores']} cores; torch {m['torch']}, transformers "
        f"{m['transformers']}, trl {m['trl']} (accelerate {m['accelerate']}), "
        f"Python {m['python']}.",
        f"Target: {report['target']['rule']}; at most {report['max_steps']} steps; "
        f"{report['settings']['responses_per_step']} responses per step; "
        f"{report['threads_per_process']} thread(s) per training process.",
        "",
        "| seed | framework | steps to target | samples to target | time to target (s) | "
        "responses/s | peak RSS (MiB) | process (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['seed']} | {r['framework']} | {_fmt(r['steps_to_target'])} | "
            f"{_fmt(r['samples_to_target'])} | {_fmt(r['time_to_target_s'])} | "
            f"{_fmt(r['responses_per_s'], 0)} | {_fmt(r['peak_rss_mib'], 0)} | "
            f"{_fmt(r['process_s'])} |"
        )
    lines += ["", "| hyrl / TRL | min | median | max | seeds |", "|---|---|---|---|---|"]
    names = {
        "time_to_target": "time to target",
        "steps_to_target": "steps to target",
        "throughput": "responses per second",
        "peak_rss": "peak RSS",
    }
    for key, label in names.items():
        s = report["ratios_hyrl_over_trl"][key]
        lines.append(
            f"| {label} | {_fmt(s['min'], 2)} | {_fmt(s['median'], 2)} | "
            f"{_fmt(s['max'], 2)} | {s['count']} |"
        )
    for framework, label in (("hyrl", "hyrl"), ("trl", "TRL")):
        shares = report[f"{framework}_stage_share_median"]
        if shares:
            parts = ", ".join(
                f"{stage} {100 * share:.0f}%"
                for stage, share in sorted(shares.items(), key=lambda kv: -kv[1])
            )
            lines += ["", f"{label} loop time by stage (median share over seeds): {parts}."]
    return "\n".join(lines) + "\n"


# -- the machine ---------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe_machine() -> dict:
    import torch
    import transformers

    bench = trl_env_versions()
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_trl_env": bench["torch"],
        "transformers_trl_env": bench["transformers"],
        "trl": bench["trl"],
        "accelerate": bench["accelerate"],
    }


# -- the benchmark -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.trl_worker is not None:
        return trl_worker(args.trl_worker)
    problem = check_bench_env()
    if problem:
        print(f"bench_vs_trl: {problem}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    settings = GrpoSettings()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    command = " ".join(["python tools/bench_vs_trl.py", *(sys.argv[1:] if argv is None else argv)])
    machine = describe_machine()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    scratch = Path(tempfile.mkdtemp(prefix="bench_vs_trl-"))
    runs_root = (args.out / f"runs-{stamp}") if args.out else scratch / "runs"
    runs_root.mkdir(parents=True)
    console = Console(stderr=True)
    runs: list[dict] = []
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("reward {task.fields[reward]}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            for seed in seeds:
                checkpoint = scratch / f"init-seed{seed}"
                write_initial_checkpoint(seed, checkpoint)
                prompts = scratch / f"prompts-seed{seed}.jsonl"
                write_prompt_stream(seed, args.max_steps * settings.prompts_per_step, prompts)
                for framework in ("hyrl", "trl"):  # alternating: hyrl, TRL, hyrl, TRL, ...
                    run_dir = runs_root / f"seed{seed}-{framework}"
                    if framework == "hyrl":
                        child = run_hyrl(seed, checkpoint, run_dir, args, progress)
                    else:
                        child = run_trl(
                            seed, checkpoint, prompts, run_dir, args, settings, progress
                        )
                    outcome = run_outcome(child["records"], args.target, args.window)
                    runs.append(
                        {
                            "framework": framework,
                            "seed": seed,
                            **outcome,
                            "peak_rss_mib": child["peak_rss_mib"],
                            "process_s": child["process_s"],
                            "stage_share": stage_shares(child["records"], outcome["elapsed_s"]),
                            "run_dir": str(run_dir) if args.out else None,
                        }
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = build_report(
        seeds=seeds,
        runs=runs,
        machine=machine,
        settings=settings,
        target=args.target,
        window=args.window,
        max_steps=args.max_steps,
        threads=args.threads,
        command=command,
    )
    markdown = render_markdown(report)
    if args.out:
        (args.out / "bench.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        (args.out / "bench.md").write_text(markdown, encoding="utf-8")
    if args.json:
        print(json.dumps(report))
    else:
        print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
