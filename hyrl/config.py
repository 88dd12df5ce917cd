"""Run configuration for `hyrl train`: every flag declared once, parsed and validated up front.

Each flag is one field of `RunConfig`; the command-line parser is generated from the fields
(`--some-name` for field `some_name`). `parse_args` turns argv into a `RunConfig` and
`validate` checks it against the world size. Flags whose default is "none" mean "not given":
`resolve` returns a new `RunConfig` with each of them replaced by the value it stands for (the
global batch from P x G, the learning rate from the default or from a reference recipe scaled to
the global batch, see `scaled_lr`, the critic's settings from the actor's under PPO), and
`load` does all three (parse, validate, resolve) for the command line. All of them raise
`ConfigError`, which names the flag, the offending value and what is allowed, before any process
group or model exists.

This module uses the standard library only (no torch, no megatron) so that it is quick to
import and usable on a login node.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
from dataclasses import dataclass, field
from typing import Any

from hyrl.metrics.target import TARGET_ALLOWED, TargetSyntaxError
from hyrl.metrics.target import parse_target as _parse_target

GROUPS = ("model", "parallelism", "batch", "optimizer", "rollout", "algorithm", "critic",
          "eval", "mismatch", "task", "run")

GROUP_TITLES = {
    "model": "model architecture",
    "parallelism": "parallelism (Megatron layout)",
    "batch": "batch sizes (the batch-size question: P prompts x G samples, B per optimizer step)",
    "optimizer": "optimizer and learning-rate schedule",
    "rollout": "rollout (generation)",
    "algorithm": "algorithm (GRPO, PPO)",
    "mismatch": "MoE stability: train-inference mismatch (importance sampling, routing replay)",
    "critic": "critic (PPO value model, --advantage-estimator gae; 'none' = the actor's value)",
    "eval": "evaluation on held-out prompts, and the target a run is timed to",
    "task": "task",
    "run": "run",
}

HELP_HINT = "hyrl train --help lists all flags"

# The arithmetic task's prompt ("a+b=" style, with BOS) is this many tokens long.
ARITH_PROMPT_TOKENS = 5
# Size of the tiny task's tokenizer vocabulary.
TASK_VOCAB_SIZE = 16

# Peak learning rate when neither --lr nor --ref-lr is given (per optimizer step).
DEFAULT_LR = 3e-4
# Learning-rate scaling with the global batch: lr(B) = LR0 * (B / B0) ** k, k by rule.
LR_SCALING_EXPONENTS = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}


class ConfigError(ValueError):
    """A flag value that cannot work: names the flag, the value and what is allowed."""

    def __init__(self, flag: str, value: Any, problem: str, allowed: str):
        self.flag = flag
        self.value = value
        self.problem = problem
        self.allowed = allowed
        where = flag if value is None else f"{flag}={value}"
        super().__init__(f"{where}: {problem}; allowed: {allowed}")

    def __reduce__(self):
        # Keeps the error picklable (it may cross a process boundary).
        return (type(self), (self.flag, self.value, self.problem, self.allowed))


def flag_name(field_name: str) -> str:
    """The command-line flag of a RunConfig field: `global_batch_size` -> `--global-batch-size`."""
    return "--" + field_name.replace("_", "-")


def _opt(default, help: str, group: str, choices: tuple | None = None):
    metadata = {"help": help, "group": group}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return field(default=default, metadata=metadata)


@dataclass
class RunConfig:
    # --- model ---------------------------------------------------------------------------
    num_layers: int = _opt(2, "number of transformer layers (count)", "model")
    hidden_size: int = _opt(64, "model width (hidden units)", "model")
    ffn_hidden_size: int = _opt(
        128, "dense MLP inner size (units); unused by MoE layers, kept for Megatron parity", "model")
    num_attention_heads: int = _opt(4, "number of query attention heads (count)", "model")
    num_query_groups: int = _opt(2, "number of key/value heads for grouped-query attention (count)",
                                 "model")
    kv_channels: int = _opt(16, "size of one attention head (units per head)", "model")
    num_experts: int = _opt(4, "routed experts per MoE layer (count)", "model")
    moe_ffn_hidden_size: int = _opt(64, "inner size of one expert's MLP (units)", "model")
    moe_router_topk: int = _opt(2, "experts each token is routed to (count)", "model")
    qk_layernorm: bool = _opt(True, "normalise queries and keys per head before attention (on/off)",
                              "model")
    normalization: str = _opt("RMSNorm", "normalisation layer type (name)", "model",
                              choices=("RMSNorm", "LayerNorm"))
    norm_epsilon: float = _opt(1e-6, "epsilon added inside the normalisation (dimensionless)",
                               "model")
    rotary_base: float = _opt(1000000.0, "rotary position embedding base (theta, dimensionless)",
                              "model")
    vocab_size: int = _opt(16, "vocabulary size (tokens)", "model")
    max_position_embeddings: int = _opt(64, "longest sequence the model handles (tokens)", "model")
    untie_embeddings_and_output_weights: bool = _opt(
        True, "use a separate output projection instead of the input embedding (on/off)", "model")
    moe_token_dispatcher_type: str = _opt(
        "auto", "MoE token dispatcher (name); auto = allgather on CPU, alltoall on GPU", "model",
        choices=("auto", "allgather", "alltoall"))
    transformer_impl: str = _opt(
        "auto", "transformer layer implementation (name); auto picks transformer_engine when "
        "available", "model", choices=("auto", "local", "transformer_engine"))
    hf_checkpoint: str | None = _opt(
        None, "local Hugging Face Qwen3-MoE directory whose weights initialise the actor (and "
        "the reference and critic trunk unless set otherwise); its config.json must match the "
        "model flags (path); none = random initialisation", "model")

    # --- parallelism ---------------------------------------------------------------------
    tensor_model_parallel_size: int = _opt(1, "tensor-parallel size TP (ranks)", "parallelism")
    pipeline_model_parallel_size: int = _opt(1, "pipeline-parallel size PP (ranks)", "parallelism")
    expert_model_parallel_size: int = _opt(1, "expert-parallel size EP (ranks)", "parallelism")
    expert_tensor_parallel_size: int = _opt(1, "tensor-parallel size inside each expert (ranks)",
                                            "parallelism")
    sequence_parallel: bool = _opt(
        False, "shard activations along the sequence across TP ranks (on/off; needs TP > 1)",
        "parallelism")
    recompute_granularity: str | None = _opt(
        None, "activation recomputation in the backward pass (name): full = whole layers, "
        "selective = the attention core; none = keep activations", "parallelism",
        choices=("full", "selective"))
    recompute_method: str | None = _opt(
        None, "which layers full recomputation covers (name): uniform = groups of "
        "--recompute-num-layers, block = the first --recompute-num-layers per pipeline stage; "
        "none = uniform with full recomputation", "parallelism", choices=("uniform", "block"))
    recompute_num_layers: int | None = _opt(
        None, "layers per recomputation group (uniform) or layers recomputed (block) (layers); "
        "none = 1 with full recomputation", "parallelism")
    distributed_timeout_minutes: float = _opt(
        10.0, "timeout of the trainer's NCCL (gloo on CPU) collectives (minutes, > 0), as "
        "Megatron's flag; ranks waiting for rank 0's generation, rewards and evaluation wait "
        "in a gloo group of their own without it", "parallelism")
    use_distributed_optimizer: bool = _opt(
        False, "shard the fp32 main params and Adam states over data-parallel ranks (expert "
        "parameters over expert-data-parallel ranks): megatron-core's distributed optimizer, "
        "gradients reduce-scattered (on/off)", "parallelism")
    bf16: bool = _opt(
        False, "bfloat16 weights and activations, fp32 main params and Adam states in the "
        "optimizer (megatron's Float16Module and mixed-precision optimizer) (on/off); off = "
        "float32 throughout", "parallelism")
    accumulate_allreduce_grads_in_fp32: bool = _opt(
        True, "accumulate and reduce gradients in float32 buffers even under --bf16 (on/off)",
        "parallelism")
    overlap_grad_reduce: bool = _opt(
        False, "start each gradient bucket's DP reduction as soon as its gradients are ready in "
        "the last micro-batch's backward pass (on/off)", "parallelism")
    ddp_bucket_size: int | None = _opt(
        None, "parameters per gradient-reduction bucket of megatron's DDP (elements); none = "
        "megatron's default (40M, or one bucket without overlap)", "parallelism")
    gpus_per_node: int | None = _opt(
        None, "GPUs per node (GPUs), for hyrl plan: TP and EP groups should not cross nodes; "
        "none = not checked", "parallelism")
    gpu_memory_gib: float | None = _opt(
        None, "memory of one GPU (GiB), for hyrl plan's fit check; none = no check", "parallelism")

    # --- batch ---------------------------------------------------------------------------
    rollout_batch_size: int = _opt(16, "prompts per rollout step, P (prompts)", "batch")
    n_samples_per_prompt: int = _opt(8, "responses sampled per prompt, G (responses)", "batch")
    global_batch_size: int | None = _opt(
        None, "responses per actor optimizer step, B (responses); none = P x G, one optimizer "
        "step per rollout (or P x G / --num-steps-per-rollout)", "batch")
    micro_batch_size: int = _opt(
        16, "responses per forward/backward pass on one data-parallel rank (responses)", "batch")
    batch_ramp: str | None = _opt(
        None, "change responses per optimizer step during the run: START:END:STEPS goes "
        "linearly from START to END over STEPS rollout steps (prompts per step follow, G and "
        "optimizer steps per rollout stay; with --ref-lr the lr is re-derived by "
        "--lr-scaling at every change); START must equal the global batch size", "batch")
    use_dynamic_batch_size: bool = _opt(
        False, "pack micro-batches by token count (--max-tokens-per-gpu) instead of "
        "--micro-batch-size responses, for log-prob and training passes (on/off)", "batch")
    max_tokens_per_gpu: int | None = _opt(
        None, "most tokens (prompt + response) in one micro-batch with --use-dynamic-batch-size "
        "(tokens)", "batch")
    noise_scale_beta: float | None = _opt(
        0.99, "EMA decay of the gradient-noise-scale estimates, logged as actor/noise_scale and "
        "critic/noise_scale (dimensionless, in [0, 1)); none = do not measure", "batch")

    # --- optimizer -----------------------------------------------------------------------
    lr: float | None = _opt(
        None, "peak learning rate (per optimizer step); none = 3e-4, or --ref-lr scaled to B "
        "(see --lr-scaling) when --ref-lr is given", "optimizer")
    lr_scaling: str = _opt(
        "none", "how --ref-lr scales with the global batch (name): lr = LR0 x (B / B0)^k with "
        "k = 1/2 for sqrt, 1 for linear, 0 for none", "optimizer",
        choices=tuple(LR_SCALING_EXPONENTS))
    ref_lr: float | None = _opt(
        None, "peak learning rate LR0 of the reference recipe at B0 (per optimizer step); when "
        "given, the learning rate is LR0 x (B / B0)^k instead of --lr; none = use --lr",
        "optimizer")
    ref_global_batch_size: int | None = _opt(
        None, "responses per optimizer step of the reference recipe, B0 (responses); needs "
        "--ref-lr; none = B (no scaling)", "optimizer")
    min_lr: float = _opt(0.0, "learning rate at the end of decay (per optimizer step)", "optimizer")
    lr_warmup_steps: int = _opt(0, "linear warmup length (optimizer steps)", "optimizer")
    lr_decay_style: str = _opt("constant", "learning-rate decay after warmup (name)", "optimizer",
                               choices=("constant", "linear", "cosine"))
    weight_decay: float = _opt(0.0, "decoupled weight decay coefficient (per optimizer step)",
                               "optimizer")
    adam_beta1: float = _opt(0.9, "Adam first-moment decay (dimensionless, in [0, 1))",
                             "optimizer")
    adam_beta2: float = _opt(0.999, "Adam second-moment decay (dimensionless, in [0, 1))",
                             "optimizer")
    adam_eps: float = _opt(1e-8, "Adam denominator epsilon (dimensionless)", "optimizer")
    clip_grad: float = _opt(1.0, "clip the global gradient norm to this (L2 norm; 0 = no clipping)",
                            "optimizer")

    # --- rollout -------------------------------------------------------------------------
    rollout_engine: str = _opt("hf", "generation engine (name)", "rollout", choices=("hf", "sglang"))
    rollout_concurrency: int = _opt(64, "most sequences decoded at once (sequences)", "rollout")
    rollout_max_response_len: int = _opt(2, "longest generated response (tokens)", "rollout")
    rollout_temperature: float = _opt(1.0, "sampling temperature (dimensionless, > 0)", "rollout")
    rollout_top_p: float = _opt(1.0, "nucleus sampling mass (probability, in (0, 1])", "rollout")
    rollout_num_engines: int | None = _opt(
        None, "rollout engines (count), each a Ray actor in its own placement-group bundle; "
        "none = hf: one engine inside the trainer process (no Ray), sglang: --rollout-num-gpus "
        "/ --rollout-num-gpus-per-engine", "rollout")
    rollout_num_gpus: int | None = _opt(
        None, "GPUs given to rollout engines in all (GPUs); none = with --colocate the training "
        "world size, else --rollout-num-engines x --rollout-num-gpus-per-engine", "rollout")
    rollout_num_gpus_per_engine: int | None = _opt(
        None, "GPUs per rollout engine, SGLang's tensor-parallel size (GPUs); none = 1 for "
        "sglang, 0 for hf", "rollout")
    rollout_max_restarts: int = _opt(
        3, "restarts allowed per rollout engine over the run before it fails (count); an engine "
        "that dies is replaced and its in-flight prompts resubmitted", "rollout")
    update_weight_mode: str | None = _opt(
        None, "how new weights reach SGLang (name): tensor = bucketed update_weights_from_tensor "
        "(same node), distributed = NCCL broadcast group, disk = safetensors + "
        "update_weights_from_disk; none = tensor with --colocate, else distributed", "rollout",
        choices=("tensor", "distributed", "disk"))
    update_weight_buffer_size: int = _opt(
        512 * 1024 ** 2, "most bytes of weights sent per update bucket (bytes)", "rollout")
    colocate: bool = _opt(
        False, "rollout engines share the training GPUs: SGLang releases its memory while the "
        "actor trains and resumes it for generation (on/off)", "rollout")
    offload_train: bool | None = _opt(
        None, "with --colocate, the trainer's GPU memory goes to host memory while the engines "
        "generate (slime's --offload-train): gradient buffers freed, optimizer states, the KL "
        "reference and the critic parked before the engines resume, the actor's weights after "
        "the weight sync; all back before the log-prob pass (on/off); none = on with --colocate",
        "rollout")
    sglang_router_url: str | None = _opt(
        None, "attach to running SGLang servers behind this sglang-router instead of starting "
        "engines (http://HOST:PORT); none = start engines", "rollout")
    sglang_mem_fraction_static: float | None = _opt(
        None, "fraction of GPU memory SGLang takes for weights and KV cache (fraction in (0, 1)); "
        "none = SGLang's default", "rollout")
    sglang_server_args: str | None = _opt(
        None, "further sglang.launch_server flags, passed through verbatim (a quoted string); any "
        "other --sglang-NAME [VALUE] on the command line is appended here as --NAME [VALUE]",
        "rollout")
    reward_num_workers: int = _opt(
        0, "Ray worker processes that score rewards off the trainer (count); 0 = score in the "
        "trainer process (no timeout)", "rollout")
    reward_timeout_s: float = _opt(
        30.0, "seconds one reward call may take on a worker before it scores 0 and counts in "
        "train/reward_failures (seconds)", "rollout")
    ray_address: str | None = _opt(
        None, "Ray cluster to join for engines and reward workers (address or 'auto'); none = "
        "start a local Ray when one is needed", "rollout")

    # --- algorithm (GRPO, PPO) -----------------------------------------------------------
    advantage_estimator: str = _opt(
        "grpo", "advantage estimator (name): grpo = group-relative, no critic; gae = PPO with a "
        "critic", "algorithm", choices=("grpo", "gae"))
    grpo_std_normalization: bool = _opt(
        True, "divide group-relative advantages by the group's reward std (on/off)", "algorithm")
    eps_clip: float = _opt(0.2, "PPO-style ratio clip, lower side (ratio offset)", "algorithm")
    eps_clip_high: float | None = _opt(
        None, "ratio clip, upper side (ratio offset); 'none' = same as --eps-clip", "algorithm")
    kl_loss_coef: float = _opt(0.0, "weight of the KL-to-reference loss term (coefficient)",
                               "algorithm")
    kl_loss_type: str = _opt("low_var_kl", "KL estimator for the KL loss (name)", "algorithm",
                             choices=("low_var_kl", "k1"))
    entropy_coef: float = _opt(0.0, "weight of the entropy bonus (coefficient)", "algorithm")
    gamma: float | None = _opt(
        None, "discount per token (dimensionless, in [0, 1]); PPO only; none = 1.0 under gae",
        "algorithm")
    lambd: float | None = _opt(
        None, "GAE lambda (dimensionless, in [0, 1]); PPO only; none = 1.0 under gae", "algorithm")
    normalize_advantages: bool | None = _opt(
        None, "whiten advantages over the global rollout batch (on/off); PPO only; none = on "
        "under gae", "algorithm")
    kl_coef: float = _opt(
        0.0, "KL-to-reference penalty subtracted from the per-token reward, PPO-style "
        "(coefficient); PPO only; --kl-loss-coef is the loss-term form", "algorithm")
    num_steps_per_rollout: int | None = _opt(
        None, "actor optimizer steps per rollout (steps); when given, B = P x G / this",
        "algorithm")

    # --- critic (PPO) --------------------------------------------------------------------
    critic_global_batch_size: int | None = _opt(
        None, "responses per critic optimizer step (responses); none = --global-batch-size",
        "critic")
    critic_micro_batch_size: int | None = _opt(
        None, "critic responses per forward/backward pass on one data-parallel rank (responses); "
        "none = --micro-batch-size", "critic")
    critic_lr: float | None = _opt(
        None, "critic peak learning rate (per critic optimizer step); none = --lr (the actor's "
        "resolved rate), or --critic-ref-lr scaled to the critic batch when that is given",
        "critic")
    critic_lr_scaling: str | None = _opt(
        None, "how --critic-ref-lr scales with the critic batch (name): critic lr = LR0 x "
        "(critic B / B0)^k, k as for --lr-scaling; none = none", "critic",
        choices=tuple(LR_SCALING_EXPONENTS))
    critic_ref_lr: float | None = _opt(
        None, "critic peak learning rate LR0 of the reference recipe at its critic B0 (per "
        "critic optimizer step); when given, the critic learning rate is LR0 x (critic B / "
        "B0)^k instead of --critic-lr; none = use --critic-lr", "critic")
    critic_ref_global_batch_size: int | None = _opt(
        None, "responses per critic optimizer step of the reference recipe, B0 (responses); "
        "needs --critic-ref-lr; none = the critic batch (no scaling)", "critic")
    critic_min_lr: float | None = _opt(
        None, "critic learning rate at the end of decay (per critic optimizer step); "
        "none = --min-lr", "critic")
    critic_lr_warmup_steps: int | None = _opt(
        None, "critic linear warmup length (critic optimizer steps); none = --lr-warmup-steps",
        "critic")
    critic_lr_decay_style: str | None = _opt(
        None, "critic learning-rate decay after warmup (name); none = --lr-decay-style", "critic",
        choices=("constant", "linear", "cosine"))
    critic_weight_decay: float | None = _opt(
        None, "critic decoupled weight decay coefficient (per critic optimizer step); "
        "none = --weight-decay", "critic")
    critic_clip_grad: float | None = _opt(
        None, "clip the critic's global gradient norm to this (L2 norm; 0 = no clipping); "
        "none = --clip-grad", "critic")
    num_critic_only_steps: int = _opt(
        0, "rollout steps at the start in which only the critic trains (rollout steps)", "critic")
    value_clip: float | None = _opt(
        None, "clip range of the value update around the old values (value units; 0 disables); "
        "none = 0.2 under gae", "critic")
    critic_load: str | None = _opt(
        None, "local Hugging Face Qwen3-MoE directory whose weights initialise the critic trunk "
        "(path); none = the actor's initial weights", "critic")

    # --- eval ----------------------------------------------------------------------------
    eval_interval: int = _opt(
        0, "rollout steps between evaluations on the held-out prompts (rollout steps; 0 = no "
        "evaluation); when > 0, evaluation also runs before the first step and after the last",
        "eval")
    n_samples_per_eval_prompt: int = _opt(
        1, "responses sampled per held-out prompt, k of the mean@k accuracy (responses)", "eval")
    eval_temperature: float | None = _opt(
        None, "sampling temperature for evaluation (dimensionless, >= 0; 0 = greedy); "
        "none = --rollout-temperature", "eval")
    target: str | None = _opt(
        None, "METRIC=VALUE, e.g. eval/accuracy=0.77 (METRIC under eval/ or train/): the run "
        "records the step, responses and seconds at which METRIC first reaches VALUE; "
        "none = no target", "eval")

    # --- MoE stability: train-inference mismatch ------------------------------------------
    use_tis: bool = _opt(
        False, "truncated importance sampling: weight each token's policy-gradient term by "
        "min(pi_old_train / pi_rollout, --tis-clip) (on/off)", "mismatch")
    tis_clip: float = _opt(2.0, "upper bound C of the truncated importance weight (ratio)",
                           "mismatch")
    use_mis: bool = _opt(
        False, "masked importance sampling: drop tokens (or responses, --mis-level sequence) "
        "whose ratio pi_old_train / pi_rollout is outside [--mis-low, --mis-high] (on/off)",
        "mismatch")
    mis_low: float = _opt(0.5, "lower bound L of the kept ratio range (ratio)", "mismatch")
    mis_high: float = _opt(2.0, "upper bound H of the kept ratio range (ratio)", "mismatch")
    mis_level: str = _opt(
        "token", "what --use-mis drops (name): token = single tokens; sequence = whole "
        "responses, by the geometric mean of their ratios", "mismatch",
        choices=("token", "sequence"))
    use_routing_replay: bool = _opt(
        False, "rollout routing replay (R3): the engine returns the experts it routed every "
        "token to and the trainer's MoE routers reuse them (on/off)", "mismatch")
    measure_routing_mismatch: bool = _opt(
        False, "the engine returns the experts it routed every token to and the trainer logs how "
        "often its own routing differs (mismatch/routing_diff_frac), without replaying them; "
        "implied by --use-routing-replay (on/off)", "mismatch")

    # --- task ----------------------------------------------------------------------------
    task: str | None = _opt(
        None, "training task (name): arith_mod10 = the built-in arithmetic task, prompt_data = "
        "--prompt-data; none = prompt_data when --prompt-data is given, else arith_mod10", "task",
        choices=("arith_mod10", "prompt_data"))
    prompt_data: str | None = _opt(
        None, "training prompts, a .jsonl or .parquet file with one prompt per record (path)",
        "task")
    input_key: str = _opt("prompt", "record field holding the prompt text (name)", "task")
    label_key: str = _opt("label", "record field holding the reference answer (name)", "task")
    apply_chat_template: bool = _opt(
        False, "wrap each prompt as a user message in the tokenizer's chat template (on/off)",
        "task")
    tokenizer_path: str | None = _opt(
        None, "local Hugging Face tokenizer directory for --prompt-data (path); none = "
        "--hf-checkpoint", "task")
    rollout_max_prompt_len: int | None = _opt(
        None, "drop prompts longer than this when loading --prompt-data (tokens); none = "
        "--max-position-embeddings - --rollout-max-response-len", "task")
    eval_prompt_data: list[str] | None = _opt(
        None, "held-out sets as NAME FILE pairs, each logged as eval/NAME/accuracy (names and "
        "paths); none = the task's own held-out split", "task")
    rm_type: str | None = _opt(
        None, "reward function (name): exact_match, math (math-verify on the boxed or last "
        "answer), mcq (one choice letter), logic (exact structured answer); none = exact_match "
        "for arith_mod10, required with --prompt-data unless --custom-rm-path", "task",
        choices=("exact_match", "math", "mcq", "logic"))
    custom_rm_path: str | None = _opt(
        None, "your reward function as module:function, called as f(response_text, label, "
        "finish_reason) -> float (import path)", "task")
    task_max_operand: int = _opt(9, "largest operand in the arithmetic prompts (integer, 1..9)",
                                 "task")
    task_eval_fraction: float = _opt(
        0.2, "fraction of the task's prompts held out for evaluation and never trained on "
        "(fraction, in [0, 1); round(fraction x prompts) are held out when --eval-interval > 0; "
        "0 = evaluate on the training prompts themselves, an in-distribution check)",
        "task")

    # --- run -----------------------------------------------------------------------------
    num_steps: int = _opt(1000, "training length (rollout steps)", "run")
    run_dir: str = _opt("runs/latest", "directory for config.json and metrics.jsonl (path)", "run")
    seed: int = _opt(1234, "random seed for weights, prompts and sampling (integer >= 0)", "run")
    log_wandb: bool = _opt(False, "also log metrics to Weights & Biases (on/off)", "run")
    wandb_project: str = _opt("hyrl", "Weights & Biases project (name)", "run")
    progress: bool = _opt(True, "show a progress bar on rank 0 (on/off)", "run")
    save: str | None = _opt(
        None, "checkpoint directory: DIR/step_N/ holds the actor, reference, critic, optimizer, "
        "RNG and loop state, written atomically, and DIR/latest names the newest (path); none = "
        "no checkpoints", "run")
    save_interval: int | None = _opt(
        None, "rollout steps between checkpoints (rollout steps); none = only at the end and on "
        "preemption (SIGTERM/SIGUSR1); needs --save", "run")
    load: str | None = _opt(
        None, "resume from this --save directory (its 'latest') or one of its step_N directories "
        "(path); a --run-dir holding a run is then appended to, if its config.json matches", "run")
    max_skipped_steps: int = _opt(
        3, "optimizer steps in a row that may be skipped for a non-finite loss or gradient norm; "
        "the run stops (exit 1) when that many are skipped in a row (count >= 1)", "run")

    # --- derived values (not flags) ------------------------------------------------------
    def data_parallel_size(self, world_size: int) -> int:
        """Data-parallel size DP = world size // (TP * PP)."""
        return world_size // (self.tensor_model_parallel_size * self.pipeline_model_parallel_size)

    @property
    def responses_per_rollout(self) -> int:
        """P x G: responses generated per rollout step."""
        return self.rollout_batch_size * self.n_samples_per_prompt

    @property
    def optimizer_steps_per_rollout(self) -> int:
        """(P x G) // B: actor optimizer steps on each rollout's responses (resolved B)."""
        _require_resolved(self, _BATCH_FIELDS)
        return self.responses_per_rollout // self.global_batch_size

    @property
    def critic_steps_per_rollout(self) -> int | None:
        """(P x G) // critic B under PPO (resolved batches); None without a critic."""
        _require_resolved(self, _BATCH_FIELDS)
        if self.critic_global_batch_size is None:
            return None
        return self.responses_per_rollout // self.critic_global_batch_size

    @property
    def resolved_eps_clip_high(self) -> float:
        """Upper ratio clip: --eps-clip-high when set, else --eps-clip."""
        return self.eps_clip if self.eps_clip_high is None else self.eps_clip_high

    def to_dict(self, world_size: int) -> dict:
        """Every field plus the derived values; JSON-serialisable (for config.json and wandb).

        Needs a resolved config (see `resolve`); raises ValueError otherwise.
        """
        _require_resolved(self)
        out = dataclasses.asdict(self)
        out["world_size"] = world_size
        out["data_parallel_size"] = self.data_parallel_size(world_size)
        out["responses_per_rollout"] = self.responses_per_rollout
        out["optimizer_steps_per_rollout"] = self.optimizer_steps_per_rollout
        out["lr_scaling_exponent"] = LR_SCALING_EXPONENTS[self.lr_scaling]
        if self.critic_global_batch_size is not None:
            out["critic_steps_per_rollout"] = self.critic_steps_per_rollout
            out["critic_lr_scaling_exponent"] = LR_SCALING_EXPONENTS[self.critic_lr_scaling]
        out["rollout_layout"] = dataclasses.asdict(rollout_layout(self, world_size))
        return out


