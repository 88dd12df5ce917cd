# shellcheck shell=bash  # sourced by recipes/*/sweep_grpo.sh
# parse_sweep_args ARGS...: a sweep recipe's command line, [OUT_DIR] [--dry-run] [--seeds LIST]
# in any order. Sets OUT (empty when not given: the recipe picks its default), DRY_RUN (0 or 1)
# and SEEDS (empty when not given: the recipe picks its default).
parse_sweep_args() {
  DRY_RUN=0
  OUT=""
  SEEDS=""
  local arg want_seeds=0
  for arg in "$@"; do
    if [[ "$want_seeds" == 1 ]]; then
      SEEDS="$arg"
      want_seeds=0
    elif [[ "$arg" == "--seeds" ]]; then
      want_seeds=1
    elif [[ "$arg" == --seeds=* ]]; then
      SEEDS="${arg#--seeds=}"
    elif [[ "$arg" == "--dry-run" ]]; then
      DRY_RUN=1
    elif [[ -z "$OUT" ]]; then
      OUT="$arg"
    else
      echo "sweep_grpo.sh: OUT_DIR given twice ($OUT, $arg); allowed: [OUT_DIR] [--dry-run]" \
        "[--seeds S1,S2,...]" >&2
      exit 2
    fi
  done
  if [[ "$want_seeds" == 1 ]]; then
    echo "sweep_grpo.sh: --seeds needs a value; allowed: --seeds S1,S2,... (integers >= 0)" >&2
    exit 2
  fi
}
