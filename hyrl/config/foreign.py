"""The flags of slime and Megatron-LM that `hyrl train` does not declare under the same name,
and what hyrl does instead: a table, data only (the parser turns an unknown flag found here into
its hyrl equivalent or a "not supported" error with the reason).

Sources, read at these commits:
- slime (github.com/THUDM/slime, 624b824a898ab0ec1fcb4d373004c7f3852bf515): every argument of
  slime/utils/arguments.py (its add_argument calls, and the Megatron-LM arguments it resets or
  adds with reset_arg), slime's own --sglang-* flags of slime/backends/sglang_utils/arguments.py,
  and every flag of scripts/models/qwen3-30B-A3B.sh and scripts/run-qwen3-30B-A3B.sh.
- Megatron-LM (github.com/NVIDIA/Megatron-LM, d98e8a64ddf34856e74b24714e3bedb2f5a39553):
  megatron/training/arguments.py (with the dataclass fields it turns into flags). Not all of
  its ~880 flags: those of the two slime scripts above, the ones slime resets, and the training,
  parallelism, precision, checkpoint, logging and MoE flags a Megatron-LM user brings along.

A flag both projects take is listed under Megatron-LM, its owner. Flags hyrl declares under
the same name are not here, even where their meaning differs; neither are the old names of
flags hyrl renamed (it still accepts them).

Every `--name` in a message is a `hyrl train` flag, or an `--sglang-NAME` that hyrl passes
through to SGLang. Where hyrl has a flag's effect built in, the reason says "hyrl always ..."
(--swiglu, --disable-bias-linear, --rollout-shuffle): such a flag is harmless as slime's scripts
give it, but another value of it (--attention-dropout 0.1) would not be what hyrl does.
Standard library only, no imports: data for `hyrl.config.parser` and its tests.
"""

from __future__ import annotations

MEGATRON = "Megatron-LM"
SLIME = "slime"

# Reasons several flags share.
_ATTENTION_KERNEL = (
    "not supported: hyrl leaves the attention kernel to Transformer Engine (megatron's auto); "
    "--transformer-impl local runs megatron's own attention"
)
_BALANCE = (
    "not supported: hyrl does not reorder responses across data-parallel ranks by their length or "
    "cost"
)
_CI = "not supported: these are slime's own continuous-integration checks"
_CP = "not supported: hyrl has no context parallelism"
_CPU_OPT = (
    "not supported: hyrl keeps Adam's states on the GPU while it trains; with --colocate, "
    "--offload-train parks them in host memory while the engines generate"
)
_DEBUG_DUMP = "not supported: hyrl does not dump rollouts or training batches for replay"
_DEBUG_REPLAY = "not supported: hyrl cannot train on a dumped rollout; every step generates its own"
_DEEPGEMM = (
    "not supported: hyrl's trainer runs megatron's and Transformer Engine's own kernels, not "
    "SGLang's block-FP8 DeepGEMM forward"
)
_DELTA_SYNC = (
    "not supported: hyrl has no delta weight sync: every sync sends the whole model "
    "(--update-weight-transport)"
)
_DISPATCHER = (
    "not supported: hyrl's token dispatcher is allgather or alltoall (--moe-token-dispatcher-type)"
)
_DROPOUT = "not supported: hyrl always trains without dropout (Megatron-LM's default is 0.1)"
_ENGINE_FLEET = (
    "not supported: hyrl's training ranks are the processes torchrun starts (launch/torchrun.sh: "
    "NNODES x NPROC, or launch/srun.sh under Slurm)"
)
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
_HEALTH = (
    "not supported: hyrl has no periodic health check: a dead engine is found at its next call and "
    "replaced (--rollout-max-restarts), and a request that hangs fails after "
    "--sglang-request-timeout-s"
)
_LOG_HOOK = (
    "not supported: hyrl writes every record to RUN_DIR/metrics.jsonl (and its wandb and "
    "TensorBoard mirrors), with no logging hook"
)
_LOW_PRECISION_OPT = (
    "not supported: hyrl keeps float32 main parameters and Adam states under --bf16 (no "
    "lower-precision optimizer states)"
)
_MEGATRON_HOOK = "not supported: hyrl has no hooks into its Megatron trainer"
_MEMORY_DEBUG = "not supported: hyrl has no memory snapshot or recorder switch"
_MLA = (
    "not supported: hyrl's model is Qwen3-MoE with grouped-query attention, not multi-latent "
    "attention"
)
_MTP = "not supported: hyrl's Qwen3-MoE has no multi-token-prediction layers"
_NO_BIAS = "not supported: hyrl's linear layers never have biases (Qwen3-MoE)"
_NO_CAPACITY = "not supported: hyrl's experts have no capacity limit, so no token is dropped"
_NO_DATA_LOADER = "not supported: hyrl reads its prompt file itself, with no data loader"
_NO_OFFLOAD_ROLLOUT = (
    "not supported: with --colocate hyrl's SGLang engines always release their GPU memory while "
    "the actor trains and take it back to generate"
)
_NO_VOCAB_PADDING = (
    "not supported: hyrl does not pad the vocabulary: the embedding has --vocab-size rows, which "
    "the tensor-parallel size must divide"
)
_OPD = "not supported: hyrl has no on-policy distillation from a teacher model"
_OPSM = "not supported: hyrl has no off-policy sequence masking (OPSM)"
_PARAM_GATHER = (
    "not supported: hyrl's distributed optimizer gathers the updated parameters after the step, "
    "without overlap"
)
_PROFILER = (
    "not supported: hyrl has no profiler switch; every record times the run's stages (perf/*)"
)
_REF_INITIAL = (
    "not supported: hyrl's reference model (kept only with --kl-loss-coef or --kl-coef above 0) is "
    "a copy of the actor's initial weights (--hf-checkpoint), and a Megatron torch_dist checkpoint "
    "does not load: give the model's Hugging Face directory as --hf-checkpoint (slime, too, starts "
    "the actor from the reference checkpoint when there is none to resume)"
)
_RESUME_ALL = (
    "not supported: hyrl's --load resumes the whole run (weights, optimizer, RNG states, loop); to "
    "start from weights alone give them as --hf-checkpoint"
)
_REWARD_NUMBER = (
    "not supported: hyrl's reward functions return one number, so there is no key to pick"
)
_ROLLOUT_BUFFER = (
    "not supported: hyrl has no external rollout buffer service: it generates every rollout itself"
)
_ROUTER_URL = "use --sglang-router-url: hyrl takes the router as one http://HOST:PORT URL"
_SCHED_STATE = (
    "not supported: hyrl computes each step's learning rate from the flags and the step count, "
    "with no scheduler state in a checkpoint"
)
_SHARED_EXPERTS = "not supported: hyrl's Qwen3-MoE has no shared experts"
_SIGNALS = "not supported: hyrl always checkpoints on SIGTERM and on SIGUSR1 when --save is given"
_SINGLE_TURN = (
    "not supported: hyrl's prompts are single user messages, without tools or further turns"
)
_STOP = (
    "not supported: hyrl's engines stop at the checkpoint's end-of-sequence ids "
    "(generation_config.json, config.json, the tokenizer's) or at --rollout-max-response-len"
)
_SWIGLU = "not supported: hyrl's MLP and experts always use SwiGLU (Qwen3-MoE)"
_TB_DIR = (
    "use --tensorboard-dir: hyrl takes the event directory itself (slime writes under "
    "tensorboard_log/PROJECT/EXPERIMENT)"
)
_TB_EXTRA = "not supported: hyrl mirrors its records (perf/* included) to --tensorboard-dir"
_TOKENIZER_FILES = (
    "use --tokenizer-path: hyrl loads a local Hugging Face tokenizer directory instead of "
    "vocabulary and merge files"
)
_UNFUSED = "not supported: hyrl always runs this kernel unfused"
_WANDB_DIR = "not supported: hyrl writes wandb's files under --run-dir (RUN_DIR/wandb)"
_WARMUP_DECAY = (
    "not supported: hyrl decays the learning rate from the end of the warmup to the last optimizer "
    "step of the run (Megatron-LM's default: decay over all training iterations)"
)
_WD_SCHEDULE = "not supported: hyrl's weight decay is constant over the run (--weight-decay)"
_WHOLE_MODEL = "not supported: hyrl trains every parameter of the actor"
_WSD = "not supported: hyrl's --lr-decay-style is constant, linear or cosine (no WSD)"