# ------------------------------------------------------------------------------------------
# Learning-rate scaling and targets (also used by the trainer and the sweep tools)
# ------------------------------------------------------------------------------------------


def scaled_lr(ref_lr: float, batch: int, ref_batch: int, rule: str) -> float:
    """The learning rate at global batch `batch` from a reference recipe: LR0 x (B / B0)^k.

    `ref_lr` is LR0, the peak learning rate tuned at `ref_batch` = B0 responses per optimizer
    step; k is 1/2 for rule "sqrt", 1 for "linear" and 0 for "none" (LR0 at every B). "sqrt" is
    the square-root scaling rule for Adam-style optimizers (Malladi et al. 2022, "On the SDEs
    and Scaling Rules for Adaptive Gradient Algorithms"; the batch-size study's "sqrt
    scaling"); "linear" is the rule for SGD (Goyal et al. 2017). Example: LR0 = 1e-6 at
    B0 = 1024 gives 2e-6 at B = 4096 under sqrt and 5e-7 at B = 512 under linear.

    Raises ValueError for an unknown rule, a batch below 1 or a rate that is not positive.
    """
    if rule not in LR_SCALING_EXPONENTS:
        raise ValueError(f"unknown learning-rate scaling rule {rule!r}; allowed: "
                         + ", ".join(LR_SCALING_EXPONENTS))
    for name, value in (("batch", batch), ("ref_batch", ref_batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(ref_lr, bool) or not isinstance(ref_lr, (int, float)) \
            or not (math.isfinite(ref_lr) and ref_lr > 0):
        raise ValueError(f"ref_lr must be a finite number > 0, got {ref_lr!r}")
    return float(ref_lr) * (batch / ref_batch) ** LR_SCALING_EXPONENTS[rule]


def parse_target(text: str) -> tuple[str, float]:
    """--target "METRIC=VALUE" -> (METRIC, VALUE) under eval/ or train/ (the rules are
    `hyrl.metrics.target.parse_target`'s); raises ConfigError on --target otherwise."""
    try:
        return _parse_target(text)
    except TargetSyntaxError as err:
        raise ConfigError("--target", text, err.problem, TARGET_ALLOWED) from None


# ------------------------------------------------------------------------------------------
# Field types
# ------------------------------------------------------------------------------------------

# "opt" kinds also take None ("none" on the command line): the flag was not given.
_KINDS = {int: "int", float: "float", str: "str", bool: "bool",
          int | None: "optint", float | None: "optfloat", str | None: "optstr",
          bool | None: "optbool", list[str] | None: "optlist"}
_KIND_NAMES = {
    "int": "an integer",
    "float": "a finite number",
    "str": "a string",
    "bool": "true or false",
    "optint": "an integer or 'none'",
    "optfloat": "a finite number or 'none'",
    "optstr": "a string or 'none'",
    "optbool": "true, false or none",
    "optlist": "one or more strings, or none",
}
_TYPE_NAMES = {"int": int, "float": float, "str": str, "bool": bool,
               "int | None": int | None, "float | None": float | None,
               "str | None": str | None, "bool | None": bool | None,
               "list[str] | None": list[str] | None}


def _resolve_type(annotation):
    # `from __future__ import annotations` leaves field types as strings.
    if isinstance(annotation, str):
        return _TYPE_NAMES[annotation]
    return annotation


def _base(kind: str) -> str:
    """The kind without its optional marker: optint -> int."""
    return kind[3:] if kind.startswith("opt") else kind


def _kind(f: dataclasses.Field) -> str:
    return _KINDS[_resolve_type(f.type)]


def _fields() -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(RunConfig)


# ------------------------------------------------------------------------------------------
# Parser
# ------------------------------------------------------------------------------------------


class _Abort(Exception):
    """Carries a ConfigError through argparse (which swallows ValueError from type functions)."""

    def __init__(self, error: ConfigError):
        super().__init__(str(error))
        self.error = error


def _allowed_text(kind: str, choices: tuple | None) -> str:
    if choices:
        return "one of " + ", ".join(str(c) for c in choices) + (
            ", none" if kind.startswith("opt") else "")
    return _KIND_NAMES[kind]


def _converter(f: dataclasses.Field):
    kind = _kind(f)
    base = _base(kind)
    choices = f.metadata.get("choices")
    flag = flag_name(f.name)

    def convert(text: str):
        if kind != base and text.strip().lower() == "none":
            return None
        try:
            if base == "int":
                value = int(text)
            elif base == "float":
                value = float(text)
                if not math.isfinite(value):
                    raise _Abort(ConfigError(flag, text, "not a finite number",
                                             _allowed_text(kind, choices)))
            else:
                value = text
        except ValueError:
            raise _Abort(ConfigError(flag, text, "not an integer" if base == "int" else
                                     "not a number",
                                     _allowed_text(kind, choices))) from None
        if choices and value not in choices:
            by_lower = {str(c).lower(): str(c) for c in choices}
            close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1)
            close = [by_lower[m] for m in close]
            problem = "not a valid choice" + (f" (did you mean {close[0]}?)" if close else "")
            raise _Abort(ConfigError(flag, text, problem, _allowed_text(kind, choices)))
        return value

    convert.__name__ = kind
    return convert


class _RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser that raises ConfigError instead of printing and exiting."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise ConfigError("command line", None, message, HELP_HINT)


def build_parser(prog: str = "hyrl train") -> argparse.ArgumentParser:
    """The `hyrl train` parser, generated from RunConfig's fields and grouped by concern."""
    parser = _RaisingParser(
        prog=prog,
        description="Train a Mixture-of-Experts policy with GRPO or PPO on Megatron-core. "
                    "Flags may repeat; the last one wins.",
        allow_abbrev=False,
        exit_on_error=False,
    )
    groups = {name: parser.add_argument_group(GROUP_TITLES[name]) for name in GROUPS}
    for f in _fields():
        kind = _kind(f)
        group = groups[f.metadata["group"]]
        default = f.default
        help_text = f"{f.metadata['help']} (default: {'none' if default is None else default})"
        if kind == "optlist":  # --flag A B C; "--flag none" = not given
            group.add_argument(flag_name(f.name), dest=f.name, default=default, nargs="+",
                               type=_converter(f), metavar="VALUE", help=help_text)
        elif _base(kind) == "bool":
            # An optional bool stays None (not given) unless --flag or --no-flag appears.
            group.add_argument(flag_name(f.name), dest=f.name, default=default,
                               action=argparse.BooleanOptionalAction, help=help_text)
        else:
            kwargs = {}
            choices = f.metadata.get("choices")
            if choices and kind == _base(kind):
                kwargs["choices"] = choices
            elif choices:
                # argparse would reject None ('none') against the choices; the converter checks.
                kwargs["metavar"] = "{" + ",".join(str(c) for c in choices) + "}|none"
            else:
                kwargs["metavar"] = _base(kind).upper() + ("|none" if kind != _base(kind) else "")
            group.add_argument(flag_name(f.name), dest=f.name, default=default,
                               type=_converter(f), help=help_text, **kwargs)
    return parser


def _all_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def _action_for(parser: argparse.ArgumentParser, option: str):
    for action in parser._actions:
        if option in action.option_strings:
            return action
    return None


def _argument_error(parser: argparse.ArgumentParser, err: argparse.ArgumentError,
                    argv: list[str]) -> ConfigError:
    option = (err.argument_name or "").split("/")[0]
    action = _action_for(parser, option)
    if action is None:
        return ConfigError(option or "command line", None, err.message, HELP_HINT)
    if isinstance(action, argparse.BooleanOptionalAction):
        given = next((a for a in argv if a.split("=", 1)[0] in action.option_strings
                      and "=" in a), option)
        flag, _, value = given.partition("=")
        return ConfigError(flag, value or None, "a boolean flag takes no value",
                           " or ".join(action.option_strings))
    f = next(f for f in _fields() if f.name == action.dest)
    return ConfigError(option, None, f"{err.message} (write {option}=VALUE for a value "
                       "that starts with '-')", _allowed_text(_kind(f), f.metadata.get("choices")))


def _unknown_error(parser: argparse.ArgumentParser, token: str, argv: list[str]) -> ConfigError:
    if token.startswith("-") and token not in ("-", "--"):
        flag, sep, value = token.partition("=")
        close = difflib.get_close_matches(flag, _all_flags(parser), n=3, cutoff=0.6)
        if close:
            allowed = f"did you mean {' or '.join(close)}? ({HELP_HINT})"
        else:
            allowed = f"a known flag ({HELP_HINT})"
        return ConfigError(flag, value if sep else None, "unknown flag", allowed)
    problem = "stray argument not attached to any flag"
    index = argv.index(token) if token in argv else -1
    if index > 0:
        previous = _action_for(parser, argv[index - 1])
        if isinstance(previous, argparse.BooleanOptionalAction):
            problem += (f" ({argv[index - 1]} is a boolean flag and takes no value; "
                        f"use {' or '.join(previous.option_strings)})")
    return ConfigError("<positional>", token, problem,
                       f"flags only, as --name VALUE or --name=VALUE ({HELP_HINT})")


SGLANG_PASS_PREFIX = "--sglang-"


def _split_sglang_passthrough(argv: list[str], parser: argparse.ArgumentParser
                              ) -> tuple[list[str], list[str]]:
    """(hyrl's own args, pass-through server flags): an undeclared --sglang-NAME [VALUE] becomes
    --NAME [VALUE] for sglang.launch_server. A near miss of a declared --sglang-* flag is a typo,
    not a pass-through, and is refused (so --sglang-router-ur does not reach SGLang)."""
    declared = [f for f in _all_flags(parser) if f.startswith(SGLANG_PASS_PREFIX)]
    own, passed = [], []
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, sep, value = token.partition("=")
        if flag.startswith(SGLANG_PASS_PREFIX) and flag not in declared \
                and len(flag) > len(SGLANG_PASS_PREFIX):
            close = difflib.get_close_matches(flag, declared, n=1, cutoff=0.85)
            if close:
                raise ConfigError(flag, value if sep else None, "unknown flag",
                                  f"did you mean {close[0]}? (other --sglang-NAME flags pass "
                                  "through to sglang.launch_server as --NAME)")
            passed.append("--" + flag[len(SGLANG_PASS_PREFIX):])
            if sep:
                passed.append(value)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                passed.append(argv[i + 1])
                i += 1
        else:
            own.append(token)
        i += 1
    return own, passed


# The marker a recipe puts between its own flags and the ones appended to it (its "$@").
RECIPE_MARKER = "--"
# Flags that exclude each other, as groups: a side is its leading flag and the flags that only
# go with it. When a recipe's flags (before RECIPE_MARKER) hold one side and the appended ones
# the other, the recipe's side is dropped: what is appended wins. Given by the user on both
# sides, validation refuses them as before.
EXCLUSIVE_FLAGS = (
    (("lr",), ("ref_lr", "ref_global_batch_size", "lr_scaling")),
    (("critic_lr",), ("critic_ref_lr", "critic_ref_global_batch_size", "critic_lr_scaling")),
    (("global_batch_size",), ("num_steps_per_rollout",)),
    (("rm_type",), ("custom_rm_path",)),
)


def _flag_fields(parser: argparse.ArgumentParser) -> dict[str, tuple[str, object]]:
    """Every option string -> (field, its argparse action)."""
    return {option: (action.dest, action) for action in parser._actions
            for option in action.option_strings if option.startswith("--")}


def _given_fields(tokens: list[str], options: dict) -> set[str]:
    return {options[token.split("=", 1)[0]][0] for token in tokens
            if token.split("=", 1)[0] in options}


def _without_fields(tokens: list[str], fields: set[str], options: dict) -> list[str]:
    """tokens less every occurrence of the flags of `fields` and their values."""
    kept, i = [], 0
    while i < len(tokens):
        flag, sep, _ = tokens[i].partition("=")
        entry = options.get(flag)
        if entry is None or entry[0] not in fields:
            kept.append(tokens[i])
            i += 1
            continue
        action, i = entry[1], i + 1
        if sep or isinstance(action, argparse.BooleanOptionalAction):
            continue  # the value, if any, was in the token itself
        if action.nargs == "+":
            while i < len(tokens) and not tokens[i].startswith("--"):
                i += 1
        else:
            i += 1
    return kept


def appended_wins(argv: list[str], parser: argparse.ArgumentParser | None = None
                  ) -> tuple[list[str], list[str]]:
    """(argv without RECIPE_MARKER, notes): a recipe's flags and the ones appended after its
    marker, with the recipe's side of every EXCLUSIVE_FLAGS pair dropped where the appended
    flags take the other side. Without a marker nothing changes (every flag is the user's)."""
    argv = list(argv)
    if RECIPE_MARKER not in argv:
        return argv, []
    cut = argv.index(RECIPE_MARKER)
    recipe, appended = argv[:cut], argv[cut + 1:]
    if RECIPE_MARKER in appended:
        raise ConfigError(RECIPE_MARKER, None, "given twice: it separates a recipe's own flags "
                          "from the ones appended to it", "one -- (the recipe's)")
    options = _flag_fields(parser or build_parser())
    in_recipe, by_user = _given_fields(recipe, options), _given_fields(appended, options)
    dropped, notes = set(), []
    for side_a, side_b in EXCLUSIVE_FLAGS:
        for mine, theirs in ((side_a, side_b), (side_b, side_a)):
            replaced = [f for f in theirs if f in in_recipe and f not in by_user]
            if replaced and any(f in by_user for f in mine):
                dropped.update(replaced)
                given = [flag_name(f) for f in mine if f in by_user]
                notes.append(f"{', '.join(given)} from the command line "
                             f"{'replaces' if len(given) == 1 else 'replace'} the recipe's "
                             + ", ".join(flag_name(f) for f in replaced))
    return _without_fields(recipe, dropped, options) + appended, notes


def parse_args(argv: list[str]) -> RunConfig:
    """argv (without the command) -> RunConfig. Raises ConfigError; neither validates nor
    resolves (flags not given stay None; see `resolve` and `load`). Undeclared --sglang-NAME
    [VALUE] flags are appended to --sglang-server-args as --NAME [VALUE]. A recipe's flags
    come before RECIPE_MARKER, the ones appended to it after: later flags win, also across
    the pairs of EXCLUSIVE_FLAGS (see `appended_wins`; a note on stderr says what was
    replaced, from rank 0 only)."""
    import shlex
    import sys

    parser = build_parser()
    argv, notes = appended_wins(argv, parser)
    if os.environ.get("RANK", "0") == "0":
        for note in notes:
            print(f"hyrl: {note}", file=sys.stderr, flush=True)
    argv, passthrough = _split_sglang_passthrough(list(argv), parser)
    try:
        namespace, extras = parser.parse_known_args(argv)
    except _Abort as abort:
        raise abort.error from None
    except argparse.ArgumentError as err:
        raise _argument_error(parser, err, argv) from None
    if extras:
        raise _unknown_error(parser, extras[0], argv)
    for f in _fields():  # --list-flag none -> [None] from argparse -> None (not given)
        value = getattr(namespace, f.name)
        if _kind(f) == "optlist" and isinstance(value, list) and None in value:
            if value != [None]:
                raise ConfigError(flag_name(f.name), " ".join(str(v) for v in value),
                                  "'none' mixed with values", _allowed_text("optlist", None))
            setattr(namespace, f.name, None)
    if passthrough:
        given = namespace.sglang_server_args
        namespace.sglang_server_args = " ".join(
            ([given] if given else []) + [shlex.quote(arg) for arg in passthrough])
    return RunConfig(**vars(namespace))


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------

# Fields that count or size something: must be >= 1.
_POSITIVE_INTS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
    "kv_channels", "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "vocab_size",
    "max_position_embeddings",
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "rollout_batch_size", "n_samples_per_prompt", "global_batch_size", "micro_batch_size",
    "rollout_concurrency", "rollout_max_response_len",
    "num_steps_per_rollout", "critic_global_batch_size", "critic_micro_batch_size",
    "save_interval", "max_skipped_steps",
    "ref_global_batch_size", "critic_ref_global_batch_size", "n_samples_per_eval_prompt",
    "task_max_operand", "num_steps",
)  # None (not given) is skipped: resolved later.

