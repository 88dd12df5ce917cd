#!/usr/bin/env bash
# GRPO on Qwen3-30B-A3B: the batch-size study's base recipe (docs/batch-size.md). P = 128 prompts x
# G = 8 responses = B = 1024 responses per rollout, one optimizer step per rollout, lr 1e-6 at
# B0 = 1024; edit the batch and the lr follows the square-root rule (--lr-scaling sqrt).
#
# Intended layout: NNODES x GPUS_PER_NODE GPUs of GPU_MEMORY_GIB each (default 2 x 8 x 80 GiB,
# e.g. two H100 nodes), rollout colocated on the training GPUs:
#   training  16 ranks: TP = 4 with sequence parallelism (inside a node), EP = 16 (each rank 8
#             of the 128 experts; the expert all-to-all spans both nodes), ETP = 1, PP = 1,
#             DP = 4, expert-DP = 1; full recomputation of every layer; micro-batches packed
#             to 18432 tokens (two longest sequences).
#   rollout   2 SGLang engines of 8 GPUs (TP 8) on the same GPUs (--colocate): they release
#             their memory while the actor trains. SGLang's --mem-fraction-static counts
#             everything on the GPU, the actor's resident weights, grads and Adam states
#             included, so it is set high (0.85): the KV cache is what is left of it.
#   On 141 GiB GPUs (H200) one node suffices: NNODES=1 GPU_MEMORY_GIB=141 with
#   `-- --expert-model-parallel-size 8` (check it with `hyrl plan`).
# Check a layout before you queue it (any machine, no GPU; exits non-zero naming the flag):
#   hyrl plan recipes/qwen3_30b_a3b/grpo.sh [-- EXTRA FLAGS]
# Run it (data and checkpoint: see data.sh):
#   DATA=/data/dapo-math-17k.jsonl HF_CHECKPOINT=/models/Qwen3-30B-A3B \
#     sbatch --nodes 2 launch/sbatch.template recipes/qwen3_30b_a3b/grpo.sh     # Slurm
#   NODE_RANK=0 MASTER_ADDR=host0 bash recipes/qwen3_30b_a3b/grpo.sh            # by hand, per node
# Under Slurm (SLURM_JOB_ID set) it launches through launch/srun.sh, else launch/torchrun.sh.
# Extra arguments come after the -- marker and win over anything below, also over the
# recipe's side of an exclusive pair (e.g. --base-lr over --lr; docs/recipes.md "Running a recipe").
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NNODES="${NNODES:-2}"                # training nodes
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"  # GPUs a node has
NPROC="${NPROC:-$GPUS_PER_NODE}"     # training ranks per node (the launchers' NPROC)
GPU_MEMORY_GIB="${GPU_MEMORY_GIB:-80}"
# shellcheck source=recipes/qwen3_30b_a3b/model.sh
source "$HERE/model.sh"
# shellcheck source=recipes/qwen3_30b_a3b/data.sh
source "$HERE/data.sh"

PARALLEL_ARGS=(
  --tensor-model-parallel-size 4     # attention and vocab layers over 4 GPUs of one node
  --sequence-parallel                # required by MoE with TP > 1; activations / TP
  --expert-model-parallel-size 16    # 128 experts / 16 = 8 per GPU
  --expert-tensor-parallel-size 1
  --pipeline-model-parallel-size 1
  --bf16                             # bf16 weights/activations, fp32 main params + Adam states
  --use-distributed-optimizer        # main params + Adam states sharded over (expert-)DP
  --transformer-impl transformer_engine # TE layers: flash/varlen attention, grouped-GEMM experts
  --recompute-granularity full       # keep only each layer's input, rebuild in backward
  --recompute-method uniform
  --recompute-num-layers 1
  --gpus-per-node "$GPUS_PER_NODE"   # for hyrl plan: TP must stay inside a node
  --gpu-memory-gib "$GPU_MEMORY_GIB" # for hyrl plan's fit check
)
# P prompts x G responses = 1024 responses per rollout = one optimizer step (B = 1024).
BATCH_ARGS=(
  --rollout-batch-size 128
  --n-samples-per-prompt 8
  --global-batch-size 1024
  --micro-batch-size 1
  --use-dynamic-batch-size           # pack micro-batches by tokens instead of responses
  --max-tokens-per-gpu 18432
  --qkv-format thd                   # each micro-batch's sequences packed: no padding computed
  --moe-permute-fusion               # Transformer Engine's fused token permutation
)
# lr = 1e-6 x (B / 1024)^(1/2): the reference rate, re-derived when B changes.
OPTIMIZER_ARGS=(
  --base-lr 1e-6
  --base-global-batch-size 1024
  --lr-scaling sqrt
  --min-lr 0
  --lr-warmup-steps 0
  --lr-decay-style constant
  --weight-decay 0.1
  --adam-beta1 0.9
  --adam-beta2 0.98
  --clip-grad 1.0
)
ROLLOUT_ARGS=(
  --rollout-engine sglang
  --colocate                         # engines on the training GPUs
  --rollout-num-gpus-per-engine 8    # SGLang tensor parallel 8: 16 GPUs = 2 engines
  --sglang-mem-fraction-static 0.85
  --rollout-concurrency 256          # sequences in flight per engine (C, not B)
  --rollout-max-response-len 8192
  --rollout-temperature 1.0
  --reward-num-workers 16            # math-verify off the trainer process
  ${RAY_ADDRESS:+--ray-address "$RAY_ADDRESS"}   # set by launch/sbatch.template
)
GRPO_ARGS=(
  --advantage-estimator grpo
  --eps-clip 0.2
  --eps-clip-high 0.28
  --kl-loss-coef 0.0                 # no reference model kept
  --entropy-coef 0.0
)
# MoE stability (docs/moe-stability.md): mismatch/* metrics are logged every step;
# truncated importance sampling against SGLang's log-probs is on; routing replay (R3) is one
# uncommented line away (it starts the servers with --enable-return-routed-experts).
MISMATCH_ARGS=(
  --use-tis
  --tis-clip 2.0
  # --use-rollout-routing-replay
  # --measure-routing-mismatch       # without replay: only log mismatch/routing_diff_frac
)
RUN_ARGS=(
  --num-steps 3000
  --run-dir "runs/qwen3-30b-a3b-grpo-$(date +%Y%m%d-%H%M%S)"
  --seed 1234
)

ARGS=("${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${BATCH_ARGS[@]}" "${OPTIMIZER_ARGS[@]}"
      "${ROLLOUT_ARGS[@]}" "${DATA_ARGS[@]}" "${GRPO_ARGS[@]}" "${MISMATCH_ARGS[@]}" "${RUN_ARGS[@]}" -- "$@")
LAUNCHER="$ROOT/launch/torchrun.sh"  # --dry-run: one process at WORLD_SIZE = NNODES x NPROC
[[ -n "${SLURM_JOB_ID:-}" && "$DRY_RUN" == 0 ]] && LAUNCHER="$ROOT/launch/srun.sh"
NNODES="$NNODES" NPROC="$NPROC" exec bash "$LAUNCHER" "${ARGS[@]}"
