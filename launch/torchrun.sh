#!/usr/bin/env bash
# Run `python -m hyrl train FLAGS` on NPROC ranks per node with torchrun.
#   NPROC=2 bash launch/torchrun.sh --tensor-model-parallel-size 2 --sequence-parallel ...
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=host0 NPROC=8 bash launch/torchrun.sh FLAGS   # on host0
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=host0 NPROC=8 bash launch/torchrun.sh FLAGS   # on host1
# NPROC (GPUs per node) and NNODES default to 1. MASTER_PORT may be set to avoid clashes
# (multi-node: default 29500; one node: unset, torchrun --standalone binds a port the kernel
# picks). Under Slurm, launch/srun.sh sets NNODES, NODE_RANK and MASTER_ADDR and calls this
# script once per node.
# With --dry-run among the flags: ONE process validates the flags at WORLD_SIZE = NNODES x
# NPROC and prints the resolved configuration (no torchrun, no GPU; what `hyrl plan` and
# `hyrl sweep` use). With --preflight-only: ONE process validates the flags and checks the
# files and this machine (hyrl's preflight), printing nothing on success. Before starting
# several ranks it runs that check, so a refused flag or a bad file is reported once (exit 2)
# and nothing starts.
set -euo pipefail
# Megatron's tensor-parallel layers (sequence parallel, async TP all-reduce) rely on one CUDA
# work queue per device so a collective launched first runs first and overlaps the matmul
# after it (megatron/core/tensor_parallel/layers.py). The ranks only: SGLang servers set
# their own (8) whatever they inherit.
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-1}"
NPROC="${NPROC:-1}"
NNODES="${NNODES:-1}"
for name in NPROC NNODES; do
  if ! [[ "${!name}" =~ ^[1-9][0-9]*$ ]]; then
    echo "launch/torchrun.sh: $name=${!name}; allowed: a positive integer" >&2
    exit 2
  fi
done
PYTHON="${PYTHON:-python}"
# A preemption signal sent to torchrun (its pid, or its whole process group) is forwarded to
# the ranks, which finish the rollout step, checkpoint and exit 0; torchrun then exits 1
# ("SignalException ... got signal"), so judge a run by its summary.json. torch 2.13 and
# 2.14.1 forward SIGTERM, SIGINT, SIGHUP and SIGQUIT and kill the ranks 30 s later: here
# SIGUSR1 is forwarded too (unforwarded, it would end torchrun and orphan the ranks), and the
# ranks get SHUTDOWN_GRACE_S (default 1800, launch/sbatch.template's preemption lead; size it
# with `hyrl plan`) to finish the step and save before torchrun's SIGKILL.
SHUTDOWN_GRACE_S="${SHUTDOWN_GRACE_S:-1800}"
if ! [[ "$SHUTDOWN_GRACE_S" =~ ^[0-9]+$ ]]; then
  echo "launch/torchrun.sh: SHUTDOWN_GRACE_S=$SHUTDOWN_GRACE_S; allowed: seconds, an integer >= 0" >&2
  exit 2
fi
SIGNAL_FLAGS=(--signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 --shutdown-timeout "$SHUTDOWN_GRACE_S")
WORLD_SIZE=$((NNODES * NPROC))
for arg in "$@"; do
  if [[ "$arg" == "--dry-run" || "$arg" == "--preflight-only" ]]; then
    echo "+ WORLD_SIZE=$WORLD_SIZE $PYTHON -m hyrl train $*" >&2
    WORLD_SIZE=$WORLD_SIZE RANK=0 LOCAL_RANK=0 exec "$PYTHON" -m hyrl train "$@"
  fi
done
if [[ "$WORLD_SIZE" == 1 ]]; then
  # One rank needs no rendezvous; WORLD_SIZE=1 keeps validation and the job consistent.
  echo "+ WORLD_SIZE=1 $PYTHON -m hyrl train $*" >&2
  WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 exec "$PYTHON" -m hyrl train "$@"
fi
# Several ranks: validate the flags in one process first (launch/validate.sh).
# shellcheck source=launch/validate.sh
source "$(dirname "${BASH_SOURCE[0]}")/validate.sh"
validate_flags "$WORLD_SIZE" "$@"
if [[ "$NNODES" == 1 ]]; then
  if [[ -z "${MASTER_PORT:-}" ]]; then
    # --standalone: torchrun binds its store to a port the kernel picks and the ranks meet
    # there. A port picked free here and bound later could be taken in between (a test run
    # failed with EADDRINUSE so when many jobs started side by side).
    echo "+ torchrun --standalone --nproc-per-node $NPROC -m hyrl train $*" >&2
    exec "$PYTHON" -m torch.distributed.run "${SIGNAL_FLAGS[@]}" --standalone --nnodes 1 \
      --nproc-per-node "$NPROC" -m hyrl train "$@"
  fi
  echo "+ torchrun --nproc-per-node $NPROC --master-port $MASTER_PORT -m hyrl train $*" >&2
  exec "$PYTHON" -m torch.distributed.run "${SIGNAL_FLAGS[@]}" --nnodes 1 --nproc-per-node "$NPROC" \
    --master-addr 127.0.0.1 --master-port "$MASTER_PORT" -m hyrl train "$@"
fi
NODE_RANK="${NODE_RANK:?launch/torchrun.sh: NNODES=$NNODES needs NODE_RANK (0..$((NNODES - 1))) on every node}"
MASTER_ADDR="${MASTER_ADDR:?launch/torchrun.sh: NNODES=$NNODES needs MASTER_ADDR (the host of node rank 0)}"
MASTER_PORT="${MASTER_PORT:-29500}"
echo "+ [node $NODE_RANK/$NNODES] torchrun --nnodes $NNODES --node-rank $NODE_RANK --nproc-per-node $NPROC --master-addr $MASTER_ADDR --master-port $MASTER_PORT -m hyrl train $*" >&2
exec "$PYTHON" -m torch.distributed.run "${SIGNAL_FLAGS[@]}" --nnodes "$NNODES" --node-rank "$NODE_RANK" \
  --nproc-per-node "$NPROC" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \
  -m hyrl train "$@"
