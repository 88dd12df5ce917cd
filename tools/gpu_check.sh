#!/usr/bin/env bash
# Every GPU check in one script, sized for one GPU and 10 minutes:
#   1. the GPU tests (tests/gpu: the CUDA trainer path, the weight stream and offload on CUDA,
#      Transformer Engine and a real SGLang server where they are installed),
#   2. a short tiny-recipe GRPO run on the 30B recipes' training path with the in-process hf
#      engine: --bf16 --use-distributed-optimizer --qkv-format thd (packed sequences) with
#      --use-tis --use-rollout-routing-replay, PP=1, and with Transformer Engine installed its spec and
#      --moe-permute-fusion; the report prints the median perf/tokens_per_s_per_gpu and perf/mfu
#      over the run's steps, with the GPU's name and the peak bf16 FLOP/s the MFU is taken
#      against (hyrl/metrics/flops.py),
#      then tiny PPO in bf16 with the distributed optimizer (10 steps) and
#      tools/bench_weight_sync.py (the weight stream's GPU memory against the bucket size),
#   3. where SGLang imports: the same run with --rollout-engine sglang --colocate on that GPU
#      (SGLang's bf16 against the trainer: mismatch/*); --colocate turns on --offload-train,
#      and the report prints the bytes its offload freed per step (perf/offload_freed_bytes;
#      tests/gpu/test_offload_cuda.py checks torch.cuda.memory_allocated around the offload
#      of a bare actor). Without SGLang the report says it was skipped and why.
# Needs the GPU stack of requirements.txt in $PYTHON's environment; a missing SGLang or
# Transformer Engine makes their tests skip (named in the pytest summary) and the report says
# which parts ran.
#   bash tools/gpu_check.sh [OUT_DIR]          # OUT_DIR default: runs/gpu-check-<time>
# Writes OUT_DIR/gpu_check.md (what ran, how long, pass/fail) next to the run directories and
# logs.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
PYTHON="${PYTHON:-python}"
OUT="${1:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
STEPS="${GPU_CHECK_STEPS:-20}"  # GPU_CHECK_TEST_TIMEOUT: seconds for pytest (420)
if ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "tools/gpu_check.sh: torch.cuda.is_available() is False for $PYTHON; run it on a GPU machine" >&2
  exit 2
fi
mkdir -p "$OUT"
REPORT="$OUT/gpu_check.md"

{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  "$PYTHON" - <<'EOF' 2>&1
import importlib, warnings
import torch
warnings.simplefilter("ignore")  # megatron's "TE and Apex are not installed" at import
print(f"torch {torch.__version__} cuda {torch.version.cuda}")
for name in ("megatron.core", "transformer_engine", "sglang", "sglang_router", "transformers", "ray"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as exc:  # noqa: BLE001 - report, do not stop
        print(f"{name} missing ({type(exc).__name__}: {exc})")
EOF
  echo '```'
} > "$REPORT"

status=0
has() { "$PYTHON" -c "import $1" >/dev/null 2>&1; }
declare -a ROWS=()
run_step() {  # run_step NAME SECONDS LOG CMD...: runs CMD under a timeout, logs it, records a row
  local name="$1" limit="$2" log="$3"
  shift 3
  echo "== $name" >&2
  local began rc
  began=$(date +%s)
  timeout "$limit" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  ROWS+=("| $name | $rc | $(( $(date +%s) - began )) |")
  [[ $rc == 0 ]] || status=1
}

run_step "pytest tests/gpu" "${GPU_CHECK_TEST_TIMEOUT:-420}" "$OUT/pytest_gpu.log" \
  "$PYTHON" -m pytest tests/gpu -v -rs -rP -p no:cacheprovider

# The 30B recipes' training path on this GPU; TE's spec and fused permutation where TE is here.
TRAIN_FLAGS=(--bf16 --use-distributed-optimizer --qkv-format thd --use-tis --use-rollout-routing-replay)
if has transformer_engine; then
  TRAIN_FLAGS+=(--transformer-impl transformer_engine --moe-permute-fusion)
fi
run_step "tiny GRPO, hf engine, ${TRAIN_FLAGS[*]}, $STEPS steps" 240 "$OUT/run_hf.log" \
  env PYTHON="$PYTHON" bash recipes/tiny/grpo.sh "${TRAIN_FLAGS[@]}" \
  --num-steps "$STEPS" --no-progress --run-dir "$OUT/tiny-grpo-hf"
# PPO (the critic's own DDP and optimizer) on the same path, without the routing flags.
run_step "tiny PPO, hf engine, --bf16 --use-distributed-optimizer --qkv-format thd, 10 steps" \
  240 "$OUT/run_ppo.log" \
  env PYTHON="$PYTHON" bash recipes/tiny/ppo.sh --bf16 --use-distributed-optimizer \
  --qkv-format thd --num-steps 10 --no-progress --run-dir "$OUT/tiny-ppo-hf"
# The weight stream's GPU memory against the bucket size, ~115M parameters, one rank.
run_step "tools/bench_weight_sync.py on this GPU, buckets of 16, 64, 256 MiB" 240 \
  "$OUT/bench_weight_sync.log" \
  "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 1 tools/bench_weight_sync.py \
  --buffer-mib 16,64,256

if has sglang; then
  run_step "tiny GRPO, sglang colocated, ${TRAIN_FLAGS[*]}, $STEPS steps" 240 \
    "$OUT/run_sglang.log" \
    env PYTHON="$PYTHON" bash recipes/tiny/grpo.sh "${TRAIN_FLAGS[@]}" \
    --rollout-engine sglang --colocate --sglang-mem-fraction-static 0.3 \
    --num-steps "$STEPS" --no-progress --run-dir "$OUT/tiny-grpo-sglang"
else
  ROWS+=("| tiny GRPO, sglang colocated | skipped: sglang does not import in $PYTHON | |")
fi

{
  echo
  echo "| check | exit | seconds |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "pytest summary: $(tail -n 1 "$OUT/pytest_gpu.log")"
  echo
  echo "tools/bench_weight_sync.py:"
  echo '```'
  grep -v '^\[\|Warning\|warn' "$OUT/bench_weight_sync.log" | tail -n 12
  echo '```'
  for run in "$OUT"/tiny-grpo-*; do
    [[ -d "$run" ]] && "$PYTHON" tools/gpu_check_summary.py "$run"
  done
} >> "$REPORT"
cat "$REPORT"
exit $status
