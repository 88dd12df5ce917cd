"""Megatron-LM's flags that `hyrl train` does not declare under the same name, and what hyrl
does instead.

Read at github.com/NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553:
megatron/training/arguments.py (with the dataclass fields it turns into flags). Not all of its
~880 flags: those of slime's two Qwen3-30B-A3B scripts (see `slime`), the ones slime resets,
and the training, parallelism, precision, checkpoint, logging and MoE flags a Megatron-LM user
brings along. A flag slime takes too is listed here, under its owner.
"""

from __future__ import annotations

import hyrl.config.foreign.reasons as reasons

# Reasons several flags share.
_ATTENTION_KERNEL = (
    "not supported: hyrl leaves the attention kernel to Transformer Engine (megatron's auto); "
    "--transformer-impl local runs megatron's own attention"
)
_CPU_OPT = (
    "not supported: hyrl keeps Adam's states on the GPU while it trains; with --colocate, "
    "--offload-train parks them in host memory while the engines generate"
)
_DISPATCHER = (
    "not supported: hyrl's token dispatcher is allgather or alltoall (--moe-token-dispatcher-type)"
)
_DROPOUT = "not supported: hyrl always trains without dropout (Megatron-LM's default is 0.1)"
_EVEN_PIPELINE = (
    "not supported: hyrl splits the layers evenly over the pipeline stages "
    "(--pipeline-model-parallel-size must divide --num-layers)"
)
_EXPERT_BIAS = (
    "not supported: hyrl's routers have no expert bias (no auxiliary-loss-free balancing)"
)
_FP16 = "not supported: hyrl trains in bfloat16 (--bf16) or float32, without fp16 loss scaling"
_FROM_WEIGHTS = (
    "use --hf-checkpoint: hyrl starts a new run from a Hugging Face directory's weights (no "
    "optimizer, RNG or step), while --load always resumes a hyrl run"
)
_FSDP = (
    "not supported: hyrl shards with megatron's distributed optimizer "
    "(--use-distributed-optimizer), not with FSDP"
)
_FUSION_TE = (
    "not supported: hyrl chooses this fusion with --transformer-impl (on under Transformer Engine "
    "where available, off on megatron's local layers)"
)
_GROUPED_ROUTING = (
    "not supported: hyrl's routers take the top --moe-router-topk over all experts, without expert "
    "groups"
)
_LOW_PRECISION_OPT = (
    "not supported: hyrl keeps float32 main parameters and Adam states under --bf16 (no "
    "lower-precision optimizer states)"
)
_MLA = (
    "not supported: hyrl's model is Qwen3-MoE with grouped-query attention, not multi-latent "
    "attention"
)
_NO_BIAS = "not supported: hyrl's linear layers never have biases (Qwen3-MoE)"
_NO_CAPACITY = "not supported: hyrl's experts have no capacity limit, so no token is dropped"
_NO_DATA_LOADER = "not supported: hyrl reads its prompt file itself, with no data loader"
_NO_VOCAB_PADDING = (
    "not supported: hyrl does not pad the vocabulary: the embedding has --vocab-size rows, which "
    "the tensor-parallel size must divide"
)
_PARAM_GATHER = (
    "not supported: hyrl's distributed optimizer gathers the updated parameters after the step, "
    "without overlap"
)
_RESUME_ALL = (
    "not supported: hyrl's --load resumes the whole run (weights, optimizer, RNG states, loop); to "
    "start from weights alone give them as --hf-checkpoint"
)
_SCHED_STATE = (
    "not supported: hyrl computes each step's learning rate from the flags and the step count, "
    "with no scheduler state in a checkpoint"
)
_SHARED_EXPERTS = "not supported: hyrl's Qwen3-MoE has no shared experts"
_SIGNALS = "not supported: hyrl always checkpoints on SIGTERM and on SIGUSR1 when --save is given"
_SWIGLU = "not supported: hyrl's MLP and experts always use SwiGLU (Qwen3-MoE)"
_TB_EXTRA = "not supported: hyrl mirrors its records (perf/* included) to --tensorboard-dir"
_TOKENIZER_FILES = (
    "use --tokenizer-path: hyrl loads a local Hugging Face tokenizer directory instead of "
    "vocabulary and merge files"
)
_UNFUSED = "not supported: hyrl always runs this kernel unfused"
_WARMUP_DECAY = (
    "not supported: hyrl decays the learning rate from the end of the warmup to the last optimizer "
    "step of the run (Megatron-LM's default: decay over all training iterations)"
)
_WD_SCHEDULE = "not supported: hyrl's weight decay is constant over the run (--weight-decay)"
_WSD = "not supported: hyrl's --lr-decay-style is constant, linear or cosine (no WSD)"

