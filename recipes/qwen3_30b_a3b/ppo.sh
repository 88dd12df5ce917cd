#!/usr/bin/env bash
# PPO on Qwen3-30B-A3B with a Megatron critic that has its own batch size and learning rate
# (the actor's gradient noise falls with the batch, the critic's stays high: docs/batch-size.md).
# Actor: P = 128 x G = 8 = B = 1024 responses, one step per rollout, lr 1e-6 at B0 = 1024 by
# the square-root rule. Critic: 512 responses per step (2 critic steps per rollout), lr 5e-6 at
# its own B0 = 512, also by the square-root rule.
#
# Intended layout: NNODES training nodes + ROLLOUT_NODES rollout nodes of GPUS_PER_NODE GPUs of
# GPU_MEMORY_GIB each (default 4 + 1 nodes x 8 x 80 GiB): rollout on GPUs of its own.
#   training  32 ranks: TP = 4 with sequence parallelism (inside a node), EP = 32 (4 of the
#             128 experts per GPU; the all-to-all spans the 4 nodes), ETP = 1, PP = 1, DP = 8,
#             expert-DP = 1; actor and critic each keep weights, fp32 grads and Adam states on
#             every GPU (that is why EP is 32); full recomputation; 18432-token micro-batches.
#   rollout   ROLLOUT_NODES x 8 GPUs = 2 SGLang engines of 4 GPUs (TP 4) each, weights sent
#             over NCCL after every actor step (--update-weight-transport distributed, the default
#             without --colocate); --mem-fraction-static 0.85 of an otherwise empty GPU.
# Check a layout before you queue it (any machine, no GPU; exits non-zero naming the flag):
#   hyrl plan recipes/qwen3_30b_a3b/ppo.sh [-- EXTRA FLAGS]
# Run it (data and checkpoint: see data.sh); Ray must span the rollout nodes (RAY_ADDRESS):
#   DATA=... HF_CHECKPOINT=... ROLLOUT_NODES=1 sbatch --nodes 5 launch/sbatch.template \
#     recipes/qwen3_30b_a3b/ppo.sh
# Under Slurm (SLURM_JOB_ID set) it launches through launch/srun.sh (torchrun on the first
# NNODES nodes), else launch/torchrun.sh. Extra arguments come after the
# -- marker and win, also over the recipe's side of an exclusive pair (docs/recipes.md).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NNODES="${NNODES:-4}"                # training nodes
ROLLOUT_NODES="${ROLLOUT_NODES:-1}"  # nodes for SGLang only
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"  # GPUs a node has
NPROC="${NPROC:-$GPUS_PER_NODE}"     # training ranks per node (the launchers' NPROC)
GPU_MEMORY_GIB="${GPU_MEMORY_GIB:-80}"
# shellcheck source=recipes/qwen3_30b_a3b/model.sh
source "$HERE/model.sh"
# shellcheck source=recipes/qwen3_30b_a3b/data.sh
source "$HERE/data.sh"

PARALLEL_ARGS=(
  --tensor-model-parallel-size 4
  --sequence-parallel
  --expert-model-parallel-size 32    # 128 experts / 32 = 4 per GPU
  --expert-tensor-parallel-size 1
  --pipeline-model-parallel-size 1
  --bf16                             # bf16 weights/activations, fp32 main params + Adam states
  --use-distributed-optimizer        # main params + Adam states sharded over (expert-)DP
  --transformer-impl transformer_engine # TE layers: flash/varlen attention, grouped-GEMM experts
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  --gpus-per-node "$GPUS_PER_NODE"
  --gpu-memory-gib "$GPU_MEMORY_GIB"
)
BATCH_ARGS=(
  --rollout-batch-size 128
  --n-samples-per-prompt 8
  --global-batch-size 1024
  --micro-batch-size 1
  --use-dynamic-batch-size
  --max-tokens-per-gpu 18432
  --qkv-format thd                   # each micro-batch's sequences packed: no padding computed
  --moe-permute-fusion               # Transformer Engine's fused token permutation
)
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
# The critic's own batch and rate: critic lr = 5e-6 x (critic B / 512)^(1/2).
CRITIC_ARGS=(
  --critic-global-batch-size 512
  --critic-micro-batch-size 1
  --critic-base-lr 5e-6
  --critic-base-global-batch-size 512
  --critic-lr-scaling sqrt
  --critic-min-lr 0
  --critic-lr-warmup-steps 0
  --critic-lr-decay-style constant
  --critic-weight-decay 0.1
  --critic-clip-grad 1.0
  --num-critic-only-steps 5          # warm the value head up before the actor moves
  --value-clip 0.2
)
ROLLOUT_ARGS=(
  --rollout-engine sglang
  --rollout-num-gpus $((ROLLOUT_NODES * GPUS_PER_NODE))
  --rollout-num-gpus-per-engine 4    # SGLang tensor parallel 4
  --sglang-mem-fraction-static 0.85
  --rollout-concurrency 192          # sequences in flight per engine (C, not B); 254 of
                                     # the longest fit in each engine's KV cache
  --rollout-max-response-len 8192
  --rollout-temperature 1.0
  --reward-num-workers 16
  ${RAY_ADDRESS:+--ray-address "$RAY_ADDRESS"}   # set by launch/sbatch.template
)
PPO_ARGS=(
  --advantage-estimator gae
  --gamma 1.0
  --lambd 1.0
  --normalize-advantages
  --eps-clip 0.2
  --eps-clip-high 0.28
  --kl-coef 0.0
  --kl-loss-coef 0.0
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
  --run-dir "runs/qwen3-30b-a3b-ppo-$(date +%Y%m%d-%H%M%S)"
  --seed 1234
)

ARGS=("${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${BATCH_ARGS[@]}" "${OPTIMIZER_ARGS[@]}"
      "${CRITIC_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${DATA_ARGS[@]}" "${PPO_ARGS[@]}" "${MISMATCH_ARGS[@]}" "${RUN_ARGS[@]}"
      -- "$@")
LAUNCHER="$ROOT/launch/torchrun.sh"  # --dry-run: one process at WORLD_SIZE = NNODES x NPROC
[[ -n "${SLURM_JOB_ID:-}" && "$DRY_RUN" == 0 ]] && LAUNCHER="$ROOT/launch/srun.sh"
NNODES="$NNODES" NPROC="$NPROC" exec bash "$LAUNCHER" "${ARGS[@]}"
