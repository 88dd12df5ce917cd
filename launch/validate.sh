# shellcheck shell=bash  # sourced by launch/torchrun.sh and launch/srun.sh
# validate_flags WORLD_SIZE FLAGS...: the flags' dry run in one process (about a second, no GPU)
# before a launcher starts several ranks. A refused flag prints hyrl's message once, naming the
# flag, and exits 2 with nothing started, not once per rank under torchrun's or srun's report.
# Needs PYTHON (the interpreter the launcher runs).
validate_flags() {
  local world_size="$1" check_err
  shift
  if ! check_err=$(WORLD_SIZE=$world_size RANK=0 LOCAL_RANK=0 \
                   "$PYTHON" -m hyrl train --dry-run "$@" 2>&1 >/dev/null); then
    printf '%s\n' "$check_err" >&2
    exit 2
  fi
}