# The step counts per rollout need only these resolved.
_BATCH_FIELDS = ("global_batch_size", "critic_global_batch_size")
# Under gae each critic setting not given takes the actor's value.
_CRITIC_FROM_ACTOR = {
    "critic_global_batch_size": "global_batch_size",
    "critic_micro_batch_size": "micro_batch_size",
    "critic_lr": "lr",
    "critic_min_lr": "min_lr",
    "critic_lr_warmup_steps": "lr_warmup_steps",
    "critic_lr_decay_style": "lr_decay_style",
    "critic_weight_decay": "weight_decay",
    "critic_clip_grad": "clip_grad",
}
# Under gae these take a fixed value when not given.
_GAE_DEFAULTS = {"gamma": 1.0, "lambd": 1.0, "normalize_advantages": True, "value_clip": 0.2}
# Flags only PPO uses (besides the critic group): an error under grpo when given.
_PPO_ALGORITHM_FLAGS = ("gamma", "lambd", "normalize_advantages", "kl_coef")


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _fail(name: str, value: Any, problem: str, allowed: str):
    raise ConfigError(flag_name(name), value, problem, allowed)


# ------------------------------------------------------------------------------------------
# Resolution: "none" (not given) -> the value it stands for
# ------------------------------------------------------------------------------------------


