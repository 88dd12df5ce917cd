"""Validation: the order in which the concerns' checks (`hyrl.config.concerns`) run on a
RunConfig against the world size, before any process group exists, and `load` (parse,
validate, resolve) for the command line. The order is the order of the errors: the first
problem found is the one reported."""

from __future__ import annotations

import os

from hyrl.config.concerns import (
    algorithm,
    autopilot,
    batch,
    critic,
    data,
    evaluation,
    logs,
    mismatch,
    model,
    optimizer,
    parallel,
    rollout,
    run,
)
from hyrl.config.conditional_flags import check_applies_only_with
from hyrl.config.errors import ConfigError, _fail
from hyrl.config.fields import ResolvedConfig, RunConfig
from hyrl.config.kinds import _check_types
from hyrl.config.parser import parse_args
from hyrl.config.resolve import resolve
from hyrl.config.resume import check_resume
from hyrl.config.rollout_layout import rollout_layout

# Fields that count or size something, concern by concern: must be >= 1.
_POSITIVE_COUNTS = (
    *model.POSITIVE_COUNTS,
    *parallel.POSITIVE_COUNTS,
    *batch.POSITIVE_COUNTS,
    *autopilot.POSITIVE_COUNTS,
    *optimizer.POSITIVE_COUNTS,
    *rollout.POSITIVE_COUNTS,
    *algorithm.POSITIVE_COUNTS,
    *critic.POSITIVE_COUNTS,
    *evaluation.POSITIVE_COUNTS,
    *data.POSITIVE_COUNTS,
    *logs.POSITIVE_COUNTS,
    *run.POSITIVE_COUNTS,
)  # None (not given) is skipped: resolved later.


def _check_ranges(c: RunConfig) -> None:
    """The values as given: counts first (other ranges compare with them), then each
    concern's own ranges."""
    for name in _POSITIVE_COUNTS:
        if getattr(c, name) is not None and getattr(c, name) < 1:
            _fail(name, getattr(c, name), "must be a positive count", "an integer >= 1")
    run.check_given(c)
    parallel.check_given(c)
    optimizer.check_given(c, run=c)
    batch.check_given(c)
    model.check_given(c)
    algorithm.check_given(c, rollout_max_response_len=c.rollout_max_response_len)
    mismatch.check_given(c)
    critic.check_given(c, run=c)
    rollout.check_given(c)
    logs.check_given(c)
    evaluation.check_given(c)
    data.check_given(c)


