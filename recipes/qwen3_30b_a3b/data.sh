# shellcheck shell=bash disable=SC2034  # sourced by the recipes
# Data, checkpoint and reward flags shared by the Qwen3-30B-A3B recipes (sourced, not run).
# Set these before running a recipe; the defaults are placeholders that a real run refuses:
#   DATA           training prompts, .jsonl or .parquet, one record per prompt with the fields
#                  "prompt" and "label" (see dry_run/prompts.jsonl): DAPO-Math-17k
#   HF_CHECKPOINT  local Hugging Face directory of Qwen/Qwen3-30B-A3B (weights + tokenizer;
#                  its config.json must match model.sh)
#   EVAL_DATA      held-out prompts (same format), logged as eval/heldout/accuracy: AIME 2024
#                  (30 problems); optional for grpo.sh and ppo.sh, required by sweep_grpo.sh
# The sets are slime's for this model (scripts/run-qwen3-30B-A3B.sh): DAPO-Math-17k to train,
# AIME 2024 held out. Make them from the downloaded files with `hyrl data import`
# (docs/data.md), from verl's parquet (BytedTsinghua-SIA/DAPO-Math-17k, .../AIME-2024) or
# slime's jsonl (zhuzilin/dapo-math-17k, zhuzilin/aime-2024):
#   hyrl data import dapo-math-17k.parquet --preset dapo-math --out /data/dapo-math-17k.jsonl
#   hyrl data import aime-2024.parquet --preset aime --out /data/aime-2024.jsonl
# It drops the parquet's repeats (each DAPO prompt ~100 times, each AIME problem 32) and prints
# the reward each file is meant for: these prompts ask for DAPO's "Answer: X" last line, which
# --rm-type dapo reads (below; for prompts that ask for a \boxed{} answer append
# `-- --rm-type math`). slime's script scores the same data with deepscaler (a \boxed{} answer
# after </think>); docs/recipes.md "Reward functions" sets the two side by side.
# The sweep's target (sweep_grpo.sh, eval/heldout/accuracy=0.77) is a placeholder that nothing
# in this repository measured: set TARGET from your own reference run on EVAL_DATA.
# With --dry-run (hyrl plan, hyrl sweep's checks, sweep_grpo.sh --dry-run) missing files
# (DATA, HF_CHECKPOINT, a set EVAL_DATA) are replaced by the stand-ins in dry_run/, so a layout
# can be planned on a laptop; the plan does not depend on the data.
DATA="${DATA:-/path/to/dapo-math-17k.jsonl}"
HF_CHECKPOINT="${HF_CHECKPOINT:-/path/to/Qwen3-30B-A3B}"
EVAL_DATA="${EVAL_DATA:-}"

DRY_RUN=0
for arg in "$@"; do [[ "$arg" == "--dry-run" ]] && DRY_RUN=1; done
if [[ "$DRY_RUN" == 1 && ! -f "$DATA" ]]; then
  echo "dry run: DATA=$DATA does not exist here; validating with the stand-in" \
    "$HERE/dry_run/prompts.jsonl" >&2
  DATA="$HERE/dry_run/prompts.jsonl"
fi
DATA_ARGS=(
  --prompt-data "$DATA"
  --input-key prompt
  --label-key label
  --apply-chat-template
  --rollout-max-prompt-len 1024   # longer prompts are dropped when the data loads (tokens)
  --rm-type dapo                  # the "Answer:" line DAPO's prompts ask for, by math-verify
)
if [[ "$DRY_RUN" == 1 && ! -d "$HF_CHECKPOINT" ]]; then
  echo "dry run: HF_CHECKPOINT=$HF_CHECKPOINT does not exist here; random weights and the" \
    "stand-in tokenizer directory $HERE/dry_run" >&2
  DATA_ARGS+=(--tokenizer-path "$HERE/dry_run")
else
  DATA_ARGS+=(--hf-checkpoint "$HF_CHECKPOINT")
fi
if [[ "$DRY_RUN" == 1 && -n "$EVAL_DATA" && ! -f "$EVAL_DATA" ]]; then
  echo "dry run: EVAL_DATA=$EVAL_DATA does not exist here; validating with the stand-in" \
    "$HERE/dry_run/prompts.jsonl" >&2
  EVAL_DATA="$HERE/dry_run/prompts.jsonl"
fi
if [[ -n "$EVAL_DATA" ]]; then
  DATA_ARGS+=(--eval-prompt-data heldout "$EVAL_DATA" --eval-interval 10
              --n-samples-per-eval-prompt 4 --eval-temperature 1.0)
fi