def _unresolved(cfg: RunConfig) -> list[str]:
    """Fields still None that `resolve` would fill in."""
    names = [n for n in ("global_batch_size", "lr", "eval_temperature")
             if getattr(cfg, n) is None]
    if cfg.ref_lr is not None and cfg.ref_global_batch_size is None:
        names.append("ref_global_batch_size")
    if cfg.advantage_estimator == "gae":
        names += [n for n in (*_CRITIC_FROM_ACTOR, *_GAE_DEFAULTS, "critic_lr_scaling")
                  if getattr(cfg, n) is None]
        if cfg.critic_ref_lr is not None and cfg.critic_ref_global_batch_size is None:
            names.append("critic_ref_global_batch_size")
    return names


def _resolve_rate(cfg: RunConfig, prefix: str, batch: int,
                  fallback: float) -> tuple[float, int | None]:
    """(learning rate, reference batch B0) of the actor (prefix "") or the critic ("critic_").

    With --ref-lr: LR0 x (B / B0)^k (see `scaled_lr`), B0 = B when not given; a --lr given as
    well is an error unless it equals that value (as in a resolved config). Without: --lr, or
    `fallback` when not given; --lr-scaling other than none or a --ref-global-batch-size are
    errors then (nothing to scale).
    """
    lr_name, rule_name = prefix + "lr", prefix + "lr_scaling"
    ref_name, ref_b_name = prefix + "ref_lr", prefix + "ref_global_batch_size"
    lr, ref_lr, ref_b = getattr(cfg, lr_name), getattr(cfg, ref_name), getattr(cfg, ref_b_name)
    rule = getattr(cfg, rule_name) or "none"
    lr_flag, rule_flag = flag_name(lr_name), flag_name(rule_name)
    ref_flag, ref_b_flag = flag_name(ref_name), flag_name(ref_b_name)
    if ref_lr is None:
        if rule != "none":
            _fail(rule_name, rule,
                  f"scales the reference learning rate {ref_flag}, which is not given",
                  f"add {ref_flag} LR0 and {ref_b_flag} B0, or {rule_flag} none")
        if ref_b is not None:
            _fail(ref_b_name, ref_b,
                  f"the reference batch B0 only applies to {ref_flag}, which is not given",
                  f"add {ref_flag} LR0, or remove {ref_b_flag}")
        return (fallback if lr is None else lr), None
    if not ref_lr > 0:
        _fail(ref_name, ref_lr, "the learning rate must be positive", "a number > 0")
    if ref_b is None:
        ref_b = batch
    elif ref_b < 1:
        _fail(ref_b_name, ref_b, "must be a positive count", "an integer >= 1")
    rate = scaled_lr(ref_lr, batch, ref_b, rule)
    if lr is not None and not math.isclose(lr, rate, rel_tol=1e-9):
        _fail(lr_name, lr,
              f"given together with {ref_flag}={ref_lr}, which sets the learning rate "
              f"({ref_lr} x ({batch} / {ref_b})^{LR_SCALING_EXPONENTS[rule]:g} = {rate:.6g}, "
              f"{rule_flag} {rule})",
              f"one of them: {lr_flag} for a fixed rate, or {ref_flag} with {rule_flag}")
    return rate, ref_b


