#!/usr/bin/env bash
# `hyrl tune` on the tiny GRPO testbed (recipes/tiny/testbed.sh), in either regime of its
# batch-size studies, so its recommendation can be held against theirs:
#   bash recipes/tiny/tune_grpo.sh [OUT_DIR]          # B0 = 128 at 3e-4, as sweep_grpo.sh
#   REGIME=b32 bash recipes/tiny/tune_grpo.sh [OUT_DIR] # B0 = 32 at 1.5e-4, as sweep_grpo_b32.sh
# Candidates x1, x2, x4, x8 by the square-root rule; the recipe's seed (1234); the alignment
# check on (halfway to the target). Re-running with the same OUT_DIR resumes.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python}"
OUT="${1:-runs/tune-tiny-grpo-${REGIME:-b128}-$(date +%Y%m%d-%H%M%S)}"
DRY_RUN=0
# shellcheck source=recipes/tiny/testbed.sh
source "$HERE/testbed.sh"
testbed_base
case "${REGIME:-b128}" in
  b128) REGIME_ARGS=(--lr 3e-4 --eval-interval 8 --num-steps 625) ;;
  b32)
    REGIME_ARGS=(--rollout-batch-size 4 --global-batch-size 32 --micro-batch-size 16 --lr 1.5e-4
      --eval-interval 32 --num-steps 1500)
    ;;
  *)
    echo "tune_grpo.sh: REGIME=$REGIME: allowed: b128, b32" >&2
    exit 2
    ;;
esac
"$PYTHON" -m hyrl tune "$HERE/grpo.sh" --out "$OUT" --batch-mults 1,2,4,8 -- \
  "${TESTBED_ARGS[@]}" "${REGIME_ARGS[@]}"
