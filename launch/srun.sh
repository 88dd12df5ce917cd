#!/usr/bin/env bash
# Inside a Slurm allocation: one torchrun per training node (srun), NPROC ranks on each.
#   NNODES=2 NPROC=8 bash launch/srun.sh FLAGS       (what a recipe runs when SLURM_JOB_ID is set)
# The first NNODES hosts of the allocation train (node rank = SLURM_NODEID); any further hosts
# are left to the rollout engines (Ray, see launch/sbatch.template). Master address = the first
# host (scontrol show hostnames "$SLURM_JOB_NODELIST"), port MASTER_PORT (default 29500).
# Before launching it checks that the allocation holds NNODES (+ ROLLOUT_NODES) nodes with
# NPROC GPUs each, and checks the flags and files at WORLD_SIZE = NNODES x NPROC in one process
# (--preflight-only): a refused flag or a bad file prints its message once (exit 2), naming the
# flag, and srun is never called.
# SRUN_ARGS adds flags to srun (default --overlap, so training can share nodes with Ray's steps).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python}"
for arg in "$@"; do  # a dry run or a preflight needs no allocation: one local process
  [[ "$arg" == "--dry-run" || "$arg" == "--preflight-only" ]] && exec bash "$HERE/torchrun.sh" "$@"
done
fail() { echo "launch/srun.sh: $*" >&2; exit 2; }
[[ -n "${SLURM_JOB_ID:-}" ]] || fail "not inside a Slurm allocation (SLURM_JOB_ID unset); use sbatch/salloc, or launch/torchrun.sh"
NNODES="${NNODES:-${SLURM_NNODES:-1}}"
NPROC="${NPROC:-8}"
ROLLOUT_NODES="${ROLLOUT_NODES:-0}"
[[ "$NNODES" =~ ^[1-9][0-9]*$ ]] || fail "NNODES=$NNODES; allowed: a positive integer"
[[ "$NPROC" =~ ^[1-9][0-9]*$ ]] || fail "NPROC=$NPROC; allowed: a positive integer"
need=$((NNODES + ROLLOUT_NODES))
if (( need > SLURM_NNODES )); then
  fail "the layout needs NNODES=$NNODES training + ROLLOUT_NODES=$ROLLOUT_NODES rollout nodes = $need, the allocation has SLURM_NNODES=$SLURM_NNODES; allowed: sbatch --nodes $need, or a smaller NNODES"
fi
gpus_here="${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-}}"
gpus_here="${gpus_here##*:}"  # "h100:8" -> 8
# 0 GPUs: a CPU job (the tiny recipes); the ranks run on CPU, so there is nothing to check
if [[ "$gpus_here" =~ ^[0-9]+$ ]] && (( gpus_here > 0 && gpus_here < NPROC )); then
  fail "NPROC=$NPROC ranks per node (GPUS_PER_NODE in the recipe), the allocation has $gpus_here GPUs per node; allowed: NPROC <= $gpus_here, or sbatch --gpus-per-node $NPROC"
fi
# The flags at WORLD_SIZE = NNODES x NPROC, in this one process (launch/validate.sh).
# shellcheck source=launch/validate.sh
source "$HERE/validate.sh"
validate_flags "$((NNODES * NPROC))" "$@"
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
# Slurm >= 22.05: a step no longer inherits the job's --cpus-per-task; pass it on.
if [[ -n "${SLURM_CPUS_PER_TASK:-}" ]]; then
  export SRUN_CPUS_PER_TASK="${SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}"
fi
export MASTER_ADDR="${MASTER_ADDR:-${HOSTS[0]}}"
export MASTER_PORT="${MASTER_PORT:-29500}"
export NNODES NPROC
NODELIST="$(IFS=,; echo "${HOSTS[*]:0:$NNODES}")"
read -r -a EXTRA <<< "${SRUN_ARGS:---overlap}"
# shellcheck disable=SC2016  # $SLURM_NODEID and $@ expand on each node, not here
CMD=(srun "${EXTRA[@]}" --nodes "$NNODES" --ntasks "$NNODES" --ntasks-per-node 1
     --nodelist "$NODELIST" --kill-on-bad-exit=1
     bash -c 'NODE_RANK="$SLURM_NODEID" exec bash "$0" "$@"' "$HERE/torchrun.sh" "$@")
echo "+ MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT NNODES=$NNODES NPROC=$NPROC ${CMD[*]}" >&2
exec "${CMD[@]}"