def _require_resolved(cfg: RunConfig, only: tuple[str, ...] | None = None) -> None:
    """Raise ValueError unless `cfg` is resolved (in the fields `only`, when given)."""
    names = [n for n in _unresolved(cfg) if only is None or n in only]
    if names:
        raise ValueError(f"RunConfig is not resolved ({', '.join(flag_name(n) for n in names)} "
                         "still none): call hyrl.config.resolve(cfg) or "
                         "hyrl.config.load(argv, world_size) first")


def resolve(cfg: RunConfig) -> RunConfig:
    """A new RunConfig with every flag not given (None) replaced by the value it stands for.

    --global-batch-size: P x G / --num-steps-per-rollout when that is given, else P x G.
    --lr: with --ref-lr, scaled_lr(--ref-lr, B, B0, --lr-scaling) for the resolved B, with
    --ref-global-batch-size B0 <- B when not given; else 3e-4. --eval-temperature <-
    --rollout-temperature.
    Under --advantage-estimator gae: each --critic-* setting takes the actor's value
    (--critic-lr <- the resolved --lr, ...; the critic batch <- the resolved actor batch)
    except that --critic-ref-lr, when given, sets the critic's rate the same way from the
    critic batch (--critic-lr-scaling <- none, --critic-ref-global-batch-size <- the critic
    batch); --gamma and --lambd 1.0, --normalize-advantages on, --value-clip 0.2;
    --critic-load stays none (the actor's initial weights). Under grpo those stay None. Values
    given are kept; resolving a resolved config changes nothing. Raises ConfigError when
    --num-steps-per-rollout does not divide P x G or disagrees with --global-batch-size, when
    --lr and --ref-lr are both given (and disagree), and when --lr-scaling (other than none) or
    --ref-global-batch-size is given without --ref-lr (the same for the --critic-* forms).
    """
    _check_types(cfg)
    p, g = cfg.rollout_batch_size, cfg.n_samples_per_prompt
    n = p * g
    b, k = cfg.global_batch_size, cfg.num_steps_per_rollout
    if k is not None:
        if k < 1:
            _fail("num_steps_per_rollout", k, "must be a positive count", "an integer >= 1")
        if n >= 1 and n % k != 0:
            _fail("num_steps_per_rollout", k,
                  f"P x G = {p} x {g} = {n} responses per rollout do not split into {k} equal "
                  "optimizer steps", f"a divisor of {n}: {_divisors(n)}")
        if b is not None and b != n // k:
            _fail("num_steps_per_rollout", k,
                  f"disagrees with --global-batch-size={b}: P x G = {n} responses in {k} "
                  f"optimizer steps is B = {n // k} per step",
                  f"--global-batch-size={n // k}, or only one of --global-batch-size and "
                  "--num-steps-per-rollout")
        b = n // k
    elif b is None:
        b = n
    updates: dict[str, Any] = {"global_batch_size": b}
    updates["lr"], updates["ref_global_batch_size"] = _resolve_rate(cfg, "", b, DEFAULT_LR)
    if cfg.eval_temperature is None:
        updates["eval_temperature"] = cfg.rollout_temperature
    if cfg.task is None:
        updates["task"] = "prompt_data" if cfg.prompt_data is not None else "arith_mod10"
    if cfg.rm_type is None and cfg.custom_rm_path is None and \
            updates.get("task", cfg.task) == "arith_mod10":
        updates["rm_type"] = "exact_match"
    if cfg.advantage_estimator == "gae":
        for name, actor_name in _CRITIC_FROM_ACTOR.items():
            if getattr(cfg, name) is None:
                updates[name] = updates.get(actor_name, getattr(cfg, actor_name))
        updates["critic_lr"], updates["critic_ref_global_batch_size"] = _resolve_rate(
            cfg, "critic_", updates.get("critic_global_batch_size", cfg.critic_global_batch_size),
            updates["lr"])
        updates["critic_lr_scaling"] = cfg.critic_lr_scaling or "none"
        for name, value in _GAE_DEFAULTS.items():
            if getattr(cfg, name) is None:
                updates[name] = value
    return dataclasses.replace(cfg, **updates)


def _check_types(cfg: RunConfig) -> None:
    for f in _fields():
        value = getattr(cfg, f.name)
        kind = _kind(f)
        base = _base(kind)
        if value is None and kind != base:
            continue  # not given
        if base == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif base == "bool":
            ok = isinstance(value, bool)
        elif base == "str":
            ok = isinstance(value, str)
        elif base == "list":
            ok = isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
        else:
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and math.isfinite(value))
        if not ok:
            _fail(f.name, value, f"wrong type ({type(value).__name__})",
                  _allowed_text(kind, f.metadata.get("choices")))
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            _fail(f.name, value, "not a valid choice", _allowed_text(kind, choices))


def _check_ranges(c: RunConfig) -> None:
    for name in _POSITIVE_INTS:
        if getattr(c, name) is not None and getattr(c, name) < 1:
            _fail(name, getattr(c, name), "must be a positive count", "an integer >= 1")
    if c.seed < 0:
        _fail("seed", c.seed, "must not be negative", "an integer >= 0")
    if not c.distributed_timeout_minutes > 0:
        _fail("distributed_timeout_minutes", c.distributed_timeout_minutes, "must be positive",
              "minutes > 0 (Megatron's default: 10)")

    # optimizer (min_lr against the resolved learning rate: see _check_learning_rates)
    for name in ("lr", "ref_lr", "critic_lr", "critic_ref_lr"):
        value = getattr(c, name)
        if value is not None and not value > 0:
            _fail(name, value, "the learning rate must be positive", "a number > 0")
    if not c.min_lr >= 0:
        _fail("min_lr", c.min_lr, "must not be negative", "a number >= 0")
    if c.lr_warmup_steps < 0:
        _fail("lr_warmup_steps", c.lr_warmup_steps, "must not be negative", "an integer >= 0")
    if not c.lr_warmup_steps < c.num_steps:
        _fail("lr_warmup_steps", c.lr_warmup_steps,
              f"warmup must end before the run does (--num-steps={c.num_steps})",
              f"0 <= lr_warmup_steps < {c.num_steps}")
    if not c.weight_decay >= 0:
        _fail("weight_decay", c.weight_decay, "must not be negative", "a number >= 0")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(c, name) < 1:
            _fail(name, getattr(c, name), "an Adam beta must lie in [0, 1)", "0 <= beta < 1")
    if not c.adam_eps > 0:
        _fail("adam_eps", c.adam_eps, "must be positive", "a number > 0")
    if not c.clip_grad >= 0:
        _fail("clip_grad", c.clip_grad, "must not be negative", "a number >= 0 (0 = no clipping)")
    if c.noise_scale_beta is not None and not 0 <= c.noise_scale_beta < 1:
        _fail("noise_scale_beta", c.noise_scale_beta, "an EMA decay must lie in [0, 1)",
              "0 <= beta < 1, or none to switch the measurement off")

    # model numerics
    if not c.norm_epsilon > 0:
        _fail("norm_epsilon", c.norm_epsilon, "must be positive", "a number > 0")
    if not c.rotary_base > 0:
        _fail("rotary_base", c.rotary_base, "must be positive", "a number > 0")

    # algorithm
    if not c.eps_clip > 0:
        _fail("eps_clip", c.eps_clip, "the clip range must be positive", "a number > 0")
    if c.eps_clip_high is not None and not c.eps_clip_high > 0:
        _fail("eps_clip_high", c.eps_clip_high, "the clip range must be positive",
              "a number > 0, or none (= --eps-clip)")
    if not c.tis_clip >= 1:
        _fail("tis_clip", c.tis_clip, "the truncation bound of an importance weight must be at "
              "least 1 (below 1 every on-policy token would be down-weighted)", "a number >= 1")
    if not 0 <= c.mis_low < 1:
        _fail("mis_low", c.mis_low, "the kept ratio range must contain 1 (on-policy tokens)",
              "a number in [0, 1)")
    if not c.mis_high > 1:
        _fail("mis_high", c.mis_high, "the kept ratio range must contain 1 (on-policy tokens)",
              "a number > 1")
    if not c.kl_loss_coef >= 0:
        _fail("kl_loss_coef", c.kl_loss_coef, "must not be negative", "a number >= 0")
    if not c.entropy_coef >= 0:
        _fail("entropy_coef", c.entropy_coef, "must not be negative", "a number >= 0")
    for name, what in (("gamma", "a discount"), ("lambd", "GAE lambda")):
        value = getattr(c, name)
        if value is not None and not 0 <= value <= 1:
            _fail(name, value, f"{what} must lie in [0, 1]", "0 <= value <= 1")
    if not c.kl_coef >= 0:
        _fail("kl_coef", c.kl_coef, "must not be negative", "a number >= 0")

    # critic (None = not given: resolved from the actor's value, checked above)
    if c.critic_min_lr is not None and not c.critic_min_lr >= 0:
        _fail("critic_min_lr", c.critic_min_lr, "must not be negative", "a number >= 0")
    if c.critic_lr_warmup_steps is not None and c.critic_lr_warmup_steps < 0:
        _fail("critic_lr_warmup_steps", c.critic_lr_warmup_steps, "must not be negative",
              "an integer >= 0")
    if c.critic_weight_decay is not None and not c.critic_weight_decay >= 0:
        _fail("critic_weight_decay", c.critic_weight_decay, "must not be negative",
              "a number >= 0")
    if c.critic_clip_grad is not None and not c.critic_clip_grad >= 0:
        _fail("critic_clip_grad", c.critic_clip_grad, "must not be negative",
              "a number >= 0 (0 = no clipping)")
    if c.value_clip is not None and not c.value_clip >= 0:
        _fail("value_clip", c.value_clip, "must not be negative", ">= 0; 0 disables clipping")
    if c.num_critic_only_steps < 0:
        _fail("num_critic_only_steps", c.num_critic_only_steps, "must not be negative",
              "an integer >= 0")
    if not c.num_critic_only_steps < c.num_steps:
        _fail("num_critic_only_steps", c.num_critic_only_steps,
              f"the actor must train in at least one of the --num-steps={c.num_steps} rollout "
              "steps", f"0 <= num_critic_only_steps < {c.num_steps}")

    # rollout
    if not c.rollout_temperature > 0:
        _fail("rollout_temperature", c.rollout_temperature, "must be positive", "a number > 0")
    if not 0 < c.rollout_top_p <= 1:
        _fail("rollout_top_p", c.rollout_top_p, "must be a probability mass in (0, 1]",
              "0 < top_p <= 1")
    for name in ("rollout_num_engines", "rollout_num_gpus"):
        if getattr(c, name) is not None and getattr(c, name) < 1:
            _fail(name, getattr(c, name), "must be a positive count", "an integer >= 1, or none")
    for name in ("rollout_num_gpus_per_engine", "rollout_max_restarts", "reward_num_workers"):
        if getattr(c, name) is not None and getattr(c, name) < 0:
            _fail(name, getattr(c, name), "must not be negative", "an integer >= 0")
    if c.update_weight_buffer_size < 1024 ** 2:
        _fail("update_weight_buffer_size", c.update_weight_buffer_size,
              "buckets this small make one HTTP request per tensor slice", "bytes >= 1048576 (1 MiB)")
    if c.sglang_mem_fraction_static is not None and not 0 < c.sglang_mem_fraction_static < 1:
        _fail("sglang_mem_fraction_static", c.sglang_mem_fraction_static,
              "must be a fraction of GPU memory", "0 < fraction < 1, or none")
    if not c.reward_timeout_s > 0:
        _fail("reward_timeout_s", c.reward_timeout_s, "must be positive", "seconds > 0")

    # eval, task
    if c.eval_interval < 0:
        _fail("eval_interval", c.eval_interval, "must not be negative",
              "an integer >= 0 (0 = no evaluation)")
    if c.eval_temperature is not None and not c.eval_temperature >= 0:
        _fail("eval_temperature", c.eval_temperature, "must not be negative",
              "a number >= 0 (0 = greedy), or none (= --rollout-temperature)")
    if not 0 <= c.task_eval_fraction < 1:
        _fail("task_eval_fraction", c.task_eval_fraction,
              "a held-out fraction must lie in [0, 1)", "0 <= fraction < 1")