# A foreign flag with exactly hyrl's meaning (the same unit and value syntax; store_true is
# hyrl's --flag form of an on/off flag): hyrl accepts it as another name of that field.
# foreign flag -> hyrl field name. Both default to the same when absent, except --num-rollout
# (slime: required unless --num-epoch; hyrl's --num-steps: 1000).
SAME_MEANING: dict[str, str] = {
    # Megatron-LM
    "--lr-warmup-iters": "lr_warmup_steps",
    # slime
    "--num-rollout": "num_steps",
    "--use-wandb": "log_wandb",
    "--wandb-team": "wandb_entity",
}

# Every other flag of slime or Megatron-LM that hyrl does not declare under the same name:
# flag -> (source, what to do). What to do is one sentence, starting either "use --X ..." (the
# hyrl way to get the same effect, saying what differs: units, values) or "not supported: "
# with the reason (what hyrl does instead, or why it does not apply). Sorted by source, then
# alphabetically.
FOREIGN_FLAGS: dict[str, tuple[str, str]] = {
    # ---- Megatron-LM flags ------------------------------------------------------------
    "--account-for-embedding-in-pipeline-split": (MEGATRON, _EVEN_PIPELINE),
    "--add-qkv-bias": (MEGATRON, _NO_BIAS),
    "--apply-layernorm-1p": (
        MEGATRON,
        "not supported: hyrl's norms are plain RMSNorm or LayerNorm (--normalization)",
    ),
    "--apply-query-key-layer-scaling": (
        MEGATRON,
        "not supported: hyrl never scales Q x K by the layer number (an fp16 aid)",
    ),
    "--async-save": (
        MEGATRON,
        "not supported: hyrl writes each checkpoint synchronously (to a temporary directory, "
        "then renamed)",
    ),
    "--attention-backend": (MEGATRON, _ATTENTION_KERNEL),
    "--attention-dropout": (MEGATRON, _DROPOUT),
    "--attention-softmax-in-fp32": (
        MEGATRON,
        "not supported: hyrl always keeps megatron-core's default, the attention softmax in "
        "float32",
    ),
    "--batch-size": (
        MEGATRON,
        "use --micro-batch-size: Megatron-LM's old name for it (Megatron-LM refuses it too)",
    ),
    "--calculate-per-token-loss": (
        MEGATRON,
        "use --loss-agg-mode token-mean: hyrl's default, the loss divided by the global "
        "batch's response tokens (slime's default without the flag is seq-mean-token-mean)",
    ),
    "--ckpt-format": (
        MEGATRON,
        "not supported: hyrl always saves megatron's distributed format (torch_dist) with its "
        "own metadata, one directory per step under --save",
    ),
    "--ckpt-step": (
        MEGATRON,
        "use --load: hyrl takes a step's directory (DIR/step_N) as well as a --save directory "
        "(its latest)",
    ),
    "--context-parallel-size": (MEGATRON, _CP),
    "--cp-comm-type": (MEGATRON, _CP),
    "--data-parallel-sharding-strategy": (MEGATRON, _FSDP),
    "--data-path": (
        MEGATRON,
        "use --prompt-data: hyrl trains on prompts (.jsonl or .parquet), not on a pre-training "
        "corpus",
    ),
    "--dataloader-type": (MEGATRON, _NO_DATA_LOADER),
    "--ddp-average-in-collective": (
        MEGATRON,
        "not supported: hyrl's losses are already divided by the global batch's token count, "
        "so the data-parallel reduction sums the gradients",
    ),
    "--decoder-first-pipeline-num-layers": (MEGATRON, _EVEN_PIPELINE),
    "--decoder-last-pipeline-num-layers": (MEGATRON, _EVEN_PIPELINE),
    "--decoupled-lr": (
        MEGATRON,
        "not supported: hyrl uses one learning rate for every parameter (--lr)",
    ),
    "--decoupled-min-lr": (
        MEGATRON,
        "not supported: hyrl uses one learning rate for every parameter (--lr, --min-lr)",
    ),
    "--deterministic-mode": (MEGATRON, "not supported: hyrl has no deterministic-kernel switch"),
    "--disable-bias-linear": (
        MEGATRON,
        "not supported: hyrl always builds its linear layers without biases (Qwen3-MoE)",
    ),
    "--distribute-saved-activations": (
        MEGATRON,
        "not supported: hyrl does not spread recomputation checkpoints over the "
        "tensor-parallel group",
    ),
    "--distributed-backend": (
        MEGATRON,
        "not supported: hyrl uses NCCL on GPUs and gloo on CPU (and gloo for the ranks that "
        "wait on rank 0's generation)",
    ),
    "--end-weight-decay": (MEGATRON, _WD_SCHEDULE),
    "--eval-iters": (
        MEGATRON,
        "not supported: hyrl evaluates on every held-out prompt (--eval-prompt-data, "
        "--n-samples-per-eval-prompt responses each), not on a number of batches",
    ),
    "--exit-duration-in-mins": (
        MEGATRON,
        "not supported: hyrl has no time limit of its own; the job's SIGTERM or SIGUSR1 makes "
        "it checkpoint (with --save) and exit",
    ),
    "--exit-interval": (
        MEGATRON,
        "use --num-steps: hyrl ends the run after that many rollout steps, and a later --load "
        "with a larger --num-steps continues it",
    ),
    "--exit-signal": (MEGATRON, _SIGNALS),
    "--exit-signal-handler": (MEGATRON, _SIGNALS),
    "--exp-avg-dtype": (MEGATRON, _LOW_PRECISION_OPT),
    "--exp-avg-sq-dtype": (MEGATRON, _LOW_PRECISION_OPT),
    "--finetune": (MEGATRON, _FROM_WEIGHTS),
    "--fp16": (MEGATRON, _FP16),
    "--fp8-format": (
        MEGATRON,
        "not supported: hyrl trains in bfloat16 (--bf16) or float32, not FP8",
    ),
    "--group-query-attention": (
        MEGATRON,
        "not supported: hyrl always uses grouped-query attention, with --num-query-groups "
        "key/value heads",
    ),
    "--hidden-dropout": (MEGATRON, _DROPOUT),
    "--init-method-std": (
        MEGATRON,
        "not supported: hyrl draws random weights with megatron's std 0.02; a real run starts "
        "from --hf-checkpoint",
    ),
    "--initial-loss-scale": (MEGATRON, _FP16),
    "--kv-lora-rank": (MEGATRON, _MLA),
    "--log-num-zeros-in-grad": (
        MEGATRON,
        "not supported: hyrl does not count zeros in the gradient",
    ),
    "--log-params-norm": (
        MEGATRON,
        "not supported: hyrl logs the gradient norm (actor/grad_norm), not the parameter norm",
    ),
    "--log-throughput": (
        MEGATRON,
        "not supported: hyrl always logs its throughput (perf/rollout_tokens_per_s and the "
        "stage timers perf/*)",
    ),
    "--log-timers-to-tensorboard": (MEGATRON, _TB_EXTRA),
    "--loss-scale": (MEGATRON, _FP16),
    "--lr-decay-iters": (MEGATRON, _WARMUP_DECAY),
    "--lr-decay-samples": (MEGATRON, _WARMUP_DECAY),
    "--lr-warmup-fraction": (
        MEGATRON,
        "use --lr-warmup-steps: hyrl takes the warmup in optimizer steps, not as a fraction of "
        "the decay",
    ),
    "--lr-warmup-init": (
        MEGATRON,
        "not supported: hyrl's warmup rises linearly from 0 (Megatron-LM's default)",
    ),
    "--lr-warmup-samples": (
        MEGATRON,
        "use --lr-warmup-steps: hyrl takes the warmup in optimizer steps of "
        "--global-batch-size responses, not in samples",
    ),
    "--lr-wsd-decay-iters": (MEGATRON, _WSD),
    "--lr-wsd-decay-samples": (MEGATRON, _WSD),
    "--lr-wsd-decay-style": (MEGATRON, _WSD),
    "--main-grads-dtype": (MEGATRON, _LOW_PRECISION_OPT),
    "--main-params-dtype": (MEGATRON, _LOW_PRECISION_OPT),
    "--make-vocab-size-divisible-by": (MEGATRON, _NO_VOCAB_PADDING),
    "--manual-gc": (
        MEGATRON,
        "not supported: hyrl does not manage Python's garbage collector between steps",
    ),
    "--merge-file": (MEGATRON, _TOKENIZER_FILES),
    "--mock-data": (
        MEGATRON,
        "not supported: hyrl's built-in arithmetic task (no --prompt-data) needs no data files",
    ),
    "--model-parallel-size": (
        MEGATRON,
        "use --tensor-model-parallel-size: Megatron-LM's old name for it (Megatron-LM refuses "
        "it too)",
    ),
    "--moe-apply-probs-on-input": (
        MEGATRON,
        "not supported: hyrl weights each expert's output by its routing probability "
        "(Qwen3-MoE), never its input",
    ),
    "--moe-aux-loss-coeff": (
        MEGATRON,
        "not supported: hyrl trains without the load-balancing auxiliary loss (a coefficient "
        "of 0, as slime's Qwen3-30B-A3B script sets)",
    ),
    "--moe-enable-deepep": (MEGATRON, _DISPATCHER),
    "--moe-enable-routing-replay": (
        MEGATRON,
        "use --use-rollout-routing-replay: hyrl installs megatron's routing replay itself and "
        "fills it with the experts the rollout engine chose (R3); it does not replay the "
        "trainer's own routing (R2)",
    ),
    "--moe-expert-capacity-factor": (MEGATRON, _NO_CAPACITY),
    "--moe-flex-dispatcher-backend": (MEGATRON, _DISPATCHER),
    "--moe-grouped-gemm": (
        MEGATRON,
        "not supported: hyrl always runs the experts as one grouped GEMM under "
        "--transformer-impl transformer_engine, and one after another on the local layers",
    ),
    "--moe-input-jitter-eps": (
        MEGATRON,
        "not supported: hyrl adds no jitter to the router's input",
    ),
    "--moe-layer-freq": (
        MEGATRON,
        "not supported: every hyrl layer is an MoE layer (Qwen3-MoE, Megatron-LM's 1)",
    ),
    "--moe-layer-recompute": (
        MEGATRON,
        "use --recompute-granularity: hyrl recomputes whole layers (full) or the attention "
        "core (selective), not the MoE layer alone",
    ),
    "--moe-pad-expert-input-to-capacity": (MEGATRON, _NO_CAPACITY),
    "--moe-per-layer-logging": (
        MEGATRON,
        "not supported: hyrl logs no per-layer router statistics",
    ),
    "--moe-router-bias-update-rate": (MEGATRON, _EXPERT_BIAS),
    "--moe-router-dtype": (
        MEGATRON,
        "not supported: hyrl always routes in float32 (megatron's moe_router_dtype fp32)",
    ),
    "--moe-router-enable-expert-bias": (MEGATRON, _EXPERT_BIAS),
    "--moe-router-force-load-balancing": (
        MEGATRON,
        "not supported: hyrl routes by the router's own scores (or the engine's choice under "
        "--use-rollout-routing-replay)",
    ),
    "--moe-router-fusion": (MEGATRON, "not supported: hyrl runs megatron's unfused router"),
    "--moe-router-group-topk": (MEGATRON, _GROUPED_ROUTING),
    "--moe-router-load-balancing-type": (
        MEGATRON,
        "not supported: hyrl's routers do no load balancing (megatron's none)",
    ),
    "--moe-router-num-groups": (MEGATRON, _GROUPED_ROUTING),
    "--moe-router-pre-softmax": (
        MEGATRON,
        "not supported: hyrl's routers take the top-k first and normalise over it (Qwen3-MoE's "
        "renormalised top-k, pre-softmax off)",
    ),
    "--moe-router-score-function": (
        MEGATRON,
        "not supported: hyrl's routers always score with a softmax over the top "
        "--moe-router-topk experts (Qwen3-MoE)",
    ),
    "--moe-router-topk-scaling-factor": (
        MEGATRON,
        "not supported: hyrl does not scale the routing weights",
    ),
    "--moe-shared-expert-gate": (MEGATRON, _SHARED_EXPERTS),
    "--moe-shared-expert-intermediate-size": (MEGATRON, _SHARED_EXPERTS),
    "--moe-shared-expert-overlap": (MEGATRON, _SHARED_EXPERTS),
    "--moe-token-drop-policy": (MEGATRON, _NO_CAPACITY),
    "--moe-use-upcycling": (
        MEGATRON,
        "not supported: hyrl does not upcycle a dense model into an MoE",
    ),
    "--moe-z-loss-coeff": (MEGATRON, "not supported: hyrl adds no router z-loss"),
    "--mtp-loss-scaling-factor": (MEGATRON, _MTP),
    "--mtp-num-layers": (MEGATRON, _MTP),
    "--multi-latent-attention": (MEGATRON, _MLA),
    "--no-bias-dropout-fusion": (MEGATRON, _UNFUSED),
    "--no-bias-swiglu-fusion": (MEGATRON, _UNFUSED),
    "--no-check-for-nan-in-loss-and-grad": (
        MEGATRON,
        "not supported: hyrl always checks: an optimizer step with a non-finite loss or "
        "gradient norm is skipped, and --max-skipped-steps of them in a row stop the run",
    ),
    "--no-gradient-accumulation-fusion": (MEGATRON, _FUSION_TE),
    "--no-load-optim": (MEGATRON, _RESUME_ALL),
    "--no-load-rng": (MEGATRON, _RESUME_ALL),
    "--no-masked-softmax-fusion": (MEGATRON, _UNFUSED),
    "--no-persist-layer-norm": (
        MEGATRON,
        "not supported: hyrl never uses megatron's persistent layer-norm kernel",
    ),
    "--no-rope-fusion": (MEGATRON, _FUSION_TE),
    "--no-save-optim": (
        MEGATRON,
        "not supported: hyrl's checkpoints always hold the optimizer, so --load resumes the "
        "run exactly",
    ),
    "--no-save-rng": (
        MEGATRON,
        "not supported: hyrl's checkpoints always hold every rank's RNG states",
    ),
    "--non-persistent-save-interval": (
        MEGATRON,
        "not supported: hyrl writes persistent checkpoints only (--save-interval)",
    ),
    "--num-distributed-optimizer-instances": (
        MEGATRON,
        "not supported: hyrl keeps one distributed-optimizer instance over the data-parallel ranks",
    ),
    "--num-workers": (MEGATRON, _NO_DATA_LOADER),
    "--optimizer": (
        MEGATRON,
        "not supported: hyrl's optimizer is always Adam with decoupled weight decay "
        "(Megatron-LM's adam)",
    ),
    "--optimizer-cpu-offload": (MEGATRON, _CPU_OPT),
    "--optimizer-offload-fraction": (MEGATRON, _CPU_OPT),
    "--overlap-cpu-optimizer-d2h-h2d": (MEGATRON, _CPU_OPT),
    "--overlap-moe-expert-parallel-comm": (
        MEGATRON,
        "not supported: hyrl does not overlap the expert all-to-all with other micro-batches",
    ),
    "--overlap-param-gather": (MEGATRON, _PARAM_GATHER),
    "--overlap-param-gather-with-optimizer-step": (MEGATRON, _PARAM_GATHER),
    "--override-opt_param-scheduler": (MEGATRON, _SCHED_STATE),
    "--padded-vocab-size": (MEGATRON, _NO_VOCAB_PADDING),
    "--position-embedding-type": (
        MEGATRON,
        "not supported: hyrl always uses rotary position embeddings (rope, base --rotary-base)",
    ),
    "--pretrained-checkpoint": (MEGATRON, _FROM_WEIGHTS),
    "--profile": (MEGATRON, _PROFILER),
    "--q-lora-rank": (MEGATRON, _MLA),
    "--qk-l2-norm": (
        MEGATRON,
        "not supported: hyrl normalises queries and keys per head with --qk-layernorm, not "
        "with an L2 norm",
    ),
    "--rampup-batch-size": (
        MEGATRON,
        "use --batch-ramp START:END:STEPS: hyrl ramps responses per optimizer step linearly "
        "from START to END over STEPS rollout steps (Megatron-LM gives start, increment and "
        "samples)",
    ),
    "--recompute-activations": (
        MEGATRON,
        "use --recompute-granularity selective: Megatron-LM's shorthand for it",
    ),
    "--recompute-modules": (
        MEGATRON,
        "not supported: hyrl's selective recomputation covers the attention core only "
        "(Megatron-LM's default core_attn)",
    ),
    "--record-memory-history": (MEGATRON, _MEMORY_DEBUG),
    "--rotary-interleaved": (
        MEGATRON,
        "not supported: hyrl always rotates the two halves of each head (Llama and Qwen "
        "style), never interleaved pairs",
    ),
    "--rotary-percent": (
        MEGATRON,
        "not supported: hyrl always rotates the whole head dimension (Megatron-LM's 1.0)",
    ),
    "--rotary-seq-len-interpolation-factor": (
        MEGATRON,
        "not supported: hyrl applies no RoPE scaling",
    ),
    "--seq-length": (
        MEGATRON,
        "use --rollout-max-prompt-len and --rollout-max-response-len: a hyrl sequence is a "
        "prompt and its response, each bounded, their sum within --max-position-embeddings",
    ),
    "--sgd-momentum": (MEGATRON, "not supported: hyrl's optimizer is always Adam"),
    "--skip-train": (MEGATRON, "not supported: hyrl has no evaluation-only run"),
    "--spec": (
        MEGATRON,
        "not supported: hyrl picks its layer spec from --transformer-impl (Transformer Engine "
        "or megatron's local layers)",
    ),
    "--split": (
        MEGATRON,
        "not supported: hyrl's held-out prompts for --prompt-data come from their own files "
        "(--eval-prompt-data), not from a split of the training data",
    ),
    "--squared-relu": (MEGATRON, _SWIGLU),
    "--start-weight-decay": (MEGATRON, _WD_SCHEDULE),
    "--swiglu": (MEGATRON, _SWIGLU),
    "--tensorboard-log-interval": (
        MEGATRON,
        "not supported: hyrl writes every record to --tensorboard-dir",
    ),
    "--timing-log-level": (MEGATRON, _PROFILER),
    "--tokenizer-model": (
        MEGATRON,
        "use --tokenizer-path: a local Hugging Face tokenizer directory (none = "
        "--hf-checkpoint, as in slime)",
    ),
    "--tokenizer-type": (
        MEGATRON,
        "not supported: hyrl always loads a Hugging Face tokenizer (--tokenizer-path, else "
        "--hf-checkpoint)",
    ),
    "--tp-comm-overlap": (
        MEGATRON,
        "not supported: hyrl does not overlap tensor-parallel communication with the GEMMs",
    ),
    "--train-iters": (
        MEGATRON,
        "use --num-steps: hyrl counts rollout steps, each of P x G / --global-batch-size "
        "optimizer steps, not optimizer iterations",
    ),
    "--train-samples": (
        MEGATRON,
        "use --num-steps: hyrl counts rollout steps of --rollout-batch-size x "
        "--n-samples-per-prompt responses each, not samples",
    ),
    "--use-checkpoint-opt_param-scheduler": (MEGATRON, _SCHED_STATE),
    "--use-cpu-initialization": (
        MEGATRON,
        "not supported: hyrl initialises random weights on the CPU only when it runs on CPU; "
        "on GPUs megatron initialises them on the device",
    ),
    "--use-flash-attn": (MEGATRON, _ATTENTION_KERNEL),
    "--use-mcore-models": (
        MEGATRON,
        "not supported: hyrl always builds megatron-core models (Megatron-LM ignores the flag too)",
    ),
    "--use-megatron-fsdp": (MEGATRON, _FSDP),
    "--use-precision-aware-optimizer": (MEGATRON, _LOW_PRECISION_OPT),
    "--use-pytorch-profiler": (MEGATRON, _PROFILER),
    "--use-rotary-position-embeddings": (
        MEGATRON,
        "not supported: hyrl always uses rotary position embeddings (base --rotary-base)",
    ),
    "--use-torch-fsdp2": (MEGATRON, _FSDP),
    "--vocab-file": (MEGATRON, _TOKENIZER_FILES),
    "--wandb-save-dir": (MEGATRON, _WANDB_DIR),
    "--weight-decay-incr-style": (MEGATRON, _WD_SCHEDULE),
    # ---- slime flags ------------------------------------------------------------------
    "--actor-num-gpus-per-node": (SLIME, _ENGINE_FLEET),
    "--actor-num-nodes": (SLIME, _ENGINE_FLEET),
    "--allgather-cp": (SLIME, _CP),
    "--apply-chat-template-kwargs": (
        SLIME,
        "not supported: hyrl renders the chat template with one user message and the "
        "generation prompt, with no further arguments",
    ),
    "--balance-by-flops": (SLIME, _BALANCE),
    "--balance-data": (SLIME, _BALANCE),
    "--buffer-filter-path": (
        SLIME,
        "not supported: hyrl keeps no sample buffer to filter (under --async-rollout it queues "
        "whole rollouts, at most --max-staleness)",
    ),
    "--check-weight-update-equal": (
        SLIME,
        "not supported: hyrl checks every weight sync through the mismatch/* metrics (a broken "
        "sync shows as a jump), not by comparing weights",
    ),
    "--ci-disable-kl-checker": (SLIME, _CI),
    "--ci-load-grad-norm": (SLIME, _CI),
    "--ci-save-grad-norm": (SLIME, _CI),
    "--ci-test": (SLIME, _CI),
    "--ci-train-rollout-logprob-abs-diff-threshold": (SLIME, _CI),
    "--custom-advantage-function-path": (
        SLIME,
        "not supported: hyrl's advantages are built in (--advantage-estimator grpo or gae)",
    ),
    "--custom-config-path": (
        SLIME,
        "not supported: hyrl takes its flags from the command line (a recipe script holds "
        "them), not from a YAML file",
    ),
    "--custom-convert-samples-to-train-data-path": (
        SLIME,
        "not supported: hyrl builds its training batch from the samples itself, with no hook",
    ),
    "--custom-eval-rollout-log-function-path": (SLIME, _LOG_HOOK),
    "--custom-generate-function-path": (SLIME, _SINGLE_TURN),
    "--custom-loss-function-path": (
        SLIME,
        "not supported: hyrl's losses are built in; --policy-loss (ppo, gspo) and "
        "--loss-agg-mode choose among them",
    ),
    "--custom-megatron-before-log-prob-hook-path": (SLIME, _MEGATRON_HOOK),
    "--custom-megatron-before-train-step-hook-path": (SLIME, _MEGATRON_HOOK),
    "--custom-megatron-init-path": (SLIME, _MEGATRON_HOOK),
    "--custom-model-provider-path": (
        SLIME,
        "not supported: hyrl builds its Qwen3-MoE GPTModel from its model flags (--num-layers, "
        "--num-experts, ...)",
    ),
    "--custom-pg-loss-reducer-function-path": (
        SLIME,
        "use --loss-agg-mode: hyrl's built-in reductions of the policy loss (token-mean, "
        "seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm) instead of a "
        "function of your own",
    ),
    "--custom-reward-post-process-path": (
        SLIME,
        "not supported: hyrl's reward shaping is built in (GRPO's group baseline, "
        "--overlong-buffer-len)",
    ),
    "--custom-rollout-log-function-path": (SLIME, _LOG_HOOK),
    "--custom-tis-function-path": (
        SLIME,
        "not supported: hyrl's importance corrections are built in, --use-tis (truncated) and "
        "--use-mis (masked)",
    ),
    "--custom-update-weight-post-write-path": (
        SLIME,
        "not supported: hyrl has no hook between writing a disk sync and the engines loading it",
    ),
    "--data-pad-size-multiplier": (
        SLIME,
        "not supported: hyrl pads a micro-batch to its longest row, or packs it (--qkv-format "
        "thd) and rounds the total up to what tensor parallelism needs",
    ),
    "--data-source-path": (
        SLIME,
        "not supported: hyrl's prompts come from --prompt-data or its built-in task, with no "
        "data-source class to plug in",
    ),
    "--debug-rollout-only": (
        SLIME,
        "not supported: hyrl always trains on what it generates (hyrl profile-rollout measures "
        "generation alone)",
    ),
    "--debug-train-only": (SLIME, _DEBUG_REPLAY),
    "--disable-compute-advantages-and-returns": (
        SLIME,
        "not supported: hyrl always computes advantages (--advantage-estimator grpo or gae)",
    ),
    "--disable-grpo-std-normalization": (
        SLIME,
        "use --no-grpo-std-normalization: the same switch under hyrl's name (the group "
        "advantage not divided by the group's reward std)",
    ),
    "--disable-rewards-normalization": (
        SLIME,
        "not supported: hyrl's GRPO always subtracts the group's mean reward "
        "(--no-grpo-std-normalization drops only the division by its std)",
    ),
    "--disable-rollout-global-dataset": (
        SLIME,
        "not supported: hyrl always serves the prompts of --prompt-data as one shuffled stream",
    ),
    "--disable-wandb-random-suffix": (
        SLIME,
        "not supported: hyrl adds no random suffix: the wandb run is named --wandb-exp-name, "
        "else after the run directory",
    ),
    "--dump-details": (SLIME, _DEBUG_DUMP),
    "--enable-mtp-training": (SLIME, _MTP),
    "--eps-clip-c": (SLIME, "not supported: hyrl has no dual-clip PPO bound"),
    "--eval-config": (
        SLIME,
        "use --eval-prompt-data: hyrl takes held-out sets as NAME FILE pairs that share "
        "--n-samples-per-eval-prompt, --eval-temperature and --eval-max-response-len",
    ),
    "--eval-function-path": (
        SLIME,
        "not supported: hyrl evaluates with the rollout's engines and the training reward, "
        "with no hook",
    ),
    "--eval-input-key": (
        SLIME,
        "use --input-key: hyrl reads the held-out files with the training prompts' keys",
    ),
    "--eval-label-key": (
        SLIME,
        "use --label-key: hyrl reads the held-out files with the training prompts' keys",
    ),
    "--eval-max-context-len": (
        SLIME,
        "use --rollout-max-prompt-len and --eval-max-response-len: hyrl bounds the prompt and "
        "the response apart, their sum within --max-position-embeddings",
    ),
    "--eval-max-prompt-len": (
        SLIME,
        "use --rollout-max-prompt-len: hyrl drops held-out prompts by the training limit",
    ),
    "--eval-min-new-tokens": (SLIME, "not supported: hyrl sets no minimum response length"),
    "--eval-reward-key": (SLIME, _REWARD_NUMBER),
    "--eval-tool-key": (SLIME, _SINGLE_TURN),
    "--eval-top-k": (
        SLIME,
        "not supported: hyrl samples from the whole vocabulary (no top-k), in evaluation too",
    ),
    "--eval-top-p": (
        SLIME,
        "use --rollout-top-p: hyrl evaluates with the rollout's top-p (only the temperature "
        "has its own flag, --eval-temperature)",
    ),
    "--fetch-trajectory-retry-times": (SLIME, _ROLLOUT_BUFFER),
    "--freeze-indexer": (SLIME, "not supported: hyrl's Qwen3-MoE has no DSA indexer"),
    "--freeze-params-name-list": (SLIME, _WHOLE_MODEL),
    "--get-mismatch-metrics": (
        SLIME,
        "not supported: hyrl always logs the train-inference mismatch (mismatch/*) at every step",
    ),
    "--group-rm": (
        SLIME,
        "not supported: hyrl scores each response on its own (a --custom-rm-path function gets "
        "one response, its label and its finish reason)",
    ),
    "--http-proxy": (
        SLIME,
        "not supported: hyrl has no proxy setting for its requests to the engines",
    ),
    "--keep-old-actor": (
        SLIME,
        "not supported: hyrl takes the old log-probs from the actor itself before its update "
        "(or from the update's own first forward pass when exactly on-policy)",
    ),
    "--load-debug-rollout-data": (SLIME, _DEBUG_REPLAY),
    "--load-debug-rollout-data-subsample": (SLIME, _DEBUG_REPLAY),
    "--load-forge-rollout-data": (SLIME, _DEBUG_REPLAY),
    "--log-correct-samples": (SLIME, "not supported: hyrl logs no response texts"),
    "--log-multi-turn": (SLIME, "not supported: hyrl's rollouts are single-turn"),
    "--log-passrate": (
        SLIME,
        "not supported: hyrl logs pass@k on held-out prompts only (--eval-pass-k), not on the "
        "training rollouts",
    ),
    "--log-probs-chunk-size": (
        SLIME,
        "not supported: hyrl's log-prob pass always works through 512 positions at a time",
    ),
    "--log-probs-max-tokens-per-gpu": (
        SLIME,
        "use --max-tokens-per-gpu: hyrl packs the log-prob pass's micro-batches by the "
        "training limit",
    ),
    "--log-reward-category": (
        SLIME,
        "not supported: hyrl's reward functions return one number, without categories",
    ),
    "--loss-mask-type": (
        SLIME,
        "not supported: hyrl's loss covers every token of a single-turn response "
        "(--overlong-filtering masks truncated ones)",
    ),
    "--loss-type": (
        SLIME,
        "not supported: hyrl trains the policy loss only, no SFT or custom loss (--policy-loss "
        "chooses ppo or gspo)",
    ),
    "--mask-offpolicy-in-partial-rollout": (
        SLIME,
        "not supported: hyrl never carries unfinished responses over to a later rollout; under "
        "--inflight-weight-updates each token keeps the engine log-prob that sampled it, for "
        "--use-tis and --use-mis",
    ),
    "--megatron-config-path": (
        SLIME,
        "not supported: hyrl sets the critic's batch, learning rate and optimizer with its own "
        "flags (--critic-lr, --critic-global-batch-size, ...) and its trunk with --critic-load",
    ),
    "--megatron-deepgemm-forward-layers": (SLIME, _DEEPGEMM),
    "--megatron-deepgemm-forward-modules": (SLIME, _DEEPGEMM),
    "--megatron-deepgemm-moe-forward-layers": (SLIME, _DEEPGEMM),
    "--megatron-deepgemm-moe-forward-modules": (SLIME, _DEEPGEMM),
    "--memory-recorder": (SLIME, _MEMORY_DEBUG),
    "--memory-snapshot-dir": (SLIME, _MEMORY_DEBUG),
    "--memory-snapshot-num-steps": (SLIME, _MEMORY_DEBUG),
    "--metadata-key": (
        SLIME,
        "not supported: hyrl reads only each record's prompt (--input-key) and label (--label-key)",
    ),
    "--min-batch-collection-ratio": (SLIME, _ROLLOUT_BUFFER),
    "--model-name": (
        SLIME,
        "not supported: hyrl's model is Qwen3-MoE, mapped to Hugging Face names by its own table",
    ),
    "--multimodal-keys": (SLIME, "not supported: hyrl trains on text prompts only"),
    "--no-offload-rollout": (SLIME, _NO_OFFLOAD_ROLLOUT),
    "--num-epoch": (
        SLIME,
        "use --num-steps: hyrl counts rollout steps, not epochs (steps = epochs x prompts in "
        "--prompt-data / --rollout-batch-size)",
    ),
    "--num-gpus-per-node": (
        SLIME,
        "not supported: hyrl places its rollout engines with Ray placement groups on the GPUs "
        "Ray sees (--gpus-per-node only informs hyrl plan)",
    ),
    "--offload": (
        SLIME,
        "use --offload-train: with --colocate hyrl's engines always release their GPU memory "
        "while the actor trains, so the trainer's offload is the part to choose (on by default "
        "with --colocate)",
    ),
    "--offload-rollout": (SLIME, _NO_OFFLOAD_ROLLOUT),
    "--only-train-params-name-list": (SLIME, _WHOLE_MODEL),
    "--opd-kl-coef": (SLIME, _OPD),
    "--opd-teacher-ckpt-step": (SLIME, _OPD),
    "--opd-teacher-load": (SLIME, _OPD),
    "--opd-type": (SLIME, _OPD),
    "--opsm-delta": (SLIME, _OPSM),
    "--over-sampling-batch-size": (
        SLIME,
        "not supported: under --dynamic-sampling hyrl generates further rounds of "
        "--rollout-batch-size prompts (at most --dynamic-sampling-max-rounds) instead",
    ),
    "--prefill-num-servers": (SLIME, "not supported: hyrl has no prefill-decode disaggregation"),
    "--profile-target": (SLIME, _PROFILER),
    "--qwen-gdn-backend": (
        SLIME,
        "not supported: hyrl trains Qwen3-MoE only, which has no gated delta-net layers",
    ),
    "--recompute-loss-function": (
        SLIME,
        "not supported: hyrl's log-prob pass always recomputes each chunk of positions in the "
        "backward pass",
    ),
    "--ref-ckpt-step": (SLIME, _REF_INITIAL),
    "--ref-load": (SLIME, _REF_INITIAL),
    "--ref-update-interval": (
        SLIME,
        "not supported: hyrl's reference model stays the initial weights for the whole run",
    ),
    "--release-train": (
        SLIME,
        "not supported: hyrl keeps its trainer alive across steps; with --colocate, "
        "--offload-train moves its GPU memory to the host while the engines generate",
    ),
    "--reset-optimizer-states": (
        SLIME,
        "not supported: hyrl keeps the Adam states across rollout steps",
    ),
    "--reward-key": (SLIME, _REWARD_NUMBER),
    "--rm-url": (
        SLIME,
        "not supported: hyrl has no remote reward model; a --custom-rm-path function may call one",
    ),
    "--rollout-all-samples-process-path": (
        SLIME,
        "not supported: hyrl has no hook over the samples (the filtered ones included)",
    ),
    "--rollout-buffer-url": (SLIME, _ROLLOUT_BUFFER),
    "--rollout-data-postprocess-path": (
        SLIME,
        "not supported: hyrl has no hook between the log-prob pass and the update",
    ),
    "--rollout-data-transport": (
        SLIME,
        "not supported: hyrl's rank 0 drives the engines and sends each rank its rows over a "
        "gloo group; there is no transport to choose",
    ),
    "--rollout-external-engine-addrs": (
        SLIME,
        "use --sglang-router-url: hyrl attaches to SGLang servers started elsewhere through "
        "one sglang-router, not a list of engine addresses",
    ),
    "--rollout-function-path": (
        SLIME,
        "not supported: hyrl's rollout (generate, score, group) is built in; a reward of your "
        "own goes in --custom-rm-path",
    ),
    "--rollout-health-check-first-wait": (SLIME, _HEALTH),
    "--rollout-health-check-interval": (SLIME, _HEALTH),
    "--rollout-health-check-timeout": (SLIME, _HEALTH),
    "--rollout-max-context-len": (
        SLIME,
        "use --rollout-max-prompt-len and --rollout-max-response-len: hyrl bounds the prompt "
        "and the response apart, their sum within --max-position-embeddings",
    ),
    "--rollout-sample-filter-path": (
        SLIME,
        "not supported: hyrl has no per-sample loss filter (--overlong-filtering masks "
        "truncated responses)",
    ),
    "--rollout-sample-hook-path": (
        SLIME,
        "not supported: hyrl has no hook on a generated sample; your --custom-rm-path function "
        "sees each response's text",
    ),
    "--rollout-seed": (
        SLIME,
        "use --seed: hyrl draws the prompt order and the sampling from its one seed (slime "
        "keeps them apart from the trainer's seed)",
    ),
    "--rollout-shuffle": (
        SLIME,
        "not supported: hyrl always shuffles the prompts, a new order every epoch drawn from "
        "--seed",
    ),
    "--rollout-skip-special-tokens": (
        SLIME,
        "not supported: hyrl always decodes a response for its reward without special tokens",
    ),
    "--rollout-stop": (SLIME, _STOP),
    "--rollout-stop-token-ids": (SLIME, _STOP),
    "--rollout-task-type": (SLIME, _ROLLOUT_BUFFER),
    "--rollout-top-k": (
        SLIME,
        "not supported: hyrl samples from the whole vocabulary (no top-k); --rollout-top-p is "
        "its only truncation",
    ),
    "--save-debug-rollout-data": (SLIME, _DEBUG_DUMP),
    "--save-debug-train-data": (SLIME, _DEBUG_DUMP),
    "--save-hf": (
        SLIME,
        "not supported: hyrl saves its own checkpoints (--save); `hyrl convert mcore-to-hf` "
        "exports a step's actor (DIR/step_N/actor) to Hugging Face format",
    ),
    "--sglang-config": (
        SLIME,
        "not supported: hyrl starts identical SGLang servers (--rollout-num-engines) and "
        "passes further server flags through --sglang-server-args or as --sglang-NAME",
    ),
    "--sglang-router-ip": (SLIME, _ROUTER_URL),
    "--sglang-router-port": (SLIME, _ROUTER_URL),
    "--sglang-router-request-timeout-secs": (
        SLIME,
        "use --sglang-request-timeout-s: hyrl's limit on one request to an SGLang server, in "
        "seconds (default 600; slime's router timeout defaults to 14400)",
    ),
    "--sglang-server-concurrency": (
        SLIME,
        "use --rollout-concurrency: the sequences in flight per engine (hyrl's default is 64, "
        "slime's 512)",
    ),
    "--skip-eval-before-train": (
        SLIME,
        "not supported: with --eval-interval above 0 hyrl always evaluates before the first "
        "step and after the last",
    ),
    "--start-rollout-id": (
        SLIME,
        "not supported: hyrl resumes at the rollout step after the one saved in --load, and "
        "starts from the beginning without it",
    ),
    "--tb-experiment-name": (SLIME, _TB_DIR),
    "--tb-project-name": (SLIME, _TB_DIR),
    "--tis-clip-low": (
        SLIME,
        "not supported: hyrl's TIS weight min(ratio, --tis-clip) has no lower bound (slime's "
        "default 0); --use-mis drops tokens below --mis-low instead",
    ),
    "--tool-key": (SLIME, _SINGLE_TURN),
    "--train-backend": (SLIME, "not supported: hyrl trains with megatron-core only"),
    "--train-env-vars": (
        SLIME,
        "not supported: hyrl's ranks inherit their launcher's environment (set the variables "
        "before launch/torchrun.sh or launch/srun.sh)",
    ),
    "--update-weight-delta-checksum": (SLIME, _DELTA_SYNC),
    "--update-weight-delta-encoding": (SLIME, _DELTA_SYNC),
    "--update-weight-disk-dir": (
        SLIME,
        "not supported: hyrl's disk sync (--update-weight-transport disk) writes under "
        "RUN_DIR/rollout_weights, so --run-dir must be on a file system the engines read",
    ),
    "--update-weight-disk-keep-files": (
        SLIME,
        "not supported: hyrl deletes a disk sync's files once the engines have loaded the next one",
    ),
    "--update-weight-local-checkpoint-dir": (SLIME, _DELTA_SYNC),
    "--update-weights-interval": (
        SLIME,
        "not supported: hyrl syncs the weights after every rollout step's update; "
        "--async-rollout with --max-staleness lets generation run that many versions behind",
    ),
    "--use-distributed-post": (
        SLIME,
        "not supported: hyrl's rank 0 sends every request to the engines",
    ),
    "--use-fault-tolerance": (
        SLIME,
        "use --rollout-max-restarts: hyrl always replaces a dead engine and resubmits its "
        "prompts, up to this many restarts per engine",
    ),
    "--use-kl-loss": (
        SLIME,
        "use --kl-loss-coef: hyrl adds the KL-to-reference loss term, and keeps a reference "
        "model, whenever the coefficient is above 0 (no separate switch; at 0 no KL is "
        "computed or logged)",
    ),
    "--use-opd": (SLIME, _OPD),
    "--use-opsm": (SLIME, _OPSM),
    "--use-rollout-entropy": (
        SLIME,
        "not supported: hyrl has no entropy-based loss mask (its log-prob pass gives the "
        "entropy for --entropy-coef)",
    ),
    "--use-rollout-logprobs": (
        SLIME,
        "not supported: hyrl's old log-probs always come from the trainer; --use-tis or "
        "--use-mis weighs tokens by the trainer-to-engine ratio instead",
    ),
    "--use-stateless-adam": (
        SLIME,
        "not supported: hyrl's optimizer is Adam with its moments kept",
    ),
    "--use-tensorboard": (
        SLIME,
        "use --tensorboard-dir: hyrl mirrors its records to TensorBoard when given a directory "
        "(no separate switch)",
    ),
    "--use-unbiased-kl": (
        SLIME,
        "not supported: hyrl's KL loss has no importance-ratio correction (the unbiased "
        "estimate of DeepSeek-V3.2)",
    ),
    "--wandb-always-use-train-step": (
        SLIME,
        "not supported: hyrl always logs to wandb at the optimizer step (each record also "
        "carries its rollout_step)",
    ),
    "--wandb-dir": (SLIME, _WANDB_DIR),
    "--wandb-host": (
        SLIME,
        "not supported: hyrl leaves the wandb server to wandb itself (WANDB_BASE_URL)",
    ),
    "--wandb-key": (
        SLIME,
        "not supported: hyrl leaves the API key to wandb itself (WANDB_API_KEY or `wandb login`)",
    ),
    "--wandb-run-id": (
        SLIME,
        "not supported: hyrl's wandb run id is the run's own (config.json's run_id), so a "
        "resume into the same --run-dir continues the same wandb run",
    ),
}