def validate(cfg: RunConfig, world_size: int, check_files: bool = True) -> None:
    """Raise ConfigError for the first problem found; run before any process group starts.

    Takes a config as parsed (flags not given still None) or a resolved one: it checks the
    values given, then resolves (see `resolve`) and checks the resolved values. Order: types,
    ranges, resolution (learning-rate scaling included), flags given without the condition
    they apply under (`hyrl.config.conditional_flags`: PPO-only flags under grpo, SGLang-only flags
    under hf, ...), minimum learning rates against the resolved rates, parallel layout, batch
    divisibility (actor, --batch-schedule and its autopilot, batch ramp, then critic),
    algorithm/rollout/task (held-out split, prompt and response lengths included),
    --max-tokens-per-gpu against the longest sequence, evaluation (pass@k, response length,
    --tensorboard-dir), --target, --critic-load, --save/--load paths, --max-staleness,
    --run-dir (a run in it only with --load and a matching config.json). Without
    `check_files` (a dry run, which plans from any machine) the data files, the tokenizer,
    --hf-checkpoint and --critic-load need not exist here (`files_not_checked` names them).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(
            "WORLD_SIZE", world_size, "the world size must be a positive integer", "an integer >= 1"
        )
    _check_types(cfg)
    _check_ranges(cfg)
    resolved = resolve(cfg)
    check_applies_only_with(resolved)
    optimizer.check_min_lr(resolved, cfg, batch=resolved)
    critic.check_min_lr(resolved, cfg, batch=resolved, optimizer=resolved)
    parallel.check_layout(
        resolved, world_size, model=resolved, noise_scale_beta=resolved.noise_scale_beta
    )
    parallel.check_virtual_pipeline(resolved, model=resolved)
    batch.check_batch(resolved, cfg, world_size, algorithm=resolved, parallel=resolved)
    batch.check_micro_batch_groups(
        resolved,
        world_size,
        micro_batch=resolved,
        model=resolved,
        parallel=resolved,
        critic_global_batch_size=resolved.critic_global_batch_size,
        critic_micro_batch_size=resolved.critic_micro_batch_size,
    )
    batch.check_schedule(resolved)
    autopilot.check_autopilot(
        resolved,
        world_size,
        batch=resolved,
        micro_batch=resolved,
        parallel=resolved,
        optimizer=resolved,
        critic=resolved,
    )
    batch.check_ramp(resolved, world_size, parallel=resolved)
    critic.check_critic_batch(resolved, cfg, world_size, batch=resolved, parallel=resolved)
    algorithm.check_group_size(resolved, n_samples_per_prompt=resolved.n_samples_per_prompt)
    data.check_task(
        resolved,
        model=resolved,
        eval_interval=resolved.eval_interval,
        rollout_max_response_len=resolved.rollout_max_response_len,
    )
    data.check_prompts_and_rewards(
        resolved, files=check_files, model=resolved, eval_interval=resolved.eval_interval
    )
    data.check_prompt_lengths(
        resolved, model=resolved, rollout_max_response_len=resolved.rollout_max_response_len
    )
    algorithm.check_group_filter(resolved)
    mismatch.check_routing_replay(
        resolved,
        rollout_engine=resolved.rollout_engine,
        sglang_server_args=resolved.sglang_server_args,
    )
    model.check_kernels(resolved)
    rollout_layout(resolved, world_size)
    parallel.check_recompute(resolved, model=resolved)
    batch.check_token_budget(
        resolved,
        model=resolved,
        parallel=resolved,
        data=resolved,
        rollout_max_response_len=resolved.rollout_max_response_len,
    )
    parallel.check_plan_hints(resolved)
    model.check_hf_checkpoint(resolved, files=check_files)
    evaluation.check_eval(resolved, model=resolved, data=resolved, rollout=resolved)
    logs.check_tensorboard_dir(resolved)
    evaluation.check_target(resolved)
    critic.check_critic_load(resolved, files=check_files)
    run.check_save_load(resolved)
    rollout.check_staleness(resolved)
    run.check_run_dir(resolved)
    check_resume(resolved, world_size)


def load(argv: list[str], world_size: int, check_files: bool = True) -> ResolvedConfig:
    """argv (without the command) -> the validated, resolved config the trainer runs with.

    parse_args, then validate, then resolve; raises ConfigError for the first problem found.
    Without `check_files`, files and directories the run reads need not exist (see `validate`).
    """
    cfg = parse_args(argv)
    optimizer.check_rate_given_once(cfg, "")
    optimizer.check_rate_given_once(cfg, "critic_")
    validate(cfg, world_size, check_files)
    return resolve(cfg)


def files_not_checked(c: RunConfig) -> str:
    """The files and directories of c that a run checks before it starts and a dry run does not
    ("--prompt-data X, --hf-checkpoint Y"; "" when c names none): the data, the tokenizer, the
    initial weights, the checkpoint to resume and the autopilot's profile."""
    given = [
        ("--prompt-data", c.prompt_data),
        *(("--eval-prompt-data", path) for path in (c.eval_prompt_data or [])[1::2]),
        ("--tokenizer-path", c.tokenizer_path),
        ("--hf-checkpoint", c.hf_checkpoint),
        ("--critic-load", c.critic_load),
        ("--load", c.load),
        ("--autopilot-profile", c.autopilot_profile),
    ]
    return ", ".join(f"{flag} {path}" for flag, path in given if path)


def world_size_from_env() -> int:
    """WORLD_SIZE as set by torchrun (1 when unset)."""
    text = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(text)
    except ValueError:
        raise ConfigError("WORLD_SIZE", text, "not an integer", "an integer >= 1") from None
