"""The part of tools/gpu_check.sh's report that reads one run directory: the first and last
step's reward, stage times and mismatch metrics, the bytes --offload-train freed, and the
median perf/tokens_per_s_per_gpu and perf/mfu with the GPU and the peak the MFU is taken
against. Reads only RUN_DIR/metrics.jsonl and RUN_DIR/config.json.

    python tools/gpu_check_summary.py RUN_DIR      # markdown on stdout
"""

import argparse
import json
import statistics
from pathlib import Path

import torch

from hyrl.metrics.flops import gpu_of

STEP_KEYS = (
    "train/reward_mean",
    "perf/step_s",
    "perf/rollout_s",
    "perf/actor_train_s",
    "perf/logprob_s",
    "perf/weight_sync_s",
    "perf/weight_sync_peak_bytes",
    "mismatch/logprob_abs_diff_mean",
    "mismatch/kl",
    "mismatch/tis_clipped_frac",
    "mismatch/routing_diff_frac",
    "mismatch/routing_replay_errors",
)


def summary(run_dir: Path) -> str:
    lines = [f"\n### {run_dir.name}\n"]
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return "".join(lines) + f"no {metrics}: the run wrote no step\n"
    # every line as written (a resumed run's re-logged steps too)
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    config = json.loads((run_dir / "config.json").read_text())
    lines.append(
        f"{len(records)} steps; transformer_impl {config.get('transformer_impl')}, "
        f"bf16 {config.get('bf16')}, distributed optimizer "
        f"{config.get('use_distributed_optimizer')}, qkv_format {config.get('qkv_format')}\n\n"
    )
    keys = [k for k in STEP_KEYS if any(k in r for r in records)]
    lines.append("| step | samples | " + " | ".join(keys) + " |\n")
    lines.append("|---" * (len(keys) + 2) + "|\n")
    for record in (records[0], records[-1]) if len(records) > 1 else records:
        values = " | ".join(f"{record.get(k, float('nan')):.4g}" for k in keys)
        lines.append(f"| {record['step']} | {record['samples']} | {values} |\n")
    freed = [r for r in records if "perf/offload_freed_bytes" in r]
    if freed:  # --offload-train (on with --colocate): rank 0's memory_allocated drop per step
        lines.append("\nbytes freed by offload (rank 0, perf/offload_freed_bytes), offload_s:\n")
        for r in (freed[0], freed[-1]):
            nbytes = r["perf/offload_freed_bytes"]
            seconds = r.get("perf/offload_s", float("nan"))
            mib = nbytes / 2**20
            lines.append(f"- step {r['step']}: {nbytes} B ({mib:.1f} MiB), {seconds:.3f} s\n")
    elif config.get("colocate"):
        lines.append("\nno perf/offload_freed_bytes in metrics.jsonl: nothing was offloaded\n")
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    gpu = gpu_of(name)
    peak = (
        f"{gpu.product}, {gpu.peak_bf16_flops_per_s / 1e12:g} TFLOP/s dense bf16"
        if gpu
        else "not in hyrl/metrics/flops.py GPUS: no perf/mfu"
    )
    lines.append(f"\nGPU {name!r}, peak {peak}; medians over the run's steps:\n")
    for key, unit in (("perf/tokens_per_s_per_gpu", " tokens/s per GPU"), ("perf/mfu", "")):
        values = [r[key] for r in records if key in r]
        if not values:
            lines.append(f"- {key}: not in metrics.jsonl\n")
            continue
        median = statistics.median(values)
        shown = f"{median:.4g}{unit}" if unit else f"{median:.4g} ({median:.3%} of the peak)"
        lines.append(f"- {key}: {shown} ({len(values)} steps)\n")
    return "".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a run directory (metrics.jsonl, config.json)")
    print(summary(parser.parse_args().run_dir), end="")


if __name__ == "__main__":
    main()
