"""Validation: every check of a RunConfig against the world size, run before any process
group exists, and `load` (parse, validate, resolve) for the command line."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from hyrl.config.applies import check_applies_only_with
from hyrl.config.concerns import (
    algorithm,
    autopilot,
    batch,
    critic,
    data,
    evaluation,
    mismatch,
    model,
    optimizer,
    parallel,
    rollout,
)
from hyrl.config.errors import ConfigError, _fail, flag_name
from hyrl.config.fields import (
    RunConfig,
    _fields,
)
from hyrl.config.kinds import _check_types
from hyrl.config.names import canonical_config
from hyrl.config.parser import parse_args
from hyrl.config.resolve import resolve
from hyrl.config.rollout_layout import rollout_layout

# Fields that count or size something: must be >= 1.
_POSITIVE_INTS = (
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
    "save_interval",
    "log_interval",
    "max_skipped_steps",
    "num_steps",
)  # None (not given) is skipped: resolved later.


def _check_ranges(c: RunConfig) -> None:
    for name in _POSITIVE_INTS:
        if getattr(c, name) is not None and getattr(c, name) < 1:
            _fail(name, getattr(c, name), "must be a positive count", "an integer >= 1")
    if c.seed < 0:
        _fail("seed", c.seed, "must not be negative", "an integer >= 0")
    parallel.check_given(c)

    optimizer.check_given(c)
    batch.check_given(c)

    model.check_given(c)

    algorithm.check_given(c)
    mismatch.check_given(c)
    critic.check_given(c)
    rollout.check_given(c)
    if c.log_interval_s is not None and not c.log_interval_s > 0:
        _fail("log_interval_s", c.log_interval_s, "must be positive", "seconds > 0, or none")

    evaluation.check_given(c)
    data.check_given(c)


def _check_tensorboard_dir(c: RunConfig) -> None:
    if c.tensorboard_dir is not None:
        if not c.tensorboard_dir:
            _fail("tensorboard_dir", "", "an empty path", "a directory path, or none")
        if os.path.exists(c.tensorboard_dir) and not os.path.isdir(c.tensorboard_dir):
            _fail(
                "tensorboard_dir",
                c.tensorboard_dir,
                "exists and is not a directory",
                "a directory (created when missing), or none",
            )


# Flags a resumed run (--load into a --run-dir holding a run) may change: its length, where it
# checkpoints and resumes from, how it reports, how it reaches Ray (a requeued job's new head),
# how long collectives may wait, and the trainer's parallel layout and world size (weights and
# optimizer states reshard).
RESUME_MAY_CHANGE = (
    "num_steps",
    "save",
    "save_interval",
    "load",
    "progress",
    "log_interval",
    "log_interval_s",
    "log_wandb",
    "wandb_project",
    "wandb_exp_name",
    "wandb_entity",
    "wandb_group",
    "wandb_mode",
    "wandb_tags",
    "tensorboard_dir",
    "max_skipped_steps",
    "ray_address",
    "distributed_timeout_minutes",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
    "overlap_grad_reduce",
    "ddp_bucket_size",
    "offload_train",  # where memory sits between steps: the state restored is the same
    "qkv_format",  # the same rows, padded or packed
    "recompute_old_log_probs",  # the same old log-probs, from another pass
    "old_log_probs_from_update",
    "world_size",
    "data_parallel_size",
    "run_dir",
)  # a run directory moved or copied elsewhere is the same run


def _check_run_dir(c: RunConfig, world_size: int) -> None:
    if not c.run_dir:
        _fail("run_dir", c.run_dir, "the run directory must be named", "a path")
    if os.path.exists(c.run_dir) and not os.path.isdir(c.run_dir):
        _fail(
            "run_dir", c.run_dir, "exists and is not a directory", "a new directory or an empty one"
        )
    if not os.path.isfile(os.path.join(c.run_dir, "metrics.jsonl")):
        return
    if c.load is None:
        _fail(
            "run_dir",
            c.run_dir,
            "already holds a run; choose a new directory, or resume it with --load CHECKPOINT_DIR",
            "a directory without metrics.jsonl (runs are never overwritten)",
        )
    _check_resumed_config(c, world_size)


# Keys of config.json that record the run rather than its flags (who it is, what it forked,
# what its initial weights came from).
RUN_RECORD_KEYS = ("run_id", "forked_from", "initial_model")


def _check_resumed_config(c: RunConfig, world_size: int) -> None:
    """--load into a run directory: its config.json must match the flags but for
    RESUME_MAY_CHANGE, so the appended records continue the same experiment."""
    import json

    path = os.path.join(c.run_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as err:
        _fail(
            "run_dir",
            c.run_dir,
            f"holds a run whose config.json cannot be read ({err})",
            "a run directory written by hyrl train",
        )
    differs = resume_differences(saved, c, world_size, "in config.json")
    if differs:
        _fail(
            "run_dir",
            c.run_dir,
            "holds a run with another configuration, which --load would "
            "append to (" + "; ".join(differs[:6]) + ")",
            resume_allowed(),
        )


def resume_allowed() -> str:
    """What a resume may change, for messages."""
    names = {f.name for f in _fields()}
    return (
        "the run's own flags (only "
        + ", ".join(flag_name(k) for k in RESUME_MAY_CHANGE if k in names)
        + " and WORLD_SIZE may change), or a new --run-dir"
    )


def resume_differences(saved: dict, c: RunConfig, world_size: int, where: str) -> list[str]:
    """What differs between a saved resolved config (config.json, or the one a checkpoint
    records) and this run's, but for RESUME_MAY_CHANGE and RUN_RECORD_KEYS: one line each,
    e.g. "--lr: 0.0003 in config.json, 0.001 now" (where: "in config.json"). A record written
    before a flag was renamed is read under the new names (`hyrl.config.names.RENAMED`)."""
    import json

    saved = canonical_config(saved)
    now = json.loads(json.dumps(c.to_dict(world_size)))  # tuples -> lists, as config.json has
    names = {f.name for f in _fields()}
    # a key config.json lacks was written by a hyrl before that flag existed: the run ran as
    # the flag's default does, which is what such a key is compared with
    missing: dict[str, Any] = {f.name: f.default for f in _fields() if f.name not in saved}
    written = set(saved)
    if missing:
        as_before = resolve(dataclasses.replace(c, **missing)).to_dict(world_size)
        saved = {**json.loads(json.dumps(as_before)), **saved}
    return [
        f"{flag_name(k) if k in names else k}: {saved.get(k)!r} "
        f"{where if k in written else f'(its default: not {where})'}, "
        f"{now.get(k)!r} now"
        for k in sorted(set(saved) | set(now))
        if k not in RESUME_MAY_CHANGE and k not in RUN_RECORD_KEYS and saved.get(k) != now.get(k)
    ]


def validate(cfg: RunConfig, world_size: int) -> None:
    """Raise ConfigError for the first problem found; run before any process group starts.

    Takes a config as parsed (flags not given still None) or a resolved one: it checks the
    values given, then resolves (see `resolve`) and checks the resolved values. Order: types,
    ranges, resolution (learning-rate scaling included), flags given without the condition
    they apply under (`hyrl.config.applies`: PPO-only flags under grpo, SGLang-only flags
    under hf, ...), minimum learning rates against the resolved rates, parallel layout, batch
    divisibility (actor, --batch-schedule and its autopilot, batch ramp, then critic),
    algorithm/rollout/task (held-out split included), evaluation (pass@k, response length,
    --tensorboard-dir), --target, --critic-load, --save/--load paths, --max-staleness,
    --run-dir (a run in it only with --load and a matching config.json).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(
            "WORLD_SIZE", world_size, "the world size must be a positive integer", "an integer >= 1"
        )
    _check_types(cfg)
    _check_ranges(cfg)
    resolved = resolve(cfg)
    check_applies_only_with(resolved)
    optimizer.check_min_lr(resolved, cfg)
    critic.check_min_lr(resolved, cfg)
    parallel.check_layout(resolved, world_size)
    parallel.check_virtual_pipeline(resolved)
    batch.check_batch(resolved, cfg, world_size)
    batch.check_micro_batch_groups(resolved, world_size)
    batch.check_schedule(resolved)
    autopilot.check_autopilot(resolved, world_size)
    batch.check_ramp(resolved, world_size)
    critic.check_critic_batch(resolved, cfg, world_size)
    algorithm.check_group_size(resolved)
    data.check_task(resolved)
    data.check_prompts_and_rewards(resolved)
    algorithm.check_group_filter(resolved)
    mismatch.check_routing_replay(resolved)
    model.check_kernels(resolved)
    rollout_layout(resolved, world_size)
    parallel.check_recompute(resolved)
    batch.check_token_budget(resolved)
    parallel.check_plan_hints(resolved)
    model.check_hf_checkpoint(resolved)
    evaluation.check_eval(resolved)
    _check_tensorboard_dir(resolved)
    evaluation.check_target(resolved)
    critic.check_critic_load(resolved)
    _check_save_load(resolved)
    rollout.check_staleness(resolved)
    _check_run_dir(resolved, world_size)


def _check_save_load(c: RunConfig) -> None:
    for name in ("save", "load"):
        if getattr(c, name) == "":
            _fail(name, "", "an empty path", "a directory path, or none")


def load(argv: list[str], world_size: int) -> RunConfig:
    """argv (without the command) -> the validated, resolved RunConfig the trainer runs with.

    parse_args, then validate, then resolve; raises ConfigError for the first problem found.
    """
    cfg = parse_args(argv)
    optimizer.check_rate_given_once(cfg, "")
    optimizer.check_rate_given_once(cfg, "critic_")
    validate(cfg, world_size)
    return resolve(cfg)


def world_size_from_env() -> int:
    """WORLD_SIZE as set by torchrun (1 when unset)."""
    text = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(text)
    except ValueError:
        raise ConfigError("WORLD_SIZE", text, "not an integer", "an integer >= 1") from None
