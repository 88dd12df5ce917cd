# shellcheck shell=bash  # sourced by launch/torchrun.sh and launch/srun.sh
# validate_flags WORLD_SIZE FLAGS...: the flags and every file and machine check (the data, the
# tokenizer, --load's checkpoint, --hf-checkpoint, custom rewards and filters: hyrl's
# preflight, `hyrl train --preflight-only`) in one process before a launcher starts several
# ranks. A refused flag or a bad file prints hyrl's message once, naming the flag, and exits 2
# with nothing started, not once per rank under torchrun's or srun's report.
# Needs PYTHON (the interpreter the launcher runs).
validate_flags() {
  local world_size="$1" check_err
  shift
  if ! check_err=$(WORLD_SIZE=$world_size RANK=0 LOCAL_RANK=0 \
                   "$PYTHON" -m hyrl train --preflight-only "$@" 2>&1 >/dev/null); then
    printf '%s\n' "$check_err" >&2
    exit 2
  fi
}