def _rate_origin(c: RunConfig, given: RunConfig, prefix: str) -> str:
    """Where the resolved learning rate of the actor ("") or the critic ("critic_") came from."""
    lr = getattr(c, prefix + "lr")
    if getattr(given, prefix + "lr") is not None:
        return f"{flag_name(prefix + 'lr')}={lr}"
    ref_lr = getattr(given, prefix + "ref_lr")
    if ref_lr is not None:
        batch = c.global_batch_size if not prefix else c.critic_global_batch_size
        return (f"{lr:.6g} ({flag_name(prefix + 'ref_lr')}={ref_lr} scaled "
                f"{getattr(c, prefix + 'lr_scaling')} from B0="
                f"{getattr(c, prefix + 'ref_global_batch_size')} to B={batch})")
    if prefix:
        return f"{lr} (from the actor's learning rate, {_rate_origin(c, given, '')})"
    return f"{lr} (the default --lr)"


def _check_learning_rates(c: RunConfig, given: RunConfig) -> None:
    """The minimum learning rates against the resolved peak rates (after scaling)."""
    if not 0 <= c.min_lr <= c.lr:
        _fail("min_lr", c.min_lr,
              f"must lie between 0 and the learning rate {_rate_origin(c, given, '')}",
              f"0 <= min_lr <= {c.lr}")
    if c.critic_lr is None or c.critic_min_lr is None:
        return  # no critic
    if 0 <= c.critic_min_lr <= c.critic_lr:
        return
    if given.critic_min_lr is not None:
        _fail("critic_min_lr", c.critic_min_lr,
              f"must lie between 0 and the critic's learning rate "
              f"{_rate_origin(c, given, 'critic_')}",
              f"0 <= critic_min_lr <= {c.critic_lr}")
    if given.critic_lr is not None:
        _fail("critic_lr", c.critic_lr,
              f"below the critic's minimum learning rate {c.critic_min_lr}, taken from --min-lr",
              f"a number >= {c.critic_min_lr}, or set --critic-min-lr")
    if given.critic_ref_lr is not None:
        _fail("critic_ref_lr", given.critic_ref_lr,
              f"scales to the critic learning rate {_rate_origin(c, given, 'critic_')}, below "
              f"the critic's minimum learning rate {c.critic_min_lr}, taken from --min-lr",
              f"a larger --critic-ref-lr, or set --critic-min-lr (0 <= critic_min_lr <= "
              f"{c.critic_lr})")
    _fail("min_lr", c.min_lr, f"must lie between 0 and the critic's learning rate "
          f"{_rate_origin(c, given, 'critic_')}", f"0 <= min_lr <= {c.critic_lr}")


def _check_eval_and_target(c: RunConfig) -> None:
    if c.target is None:
        return
    metric, _ = parse_target(c.target)
    if metric.startswith("eval/") and c.eval_interval == 0:
        _fail("target", c.target,
              f"{metric} is only measured by evaluation, which is off (--eval-interval=0)",
              "add --eval-interval N")


