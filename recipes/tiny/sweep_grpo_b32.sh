#!/usr/bin/env bash
# The batch-size study in a regime where a larger batch might pay: the tiny GRPO testbed from a
# reference of B0 = 32 responses per step (4 prompts x 8), where the per-step fixed costs
# (optimizer step, weight sync, the loop's own) weigh on throughput, so R rises with B.
#   bash recipes/tiny/sweep_grpo_b32.sh [OUT_DIR] [--dry-run] [--seeds LIST]
# The testbed as recipes/tiny/sweep_grpo.sh (recipes/tiny/testbed.sh). Members: B = 32
# (reference), 64, 128, 256, lr by the square-root rule from LR0 (default 1.5e-4 at B = 32,
# the rule's value from 3e-4 at B = 128, the main study's reference; micro-batches of 16), seeds 1 to 5 one after the
# other, MAX_PARALLEL (default 2) at once; every member consumes 48,000 responses and evaluates
# about every 1,024; then THROUGHPUT_ROUNDS (default 4) rounds of throughput probes, as in
# sweep_grpo.sh, from which the analysis takes R. Re-running with the same OUT_DIR resumes; the
# analysis follows.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python}"
# shellcheck source=launch/sweep_args.sh
source "$ROOT/launch/sweep_args.sh"
parse_sweep_args "$@"
OUT="${OUT:-runs/sweep-tiny-grpo-b32-$(date +%Y%m%d-%H%M%S)}"
# shellcheck source=recipes/tiny/testbed.sh
source "$HERE/testbed.sh"
testbed_base

SWEEP_ARGS=(
  --batch-mults 1,2,4,8
  --lr-scaling sqrt
  --seeds "${SEEDS:-1,2,3,4,5}"
  --max-samples 48000
  --max-parallel "${MAX_PARALLEL:-2}"
  --eval-every-samples 1024
  --throughput-rounds "${THROUGHPUT_ROUNDS:-4}"
)
[[ "$DRY_RUN" == 1 ]] && SWEEP_ARGS+=(--dry-run)
RECIPE_ARGS=(
  "${TESTBED_ARGS[@]}"
  --rollout-batch-size 4
  --global-batch-size 32
  --micro-batch-size 16
  --lr "${LR0:-1.5e-4}"
  --eval-interval 32
)
"$PYTHON" -m hyrl sweep "$HERE/grpo.sh" --out "$OUT" "${SWEEP_ARGS[@]}" -- "${RECIPE_ARGS[@]}"
[[ "$DRY_RUN" == 1 ]] && exit 0
"$PYTHON" -m hyrl analyze "$OUT" --target "$TARGET" --out "$OUT/analysis"
