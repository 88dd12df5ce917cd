# shellcheck shell=bash  # sourced by recipes/*/sweep_grpo.sh
# parse_sweep_args ARGS...: a sweep recipe's command line, [OUT_DIR] [--dry-run] in either order.
# Sets OUT (empty when not given: the recipe picks its default) and DRY_RUN (0 or 1).
parse_sweep_args() {
  DRY_RUN=0
  OUT=""
  local arg
  for arg in "$@"; do
    if [[ "$arg" == "--dry-run" ]]; then
      DRY_RUN=1
    elif [[ -z "$OUT" ]]; then
      OUT="$arg"
    else
      echo "sweep_grpo.sh: OUT_DIR given twice ($OUT, $arg); allowed: [OUT_DIR] [--dry-run]" >&2
      exit 2
    fi
  done
}