def _check_parallelism(c: RunConfig, world_size: int) -> None:
    tp, pp = c.tensor_model_parallel_size, c.pipeline_model_parallel_size
    ep, etp = c.expert_model_parallel_size, c.expert_tensor_parallel_size
    if c.num_layers % pp != 0:
        _fail("pipeline_model_parallel_size", pp,
              f"{c.num_layers} layers (--num-layers) do not split evenly into {pp} stages",
              f"a PP dividing {c.num_layers}: {_divisors(c.num_layers)}")
    if pp > 1 and engine_returns_routing(c):
        switch = "use_routing_replay" if c.use_routing_replay else "measure_routing_mismatch"
        _fail(switch, True, f"routing replay and its measurement map each layer's ids to the "
              f"routers of one model, not of a pipeline stage (PP={pp})",
              f"--pipeline-model-parallel-size 1, or no --{switch.replace('_', '-')}")
    if world_size % (tp * pp) != 0:
        _fail("tensor_model_parallel_size", tp,
              f"world size {world_size} is not divisible by TP x PP = {tp} x {pp} = {tp * pp}",
              f"TP x PP dividing the world size {world_size}: TP in {_divisors(world_size)}")
    if c.num_attention_heads % tp != 0:
        _fail("tensor_model_parallel_size", tp,
              f"{c.num_attention_heads} attention heads (--num-attention-heads) do not split "
              f"evenly over TP={tp}",
              f"a TP dividing {c.num_attention_heads}: {_divisors(c.num_attention_heads)}")
    if c.num_query_groups % tp != 0:
        _fail("tensor_model_parallel_size", tp,
              f"{c.num_query_groups} query groups (--num-query-groups) do not split evenly "
              f"over TP={tp}",
              f"a TP dividing {c.num_query_groups}: {_divisors(c.num_query_groups)}")
    if c.num_attention_heads % c.num_query_groups != 0:
        _fail("num_query_groups", c.num_query_groups,
              f"{c.num_attention_heads} attention heads do not split evenly into "
              f"{c.num_query_groups} query groups",
              f"a divisor of {c.num_attention_heads}: {_divisors(c.num_attention_heads)}")
    if c.vocab_size % tp != 0:
        _fail("vocab_size", c.vocab_size, f"the vocabulary does not split evenly over TP={tp}",
              f"a multiple of {tp}")
    if c.ffn_hidden_size % tp != 0:
        _fail("ffn_hidden_size", c.ffn_hidden_size, f"does not split evenly over TP={tp}",
              f"a multiple of {tp}")
    if etp != 1:
        _fail("expert_tensor_parallel_size", etp,
              "expert tensor parallelism other than 1 is not supported yet", "1")
    if c.moe_ffn_hidden_size % etp != 0:
        _fail("moe_ffn_hidden_size", c.moe_ffn_hidden_size,
              f"does not split evenly over expert TP={etp}", f"a multiple of {etp}")
    if c.num_experts % ep != 0:
        _fail("expert_model_parallel_size", ep,
              f"{c.num_experts} experts (--num-experts) do not split evenly over EP={ep}",
              f"an EP dividing {c.num_experts}: {_divisors(c.num_experts)}")
    if c.moe_router_topk > c.num_experts:
        _fail("moe_router_topk", c.moe_router_topk,
              f"cannot route each token to more than the {c.num_experts} experts",
              f"1 <= topk <= {c.num_experts}")
    if (world_size // pp) % (ep * etp) != 0:
        _fail("expert_model_parallel_size", ep,
              f"world size {world_size} (per pipeline stage: {world_size // pp}) is not "
              f"divisible by EP x expert TP = {ep} x {etp} = {ep * etp}",
              f"an EP dividing {world_size // pp}")
    if tp > 1 and c.num_experts > 0 and not c.sequence_parallel:
        _fail("sequence_parallel", c.sequence_parallel,
              f"Megatron requires sequence parallelism with MoE when TP > 1 (TP={tp})",
              "add --sequence-parallel")
    if c.sequence_parallel and tp == 1:
        _fail("sequence_parallel", c.sequence_parallel,
              "sequence parallelism needs tensor parallelism (TP=1 here)",
              "--sequence-parallel only with --tensor-model-parallel-size > 1")
    dp = c.data_parallel_size(world_size)
    if c.overlap_grad_reduce and dp > 1 and c.noise_scale_beta is not None:
        _fail("overlap_grad_reduce", c.overlap_grad_reduce,
              f"the gradient noise scale (--noise-scale-beta={c.noise_scale_beta}) reads each "
              f"data-parallel rank's gradient before the reduction (DP={dp}), which an overlapped "
              "reduction overwrites as it runs", "--noise-scale-beta none, or no "
              "--overlap-grad-reduce")
    if c.ddp_bucket_size is not None and c.ddp_bucket_size < 1:
        _fail("ddp_bucket_size", c.ddp_bucket_size, "must be positive",
              "elements >= 1, or none for megatron's default")


def _refuse_given(c: RunConfig, names, problem: str, allowed: str) -> None:
    """Fail on the first of these flags given with a value other than its default."""
    defaults = {f.name: f.default for f in _fields()}
    for name in names:
        value = getattr(c, name)
        if value is not None and value != defaults[name]:
            _fail(name, value, problem, allowed)


def _check_ppo_only(c: RunConfig) -> None:
    """Under grpo, a PPO-only flag that was given is a mistake, not something to ignore."""
    if c.advantage_estimator != "grpo":
        return
    names = _PPO_ALGORITHM_FLAGS + tuple(f.name for f in _fields()
                                         if f.metadata["group"] == "critic")
    _refuse_given(c, names, "only used by PPO (--advantage-estimator gae); "
                  "--advantage-estimator is grpo here", "remove it, or use --advantage-estimator gae")


def _check_mismatch_flags(c: RunConfig) -> None:
    """A bound of --use-tis / --use-mis given without the switch would silently do nothing."""
    for switch, names in (("use_tis", ("tis_clip",)),
                          ("use_mis", ("mis_low", "mis_high", "mis_level"))):
        if not getattr(c, switch):
            flag = "--" + switch.replace("_", "-")
            _refuse_given(c, names, f"only used with {flag}, which is off",
                          f"add {flag}, or remove it")


def engine_returns_routing(c: RunConfig) -> bool:
    """Whether the engines return the experts they routed each token to."""
    return bool(c.use_routing_replay or c.measure_routing_mismatch)


def _check_routing_replay(c: RunConfig) -> None:
    """SGLang's expert-parallel load balancer and redundant experts make the ids a server
    returns physical expert slots, not the model's experts: replay would use wrong experts."""
    if not engine_returns_routing(c) or c.rollout_engine != "sglang":
        return
    switch = "use_routing_replay" if c.use_routing_replay else "measure_routing_mismatch"
    import shlex

    tokens = shlex.split(c.sglang_server_args or "")
    for i, token in enumerate(tokens):
        flag, _, value = token.partition("=")
        if not value and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            value = tokens[i + 1]
        if flag == "--enable-eplb" or (flag == "--ep-num-redundant-experts" and value not in ("", "0")):
            _fail(switch, True, f"SGLang's {flag} makes the returned expert ids physical "
                  "slots, not the model's experts", f"no {flag} in the server flags, or no "
                  f"--{switch.replace('_', '-')}")


def _check_batch(c: RunConfig, given: RunConfig, world_size: int) -> None:
    p, g, b = c.rollout_batch_size, c.n_samples_per_prompt, c.global_batch_size
    n = p * g
    if n % b != 0:
        _fail("global_batch_size", b,
              f"P x G = {p} x {g} = {n} responses per rollout must be a multiple of B={b}",
              f"a divisor of {n}: {_divisors(n)}")
    dp = c.data_parallel_size(world_size)
    if b % dp != 0:
        if given.global_batch_size is not None:
            origin = ""
        elif given.num_steps_per_rollout is not None:
            origin = f" (B = P x G / --num-steps-per-rollout={given.num_steps_per_rollout})"
        else:
            origin = " (B = P x G, the default)"
        _fail("global_batch_size", b,
              f"B={b} responses{origin} do not split evenly over data-parallel size {dp}",
              f"a multiple of {dp} that divides {n}")
    mbs = c.micro_batch_size
    if b % (mbs * dp) != 0:
        _fail("micro_batch_size", mbs,
              f"micro batch {mbs} x data-parallel size {dp} = {mbs * dp} does not divide "
              f"the global batch B={b}",
              f"a divisor of B / DP = {b // dp}: {_divisors(b // dp)}")


def batch_ramp_unit(c: RunConfig, world_size: int) -> int:
    """Every B of a ramp must be a multiple of this: DP x micro batch divides it, and
    B x (optimizer steps per rollout) must be a whole number of prompt groups of G."""
    k = c.optimizer_steps_per_rollout
    dp = c.data_parallel_size(world_size)
    groups = c.n_samples_per_prompt // math.gcd(c.n_samples_per_prompt, k)
    return math.lcm(c.micro_batch_size * dp, groups)


def _check_batch_ramp(c: RunConfig, world_size: int) -> None:
    if c.batch_ramp is None:
        return
    from hyrl.schedules import parse_batch_ramp

    try:
        start, end, _ = parse_batch_ramp(c.batch_ramp)
    except ValueError as err:
        _fail("batch_ramp", c.batch_ramp, str(err), "START:END:STEPS with integers >= 1")
    if c.advantage_estimator != "grpo":
        _fail("batch_ramp", c.batch_ramp, "is not supported with PPO yet (the critic's batch "
              "would have to follow)", "remove it, or use --advantage-estimator grpo")
    if start != c.global_batch_size:
        _fail("batch_ramp", c.batch_ramp, f"START={start} differs from the global batch size "
              f"B={c.global_batch_size} of the first step", f"START = {c.global_batch_size}")
    unit = batch_ramp_unit(c, world_size)
    if end % unit:
        _fail("batch_ramp", c.batch_ramp, f"END={end} is not a multiple of {unit} (data-parallel "
              "size x micro batch, and whole prompt groups)", f"a multiple of {unit}")


def _check_critic_batch(c: RunConfig, given: RunConfig, world_size: int) -> None:
    cb, cm = c.critic_global_batch_size, c.critic_micro_batch_size
    if cb is None:
        return  # no critic
    p, g = c.rollout_batch_size, c.n_samples_per_prompt
    n = p * g
    origin = "" if given.critic_global_batch_size is not None else " (from --global-batch-size)"
    if n % cb != 0:
        _fail("critic_global_batch_size", cb,
              f"P x G = {p} x {g} = {n} responses per rollout must be a multiple of the critic "
              f"batch {cb}{origin}", f"a divisor of {n}: {_divisors(n)}")
    dp = c.data_parallel_size(world_size)
    if cb % dp != 0:
        _fail("critic_global_batch_size", cb,
              f"the critic batch {cb}{origin} does not split evenly over data-parallel size {dp}",
              f"a multiple of {dp} that divides {n}")
    if cb % (cm * dp) != 0:
        m_origin = "" if given.critic_micro_batch_size is not None else \
            " (from --micro-batch-size)"
        _fail("critic_micro_batch_size", cm,
              f"critic micro batch {cm}{m_origin} x data-parallel size {dp} = {cm * dp} does "
              f"not divide the critic batch {cb}{origin}",
              f"a divisor of critic B / DP = {cb // dp}: {_divisors(cb // dp)}")


def _check_critic_load(c: RunConfig) -> None:
    if c.critic_load is None:
        return
    allowed = "a local Hugging Face model directory (holding config.json and the weights)"
    if not os.path.isdir(c.critic_load):
        _fail("critic_load", c.critic_load, "not an existing directory", allowed)
    if not os.path.isfile(os.path.join(c.critic_load, "config.json")):
        _fail("critic_load", c.critic_load, "has no config.json", allowed)


def _check_algorithm_rollout_task(c: RunConfig) -> None:
    if c.advantage_estimator == "grpo" and c.n_samples_per_prompt < 2:
        _fail("n_samples_per_prompt", c.n_samples_per_prompt,
              "GRPO compares responses within a group, so it needs at least 2 per prompt",
              "an integer >= 2")
    if c.task == "arith_mod10":
        if not 1 <= c.task_max_operand <= 9:
            _fail("task_max_operand", c.task_max_operand,
                  "the arith_mod10 tokenizer has single digits only", "1..9")
        n = (c.task_max_operand + 1) ** 2
        # The same split as hyrl.data.arith.ArithTask; prompts are held out only when evaluating.
        n_eval = round(c.task_eval_fraction * n) if c.eval_interval > 0 else 0
        allowed = (f"0 (evaluate on the training prompts), or a fraction holding out between 1 "
                   f"and {n - 1} of the {n} prompts (round(fraction x {n})), e.g. {1 / n:.3g} "
                   f"to {(n - 1) / n:.3g}")
        if n - n_eval < 1:
            _fail("task_eval_fraction", c.task_eval_fraction,
                  f"holds out {n_eval} of the {n} prompts (--task-max-operand="
                  f"{c.task_max_operand}), leaving {n - n_eval} for training", allowed)
        if c.eval_interval > 0 and c.task_eval_fraction > 0 and n_eval < 1:
            _fail("task_eval_fraction", c.task_eval_fraction,
                  f"holds out {n_eval} of the {n} prompts (--task-max-operand="
                  f"{c.task_max_operand}), so evaluation (--eval-interval={c.eval_interval}) "
                  "has none", allowed)
        if c.max_position_embeddings < ARITH_PROMPT_TOKENS + c.rollout_max_response_len:
            _fail("rollout_max_response_len", c.rollout_max_response_len,
                  f"a {ARITH_PROMPT_TOKENS}-token prompt plus the response exceeds "
                  f"--max-position-embeddings={c.max_position_embeddings}",
                  f"at most {c.max_position_embeddings - ARITH_PROMPT_TOKENS}")
    if c.task == "arith_mod10" and c.vocab_size < TASK_VOCAB_SIZE:
        _fail("vocab_size", c.vocab_size,
              f"smaller than the task tokenizer's {TASK_VOCAB_SIZE} tokens",
              f"an integer >= {TASK_VOCAB_SIZE}")
    _check_prompt_data_and_rewards(c)


DATA_EXTENSIONS = (".jsonl", ".parquet")


def _check_data_file(flag_field: str, path: str, shown: Any = None) -> None:
    allowed = "an existing " + " or ".join(DATA_EXTENSIONS) + " file"
    shown = path if shown is None else shown
    if not path.endswith(DATA_EXTENSIONS):
        _fail(flag_field, shown, f"{path!r} is not a {' or '.join(DATA_EXTENSIONS)} file", allowed)
    if not os.path.isfile(path):
        _fail(flag_field, shown, f"{path!r} does not exist", allowed)


def _check_prompt_data_and_rewards(c: RunConfig) -> None:
    """The task's data, tokenizer and reward (run on a resolved config: task is set)."""
    if c.task == "prompt_data":
        if c.prompt_data is None:
            _fail("task", c.task, "needs the prompts", "--prompt-data FILE")
        _check_data_file("prompt_data", c.prompt_data)
        if c.tokenizer_path is None and c.hf_checkpoint is None:
            _fail("tokenizer_path", "none", "--prompt-data needs a tokenizer",
                  "--tokenizer-path DIR or --hf-checkpoint DIR (a local Hugging Face directory)")
        if c.tokenizer_path is not None and not os.path.isdir(c.tokenizer_path):
            _fail("tokenizer_path", c.tokenizer_path, "not an existing directory",
                  "a local Hugging Face tokenizer directory")
        if c.rm_type is None and c.custom_rm_path is None:
            _fail("rm_type", "none", "--prompt-data needs a reward function",
                  "exact_match, math, mcq, logic, or --custom-rm-path module:function")
        if c.eval_interval > 0 and c.eval_prompt_data is None:
            _fail("eval_prompt_data", "none", f"--eval-interval={c.eval_interval} evaluates "
                  "held-out prompts, and --prompt-data has no held-out split",
                  "--eval-prompt-data NAME FILE [NAME FILE ...], or --eval-interval 0")
    else:
        for name in ("prompt_data", "tokenizer_path", "eval_prompt_data", "rollout_max_prompt_len"):
            if getattr(c, name) is not None:
                _fail(name, getattr(c, name), f"applies to --task prompt_data, not {c.task}",
                      "leave it unset, or train on --prompt-data")
        if c.apply_chat_template:
            _fail("apply_chat_template", True, f"applies to --task prompt_data, not {c.task}",
                  "--no-apply-chat-template")
    if c.rm_type is not None and c.custom_rm_path is not None:
        _fail("custom_rm_path", c.custom_rm_path, f"given together with --rm-type {c.rm_type}",
              "one of --rm-type and --custom-rm-path")
    if c.custom_rm_path is not None:
        module, sep, function = c.custom_rm_path.partition(":")
        if not (sep and module.strip() and function.strip()):
            _fail("custom_rm_path", c.custom_rm_path, "not module:function",
                  "an import path like my_rewards:score")
    if c.eval_prompt_data is not None:
        items = c.eval_prompt_data
        shown = " ".join(items)
        if len(items) % 2:
            _fail("eval_prompt_data", shown, f"{len(items)} values do not pair up",
                  "NAME FILE pairs, e.g. --eval-prompt-data aime aime.jsonl gpqa gpqa.jsonl")
        names = items[0::2]
        for name, path in zip(names, items[1::2]):
            if not name or "/" in name or name.endswith(DATA_EXTENSIONS):
                _fail("eval_prompt_data", shown, f"{name!r} is not a name (NAME comes before FILE)",
                      "NAME FILE pairs, NAME without '/'")
            _check_data_file("eval_prompt_data", path, shown)
        if len(set(names)) != len(names):
            _fail("eval_prompt_data", shown, "a NAME appears twice", "distinct names")
    if c.rollout_max_prompt_len is not None and \
            c.rollout_max_prompt_len + c.rollout_max_response_len > c.max_position_embeddings:
        _fail("rollout_max_prompt_len", c.rollout_max_prompt_len,
              f"plus --rollout-max-response-len={c.rollout_max_response_len} exceeds "
              f"--max-position-embeddings={c.max_position_embeddings}",
              f"at most {c.max_position_embeddings - c.rollout_max_response_len}")


def _check_memory_flags(c: RunConfig) -> None:
    if c.recompute_granularity != "full":
        for name in ("recompute_method", "recompute_num_layers"):
            if getattr(c, name) is not None:
                _fail(name, getattr(c, name), "applies to --recompute-granularity full only",
                      "leave it unset, or --recompute-granularity full")
    if c.recompute_num_layers is not None and not 1 <= c.recompute_num_layers <= c.num_layers:
        _fail("recompute_num_layers", c.recompute_num_layers, "not a count of layers",
              f"1..{c.num_layers}")
    if c.use_dynamic_batch_size and c.max_tokens_per_gpu is None:
        _fail("max_tokens_per_gpu", "none", "--use-dynamic-batch-size packs micro-batches by it",
              "a token count, e.g. --max-tokens-per-gpu 16384")
    if c.max_tokens_per_gpu is not None:
        if not c.use_dynamic_batch_size:
            _fail("max_tokens_per_gpu", c.max_tokens_per_gpu,
                  "applies only with --use-dynamic-batch-size", "add --use-dynamic-batch-size")
        longest = c.max_position_embeddings if c.task == "prompt_data" else \
            ARITH_PROMPT_TOKENS + c.rollout_max_response_len
        if c.rollout_max_prompt_len is not None:
            longest = c.rollout_max_prompt_len + c.rollout_max_response_len
        if c.max_tokens_per_gpu < longest:
            _fail("max_tokens_per_gpu", c.max_tokens_per_gpu,
                  f"smaller than the longest sequence ({longest} tokens), which could never fit",
                  f"at least {longest}")
    if c.gpus_per_node is not None and c.gpus_per_node < 1:
        _fail("gpus_per_node", c.gpus_per_node, "must be a positive count", "an integer >= 1")
    if c.gpu_memory_gib is not None and not c.gpu_memory_gib > 0:
        _fail("gpu_memory_gib", c.gpu_memory_gib, "must be positive", "GiB > 0, or none")
    if c.hf_checkpoint is not None:
        allowed = "a local Hugging Face model directory (holding config.json and the weights)"
        if not os.path.isdir(c.hf_checkpoint):
            _fail("hf_checkpoint", c.hf_checkpoint, "not an existing directory", allowed)
        if not os.path.isfile(os.path.join(c.hf_checkpoint, "config.json")):
            _fail("hf_checkpoint", c.hf_checkpoint, "has no config.json", allowed)


@dataclass(frozen=True)
class RolloutLayout:
    """Where generation runs, resolved from the --rollout-* flags and the training world size."""

    engine: str  # hf or sglang
    in_process: bool  # hf only: one engine inside the trainer's rank 0, no Ray
    num_engines: int  # engines started by hyrl (0 when attached to --sglang-router-url)
    gpus_per_engine: int
    num_gpus: int  # GPUs the engines take in all (on the training GPUs with --colocate)
    concurrency_per_engine: int
    update_weight_mode: str  # "load_state_dict" for hf engines
    uses_ray: bool  # engines or reward workers run as Ray actors


SGLANG_ONLY = ("sglang_router_url", "sglang_mem_fraction_static", "sglang_server_args",
               "update_weight_mode", "colocate", "rollout_num_gpus")


def _router_url_ok(url: str) -> bool:
    scheme, sep, rest = url.partition("://")
    host, colon, port = rest.rstrip("/").rpartition(":")
    return (scheme in ("http", "https") and bool(sep) and bool(host) and bool(colon)
            and port.isdigit() and "/" not in host)


def rollout_layout(c: RunConfig, world_size: int) -> RolloutLayout:
    """Resolve and check the rollout flags; raises ConfigError naming the flag.

    hf: --rollout-num-engines none = one engine in the trainer process; N = N engines as Ray
    actors with --rollout-num-gpus-per-engine GPUs each (none = 0). sglang: engines take
    --rollout-num-gpus-per-engine GPUs each (none = 1, SGLang's tensor-parallel size);
    with --colocate they sit on the training GPUs (--rollout-num-gpus = world size), else
    --rollout-num-gpus or --rollout-num-engines says how many (the other is derived and must
    agree); with --sglang-router-url hyrl starts nothing and sends to the router.
    --update-weight-mode none = tensor with --colocate, else distributed (NCCL cannot join two
    ranks on one GPU, so colocated engines refuse distributed).
    """
    uses_ray_rewards = c.reward_num_workers > 0
    if c.rollout_engine == "hf":
        for name in SGLANG_ONLY:
            value = getattr(c, name)
            if value not in (None, False):
                _fail(name, value, "applies to --rollout-engine sglang only",
                      "leave it unset with --rollout-engine hf")
        if c.rollout_num_engines is None:
            if c.rollout_num_gpus_per_engine is not None:
                _fail("rollout_num_gpus_per_engine", c.rollout_num_gpus_per_engine,
                      "the hf engine runs inside the trainer unless --rollout-num-engines is given",
                      "leave it unset, or give --rollout-num-engines N for Ray engine actors")
            return RolloutLayout("hf", True, 1, 0, 0, c.rollout_concurrency, "load_state_dict",
                                 uses_ray_rewards)
        per_engine = c.rollout_num_gpus_per_engine or 0
        return RolloutLayout("hf", False, c.rollout_num_engines, per_engine,
                             c.rollout_num_engines * per_engine, c.rollout_concurrency,
                             "load_state_dict", True)

    if c.sglang_router_url is not None:
        if not _router_url_ok(c.sglang_router_url):
            _fail("sglang_router_url", c.sglang_router_url, "not an http(s)://HOST:PORT address",
                  "e.g. http://10.0.0.5:30000")
        for name in ("rollout_num_engines", "rollout_num_gpus", "rollout_num_gpus_per_engine",
                     "sglang_mem_fraction_static", "sglang_server_args"):
            if getattr(c, name) is not None:
                _fail(name, getattr(c, name), "hyrl starts no engine with --sglang-router-url "
                      "(the servers behind the router were started elsewhere)",
                      "leave it unset, or drop --sglang-router-url")
        if c.colocate:
            _fail("colocate", True, "attached servers cannot release the training GPUs' memory",
                  "--no-colocate with --sglang-router-url")
        mode = c.update_weight_mode or "distributed"
        if mode == "tensor":
            _fail("update_weight_mode", mode, "tensor handles reach only engines that hyrl "
                  "started on its own nodes", "distributed or disk with --sglang-router-url")
        return RolloutLayout("sglang", False, 0, 0, 0, c.rollout_concurrency, mode,
                             uses_ray_rewards)

    per_engine = 1 if c.rollout_num_gpus_per_engine is None else c.rollout_num_gpus_per_engine
    if per_engine < 1:
        _fail("rollout_num_gpus_per_engine", per_engine, "an SGLang engine needs a GPU",
              "an integer >= 1")
    if c.colocate:
        gpus = world_size if c.rollout_num_gpus is None else c.rollout_num_gpus
        if gpus != world_size:
            _fail("rollout_num_gpus", gpus, f"colocated engines use exactly the {world_size} "
                  "training GPUs", f"{world_size}, or none")
    elif c.rollout_num_gpus is None and c.rollout_num_engines is None:
        _fail("rollout_num_gpus", "none", "rollout engines need GPUs of their own without --colocate",
              "--rollout-num-gpus N or --rollout-num-engines N, or --colocate")
    else:
        gpus = c.rollout_num_gpus if c.rollout_num_gpus is not None \
            else c.rollout_num_engines * per_engine
    if gpus % per_engine:
        _fail("rollout_num_gpus_per_engine", per_engine,
              f"does not divide the {gpus} rollout GPUs into whole engines",
              f"a divisor of {gpus}: {_divisors(gpus)}")
    engines = gpus // per_engine
    if c.rollout_num_engines is not None and c.rollout_num_engines != engines:
        _fail("rollout_num_engines", c.rollout_num_engines,
              f"disagrees with {gpus} rollout GPUs at {per_engine} per engine ({engines} engines)",
              f"{engines}, or only one of --rollout-num-engines and --rollout-num-gpus")
    mode = c.update_weight_mode or ("tensor" if c.colocate else "distributed")
    if c.colocate and mode == "distributed":
        _fail("update_weight_mode", mode, "NCCL cannot put a trainer rank and an engine rank on "
              "one GPU", "tensor or disk with --colocate")
    return RolloutLayout("sglang", False, engines, per_engine, gpus, c.rollout_concurrency, mode,
                         True)


def offloads_train(c: RunConfig) -> bool:
    """Whether the trainer offloads its GPU memory while colocated engines generate."""
    return c.colocate if c.offload_train is None else c.offload_train


def _check_offload_train(c: RunConfig) -> None:
    if c.offload_train and not c.colocate:
        _fail("offload_train", True, "offloading frees the training GPUs for colocated engines "
              "only, and --colocate is off", "--colocate --offload-train, or --no-offload-train")


# Flags a resumed run (--load into a --run-dir holding a run) may change: its length, where it
# checkpoints and resumes from, how it reports, how it reaches Ray (a requeued job's new head),
# how long collectives may wait, and the trainer's parallel layout and world size (weights and
# optimizer states reshard).
RESUME_MAY_CHANGE = ("num_steps", "save", "save_interval", "load", "progress", "log_wandb",
                     "wandb_project", "max_skipped_steps", "ray_address",
                     "distributed_timeout_minutes",
                     "tensor_model_parallel_size", "pipeline_model_parallel_size",
                     "expert_model_parallel_size", "expert_tensor_parallel_size",
                     "sequence_parallel", "overlap_grad_reduce",
                     "ddp_bucket_size", "world_size", "data_parallel_size",
                     "run_dir")  # a run directory moved or copied elsewhere is the same run


def _check_run_dir(c: RunConfig, world_size: int) -> None:
    if not c.run_dir:
        _fail("run_dir", c.run_dir, "the run directory must be named", "a path")
    if os.path.exists(c.run_dir) and not os.path.isdir(c.run_dir):
        _fail("run_dir", c.run_dir, "exists and is not a directory",
              "a new directory or an empty one")
    if not os.path.isfile(os.path.join(c.run_dir, "metrics.jsonl")):
        return
    if c.load is None:
        _fail("run_dir", c.run_dir, "already holds a run; choose a new directory, or resume it "
              "with --load CHECKPOINT_DIR",
              "a directory without metrics.jsonl (runs are never overwritten)")
    _check_resumed_config(c, world_size)


def _check_resumed_config(c: RunConfig, world_size: int) -> None:
    """--load into a run directory: its config.json must match the flags but for
    RESUME_MAY_CHANGE, so the appended records continue the same experiment."""
    import json

    path = os.path.join(c.run_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as err:
        _fail("run_dir", c.run_dir, f"holds a run whose config.json cannot be read ({err})",
              "a run directory written by hyrl train")
    now = json.loads(json.dumps(c.to_dict(world_size)))  # tuples -> lists, as config.json has
    differs = [f"{flag_name(k) if k in {f.name for f in _fields()} else k}: {saved.get(k)!r} in config.json, "
               f"{now.get(k)!r} now" for k in sorted(set(saved) | set(now))
               if k not in RESUME_MAY_CHANGE and saved.get(k) != now.get(k)]
    if differs:
        _fail("run_dir", c.run_dir, "holds a run with another configuration, which --load would "
              "append to (" + "; ".join(differs[:6]) + ")",
              "the run's own flags (only " + ", ".join(
                  flag_name(k) for k in RESUME_MAY_CHANGE if k in {f.name for f in _fields()})
              + " and WORLD_SIZE may change), or a new --run-dir")


def validate(cfg: RunConfig, world_size: int) -> None:
    """Raise ConfigError for the first problem found; run before any process group starts.

    Takes a config as parsed (flags not given still None) or a resolved one: it checks the
    values given, then resolves (see `resolve`) and checks the resolved values. Order: types,
    ranges, PPO-only flags under grpo, resolution (learning-rate scaling included), minimum
    learning rates against the resolved rates, parallel layout, batch divisibility (actor,
    batch ramp, then critic), algorithm/rollout/task (held-out split included), --target, --critic-load,
    --save/--save-interval, --run-dir (a run in it only with --load and a matching config.json).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError("WORLD_SIZE", world_size, "the world size must be a positive integer",
                          "an integer >= 1")
    _check_types(cfg)
    _check_ranges(cfg)
    _check_ppo_only(cfg)
    _check_mismatch_flags(cfg)
    resolved = resolve(cfg)
    _check_learning_rates(resolved, cfg)
    _check_parallelism(resolved, world_size)
    _check_batch(resolved, cfg, world_size)
    _check_batch_ramp(resolved, world_size)
    _check_critic_batch(resolved, cfg, world_size)
    _check_algorithm_rollout_task(resolved)
    _check_routing_replay(resolved)
    rollout_layout(resolved, world_size)
    _check_offload_train(resolved)
    _check_memory_flags(resolved)
    _check_eval_and_target(resolved)
    _check_critic_load(resolved)
    _check_save_load(resolved)
    _check_run_dir(resolved, world_size)


def _check_save_load(c: RunConfig) -> None:
    if c.save_interval is not None and c.save is None:
        _fail("save_interval", c.save_interval, "given without --save (no checkpoint would be "
              "written)", "--save DIR with it, or none")
    for name in ("save", "load"):
        if getattr(c, name) == "":
            _fail(name, "", "an empty path", "a directory path, or none")


def load(argv: list[str], world_size: int) -> RunConfig:
    """argv (without the command) -> the validated, resolved RunConfig the trainer runs with.

    parse_args, then validate, then resolve; raises ConfigError for the first problem found.
    """
    cfg = parse_args(argv)
    _check_rate_given_once(cfg)
    validate(cfg, world_size)
    return resolve(cfg)


def _check_rate_given_once(given: RunConfig) -> None:
    """On the command line a rate is either fixed (--lr) or derived (--ref-lr), never both.

    (A resolved config carries both, the derived lr next to its reference, which is why
    `validate` itself only refuses a pair that disagrees.)
    """
    for lr_name, ref_name in (("lr", "ref_lr"), ("critic_lr", "critic_ref_lr")):
        if getattr(given, lr_name) is not None and getattr(given, ref_name) is not None:
            _fail(lr_name, getattr(given, lr_name),
                  f"given together with {flag_name(ref_name)}={getattr(given, ref_name)}",
                  f"one of them: {flag_name(lr_name)} for a fixed rate, or {flag_name(ref_name)} "
                  "with its scaling rule")


def world_size_from_env() -> int:
    """WORLD_SIZE as set by torchrun (1 when unset)."""
    text = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(text)
    except ValueError:
        raise ConfigError("WORLD_SIZE", text, "not an integer", "an integer >= 1") from None
