"""`hyrl <command>`: train, eval, sweep, analyze, profile-rollout, plan, convert, checkpoint,
data, cost, tune."""

from __future__ import annotations

import importlib
import sys

USAGE = """usage: hyrl <command> [flags]

commands:
  train    run GRPO (launch one process per rank with launch/torchrun.sh or a recipe)
  eval     mean@k accuracy and pass@k of a checkpoint on held-out prompts (JSON, markdown):
           hyrl eval --load CKPT|--hf-checkpoint DIR [--eval-prompt-data [NAME] FILE ...]
           [--n-samples K] [--eval-temperature T] [--eval-pass-k 1,4] [--seed S] [--json]
           [--out DIR]   (flags not given: the checkpoint run's own; hyrl eval --help)
  sweep    run a recipe at several batch sizes, lr re-derived by a scaling rule, resumable:
           hyrl sweep RECIPE --out DIR [--batch-mults 1,2,4,8,16] [--lr-scaling sqrt|linear|none]
           [--fixed-lr-control M] [--seeds 1234,...] [--max-samples N] [--max-parallel 1]
           [--dry-run: check every member, write nothing] [-- EXTRA RECIPE FLAGS...]
  analyze  samples / throughput / time to a target, alignment, fastest valid batch:
           hyrl analyze PATH... --target eval/accuracy=0.77 [--reference NAME]
           [--tolerance 0.2] --out DIR   (PATH: run or sweep directories)
  profile-rollout  decode throughput against concurrency, to find where it plateaus:
           hyrl profile-rollout --engine hf --concurrency 1,2,4,...,256 --num-prompts N
           --max-new-tokens L [--repeats 3] [--warmup 1] [--seed 0] [--json] --out DIR
  plan     rank layout, GPUs needed and per-GPU memory of a recipe, without GPUs:
           hyrl plan RECIPE.sh [--json] [-- EXTRA FLAGS]  |  hyrl plan [--json] -- TRAIN FLAGS
           --world-size N   (exits 1 when the recipe does not fit, naming the flag)
  convert  checkpoints between Hugging Face and Megatron distributed format (Qwen3-MoE):
           hyrl convert hf-to-mcore --hf-dir D --out M [--tp N --ep N --pp N]
           hyrl convert mcore-to-hf --load M --out D
  checkpoint  check a training checkpoint (sizes, indexes, every file read through):
           hyrl checkpoint verify SAVE_DIR|STEP_DIR [--checksums]
  data     a downloaded math set (verl/HF parquet, slime jsonl, problem/answer) as prompt/label
           jsonl, and the train flags to use it with (docs/data.md):
           hyrl data import SOURCE --preset dapo-math|math500|aime --out FILE.jsonl [--force]
           [--keep-duplicates] [--drop-incomplete]
  tune     predict the fastest batch from one short run, a decode profile and update probes:
           hyrl tune RECIPE --out DIR [--batch-mults 1,2,4,8,16] [--budget-samples N]
           [--verify K] [--lr-scaling sqrt|linear|none] [-- EXTRA RECIPE FLAGS...]
  cost     GPU-hours and dollars a time cut saves:
           hyrl cost --gpus N --hours H --usd-per-gpu-hour P --time-reduction F [--json]

`hyrl train --help` lists every flag, grouped by concern; `hyrl --version` the version."""


# command -> "module:function"; the module is imported only when its command runs, so
# `hyrl cost` loads no torch. Each function takes the command's arguments, returns the exit code.
COMMANDS = {
    "train": "hyrl.train.cli:main",
    "eval": "hyrl.evaluation.cli:main",
    "sweep": "hyrl.batchsize.sweep.cli:main",
    "analyze": "hyrl.batchsize.analyze_cli:main",
    "profile-rollout": "hyrl.profile.cli:main",
    "plan": "hyrl.plan.cli:main",
    "convert": "hyrl.backends.megatron.convert_cli:main",
    "checkpoint": "hyrl.checkpoint.verify_cli:main",
    "data": "hyrl.data.import_cli:main",
    "cost": "hyrl.batchsize.cost:main",
    "tune": "hyrl.batchsize.tune.cli:main",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] in ("--version", "-V"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"hyrl {version('hyrl')}")
        except PackageNotFoundError:  # a source tree not installed: pyproject.toml says
            print("hyrl (not installed: pip install -e .)")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(
            f"hyrl: unknown command {command!r}; allowed: {', '.join(COMMANDS)}\n\n{USAGE}",
            file=sys.stderr,
        )
        return 2
    module, function = COMMANDS[command].split(":")
    return getattr(importlib.import_module(module), function)(rest)


if __name__ == "__main__":
    sys.exit(main())
