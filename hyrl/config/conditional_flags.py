"""Flags that apply only under a condition, as one table: given without it, a flag would do
nothing, so validation refuses it instead of ignoring it.

Each row names the flags it restricts, the condition (a predicate on the resolved config, and
its text in flag terms for docs/flags.md), the problem and what is allowed. The texts are
`str.format`ted with the config's fields and `flag` (the refused flag). `check_applies_only_with`
evaluates the rows in order and refuses the first flag given whose condition does not hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hyrl.config.concerns.mismatch import engine_returns_routing
from hyrl.config.errors import _fail, flag_name
from hyrl.config.fields import RunConfig, _fields


def _set(value: Any, default: Any) -> bool:
    """Given: not none."""
    return value is not None


def _on(value: Any, default: Any) -> bool:
    """Given: switched on, or set to a value other than none."""
    return value not in (None, False)


def _changed(value: Any, default: Any) -> bool:
    """Given: set to a value other than its default."""
    return value is not None and value != default


@dataclass(frozen=True)
class AppliesOnlyWith:
    """The flags `fields` do something only when `holds(config)`; `condition` says when."""

    fields: tuple[str, ...]
    condition: str
    holds: Callable[[RunConfig], bool]
    problem: str
    allowed: str
    given: Callable[[Any, Any], bool] = _set  # (value, default) -> whether the flag was given


# Flags only PPO uses besides the critic group.
_PPO_ALGORITHM_FLAGS = ("gamma", "lambd", "normalize_advantages", "kl_coef")
_CRITIC_FLAGS = tuple(f.name for f in _fields() if f.metadata["group"] == "critic")
# Flags of SGLang engines: refused with --rollout-engine hf.
SGLANG_ONLY = (
    "sglang_router_url",
    "sglang_mem_fraction_static",
    "sglang_server_args",
    "sglang_request_timeout_s",
    "update_weight_transport",
    "colocate",
    "rollout_num_gpus",
)
# Started by hyrl; attached servers behind --sglang-router-url were started elsewhere.
_ENGINE_FLAGS = (
    "rollout_num_engines",
    "rollout_num_gpus",
    "rollout_num_gpus_per_engine",
    "sglang_mem_fraction_static",
    "sglang_server_args",
)

APPLIES_ONLY_WITH = (
    AppliesOnlyWith(
        ("wandb_exp_name", "wandb_entity", "wandb_group", "wandb_mode", "wandb_tags"),
        "--log-wandb",
        lambda c: c.log_wandb,
        "sets up the wandb mirror, which is off",
        "add --log-wandb, or remove it",
    ),
    AppliesOnlyWith(  # Megatron-LM turns wandb on by --wandb-project alone; hyrl does not
        ("wandb_project",),
        "--log-wandb",
        lambda c: c.log_wandb,
        "names a wandb project, but the wandb mirror is off (in hyrl, unlike Megatron-LM, a "
        "project alone does not turn it on)",
        "add --log-wandb, or remove it",
        given=_changed,
    ),
    AppliesOnlyWith(
        ("stop_at_target",),
        "--target",
        lambda c: c.target is not None,
        "ends the run at --target, which is not given",
        "add --target METRIC=VALUE, or remove it",
        _on,
    ),
    AppliesOnlyWith(
        _PPO_ALGORITHM_FLAGS + _CRITIC_FLAGS,
        "--advantage-estimator gae",
        lambda c: c.advantage_estimator != "grpo",
        "only used by PPO (--advantage-estimator gae); --advantage-estimator is grpo here",
        "remove it, or use --advantage-estimator gae",
        _changed,
    ),
    AppliesOnlyWith(
        ("tis_clip",),
        "--use-tis",
        lambda c: c.use_tis,
        "only used with --use-tis, which is off",
        "add --use-tis, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("mis_low", "mis_high", "mis_level"),
        "--use-mis",
        lambda c: c.use_mis,
        "only used with --use-mis, which is off",
        "add --use-mis, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("use_rollout_routing_replay", "measure_routing_mismatch"),
        "--pipeline-model-parallel-size 1",
        lambda c: c.pipeline_model_parallel_size == 1,
        "routing replay and its measurement map each layer's ids to the routers of one model, "
        "not of a pipeline stage (PP={pipeline_model_parallel_size})",
        "--pipeline-model-parallel-size 1, or no {flag}",
        _on,
    ),
    AppliesOnlyWith(
        ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank"),
        "--pipeline-model-parallel-size > 1",
        lambda c: c.pipeline_model_parallel_size > 1,
        "virtual pipeline stages split each pipeline rank's layers, and there is no pipeline "
        "(PP={pipeline_model_parallel_size})",
        "--pipeline-model-parallel-size > 1, or no {flag}",
        _set,
    ),
    AppliesOnlyWith(
        ("sequence_parallel",),
        "--tensor-model-parallel-size > 1",
        lambda c: c.tensor_model_parallel_size > 1,
        "sequence parallelism needs tensor parallelism (TP=1 here)",
        "--sequence-parallel only with --tensor-model-parallel-size > 1",
        _on,
    ),
    AppliesOnlyWith(
        ("overlong_penalty_factor",),
        "--overlong-buffer-len L",
        lambda c: c.overlong_buffer_len is not None,
        "only used with --overlong-buffer-len, which is not given",
        "add --overlong-buffer-len L, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("gspo_eps_clip", "gspo_eps_clip_high"),
        "--policy-loss gspo",
        lambda c: c.policy_loss == "gspo",
        "only used with --policy-loss gspo (the sequence ratio's clip); it is {policy_loss}",
        "--policy-loss gspo, or --eps-clip / --eps-clip-high for ppo",
        _changed,
    ),
    AppliesOnlyWith(
        ("dynamic_sampling_max_rounds", "dynamic_sampling_filter_path"),
        "--dynamic-sampling",
        lambda c: c.dynamic_sampling,
        "only used with --dynamic-sampling, which is off",
        "add --dynamic-sampling, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("dynamic_sampling",),
        "--advantage-estimator grpo",
        lambda c: c.advantage_estimator == "grpo",
        "drops groups of equal rewards as carrying no advantage, which holds for GRPO's group "
        "baseline, not for PPO's values",
        "remove it, or use --advantage-estimator grpo",
        _on,
    ),
    AppliesOnlyWith(
        ("eval_pass_k", "eval_pass_threshold", "eval_max_response_len"),
        "--eval-interval N (N > 0)",
        lambda c: c.eval_interval > 0,
        "only used by evaluation, which is off (--eval-interval=0)",
        "add --eval-interval N, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("batch_ramp",),
        "--advantage-estimator grpo",
        lambda c: c.advantage_estimator == "grpo",
        "is not supported with PPO yet (the critic's batch would have to follow)",
        "remove it, or use --advantage-estimator grpo",
    ),
    AppliesOnlyWith(
        (
            "autopilot_objective",
            "autopilot_profile",
            "autopilot_min_gain",
            "autopilot_explore_budget",
            "autopilot_k",
            "autopilot_min",
            "autopilot_max",
            "autopilot_hysteresis",
            "autopilot_warmup",
            "critic_autopilot_min",
            "critic_autopilot_max",
        ),
        "--batch-schedule auto",
        lambda c: c.batch_schedule == "auto",
        "only used by the batch-size autopilot, which is off (--batch-schedule is not auto)",
        "add --batch-schedule auto, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("prompt_data", "tokenizer_path", "eval_prompt_data", "rollout_max_prompt_len"),
        "--task prompt_data",
        lambda c: c.task == "prompt_data",
        "applies to --task prompt_data, not {task}",
        "leave it unset, or train on --prompt-data",
    ),
    AppliesOnlyWith(
        ("apply_chat_template",),
        "--task prompt_data",
        lambda c: c.task == "prompt_data",
        "applies to --task prompt_data, not {task}",
        "--no-apply-chat-template",
        _on,
    ),
    AppliesOnlyWith(
        SGLANG_ONLY,
        "--rollout-engine sglang",
        lambda c: c.rollout_engine == "sglang",
        "applies to --rollout-engine sglang only",
        "leave it unset with --rollout-engine hf",
        _on,
    ),
    AppliesOnlyWith(
        ("rollout_num_gpus_per_engine",),
        "--rollout-num-engines N (with --rollout-engine hf)",
        lambda c: c.rollout_engine != "hf" or c.rollout_num_engines is not None,
        "the hf engine runs inside the trainer unless --rollout-num-engines is given",
        "leave it unset, or give --rollout-num-engines N for Ray engine actors",
    ),
    AppliesOnlyWith(
        _ENGINE_FLAGS,
        "no --sglang-router-url",
        lambda c: c.sglang_router_url is None,
        "hyrl starts no engine with --sglang-router-url (the servers behind the router were "
        "started elsewhere)",
        "leave it unset, or drop --sglang-router-url",
    ),
    AppliesOnlyWith(
        ("colocate",),
        "no --sglang-router-url",
        lambda c: c.sglang_router_url is None,
        "attached servers cannot release the training GPUs' memory",
        "--no-colocate with --sglang-router-url",
        _on,
    ),
    AppliesOnlyWith(
        ("offload_train",),
        "--colocate",
        lambda c: c.colocate,
        "offloading frees the training GPUs for colocated engines only, and --colocate is off",
        "--colocate --offload-train, or --no-offload-train",
        _on,
    ),
    # --async-rollout (docs/rollout.md "Asynchronous rollouts")
    AppliesOnlyWith(
        ("max_staleness", "stale_policy"),
        "--async-rollout",
        lambda c: c.async_rollout,
        "only used with --async-rollout, which is off",
        "add --async-rollout, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("inflight_weight_updates",),
        "--async-rollout",
        lambda c: c.async_rollout,
        "pauses the generations of --async-rollout's worker at a weight sync, and "
        "--async-rollout is off (a synchronous run syncs between rollouts)",
        "--async-rollout --inflight-weight-updates, or remove --inflight-weight-updates",
        _on,
    ),
    AppliesOnlyWith(
        ("inflight_weight_updates",),
        "--max-staleness >= 1",
        lambda c: c.max_staleness >= 1,
        "with --max-staleness 0 the trainer waits for each generation, so no weight sync "
        "lands inside one",
        "--max-staleness 1 or more with it, or remove --inflight-weight-updates",
        _on,
    ),
    AppliesOnlyWith(
        ("inflight_segment_tokens",),
        "--inflight-weight-updates",
        lambda c: c.inflight_weight_updates,
        "only used with --inflight-weight-updates, which is off",
        "add --inflight-weight-updates, or remove it",
        _changed,
    ),
    AppliesOnlyWith(
        ("inflight_weight_updates",),
        "no --use-rollout-routing-replay, --measure-routing-mismatch",
        lambda c: not engine_returns_routing(c),
        "a response continued after a weight sync is routed again by the new weights, so the "
        "routing that sampled its earlier tokens is not kept",
        "remove --inflight-weight-updates, or --use-rollout-routing-replay and "
        "--measure-routing-mismatch",
        _on,
    ),
    # before --colocate's row: --offload-train needs --colocate
    AppliesOnlyWith(
        ("async_rollout",),
        "no --offload-train",
        lambda c: not c.offload_train,
        "--offload-train hands the trainer's GPU memory to the engines while they generate, "
        "so generation cannot overlap training",
        "--no-async-rollout with --offload-train, or --no-offload-train",
        _on,
    ),
    AppliesOnlyWith(
        ("async_rollout",),
        "no --colocate",
        lambda c: not c.colocate,
        "colocated engines share the training GPUs (their memory is released while the actor "
        "trains), so generation cannot overlap training",
        "--no-async-rollout with --colocate, or engines on GPUs of their own",
        _on,
    ),
    AppliesOnlyWith(
        ("async_rollout",),
        "no --batch-ramp",
        lambda c: c.batch_ramp is None,
        "rollouts are generated ahead at their own step's size, and a dropped stale batch "
        "would shift the ramp's sizes by a step",
        "remove --batch-ramp, or --no-async-rollout",
        _on,
    ),
    AppliesOnlyWith(
        ("async_rollout",),
        "no --batch-schedule auto",
        lambda c: c.batch_schedule != "auto",
        "rollouts are generated ahead at the batch size of the step that queued them, "
        "before the autopilot sets the next step's from the noise scale",
        "--batch-schedule fixed, or --no-async-rollout",
        _on,
    ),
    AppliesOnlyWith(
        ("stale_policy",),
        "no --dynamic-sampling",
        lambda c: not c.dynamic_sampling,
        "regenerating a batch regenerates its prompts, and --dynamic-sampling's rounds draw "
        "prompts of their own",
        "--stale-policy drop with --dynamic-sampling",
        _changed,
    ),
    AppliesOnlyWith(
        ("recompute_method", "recompute_num_layers"),
        "--recompute-granularity full",
        lambda c: c.recompute_granularity == "full",
        "applies to --recompute-granularity full only",
        "leave it unset, or --recompute-granularity full",
    ),
    AppliesOnlyWith(
        ("max_tokens_per_gpu",),
        "--use-dynamic-batch-size",
        lambda c: c.use_dynamic_batch_size,
        "applies only with --use-dynamic-batch-size",
        "add --use-dynamic-batch-size",
    ),
    AppliesOnlyWith(
        ("save_interval", "keep_checkpoint_every"),
        "--save DIR",
        lambda c: c.save is not None,
        "given without --save (no checkpoint would be written)",
        "--save DIR with it, or none",
    ),
    AppliesOnlyWith(
        ("keep_last_checkpoints",),
        "--save DIR",
        lambda c: c.save is not None,
        "given without --save (no checkpoint would be written)",
        "--save DIR with it, or none",
        given=_changed,
    ),
)


def check_applies_only_with(c: RunConfig) -> None:
    """Raise ConfigError for the first flag of APPLIES_ONLY_WITH given without its condition
    (on a resolved config: --task is set)."""
    defaults = {f.name: f.default for f in _fields()}
    for rule in APPLIES_ONLY_WITH:
        if rule.holds(c):
            continue
        for name in rule.fields:
            value = getattr(c, name)
            if rule.given(value, defaults[name]):
                texts = {**vars(c), "flag": flag_name(name)}
                _fail(name, value, rule.problem.format_map(texts), rule.allowed.format_map(texts))
