#!/usr/bin/env bash
# The batch-size study on the tiny GRPO testbed, then its analysis (what `make demo` runs).
#   bash recipes/tiny/sweep_grpo.sh [OUT_DIR]
#   bash recipes/tiny/sweep_grpo.sh [OUT_DIR] --dry-run   # the plan only; nothing runs, no files
#   bash recipes/tiny/sweep_grpo.sh [OUT_DIR] --seeds 1,2  # other seeds (default: 1,2,3,4,5)
# The testbed (recipes/tiny/testbed.sh; docs/batch-size.md, "The testbed"): RL from a base
# checkpoint with partial skill on 36 prompts, sampled accuracy (mean@8) as the metric, target
# 0.75, evaluated about every 1,024 responses (--eval-every-samples: every 8 rollout steps at
# B = 128, every step at 1024).
# Members: B = 128 (reference), 256, 512, 1024 responses per step (prompts x 8), lr by the
# square-root rule from LR0 at B = 128, plus the fixed-lr control at 4x (B = 512 at LR0), each
# once per seed, one seed after the other (every member of a seed before the next, so a change
# of the machine's load falls on every member of a seed alike; the analysis pairs each member
# with its seed's reference). MAX_PARALLEL (default 2) members run at once, one thread each.
# Every member consumes 80,000 responses: the whole curve, not only up to the target (a run that
# stopped there would hold the seed-mean curve at the target until the slowest seed arrives).
# Then THROUGHPUT_ROUNDS (default 4) rounds of throughput probes: every member of the first
# seed alone for about 8,192 responses after a warm-up step, evaluation off, the reference first
# in odd rounds and last in even ones; the analysis takes the R ratios from them (measured alone
# and back to back, not side by side).
# Re-running with the same OUT_DIR resumes: finished members and probes are skipped.
# LR0 (default 3e-4) is the reference's lr.
# With --dry-run it is `hyrl sweep --dry-run` with the same arguments: the probe and every
# member through grpo.sh --dry-run, one line per member on stdout (its resolved values and the
# flags the sweep appends); a member the flags cannot run prints the error naming the flag
# and exits 2.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python}"
# shellcheck source=launch/sweep_args.sh
source "$ROOT/launch/sweep_args.sh"
parse_sweep_args "$@"
OUT="${OUT:-runs/sweep-tiny-grpo-$(date +%Y%m%d-%H%M%S)}"
# shellcheck source=recipes/tiny/testbed.sh
source "$HERE/testbed.sh"
testbed_base

SWEEP_ARGS=(
  --batch-mults 1,2,4,8
  --lr-scaling sqrt
  --fixed-lr-control 4
  --seeds "${SEEDS:-1,2,3,4,5}"
  --max-samples 80000
  --max-parallel "${MAX_PARALLEL:-2}"
  --eval-every-samples 1024
  --throughput-rounds "${THROUGHPUT_ROUNDS:-4}"
)
[[ "$DRY_RUN" == 1 ]] && SWEEP_ARGS+=(--dry-run)
RECIPE_ARGS=(
  "${TESTBED_ARGS[@]}"
  --lr "${LR0:-3e-4}"
  --eval-interval 8
)
"$PYTHON" -m hyrl sweep "$HERE/grpo.sh" --out "$OUT" "${SWEEP_ARGS[@]}" -- "${RECIPE_ARGS[@]}"
[[ "$DRY_RUN" == 1 ]] && exit 0
"$PYTHON" -m hyrl analyze "$OUT" --target "$TARGET" --out "$OUT/analysis"
