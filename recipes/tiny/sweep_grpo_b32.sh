#!/usr/bin/env bash
# The batch-size study in a regime where a larger batch might pay: the tiny GRPO recipe from a
# reference of B0 = 32 responses per step (4 prompts x 8), where the per-step fixed costs
# (optimizer step, weight sync, the loop's own) weigh on throughput, so R rises with B.
#   bash recipes/tiny/sweep_grpo_b32.sh [OUT_DIR] [--dry-run] [--seeds LIST]
# Members: B = 32 (reference), 64, 128, 256, lr by the square-root rule from 1.5e-4 at B = 32
# (3e-4 at B = 128, the tiny recipe's own), seeds 1, 2, 3 one after the other; every member
# has the same budget of 128,000 responses and stops when it reaches the target
# (--stop-at-target: only the curves up to the target are compared). Validation: greedy
# accuracy on the 100 training prompts every 10 rollout steps (320 responses at B = 32), target
# 0.9. Re-running with the same OUT_DIR resumes.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python}"
# shellcheck source=launch/sweep_args.sh
source "$HERE/../../launch/sweep_args.sh"
parse_sweep_args "$@"
OUT="${OUT:-runs/sweep-tiny-grpo-b32-$(date +%Y%m%d-%H%M%S)}"
TARGET="eval/accuracy=0.9"

SWEEP_ARGS=(
  --batch-mults 1,2,4,8
  --lr-scaling sqrt
  --seeds "${SEEDS:-1,2,3}"
  --max-samples 128000
  --max-parallel 1
)
[[ "$DRY_RUN" == 1 ]] && SWEEP_ARGS+=(--dry-run)
RECIPE_ARGS=(
  --rollout-batch-size 4
  --global-batch-size 32
  --micro-batch-size 8
  --lr 1.5e-4
  --eval-interval 10
  --task-eval-fraction 0
  --eval-temperature 0
  --target "$TARGET"
  --stop-at-target
)
"$PYTHON" -m hyrl sweep "$HERE/grpo.sh" --out "$OUT" "${SWEEP_ARGS[@]}" -- "${RECIPE_ARGS[@]}"
[[ "$DRY_RUN" == 1 ]] && exit 0
"$PYTHON" -m hyrl analyze "$OUT" --target "$TARGET" --out "$OUT/analysis"
