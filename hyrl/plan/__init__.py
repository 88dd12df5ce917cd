"""`hyrl plan`: rank layout, GPUs, a per-GPU memory estimate, a predicted weight-sync time and
estimated step and save times (and the preemption lead they need) of a run, before it starts.

    hyrl plan RECIPE.sh [--json] [--nvlink-gb-s X ...] [--mfu X ...] [-- EXTRA FLAGS]
    hyrl plan [--json] -- TRAIN FLAGS --world-size N

`make_plan(cfg, world_size)` is pure arithmetic on a resolved RunConfig (no torch, no GPU), so a
layout can be checked on a laptop. What it counts, per GPU, in GiB (2**30 bytes):

- parameters from the architecture flags (`param_counts`), split as Megatron splits them:
  attention, router, norms and the (vocab-parallel) embedding and output layer over TP (and
  their layers over PP), routed experts over EP x ETP;
- actor weights, gradients and optimizer states at the bytes the trainer's precision flags give
  (`bytes_per_param`: --bf16, --accumulate-allreduce-grads-in-fp32), states sharded over
  data-parallel ranks (experts over expert-DP) with --use-distributed-optimizer;
- activations of one micro-batch with the chosen recomputation (`activation_bytes_per_token`),
  in the activation dtype, with the s x s scores of unfused attention when the trainer runs the
  local spec (`attention_implementation`), and the chunked log-prob pass's logits;
- the frozen reference (weights only) when a KL term is on, the critic (its own weights, grads,
  Adam and activations) under gae;
- SGLang: its weights copy and the KV cache SGLang 0.5.23 sizes from its
  --sglang-mem-fraction-static and the memory free when it starts (`sglang_kv`), in tokens and
  in sequences of the longest length, against --rollout-concurrency.

`plan["weight_sync"]` (`sync.weight_sync_plan`) predicts one weight sync's seconds from the bytes
to move (parameters x the actor's weight dtype), the TP/EP all-gathers (and PP broadcasts) over
NVLink inside a node or InfiniBand across nodes, and the transfer to the engines (colocated:
CUDA IPC copies in HBM; separate rollout GPUs: an NCCL broadcast from rank 0): a model from
named link bandwidths (`sync.Links`, overridable on the command line), not a measurement.

`plan["step_time"]` (`step_time.step_time_plan`) estimates the longest rollout step (decode
tokens over the engines' GPUs, the step's model FLOPs over the training GPUs' peak at an
MFU, the weight sync) and one checkpoint save (its bytes over the training nodes' file-system
write), from assumed throughputs (`step_time.Throughput`, overridable on the command line),
and the preemption lead they need; `preemption` sets it against launch/sbatch.template's
(`template_check` is the template's refusal). `plan["host_memory"]` (`host`): what
--offload-train pins in host memory per GPU and per node.

`check_fit(plan)` lists what cannot work (each names the flag to change); `plan["warnings"]`
what may be slow. Everything not modelled is listed in NOT_MODELLED and printed with the table.

One concern per module: `memory` (parameter counts, bytes, activations), `layout` (rank
groups), `sync` (the weight-sync model), `disk` (checkpoint sizes), `step_time` (the step and
save estimates), `preemption` (the lead time), `host` (pinned host memory), `sglang_kv` (an
engine's KV cache), `make` (the plan and the fit check), `render` (the table), `cli` (the
command, a recipe read through its dry run), `template_check` (launch/sbatch.template's lead
check). Each function takes the settings views it reads (`cfg.model`, `cfg.parallel`,
`cfg.batch`, ...); `make_plan` alone takes the whole config.
"""

from hyrl.plan.cli import PlanError, config_from_dry_run, main, recipe_dry_run
from hyrl.plan.layout import MEGATRON_ORDER, rank_groups
from hyrl.plan.make import NOT_MODELLED, SAFETY_MARGIN, check_fit, make_plan
from hyrl.plan.memory import (
    LOGPROB_CHUNK_POSITIONS,
    activation_bytes_per_token,
    activation_memory,
    attention_implementation,
    bytes_per_param,
    param_counts,
    params_per_gpu,
    sequence_length,
)
from hyrl.plan.render import describe_for_dry_run, format_plan
from hyrl.plan.step_time import Throughput, step_time_plan
from hyrl.plan.sync import Links, sync_seconds, weight_sync_plan

__all__ = [
    "LOGPROB_CHUNK_POSITIONS",
    "Links",
    "MEGATRON_ORDER",
    "NOT_MODELLED",
    "SAFETY_MARGIN",
    "Throughput",
    "PlanError",
    "activation_bytes_per_token",
    "activation_memory",
    "attention_implementation",
    "bytes_per_param",
    "check_fit",
    "config_from_dry_run",
    "describe_for_dry_run",
    "format_plan",
    "main",
    "make_plan",
    "param_counts",
    "params_per_gpu",
    "rank_groups",
    "recipe_dry_run",
    "sequence_length",
    "step_time_plan",
    "sync_seconds",
    "weight_sync_plan",
]
