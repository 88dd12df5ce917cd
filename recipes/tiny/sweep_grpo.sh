#!/usr/bin/env bash
# The batch-size study on the tiny GRPO recipe, then its analysis (what `make demo` runs).
#   bash recipes/tiny/sweep_grpo.sh [OUT_DIR]
#   bash recipes/tiny/sweep_grpo.sh [OUT_DIR] --dry-run   # the plan only; nothing runs, no files
#   bash recipes/tiny/sweep_grpo.sh [OUT_DIR] --seeds 1234  # one seed (default: 1,2,3)
# Members: B = 128 (reference), 256, 512, 1024 responses per step (prompts x 8), lr by the
# square-root rule from 3e-4 at B=128, plus the fixed-lr control at 4x (B=512, lr 3e-4), each
# once per seed (seeds 1, 2, 3: one seed after the other, every member of a seed before the
# next, so a change of the machine's load falls on every member alike; the analysis compares
# each member with the same seed's reference and gives the spread over seeds).
# Every member consumes the same 128,000 responses, so curves compare per sample.
# Validation: greedy accuracy on the 100 training prompts every 5 rollout steps (the tiny model
# memorises rather than generalises, so a held-out split would not reach a useful target).
# Re-running with the same OUT_DIR resumes: finished members are skipped.
# With --dry-run it is `hyrl sweep --dry-run` with the same arguments: the probe and every
# member through grpo.sh --dry-run, one line per member on stdout (its resolved values and the
# flags the sweep appends); a member the flags cannot run prints the error naming the flag
# and exits 2.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python}"
# shellcheck source=launch/sweep_args.sh
source "$HERE/../../launch/sweep_args.sh"
parse_sweep_args "$@"
OUT="${OUT:-runs/sweep-tiny-grpo-$(date +%Y%m%d-%H%M%S)}"
TARGET="eval/accuracy=0.9"

SWEEP_ARGS=(
  --batch-mults 1,2,4,8
  --lr-scaling sqrt
  --fixed-lr-control 4
  --seeds "${SEEDS:-1,2,3}"
  --max-samples 128000
  --max-parallel 1
)
[[ "$DRY_RUN" == 1 ]] && SWEEP_ARGS+=(--dry-run)
EVAL_ARGS=(
  --eval-interval 5
  --task-eval-fraction 0
  --eval-temperature 0
  --target "$TARGET"
)
"$PYTHON" -m hyrl sweep "$HERE/grpo.sh" --out "$OUT" "${SWEEP_ARGS[@]}" -- "${EVAL_ARGS[@]}"
[[ "$DRY_RUN" == 1 ]] && exit 0
"$PYTHON" -m hyrl analyze "$OUT" --target "$TARGET" --out "$OUT/analysis"
