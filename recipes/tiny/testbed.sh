# shellcheck shell=bash  # sourced by the tiny study scripts (sweep_grpo*, tune_grpo, autopilot_vs_fixed)
# The tiny batch-size testbed (docs/batch-size.md, "The testbed"), shared by the sweeps on it:
# RL from a base checkpoint with partial skill (tools/make_tiny_base.py, a deterministic
# supervised pre-pass of BASE_STEPS full-batch steps, a few seconds; built once into BASE), on
# the 36 prompts "a+b=" with a, b in 0..5; the metric is sampled accuracy (temperature 1,
# mean@8: 288 responses) on those prompts, the policy's expected reward; target TARGET (0.75);
# micro-batches of 64 (two at B = 128: the noise scale needs a small batch to compare with).
# Needs ROOT, PYTHON, DRY_RUN set. Sets TARGET, BASE, TESTBED_ARGS; testbed_base builds the base
# (in a temporary directory, removed at exit, for a dry run, which writes nothing).
TARGET="eval/accuracy=0.75"
BASE_STEPS=70
BASE="${BASE:-$ROOT/runs/tiny-base-sft$BASE_STEPS}"
# one thread per run: the studies run two at once on the 2 cores of the development machine, one
# core each (two runs of 2 threads each would oversubscribe them)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

testbed_base() {
  if [[ "$DRY_RUN" == 1 ]]; then
    BASE_DRY="$(mktemp -d)"
    trap 'rm -rf "$BASE_DRY"' EXIT
    "$PYTHON" "$ROOT/tools/make_tiny_base.py" "$BASE_DRY/base" --steps "$BASE_STEPS" >/dev/null
    BASE="$BASE_DRY/base"
  elif [[ ! -f "$BASE/base.json" ]]; then  # written last: a base built to the end
    "$PYTHON" "$ROOT/tools/make_tiny_base.py" "$BASE" --steps "$BASE_STEPS"
  fi
  TESTBED_ARGS=(
    --hf-checkpoint "$BASE"
    --task-max-operand 5
    --task-eval-fraction 0
    --eval-temperature 1.0
    --n-samples-per-eval-prompt 8
    --target "$TARGET"
    --micro-batch-size 64
  )
}