# flag -> what to do: one sentence, starting either "use --X ..." (the hyrl way to get the same
# effect, saying what differs: units, values) or "not supported: " with the reason (what hyrl
# does instead, or why it does not apply). Sorted alphabetically.
FLAGS: dict[str, str] = {
    "--account-for-embedding-in-pipeline-split": _EVEN_PIPELINE,
    "--add-qkv-bias": _NO_BIAS,
    "--apply-layernorm-1p": (
        "not supported: hyrl's norms are plain RMSNorm or LayerNorm (--normalization)"
    ),
    "--apply-query-key-layer-scaling": (
        "not supported: hyrl never scales Q x K by the layer number (an fp16 aid)"
    ),
    "--async-save": (
        "not supported: hyrl writes each checkpoint synchronously (to a temporary directory, "
        "then renamed)"
    ),
    "--attention-backend": _ATTENTION_KERNEL,
    "--attention-dropout": _DROPOUT,
    "--attention-softmax-in-fp32": (
        "not supported: hyrl always keeps megatron-core's default, the attention softmax in float32"
    ),
    "--batch-size": (
        "use --micro-batch-size: Megatron-LM's old name for it (Megatron-LM refuses it too)"
    ),
    "--calculate-per-token-loss": (
        "use --loss-agg-mode token-mean: hyrl's default, the loss divided by the global "
        "batch's response tokens (slime's default without the flag is seq-mean-token-mean)"
    ),
    "--ckpt-format": (
        "not supported: hyrl always saves megatron's distributed format (torch_dist) with its "
        "own metadata, one directory per step under --save"
    ),
    "--ckpt-step": (
        "use --load: hyrl takes a step's directory (DIR/step_N) as well as a --save directory "
        "(its latest)"
    ),
    "--context-parallel-size": reasons.CP,
    "--cp-comm-type": reasons.CP,
    "--data-parallel-sharding-strategy": _FSDP,
    "--data-path": (
        "use --prompt-data: hyrl trains on prompts (.jsonl or .parquet), not on a pre-training "
        "corpus"
    ),
    "--dataloader-type": _NO_DATA_LOADER,
    "--ddp-average-in-collective": (
        "not supported: hyrl's losses are already divided by the global batch's token count, "
        "so the data-parallel reduction sums the gradients"
    ),
    "--decoder-first-pipeline-num-layers": _EVEN_PIPELINE,
    "--decoder-last-pipeline-num-layers": _EVEN_PIPELINE,
    "--decoupled-lr": "not supported: hyrl uses one learning rate for every parameter (--lr)",
    "--decoupled-min-lr": (
        "not supported: hyrl uses one learning rate for every parameter (--lr, --min-lr)"
    ),
    "--deterministic-mode": "not supported: hyrl has no deterministic-kernel switch",
    "--disable-bias-linear": (
        "not supported: hyrl always builds its linear layers without biases (Qwen3-MoE)"
    ),
    "--distribute-saved-activations": (
        "not supported: hyrl does not spread recomputation checkpoints over the "
        "tensor-parallel group"
    ),
    "--distributed-backend": (
        "not supported: hyrl uses NCCL on GPUs and gloo on CPU (and gloo for the ranks that "
        "wait on rank 0's generation)"
    ),
    "--end-weight-decay": _WD_SCHEDULE,
    "--eval-iters": (
        "not supported: hyrl evaluates on every held-out prompt (--eval-prompt-data, "
        "--n-samples-per-eval-prompt responses each), not on a number of batches"
    ),
    "--exit-duration-in-mins": (
        "not supported: hyrl has no time limit of its own; the job's SIGTERM or SIGUSR1 makes "
        "it checkpoint (with --save) and exit"
    ),
    "--exit-interval": (
        "use --num-steps: hyrl ends the run after that many rollout steps, and a later --load "
        "with a larger --num-steps continues it"
    ),
    "--exit-signal": _SIGNALS,
    "--exit-signal-handler": _SIGNALS,
    "--exp-avg-dtype": _LOW_PRECISION_OPT,
    "--exp-avg-sq-dtype": _LOW_PRECISION_OPT,
    "--finetune": _FROM_WEIGHTS,
    "--fp16": _FP16,
    "--fp8-format": "not supported: hyrl trains in bfloat16 (--bf16) or float32, not FP8",
    "--group-query-attention": (
        "not supported: hyrl always uses grouped-query attention, with --num-query-groups "
        "key/value heads"
    ),
    "--hidden-dropout": _DROPOUT,
    "--init-method-std": (
        "not supported: hyrl draws random weights with megatron's std 0.02; a real run starts "
        "from --hf-checkpoint"
    ),
    "--initial-loss-scale": _FP16,
    "--kv-lora-rank": _MLA,
    "--log-num-zeros-in-grad": "not supported: hyrl does not count zeros in the gradient",
    "--log-params-norm": (
        "not supported: hyrl logs the gradient norm (actor/grad_norm), not the parameter norm"
    ),
    "--log-throughput": (
        "not supported: hyrl always logs its throughput (perf/rollout_tokens_per_s and the "
        "stage timers perf/*)"
    ),
    "--log-timers-to-tensorboard": _TB_EXTRA,
    "--loss-scale": _FP16,
    "--lr-decay-iters": _WARMUP_DECAY,
    "--lr-decay-samples": _WARMUP_DECAY,
    "--lr-warmup-fraction": (
        "use --lr-warmup-steps: hyrl takes the warmup in optimizer steps, not as a fraction of "
        "the decay"
    ),
    "--lr-warmup-init": (
        "not supported: hyrl's warmup rises linearly from 0 (Megatron-LM's default)"
    ),
    "--lr-warmup-samples": (
        "use --lr-warmup-steps: hyrl takes the warmup in optimizer steps of "
        "--global-batch-size responses, not in samples"
    ),
    "--lr-wsd-decay-iters": _WSD,
    "--lr-wsd-decay-samples": _WSD,
    "--lr-wsd-decay-style": _WSD,
    "--main-grads-dtype": _LOW_PRECISION_OPT,
    "--main-params-dtype": _LOW_PRECISION_OPT,
    "--make-vocab-size-divisible-by": _NO_VOCAB_PADDING,
    "--manual-gc": "not supported: hyrl does not manage Python's garbage collector between steps",
    "--merge-file": _TOKENIZER_FILES,
    "--mock-data": (
        "not supported: hyrl's built-in arithmetic task (no --prompt-data) needs no data files"
    ),
    "--model-parallel-size": (
        "use --tensor-model-parallel-size: Megatron-LM's old name for it (Megatron-LM refuses "
        "it too)"
    ),
    "--moe-apply-probs-on-input": (
        "not supported: hyrl weights each expert's output by its routing probability "
        "(Qwen3-MoE), never its input"
    ),
    "--moe-aux-loss-coeff": (
        "not supported: hyrl trains without the load-balancing auxiliary loss (a coefficient "
        "of 0, as slime's Qwen3-30B-A3B script sets)"
    ),
    "--moe-enable-deepep": _DISPATCHER,
    "--moe-enable-routing-replay": (
        "use --use-rollout-routing-replay: hyrl installs megatron's routing replay itself and "
        "fills it with the experts the rollout engine chose (R3); it does not replay the "
        "trainer's own routing (R2)"
    ),
    "--moe-expert-capacity-factor": _NO_CAPACITY,
    "--moe-flex-dispatcher-backend": _DISPATCHER,
    "--moe-grouped-gemm": (
        "not supported: hyrl always runs the experts as one grouped GEMM under "
        "--transformer-impl transformer_engine, and one after another on the local layers"
    ),
    "--moe-input-jitter-eps": "not supported: hyrl adds no jitter to the router's input",
    "--moe-layer-freq": (
        "not supported: every hyrl layer is an MoE layer (Qwen3-MoE, Megatron-LM's 1)"
    ),
    "--moe-layer-recompute": (
        "use --recompute-granularity: hyrl recomputes whole layers (full) or the attention "
        "core (selective), not the MoE layer alone"
    ),
    "--moe-pad-expert-input-to-capacity": _NO_CAPACITY,
    "--moe-per-layer-logging": "not supported: hyrl logs no per-layer router statistics",
    "--moe-router-bias-update-rate": _EXPERT_BIAS,
    "--moe-router-dtype": (
        "not supported: hyrl always routes in float32 (megatron's moe_router_dtype fp32)"
    ),
    "--moe-router-enable-expert-bias": _EXPERT_BIAS,
    "--moe-router-force-load-balancing": (
        "not supported: hyrl routes by the router's own scores (or the engine's choice under "
        "--use-rollout-routing-replay)"
    ),
    "--moe-router-fusion": "not supported: hyrl runs megatron's unfused router",
    "--moe-router-group-topk": _GROUPED_ROUTING,
    "--moe-router-load-balancing-type": (
        "not supported: hyrl's routers do no load balancing (megatron's none)"
    ),
    "--moe-router-num-groups": _GROUPED_ROUTING,
    "--moe-router-pre-softmax": (
        "not supported: hyrl's routers take the top-k first and normalise over it (Qwen3-MoE's "
        "renormalised top-k, pre-softmax off)"
    ),
    "--moe-router-score-function": (
        "not supported: hyrl's routers always score with a softmax over the top "
        "--moe-router-topk experts (Qwen3-MoE)"
    ),
    "--moe-router-topk-scaling-factor": "not supported: hyrl does not scale the routing weights",
    "--moe-shared-expert-gate": _SHARED_EXPERTS,
    "--moe-shared-expert-intermediate-size": _SHARED_EXPERTS,
    "--moe-shared-expert-overlap": _SHARED_EXPERTS,
    "--moe-token-drop-policy": _NO_CAPACITY,
    "--moe-use-upcycling": "not supported: hyrl does not upcycle a dense model into an MoE",
    "--moe-z-loss-coeff": "not supported: hyrl adds no router z-loss",
    "--mtp-loss-scaling-factor": reasons.MTP,
    "--mtp-num-layers": reasons.MTP,
    "--multi-latent-attention": _MLA,
    "--no-bias-dropout-fusion": _UNFUSED,
    "--no-bias-swiglu-fusion": _UNFUSED,
    "--no-check-for-nan-in-loss-and-grad": (
        "not supported: hyrl always checks: an optimizer step with a non-finite loss or "
        "gradient norm is skipped, and --max-skipped-steps of them in a row stop the run"
    ),
    "--no-gradient-accumulation-fusion": _FUSION_TE,
    "--no-load-optim": _RESUME_ALL,
    "--no-load-rng": _RESUME_ALL,
    "--no-masked-softmax-fusion": _UNFUSED,
    "--no-persist-layer-norm": (
        "not supported: hyrl never uses megatron's persistent layer-norm kernel"
    ),
    "--no-rope-fusion": _FUSION_TE,
    "--no-save-optim": (
        "not supported: hyrl's checkpoints always hold the optimizer, so --load resumes the "
        "run exactly"
    ),
    "--no-save-rng": "not supported: hyrl's checkpoints always hold every rank's RNG states",
    "--non-persistent-save-interval": (
        "not supported: hyrl writes persistent checkpoints only (--save-interval)"
    ),
    "--num-distributed-optimizer-instances": (
        "not supported: hyrl keeps one distributed-optimizer instance over the data-parallel ranks"
    ),
    "--num-workers": _NO_DATA_LOADER,
    "--optimizer": (
        "not supported: hyrl's optimizer is always Adam with decoupled weight decay "
        "(Megatron-LM's adam)"
    ),
    "--optimizer-cpu-offload": _CPU_OPT,
    "--optimizer-offload-fraction": _CPU_OPT,
    "--overlap-cpu-optimizer-d2h-h2d": _CPU_OPT,
    "--overlap-moe-expert-parallel-comm": (
        "not supported: hyrl does not overlap the expert all-to-all with other micro-batches"
    ),
    "--overlap-param-gather": _PARAM_GATHER,
    "--overlap-param-gather-with-optimizer-step": _PARAM_GATHER,
    "--override-opt_param-scheduler": _SCHED_STATE,
    "--padded-vocab-size": _NO_VOCAB_PADDING,
    "--position-embedding-type": (
        "not supported: hyrl always uses rotary position embeddings (rope, base --rotary-base)"
    ),
    "--pretrained-checkpoint": _FROM_WEIGHTS,
    "--profile": reasons.PROFILER,
    "--q-lora-rank": _MLA,
    "--qk-l2-norm": (
        "not supported: hyrl normalises queries and keys per head with --qk-layernorm, not "
        "with an L2 norm"
    ),
    "--rampup-batch-size": (
        "use --batch-ramp START:END:STEPS: hyrl ramps responses per optimizer step linearly "
        "from START to END over STEPS rollout steps (Megatron-LM gives start, increment and "
        "samples)"
    ),
    "--recompute-activations": (
        "use --recompute-granularity selective: Megatron-LM's shorthand for it"
    ),
    "--recompute-modules": (
        "not supported: hyrl's selective recomputation covers the attention core only "
        "(Megatron-LM's default core_attn)"
    ),
    "--record-memory-history": reasons.MEMORY_DEBUG,
    "--rotary-interleaved": (
        "not supported: hyrl always rotates the two halves of each head (Llama and Qwen "
        "style), never interleaved pairs"
    ),
    "--rotary-percent": (
        "not supported: hyrl always rotates the whole head dimension (Megatron-LM's 1.0)"
    ),
    "--rotary-seq-len-interpolation-factor": "not supported: hyrl applies no RoPE scaling",
    "--save-retain-interval": (
        "use --keep-checkpoint-every K --keep-last-checkpoints 1: Megatron-LM keeps every K-th "
        "iteration's checkpoint and the latest; hyrl's K counts rollout steps, and it never "
        "deletes the step --load came from or one another run forked from"
    ),
    "--seq-length": (
        "use --rollout-max-prompt-len and --rollout-max-response-len: a hyrl sequence is a "
        "prompt and its response, each bounded, their sum within --max-position-embeddings"
    ),
    "--sgd-momentum": "not supported: hyrl's optimizer is always Adam",
    "--skip-train": "not supported: hyrl has no evaluation-only run",
    "--spec": (
        "not supported: hyrl picks its layer spec from --transformer-impl (Transformer Engine "
        "or megatron's local layers)"
    ),
    "--split": (
        "not supported: hyrl's held-out prompts for --prompt-data come from their own files "
        "(--eval-prompt-data), not from a split of the training data"
    ),
    "--squared-relu": _SWIGLU,
    "--start-weight-decay": _WD_SCHEDULE,
    "--swiglu": _SWIGLU,
    "--tensorboard-log-interval": "not supported: hyrl writes every record to --tensorboard-dir",
    "--timing-log-level": reasons.PROFILER,
    "--tokenizer-model": (
        "use --tokenizer-path: a local Hugging Face tokenizer directory (none = "
        "--hf-checkpoint, as in slime)"
    ),
    "--tokenizer-type": (
        "not supported: hyrl always loads a Hugging Face tokenizer (--tokenizer-path, else "
        "--hf-checkpoint)"
    ),
    "--tp-comm-overlap": (
        "not supported: hyrl does not overlap tensor-parallel communication with the GEMMs"
    ),
    "--train-iters": (
        "use --num-steps: hyrl counts rollout steps, each of P x G / --global-batch-size "
        "optimizer steps, not optimizer iterations"
    ),
    "--train-samples": (
        "use --num-steps: hyrl counts rollout steps of --rollout-batch-size x "
        "--n-samples-per-prompt responses each, not samples"
    ),
    "--use-checkpoint-opt_param-scheduler": _SCHED_STATE,
    "--use-cpu-initialization": (
        "not supported: hyrl initialises random weights on the CPU only when it runs on CPU; "
        "on GPUs megatron initialises them on the device"
    ),
    "--use-flash-attn": _ATTENTION_KERNEL,
    "--use-mcore-models": (
        "not supported: hyrl always builds megatron-core models (Megatron-LM ignores the flag too)"
    ),
    "--use-megatron-fsdp": _FSDP,
    "--use-precision-aware-optimizer": _LOW_PRECISION_OPT,
    "--use-pytorch-profiler": reasons.PROFILER,
    "--use-rotary-position-embeddings": (
        "not supported: hyrl always uses rotary position embeddings (base --rotary-base)"
    ),
    "--use-torch-fsdp2": _FSDP,
    "--vocab-file": _TOKENIZER_FILES,
    "--wandb-save-dir": reasons.WANDB_DIR,
    "--weight-decay-incr-style": _WD_SCHEDULE,
}
