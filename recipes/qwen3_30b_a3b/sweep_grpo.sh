#!/usr/bin/env bash
# The batch-size study on Qwen3-30B-A3B GRPO (docs/batch-size.md), then its analysis.
#   DATA=... HF_CHECKPOINT=... EVAL_DATA=... bash recipes/qwen3_30b_a3b/sweep_grpo.sh [OUT_DIR]
#   bash recipes/qwen3_30b_a3b/sweep_grpo.sh --dry-run      # any machine: no GPU, no data
# Members: P = 128 (the reference, B0 = 1024, lr0 = 1e-6), 256, 512, 1024, 2048 prompts x 8
# responses, lr by the square-root rule from grpo.sh's reference; the fixed-lr control at
# P = 256 (lr 1e-6); and P = 64 (B = 512, lr 1e-6 x sqrt(1/2)) as a second sweep of one member,
# since sweep multipliers are integers >= 1. All consume MAX_SAMPLES responses, so curves
# compare per sample; `hyrl analyze` reads both sweeps against the P = 128 reference.
# Each member runs grpo.sh with its layout (NNODES, GPUS_PER_NODE, GPU_MEMORY_GIB: see grpo.sh).
# Plan the largest member first:
#   hyrl plan recipes/qwen3_30b_a3b/grpo.sh -- --rollout-batch-size 2048 --global-batch-size 16384
# EVAL_DATA (held-out prompts, AIME 2024: data.sh) is required: the target is measured on it.
# TARGET defaults to eval/heldout/accuracy=0.77, a placeholder with no source: nothing in this
# repository measured it. Set it from your own reference run (the P = 128 member on your
# EVAL_DATA, with this study's reward and evaluation settings) before comparing batch sizes.
# Re-running with the same OUT_DIR resumes (finished members are skipped).
# With --dry-run nothing runs and nothing is written: each sweep is `hyrl sweep --dry-run`
# with the arguments of the real run (the probe and every member through grpo.sh --dry-run,
# with data.sh's stand-ins for missing DATA, HF_CHECKPOINT and EVAL_DATA); one line per member
# on stdout, its resolved values and the flags the sweep appends. A member the flags cannot
# run prints hyrl's error naming the flag and exits 2.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python}"
# shellcheck source=launch/sweep_args.sh
source "$HERE/../../launch/sweep_args.sh"
parse_sweep_args "$@"
OUT="${OUT:-runs/sweep-qwen3-30b-a3b-grpo-$(date +%Y%m%d-%H%M%S)}"
TARGET="${TARGET:-eval/heldout/accuracy=0.77}"   # a placeholder: set your own (above)
MAX_SAMPLES="${MAX_SAMPLES:-1000000}"   # responses per member
if [[ "$DRY_RUN" == 0 ]]; then
  : "${EVAL_DATA:?set EVAL_DATA to the held-out prompts (.jsonl/.parquet, fields prompt and label)}"
fi
# data.sh adds --eval-prompt-data heldout "$EVAL_DATA" --eval-interval 10 (in a dry run a
# missing file is replaced by its stand-in).
export EVAL_DATA="${EVAL_DATA:-/path/to/heldout.jsonl}"

SWEEP_ARGS=(
  --lr-scaling sqrt
  --seeds 1234
  --max-samples "$MAX_SAMPLES"
  --max-parallel 1                 # one member at a time on the allocation
)
[[ "$DRY_RUN" == 1 ]] && SWEEP_ARGS+=(--dry-run)

# sweep NAME MULTS FIXED_LR_MULT EXTRA...: `hyrl sweep` of grpo.sh into OUT/NAME (with --dry-run
# its checks only: hyrl sweep --dry-run, same arguments).
sweep() {
  local name="$1" mults="$2" fixed="$3"
  shift 3
  "$PYTHON" -m hyrl sweep "$HERE/grpo.sh" --out "$OUT/$name" --batch-mults "$mults" \
    ${fixed:+--fixed-lr-control "$fixed"} "${SWEEP_ARGS[@]}" -- "$@"
}

# P = 128 x 1, 2, 4, 8, 16 = 128 ... 2048, plus P = 256 at the reference lr.
sweep main 1,2,4,8,16 2 --target "$TARGET"
# P = 64: grpo.sh derives its lr from the reference (--base-lr 1e-6 at 1024, sqrt).
sweep p64 1 "" --target "$TARGET" --rollout-batch-size 64 --global-batch-size 512
[[ "$DRY_RUN" == 1 ]] && exit 0
"$PYTHON" -m hyrl analyze "$OUT/main" "$OUT/p64" --target "$TARGET" --reference b1024-ref-s1234 \
  --out "$OUT/analysis"
