#!/usr/bin/env bash
# One node: run `python -m hyrl.train FLAGS` on NPROC ranks with torchrun.
#   NPROC=2 bash launch/torchrun.sh --tensor-model-parallel-size 2 --sequence-parallel ...
# NPROC defaults to 1. MASTER_PORT may be set to avoid clashes between concurrent runs.
set -euo pipefail
NPROC="${NPROC:-1}"
if ! [[ "$NPROC" =~ ^[1-9][0-9]*$ ]]; then
  echo "launch/torchrun.sh: NPROC=$NPROC; allowed: a positive integer" >&2
  exit 2
fi
PYTHON="${PYTHON:-python}"
if [[ "$NPROC" == 1 ]]; then
  # One rank needs no rendezvous; WORLD_SIZE=1 keeps validation and the job consistent.
  echo "+ WORLD_SIZE=1 $PYTHON -m hyrl.train $*" >&2
  WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 exec "$PYTHON" -m hyrl.train "$@"
fi
MASTER_PORT="${MASTER_PORT:-$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
echo "+ torchrun --standalone --nproc-per-node $NPROC -m hyrl.train $*" >&2
exec "$PYTHON" -m torch.distributed.run --nnodes 1 --nproc-per-node "$NPROC" \
  --master-addr 127.0.0.1 --master-port "$MASTER_PORT" -m hyrl.train "$@"
