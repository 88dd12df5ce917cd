#!/usr/bin/env bash
# The goodput autopilot against the fixed reference batch on the tiny GRPO testbed
# (recipes/tiny/testbed.sh), seed by seed, side by side, then `hyrl analyze` over seeds:
#   bash recipes/tiny/autopilot_vs_fixed.sh [OUT_DIR] [--seeds 1,2,3,4,5]
# For each seed, two runs at once, one thread each: b128-ref-s{seed}, the fixed B = 128 at 3e-4
# (sweep_grpo.sh's reference), and auto-s{seed}, --batch-schedule auto over B = 128..1024 from
# the same start, lr by the square-root rule from 3e-4 at 128, no profile (it explores a
# neighbouring B when its model cannot rule out a gain). The fixed run takes 625 rollout steps,
# the autopilot 300 (its B grows); the pair of a seed shares the machine, so a change of its
# load falls on both. The analysis compares the
# autopilot's seed-mean curve and time to the target with the fixed batch's, with bootstrap
# intervals (docs/batch-size.md, "Over seeds"). Finished runs are kept on a re-run; an
# unfinished one is moved to OUT/incomplete/ and run again.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python}"
# shellcheck source=launch/sweep_args.sh
source "$ROOT/launch/sweep_args.sh"
parse_sweep_args "$@"
if [[ "$DRY_RUN" == 1 ]]; then
  echo "autopilot_vs_fixed.sh: --dry-run: not offered; allowed: [OUT_DIR] [--seeds LIST]" >&2
  exit 2
fi
OUT="${OUT:-runs/autopilot-vs-fixed-$(date +%Y%m%d-%H%M%S)}"
# shellcheck source=recipes/tiny/testbed.sh
source "$HERE/testbed.sh"
testbed_base
mkdir -p "$OUT"
COMMON=("${TESTBED_ARGS[@]}" --eval-interval 8)
# the fixed run: 80,000 responses, as the demo's reference; the autopilot: 300 rollout steps,
# enough to reach the target from B = 128 up (the analysis says so when a seed's curve does
# not), without minutes of B = 1024 steps past it
FIXED=(--lr 3e-4 --num-steps 625)
AUTO=(--lr none --base-lr 3e-4 --base-global-batch-size 128 --lr-scaling sqrt
  --batch-schedule auto --autopilot-min 128 --autopilot-max 1024 --num-steps 300)

run() {  # NAME SEED FLAGS...: one run into OUT/NAME unless it finished earlier
  local name="$1" seed="$2"
  shift 2
  # finished: its summary says it ran its steps or reached a --stop-at-target target (a run
  # stopped by a signal writes one too, "ended": "preempted", and is run again)
  if grep -qE '"ended": *"(num_steps|target)"' "$OUT/$name/summary.json" 2>/dev/null; then
    echo "autopilot_vs_fixed: $name finished earlier"
    return 0
  fi
  if [[ -e "$OUT/$name" ]]; then  # kept, out of the analysis' way (it reads OUT's run dirs)
    mkdir -p "$OUT/incomplete"
    mv "$OUT/$name" "$OUT/incomplete/$name-$(date +%Y%m%d%H%M%S)"
  fi
  echo "autopilot_vs_fixed: $name started"
  bash "$HERE/grpo.sh" "${COMMON[@]}" "$@" --seed "$seed" --run-dir "$OUT/$name" \
    --no-progress > "$OUT/$name.log" 2>&1
  echo "autopilot_vs_fixed: $name done"
}

IFS=, read -r -a SEED_LIST <<< "${SEEDS:-1,2,3,4,5}"
for seed in "${SEED_LIST[@]}"; do
  run "b128-ref-s$seed" "$seed" "${FIXED[@]}" &
  fixed_pid=$!
  run "auto-s$seed" "$seed" "${AUTO[@]}" &
  auto_pid=$!
  wait "$fixed_pid"
  wait "$auto_pid"
done
"$PYTHON" -m hyrl analyze "$OUT" --target "$TARGET" --reference "b128-ref-s${SEED_LIST[0]}" \
  --out "$OUT/analysis"
