#!/usr/bin/env bash
# GRPO on the built-in arithmetic task ("a+b=" -> (a+b) mod 10, then <eos>), tiny Qwen3-MoE, CPU.
#   bash recipes/tiny/grpo.sh                                  # one rank
#   NPROC=2 bash recipes/tiny/grpo.sh --tensor-model-parallel-size 2 --sequence-parallel
#   NPROC=2 bash recipes/tiny/grpo.sh --expert-model-parallel-size 2
#   NPROC=2 bash recipes/tiny/grpo.sh --pipeline-model-parallel-size 2 --num-layers 4 \
#     --num-layers-per-virtual-pipeline-stage 1                 # 2 virtual stages per rank
#   bash recipes/tiny/grpo.sh --use-tis --use-rollout-routing-replay    # MoE stability flags, below
# Extra arguments come after the -- marker and win over anything below, also over the
# recipe's side of an exclusive pair (e.g. --base-lr over --lr; docs/recipes.md "Running a recipe").
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$HERE/model.sh"

PARALLEL_ARGS=(
  --tensor-model-parallel-size 1
  --expert-model-parallel-size 1
  --pipeline-model-parallel-size 1
)
# P prompts x G responses = 128 responses per rollout = one optimizer step (B = 128).
BATCH_ARGS=(
  --rollout-batch-size 16
  --n-samples-per-prompt 8
  --global-batch-size 128
  --micro-batch-size 32
)
OPTIMIZER_ARGS=(
  --lr 3e-4
  --min-lr 0
  --lr-warmup-steps 0
  --lr-decay-style constant
  --weight-decay 0.0
  --adam-beta1 0.9
  --adam-beta2 0.999
  --clip-grad 1.0
)
ROLLOUT_ARGS=(
  --rollout-engine hf
  --rollout-concurrency 128
  --rollout-max-response-len 2
  --rollout-temperature 1.0
)
GRPO_ARGS=(
  --advantage-estimator grpo
  --eps-clip 0.2
  --eps-clip-high 0.28
  --kl-loss-coef 0.0
  --entropy-coef 0.0
)
# MoE stability (docs/moe-stability.md): mismatch/* metrics are logged every step; the
# corrections are off here (engine and trainer agree to float32 rounding on CPU). To try them,
# append to the command line:
#   --use-tis --tis-clip 2.0                                   truncated importance sampling
#   --use-mis --mis-low 0.5 --mis-high 2.0 --mis-level token   masked importance sampling
#   --use-rollout-routing-replay                                       replay the engine's MoE routing (R3)
#   --measure-routing-mismatch                                 only measure how often routing differs
RUN_ARGS=(
  --num-steps 1000
  --run-dir "runs/tiny-grpo-$(date +%Y%m%d-%H%M%S)"
  --seed 1234
)

# Under Slurm (SLURM_JOB_ID set) through launch/srun.sh, as the 30B recipes (it hands a dry
# run back to torchrun.sh), else launch/torchrun.sh.
LAUNCHER="$ROOT/launch/torchrun.sh"
[[ -n "${SLURM_JOB_ID:-}" ]] && LAUNCHER="$ROOT/launch/srun.sh"
NPROC="${NPROC:-1}" exec bash "$LAUNCHER" \
  "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${BATCH_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" \
  "${ROLLOUT_ARGS[@]}" "${GRPO_ARGS[@]}" "${RUN_ARGS[@]}" -- "$@"
