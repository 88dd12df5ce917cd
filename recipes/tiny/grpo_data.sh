#!/usr/bin/env bash
# GRPO on the tiny Qwen3-MoE from a jsonl dataset, through the same data flags as
# recipes/qwen3_30b_a3b (--prompt-data, --input-key, --label-key, --tokenizer-path,
# --rm-type, --eval-prompt-data): the arithmetic task written out as records
# {"prompt": "3+4=", "label": "7"} (tests/data/tiny_arith.jsonl) and a local tokenizer directory.
#   bash recipes/tiny/grpo_data.sh --num-steps 200
# Extra arguments come after the -- marker and win over anything below, also over the
# recipe's side of an exclusive pair (e.g. --base-lr over --lr; docs/recipes.md "Running a recipe").
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$HERE/model.sh"

DATA="${DATA:-$ROOT/tests/data/tiny_arith.jsonl}"
DATA_ARGS=(
  --prompt-data "$DATA"
  --input-key prompt
  --label-key label
  --tokenizer-path "$ROOT/tests/data/tiny_tokenizer"
  --apply-chat-template
  --rm-type exact_match
  --eval-prompt-data arith "$DATA"   # in-distribution check: the training prompts themselves
  --eval-interval 100
  --eval-temperature 0
)
BATCH_ARGS=(
  --rollout-batch-size 16
  --n-samples-per-prompt 8
  --global-batch-size 128
  --micro-batch-size 32
)
OPTIMIZER_ARGS=(
  --lr 3e-4
  --lr-decay-style constant
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
)
RUN_ARGS=(
  --num-steps 1000
  --run-dir "runs/tiny-grpo-data-$(date +%Y%m%d-%H%M%S)"
  --seed 1234
)

# Under Slurm (SLURM_JOB_ID set) through launch/srun.sh, as the 30B recipes (it hands a dry
# run back to torchrun.sh), else launch/torchrun.sh.
LAUNCHER="$ROOT/launch/torchrun.sh"
[[ -n "${SLURM_JOB_ID:-}" ]] && LAUNCHER="$ROOT/launch/srun.sh"
NPROC="${NPROC:-1}" exec bash "$LAUNCHER" \
  "${MODEL_ARGS[@]}" "${BATCH_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" "${DATA_ARGS[@]}" \
  "${ROLLOUT_ARGS[@]}" "${GRPO_ARGS[@]}" "${RUN_ARGS[@]}" -- "$@"
