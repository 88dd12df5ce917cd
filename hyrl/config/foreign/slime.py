"""slime's own flags that `hyrl train` does not declare under the same name, and what hyrl
does instead.

Read at github.com/THUDM/slime 624b824a898ab0ec1fcb4d373004c7f3852bf515: every argument of
slime/utils/arguments.py (its add_argument calls; the Megatron-LM arguments it resets or adds
with reset_arg are in `megatron_lm`, their owner's table), slime's own --sglang-* flags of
slime/backends/sglang_utils/arguments.py, and every flag of scripts/models/qwen3-30B-A3B.sh and
scripts/run-qwen3-30B-A3B.sh.
"""

from __future__ import annotations

import hyrl.config.foreign.reasons as reasons

# Reasons several flags share.
_BALANCE = (
    "not supported: hyrl does not reorder responses across data-parallel ranks by their length or "
    "cost"
)
_CI = "not supported: these are slime's own continuous-integration checks"
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
_ENGINE_FLEET = (
    "not supported: hyrl's training ranks are the processes torchrun starts (launch/torchrun.sh: "
    "NNODES x NPROC, or launch/srun.sh under Slurm)"
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
_MEGATRON_HOOK = "not supported: hyrl has no hooks into its Megatron trainer"
_NO_OFFLOAD_ROLLOUT = (
    "not supported: with --colocate hyrl's SGLang engines always release their GPU memory while "
    "the actor trains and take it back to generate"
)
_OPD = "not supported: hyrl has no on-policy distillation from a teacher model"
_OPSM = "not supported: hyrl has no off-policy sequence masking (OPSM)"
_REF_INITIAL = (
    "not supported: hyrl's reference model (kept only with --kl-loss-coef or --kl-coef above 0) is "
    "a copy of the actor's initial weights (--hf-checkpoint), and a Megatron torch_dist checkpoint "
    "does not load: give the model's Hugging Face directory as --hf-checkpoint (slime, too, starts "
    "the actor from the reference checkpoint when there is none to resume)"
)
_REWARD_NUMBER = (
    "not supported: hyrl's reward functions return one number, so there is no key to pick"
)
_ROLLOUT_BUFFER = (
    "not supported: hyrl has no external rollout buffer service: it generates every rollout itself"
)
_ROUTER_URL = "use --sglang-router-url: hyrl takes the router as one http://HOST:PORT URL"
_SINGLE_TURN = (
    "not supported: hyrl's prompts are single user messages, without tools or further turns"
)
_STOP = (
    "not supported: hyrl's engines stop at the checkpoint's end-of-sequence ids "
    "(generation_config.json, config.json, the tokenizer's) or at --rollout-max-response-len"
)
_TB_DIR = (
    "use --tensorboard-dir: hyrl takes the event directory itself (slime writes under "
    "tensorboard_log/PROJECT/EXPERIMENT)"
)
_WHOLE_MODEL = "not supported: hyrl trains every parameter of the actor"

# flag -> what to do: one sentence, starting either "use --X ..." (the hyrl way to get the same
# effect, saying what differs: units, values) or "not supported: " with the reason (what hyrl
# does instead, or why it does not apply). Sorted alphabetically.
FLAGS: dict[str, str] = {
    "--actor-num-gpus-per-node": _ENGINE_FLEET,
    "--actor-num-nodes": _ENGINE_FLEET,
    "--allgather-cp": reasons.CP,
    "--apply-chat-template-kwargs": (
        "not supported: hyrl renders the chat template with one user message and the "
        "generation prompt, with no further arguments"
    ),
    "--balance-by-flops": _BALANCE,
    "--balance-data": _BALANCE,
    "--buffer-filter-path": (
        "not supported: hyrl keeps no sample buffer to filter (under --async-rollout it queues "
        "whole rollouts, at most --max-staleness)"
    ),
    "--check-weight-update-equal": (
        "not supported: hyrl checks every weight sync through the mismatch/* metrics (a broken "
        "sync shows as a jump), not by comparing weights"
    ),
    "--ci-disable-kl-checker": _CI,
    "--ci-load-grad-norm": _CI,
    "--ci-save-grad-norm": _CI,
    "--ci-test": _CI,
    "--ci-train-rollout-logprob-abs-diff-threshold": _CI,
    "--custom-advantage-function-path": (
        "not supported: hyrl's advantages are built in (--advantage-estimator grpo or gae)"
    ),
    "--custom-config-path": (
        "not supported: hyrl takes its flags from the command line (a recipe script holds "
        "them), not from a YAML file"
    ),
    "--custom-convert-samples-to-train-data-path": (
        "not supported: hyrl builds its training batch from the samples itself, with no hook"
    ),
    "--custom-eval-rollout-log-function-path": _LOG_HOOK,
    "--custom-generate-function-path": _SINGLE_TURN,
    "--custom-loss-function-path": (
        "not supported: hyrl's losses are built in; --policy-loss (ppo, gspo) and "
        "--loss-agg-mode choose among them"
    ),
    "--custom-megatron-before-log-prob-hook-path": _MEGATRON_HOOK,
    "--custom-megatron-before-train-step-hook-path": _MEGATRON_HOOK,
    "--custom-megatron-init-path": _MEGATRON_HOOK,
    "--custom-model-provider-path": (
        "not supported: hyrl builds its Qwen3-MoE GPTModel from its model flags (--num-layers, "
        "--num-experts, ...)"
    ),
    "--custom-pg-loss-reducer-function-path": (
        "use --loss-agg-mode: hyrl's built-in reductions of the policy loss (token-mean, "
        "seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm) instead of a "
        "function of your own"
    ),
    "--custom-reward-post-process-path": (
        "not supported: hyrl's reward shaping is built in (GRPO's group baseline, "
        "--overlong-buffer-len)"
    ),
    "--custom-rollout-log-function-path": _LOG_HOOK,
    "--custom-tis-function-path": (
        "not supported: hyrl's importance corrections are built in, --use-tis (truncated) and "
        "--use-mis (masked)"
    ),
    "--custom-update-weight-post-write-path": (
        "not supported: hyrl has no hook between writing a disk sync and the engines loading it"
    ),
    "--data-pad-size-multiplier": (
        "not supported: hyrl pads a micro-batch to its longest row, or packs it (--qkv-format "
        "thd) and rounds the total up to what tensor parallelism needs"
    ),
    "--data-source-path": (
        "not supported: hyrl's prompts come from --prompt-data or its built-in task, with no "
        "data-source class to plug in"
    ),
    "--debug-rollout-only": (
        "not supported: hyrl always trains on what it generates (hyrl profile-rollout measures "
        "generation alone)"
    ),
    "--debug-train-only": _DEBUG_REPLAY,
    "--disable-compute-advantages-and-returns": (
        "not supported: hyrl always computes advantages (--advantage-estimator grpo or gae)"
    ),
    "--disable-grpo-std-normalization": (
        "use --no-grpo-std-normalization: the same switch under hyrl's name (the group "
        "advantage not divided by the group's reward std)"
    ),
    "--disable-rewards-normalization": (
        "not supported: hyrl's GRPO always subtracts the group's mean reward "
        "(--no-grpo-std-normalization drops only the division by its std)"
    ),
    "--disable-rollout-global-dataset": (
        "not supported: hyrl always serves the prompts of --prompt-data as one shuffled stream"
    ),
    "--disable-wandb-random-suffix": (
        "not supported: hyrl adds no random suffix: the wandb run is named --wandb-exp-name, "
        "else after the run directory"
    ),
    "--dump-details": _DEBUG_DUMP,
    "--enable-mtp-training": reasons.MTP,
    "--eps-clip-c": "not supported: hyrl has no dual-clip PPO bound",
    "--eval-config": (
        "use --eval-prompt-data: hyrl takes held-out sets as NAME FILE pairs that share "
        "--n-samples-per-eval-prompt, --eval-temperature and --eval-max-response-len"
    ),
    "--eval-function-path": (
        "not supported: hyrl evaluates with the rollout's engines and the training reward, "
        "with no hook"
    ),
    "--eval-input-key": (
        "use --input-key: hyrl reads the held-out files with the training prompts' keys"
    ),
    "--eval-label-key": (
        "use --label-key: hyrl reads the held-out files with the training prompts' keys"
    ),
    "--eval-max-context-len": (
        "use --rollout-max-prompt-len and --eval-max-response-len: hyrl bounds the prompt and "
        "the response apart, their sum within --max-position-embeddings"
    ),
    "--eval-max-prompt-len": (
        "use --rollout-max-prompt-len: hyrl drops held-out prompts by the training limit"
    ),
    "--eval-min-new-tokens": "not supported: hyrl sets no minimum response length",
    "--eval-reward-key": _REWARD_NUMBER,
    "--eval-tool-key": _SINGLE_TURN,
    "--eval-top-k": (
        "not supported: hyrl samples from the whole vocabulary (no top-k), in evaluation too"
    ),
    "--eval-top-p": (
        "use --rollout-top-p: hyrl evaluates with the rollout's top-p (only the temperature "
        "has its own flag, --eval-temperature)"
    ),
    "--fetch-trajectory-retry-times": _ROLLOUT_BUFFER,
    "--freeze-indexer": "not supported: hyrl's Qwen3-MoE has no DSA indexer",
    "--freeze-params-name-list": _WHOLE_MODEL,
    "--get-mismatch-metrics": (
        "not supported: hyrl always logs the train-inference mismatch (mismatch/*) at every step"
    ),
    "--group-rm": (
        "not supported: hyrl scores each response on its own (a --custom-rm-path function gets "
        "one response, its label and its finish reason)"
    ),
    "--http-proxy": "not supported: hyrl has no proxy setting for its requests to the engines",
    "--keep-old-actor": (
        "not supported: hyrl takes the old log-probs from the actor itself before its update "
        "(or from the update's own first forward pass when exactly on-policy)"
    ),
    "--load-debug-rollout-data": _DEBUG_REPLAY,
    "--load-debug-rollout-data-subsample": _DEBUG_REPLAY,
    "--load-forge-rollout-data": _DEBUG_REPLAY,
    "--log-correct-samples": "not supported: hyrl logs no response texts",
    "--log-multi-turn": "not supported: hyrl's rollouts are single-turn",
    "--log-passrate": (
        "not supported: hyrl logs pass@k on held-out prompts only (--eval-pass-k), not on the "
        "training rollouts"
    ),
    "--log-probs-chunk-size": (
        "not supported: hyrl's log-prob pass always works through 512 positions at a time"
    ),
    "--log-probs-max-tokens-per-gpu": (
        "use --max-tokens-per-gpu: hyrl packs the log-prob pass's micro-batches by the "
        "training limit"
    ),
    "--log-reward-category": (
        "not supported: hyrl's reward functions return one number, without categories"
    ),
    "--loss-mask-type": (
        "not supported: hyrl's loss covers every token of a single-turn response "
        "(--overlong-filtering masks truncated ones)"
    ),
    "--loss-type": (
        "not supported: hyrl trains the policy loss only, no SFT or custom loss (--policy-loss "
        "chooses ppo or gspo)"
    ),
    "--mask-offpolicy-in-partial-rollout": (
        "not supported: hyrl never carries unfinished responses over to a later rollout; under "
        "--inflight-weight-updates each token keeps the engine log-prob that sampled it, for "
        "--use-tis and --use-mis"
    ),
    "--megatron-config-path": (
        "not supported: hyrl sets the critic's batch, learning rate and optimizer with its own "
        "flags (--critic-lr, --critic-global-batch-size, ...) and its trunk with --critic-load"
    ),
    "--megatron-deepgemm-forward-layers": _DEEPGEMM,
    "--megatron-deepgemm-forward-modules": _DEEPGEMM,
    "--megatron-deepgemm-moe-forward-layers": _DEEPGEMM,
    "--megatron-deepgemm-moe-forward-modules": _DEEPGEMM,
    "--memory-recorder": reasons.MEMORY_DEBUG,
    "--memory-snapshot-dir": reasons.MEMORY_DEBUG,
    "--memory-snapshot-num-steps": reasons.MEMORY_DEBUG,
    "--metadata-key": (
        "not supported: hyrl reads only each record's prompt (--input-key) and label (--label-key)"
    ),
    "--min-batch-collection-ratio": _ROLLOUT_BUFFER,
    "--model-name": (
        "not supported: hyrl's model is Qwen3-MoE, mapped to Hugging Face names by its own table"
    ),
    "--multimodal-keys": "not supported: hyrl trains on text prompts only",
    "--no-offload-rollout": _NO_OFFLOAD_ROLLOUT,
    "--num-epoch": (
        "use --num-steps: hyrl counts rollout steps, not epochs (steps = epochs x prompts in "
        "--prompt-data / --rollout-batch-size)"
    ),
    "--num-gpus-per-node": (
        "not supported: hyrl places its rollout engines with Ray placement groups on the GPUs "
        "Ray sees (--gpus-per-node only informs hyrl plan)"
    ),
    "--offload": (
        "use --offload-train: with --colocate hyrl's engines always release their GPU memory "
        "while the actor trains, so the trainer's offload is the part to choose (on by default "
        "with --colocate)"
    ),
    "--offload-rollout": _NO_OFFLOAD_ROLLOUT,
    "--only-train-params-name-list": _WHOLE_MODEL,
    "--opd-kl-coef": _OPD,
    "--opd-teacher-ckpt-step": _OPD,
    "--opd-teacher-load": _OPD,
    "--opd-type": _OPD,
    "--opsm-delta": _OPSM,
    "--over-sampling-batch-size": (
        "not supported: under --dynamic-sampling hyrl generates further rounds of "
        "--rollout-batch-size prompts (at most --dynamic-sampling-max-rounds) instead"
    ),
    "--prefill-num-servers": "not supported: hyrl has no prefill-decode disaggregation",
    "--profile-target": reasons.PROFILER,
    "--qwen-gdn-backend": (
        "not supported: hyrl trains Qwen3-MoE only, which has no gated delta-net layers"
    ),
    "--recompute-loss-function": (
        "not supported: hyrl's log-prob pass always recomputes each chunk of positions in the "
        "backward pass"
    ),
    "--ref-ckpt-step": _REF_INITIAL,
    "--ref-load": _REF_INITIAL,
    "--ref-update-interval": (
        "not supported: hyrl's reference model stays the initial weights for the whole run"
    ),
    "--release-train": (
        "not supported: hyrl keeps its trainer alive across steps; with --colocate, "
        "--offload-train moves its GPU memory to the host while the engines generate"
    ),
    "--reset-optimizer-states": "not supported: hyrl keeps the Adam states across rollout steps",
    "--reward-key": _REWARD_NUMBER,
    "--rm-url": (
        "not supported: hyrl has no remote reward model; a --custom-rm-path function may call one"
    ),
    "--rollout-all-samples-process-path": (
        "not supported: hyrl has no hook over the samples (the filtered ones included)"
    ),
    "--rollout-buffer-url": _ROLLOUT_BUFFER,
    "--rollout-data-postprocess-path": (
        "not supported: hyrl has no hook between the log-prob pass and the update"
    ),
    "--rollout-data-transport": (
        "not supported: hyrl's rank 0 drives the engines and sends each rank its rows over a "
        "gloo group; there is no transport to choose"
    ),
    "--rollout-external-engine-addrs": (
        "use --sglang-router-url: hyrl attaches to SGLang servers started elsewhere through "
        "one sglang-router, not a list of engine addresses"
    ),
    "--rollout-function-path": (
        "not supported: hyrl's rollout (generate, score, group) is built in; a reward of your "
        "own goes in --custom-rm-path"
    ),
    "--rollout-health-check-first-wait": _HEALTH,
    "--rollout-health-check-interval": _HEALTH,
    "--rollout-health-check-timeout": _HEALTH,
    "--rollout-max-context-len": (
        "use --rollout-max-prompt-len and --rollout-max-response-len: hyrl bounds the prompt "
        "and the response apart, their sum within --max-position-embeddings"
    ),
    "--rollout-sample-filter-path": (
        "not supported: hyrl has no per-sample loss filter (--overlong-filtering masks "
        "truncated responses)"
    ),
    "--rollout-sample-hook-path": (
        "not supported: hyrl has no hook on a generated sample; your --custom-rm-path function "
        "sees each response's text"
    ),
    "--rollout-seed": (
        "use --seed: hyrl draws the prompt order and the sampling from its one seed (slime "
        "keeps them apart from the trainer's seed)"
    ),
    "--rollout-shuffle": (
        "not supported: hyrl always shuffles the prompts, a new order every epoch drawn from --seed"
    ),
    "--rollout-skip-special-tokens": (
        "not supported: hyrl always decodes a response for its reward without special tokens"
    ),
    "--rollout-stop": _STOP,
    "--rollout-stop-token-ids": _STOP,
    "--rollout-task-type": _ROLLOUT_BUFFER,
    "--rollout-top-k": (
        "not supported: hyrl samples from the whole vocabulary (no top-k); --rollout-top-p is "
        "its only truncation"
    ),
    "--save-debug-rollout-data": _DEBUG_DUMP,
    "--save-debug-train-data": _DEBUG_DUMP,
    "--save-hf": (
        "not supported: hyrl saves its own checkpoints (--save); `hyrl convert mcore-to-hf` "
        "exports a step's actor (DIR/step_N/actor) to Hugging Face format"
    ),
    "--sglang-config": (
        "not supported: hyrl starts identical SGLang servers (--rollout-num-engines) and "
        "passes further server flags through --sglang-server-args or as --sglang-NAME"
    ),
    "--sglang-router-ip": _ROUTER_URL,
    "--sglang-router-port": _ROUTER_URL,
    "--sglang-router-request-timeout-secs": (
        "use --sglang-request-timeout-s: hyrl's limit on one request to an SGLang server, in "
        "seconds (default 600; slime's router timeout defaults to 14400)"
    ),
    "--sglang-server-concurrency": (
        "use --rollout-concurrency: the sequences in flight per engine (hyrl's default is 64, "
        "slime's 512)"
    ),
    "--skip-eval-before-train": (
        "not supported: with --eval-interval above 0 hyrl always evaluates before the first "
        "step and after the last"
    ),
    "--start-rollout-id": (
        "not supported: hyrl resumes at the rollout step after the one saved in --load, and "
        "starts from the beginning without it"
    ),
    "--tb-experiment-name": _TB_DIR,
    "--tb-project-name": _TB_DIR,
    "--tis-clip-low": (
        "not supported: hyrl's TIS weight min(ratio, --tis-clip) has no lower bound (slime's "
        "default 0); --use-mis drops tokens below --mis-low instead"
    ),
    "--tool-key": _SINGLE_TURN,
    "--train-backend": "not supported: hyrl trains with megatron-core only",
    "--train-env-vars": (
        "not supported: hyrl's ranks inherit their launcher's environment (set the variables "
        "before launch/torchrun.sh or launch/srun.sh)"
    ),
    "--update-weight-delta-checksum": _DELTA_SYNC,
    "--update-weight-delta-encoding": _DELTA_SYNC,
    "--update-weight-disk-dir": (
        "not supported: hyrl's disk sync (--update-weight-transport disk) writes under "
        "RUN_DIR/rollout_weights, so --run-dir must be on a file system the engines read"
    ),
    "--update-weight-disk-keep-files": (
        "not supported: hyrl deletes a disk sync's files once the engines have loaded the next one"
    ),
    "--update-weight-local-checkpoint-dir": _DELTA_SYNC,
    "--update-weights-interval": (
        "not supported: hyrl syncs the weights after every rollout step's update; "
        "--async-rollout with --max-staleness lets generation run that many versions behind"
    ),
    "--use-distributed-post": "not supported: hyrl's rank 0 sends every request to the engines",
    "--use-fault-tolerance": (
        "use --rollout-max-restarts: hyrl always replaces a dead engine and resubmits its "
        "prompts, up to this many restarts per engine"
    ),
    "--use-kl-loss": (
        "use --kl-loss-coef: hyrl adds the KL-to-reference loss term, and keeps a reference "
        "model, whenever the coefficient is above 0 (no separate switch; at 0 no KL is "
        "computed or logged)"
    ),
    "--use-opd": _OPD,
    "--use-opsm": _OPSM,
    "--use-rollout-entropy": (
        "not supported: hyrl has no entropy-based loss mask (its log-prob pass gives the "
        "entropy for --entropy-coef)"
    ),
    "--use-rollout-logprobs": (
        "not supported: hyrl's old log-probs always come from the trainer; --use-tis or "
        "--use-mis weighs tokens by the trainer-to-engine ratio instead"
    ),
    "--use-stateless-adam": "not supported: hyrl's optimizer is Adam with its moments kept",
    "--use-tensorboard": (
        "use --tensorboard-dir: hyrl mirrors its records to TensorBoard when given a directory "
        "(no separate switch)"
    ),
    "--use-unbiased-kl": (
        "not supported: hyrl's KL loss has no importance-ratio correction (the unbiased "
        "estimate of DeepSeek-V3.2)"
    ),
    "--wandb-always-use-train-step": (
        "not supported: hyrl always logs to wandb at the optimizer step (each record also "
        "carries its rollout_step)"
    ),
    "--wandb-dir": reasons.WANDB_DIR,
    "--wandb-host": "not supported: hyrl leaves the wandb server to wandb itself (WANDB_BASE_URL)",
    "--wandb-key": (
        "not supported: hyrl leaves the API key to wandb itself (WANDB_API_KEY or `wandb login`)"
    ),
    "--wandb-run-id": (
        "not supported: hyrl's wandb run id is the run's own (config.json's run_id), so a "
        "resume into the same --run-dir continues the same wandb run"
    ),
}
