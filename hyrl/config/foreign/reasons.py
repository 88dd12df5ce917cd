"""The reasons both tables give (`megatron_lm` and `slime`): for features the two projects
share and hyrl does not have."""

from __future__ import annotations

CP = "not supported: hyrl has no context parallelism"
MEMORY_DEBUG = "not supported: hyrl has no memory snapshot or recorder switch"
MTP = "not supported: hyrl's Qwen3-MoE has no multi-token-prediction layers"
PROFILER = (
    "not supported: hyrl has no profiler switch; every record times the run's stages (perf/*)"
)
WANDB_DIR = "not supported: hyrl writes wandb's files under --run-dir (RUN_DIR/wandb)"
