#!/usr/bin/env bash
# The GPU tier (tests/gpu) in one command, for a cluster node before a 30B job:
#   bash tools/gpu_tests.sh [more pytest arguments, e.g. -k sglang or -x]
# Runs `python -m pytest -q tests/gpu -m gpu` ($PYTHON, default python) and ends with one line
# per check: passed, FAILED, or not run and why, with the GPUs it needs. Among them, the SGLang
# checks of the engine faults (docs/testing.md, "GPU checks before a 30B job"):
#   1 GPU   test_sglang_engine_death.py        a crashed SGLang server is replaced (fault 1)
#   2 GPUs  test_sglang_distributed_rejoin.py  a replacement rejoins the NCCL weight sync (fault 2)
#   2 GPUs  test_sglang_tp2_tensor_sync.py     tensor sync into a --tp-size 2 server, 3 times (6)
# They need requirements.txt's GPU stack (sglang; Ray for the first two) and take a few minutes,
# mostly server start-ups. A check without what it needs is skipped, and the summary says "not
# run": it has not been checked on that machine.
# tools/gpu_check.sh is the other GPU script: one GPU, tests/gpu and short recipe runs, written
# to a report. This one runs the tests alone, on as many GPUs as they need (at most 2).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
PYTHON="${PYTHON:-python}"

if command -v nvidia-smi >/dev/null; then
  echo "== GPUs (nvidia-smi): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
else
  echo "== GPUs: nvidia-smi not found"
fi
"$PYTHON" - <<'EOF'
from importlib.metadata import PackageNotFoundError, version

import torch

print(f"== torch {torch.__version__}: CUDA {torch.cuda.is_available()}, "
      f"{torch.cuda.device_count()} GPU(s) visible")
for package in ("sglang", "ray", "megatron-core", "transformer-engine"):
    try:
        print(f"== {package} {version(package)}")
    except PackageNotFoundError:
        print(f"== {package}: not installed (its checks will not run)")
EOF
HYRL_GPU_CHECKS=1 exec "$PYTHON" -m pytest -q -p no:cacheprovider -rP tests/gpu -m gpu "$@"
