#!/usr/bin/env bash
# Every GPU check in one script, sized for one GPU and 10 minutes:
#   1. the GPU tests (tests/gpu: the CUDA trainer path and a real SGLang server),
#   2. a short tiny-recipe GRPO run with --rollout-engine sglang --colocate on that GPU,
#      with --use-tis --use-routing-replay (SGLang's bf16 against the trainer: mismatch/*), on
#      the 30B recipes' training path: --bf16 --use-distributed-optimizer --qkv-format thd
#      (packed sequences through Transformer Engine's varlen attention) --moe-permute-fusion,
#      PP=1; --colocate turns on --offload-train, and the report prints the bytes its offload freed per step
#      (perf/offload_freed_bytes, from the run's metrics.jsonl; tests/gpu/test_offload_cuda.py
#      checks torch.cuda.memory_allocated around the offload of a bare actor), and the median
#      perf/tokens_per_s_per_gpu and perf/mfu over the run's steps, with the GPU's name and the
#      peak bf16 FLOP/s the MFU is taken against (hyrl/metrics/flops.py).
# Needs the GPU stack of requirements.txt in $PYTHON's environment (SGLang, Transformer Engine);
# a missing piece makes its tests skip and the run fail with the import error.
#   bash tools/gpu_check.sh [OUT_DIR]          # OUT_DIR default: runs/gpu-check-<time>
# Writes OUT_DIR/gpu_check.md (what ran, how long, pass/fail) next to the run directory and logs.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
PYTHON="${PYTHON:-python}"
OUT="${1:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
STEPS="${GPU_CHECK_STEPS:-20}"
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
import importlib, torch
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
start=$(date +%s)
echo "== 1/2 GPU tests" >&2
timeout 420 "$PYTHON" -m pytest tests/gpu -v -rs 2>&1 | tee "$OUT/pytest_gpu.log"
tests_rc=${PIPESTATUS[0]}
tests_s=$(( $(date +%s) - start ))
[[ $tests_rc == 0 ]] || status=1

echo "== 2/2 tiny GRPO recipe, SGLang colocated, $STEPS steps" >&2
start=$(date +%s)
PYTHON="$PYTHON" timeout 240 bash recipes/tiny/grpo.sh \
  --rollout-engine sglang --colocate --sglang-mem-fraction-static 0.3 \
  --use-tis --use-routing-replay --bf16 --use-distributed-optimizer --qkv-format thd \
  --moe-permute-fusion \
  --num-steps "$STEPS" --no-progress --run-dir "$OUT/tiny-grpo-sglang" 2>&1 | tee "$OUT/run.log"
run_rc=${PIPESTATUS[0]}
run_s=$(( $(date +%s) - start ))
[[ $run_rc == 0 ]] || status=1

{
  echo
  echo "| check | exit | seconds |"
  echo "|---|---|---|"
  echo "| pytest tests/gpu | $tests_rc | $tests_s |"
  echo "| tiny GRPO, sglang colocated, TIS + routing replay, thd, $STEPS steps | $run_rc | $run_s |"
  echo
  echo "pytest summary: $(tail -n 1 "$OUT/pytest_gpu.log")"
  if [[ -f "$OUT/tiny-grpo-sglang/metrics.jsonl" ]]; then
    "$PYTHON" - "$OUT/tiny-grpo-sglang/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
rows = [r for r in rows if "train/reward_mean" in r]
if rows:
    first, last = rows[0], rows[-1]
    keys = ("train/reward_mean", "perf/rollout_s", "perf/weight_sync_s", "perf/rollout_tokens_per_s",
            "mismatch/logprob_abs_diff_mean", "mismatch/kl", "mismatch/tis_clipped_frac",
            "mismatch/routing_diff_frac", "mismatch/routing_replay_errors")
    print("\n| step | " + " | ".join(keys) + " |\n" + "|---" * (len(keys) + 1) + "|")
    for r in (first, last):
        print(f"| {r['step']} | " + " | ".join(f"{r.get(k, float('nan')):.4g}" for k in keys) + " |")
# --offload-train (on with --colocate): rank 0's torch.cuda.memory_allocated drop per step
freed = [(r["step"], r["perf/offload_freed_bytes"], r.get("perf/offload_s", float("nan")))
         for r in json.loads("[" + ",".join(open(sys.argv[1])) + "]")
         if "perf/offload_freed_bytes" in r]
if freed:
    print("\nbytes freed by offload (rank 0, perf/offload_freed_bytes) and perf/offload_s:")
    for step, freed_bytes, seconds in (freed[0], freed[-1]):
        print(f"  step {step}: {freed_bytes} B ({freed_bytes / 2**20:.1f} MiB), {seconds:.3f} s")
else:
    print("\nno perf/offload_freed_bytes in metrics.jsonl: the trainer did not offload")
# the trainer's throughput and model FLOPs utilisation (hyrl/metrics/flops.py), per rollout step
import statistics, torch
from hyrl.metrics.flops import gpu_of
records = [json.loads(line) for line in open(sys.argv[1])]
name = torch.cuda.get_device_name()
gpu = gpu_of(name)
peak = f"{gpu.product}, {gpu.peak_bf16_flops_per_s / 1e12:g} TFLOP/s dense bf16" if gpu else "not in hyrl/metrics/flops.py GPUS: no perf/mfu"
print(f"\nGPU {name!r}, peak {peak}; medians over the run's rollout steps:")
for key, show in (("perf/tokens_per_s_per_gpu", lambda v: f"{v:.4g} tokens/s per GPU"),
                  ("perf/mfu", lambda v: f"{v:.4g} ({v:.2%} of the peak)")):
    values = [r[key] for r in records if key in r]
    median = show(statistics.median(values)) if values else "not in metrics.jsonl"
    print(f"  {key}: {median}" + (f" ({len(values)} steps)" if values else ""))
EOF
  fi
} >> "$REPORT"
cat "$REPORT"
exit $status
