#!/usr/bin/env bash
# signal_ranks.sh SIGNAL JOB_ID: send SIGNAL to this node's training ranks of Slurm job JOB_ID
# (`python -m hyrl train` processes whose environment holds SLURM_JOB_ID=JOB_ID), and to no
# other process: another job's ranks on a shared node, or a run outside Slurm, are left alone.
# Run on each training node by launch/sbatch.template (srun --overlap) when the job is warned.
set -uo pipefail
signal="${1:?usage: signal_ranks.sh SIGNAL JOB_ID}"
job="${2:?usage: signal_ranks.sh SIGNAL JOB_ID}"
sent=0
for pid in $(pgrep -f '^[^ ]*python[0-9.]* (-u )?-m hyrl train'); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$job"; then
    kill "-$signal" "$pid" 2>/dev/null && sent=$((sent + 1))
  fi
done
echo "+ $(hostname): SIG$signal to $sent training rank(s) of job $job"
