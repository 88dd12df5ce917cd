#!/usr/bin/env bash
# PPO with a Megatron critic on the built-in arithmetic task, tiny Qwen3-MoE, CPU.
# The critic has its own batch size, learning rate and schedule (CRITIC_ARGS).
#   bash recipes/tiny/ppo.sh
#   bash recipes/tiny/ppo.sh --critic-global-batch-size 32     # 4 critic steps per actor step
#   NPROC=2 bash recipes/tiny/ppo.sh --tensor-model-parallel-size 2 --sequence-parallel
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
# P prompts x G responses = 128 responses per rollout = one actor optimizer step (B = 128).
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
CRITIC_ARGS=(
  --critic-global-batch-size 128
  --critic-micro-batch-size 32
  --critic-lr 1e-3
  --critic-min-lr 0
  --critic-lr-warmup-steps 0
  --critic-lr-decay-style constant
  --critic-weight-decay 0.0
  --critic-clip-grad 1.0
  --num-critic-only-steps 5
  --value-clip 0.2
)
ROLLOUT_ARGS=(
  --rollout-engine hf
  --rollout-concurrency 128
  --rollout-max-response-len 2
  --rollout-temperature 1.0
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
RUN_ARGS=(
  --num-steps 1000
  --run-dir "runs/tiny-ppo-$(date +%Y%m%d-%H%M%S)"
  --seed 1234
)

# Under Slurm (SLURM_JOB_ID set) through launch/srun.sh, as the 30B recipes (it hands a dry
# run back to torchrun.sh), else launch/torchrun.sh.
LAUNCHER="$ROOT/launch/torchrun.sh"
[[ -n "${SLURM_JOB_ID:-}" ]] && LAUNCHER="$ROOT/launch/srun.sh"
NPROC="${NPROC:-1}" exec bash "$LAUNCHER" \
  "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${BATCH_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" \
  "${CRITIC_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${PPO_ARGS[@]}" "${RUN_ARGS[@]}" -- "$@"
