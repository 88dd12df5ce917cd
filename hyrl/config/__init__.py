"""Run configuration for `hyrl train`: every flag declared once, parsed and validated up front.

Each flag is one field of `RunConfig` (`fields`), declared by its concern with the rules of
what it stands for when not given and of its checks (`concerns`: model, parallel, batch,
autopilot, optimizer, rollout, algorithm, critic, evaluation, mismatch, data, run, logs). The
command-line parser is generated from the fields (`--some-name` for field `some_name`,
`parser`). `parse_args` turns argv into a `RunConfig` and `validate` checks it against the
world size (`validate`). Flags whose default is "none" mean "not given": `resolve` returns a
`ResolvedConfig` with each of them replaced by the value it stands for (the global batch from
P x G, the learning rate from the default or from a base recipe scaled to the global batch,
see `hyrl.config.schedules.scaled_lr`, the critic's settings from the actor's under PPO), whose
resolved fields have resolved types (`global_batch_size: int`); `load` does all three (parse,
validate, resolve) for the command line. All of them raise `ConfigError` (`errors`), which
names the flag, the offending value and what is allowed, before any process group or model
exists.

The package uses the standard library only (no torch, no megatron) so that it is quick to
import and usable on a login node. The names below are its public face. The learning-rate
rule it uses has its own owner (`hyrl.config.schedules`); the rollout layout (which engines,
how many GPUs, which weight-update transport) is `hyrl.config.rollout_layout`.
"""

from hyrl.config.concerns.autopilot import autopilot_batches, critic_autopilot_batches
from hyrl.config.concerns.batch import batch_ramp_unit, batch_schedule
from hyrl.config.concerns.critic import CriticView
from hyrl.config.concerns.data import ARITH_PROMPT_TOKENS, DATA_EXTENSIONS, TASK_VOCAB_SIZE
from hyrl.config.concerns.evaluation import eval_max_response_len, eval_pass_ks, parse_target
from hyrl.config.concerns.mismatch import engine_returns_routing
from hyrl.config.concerns.optimizer import DEFAULT_LR
from hyrl.config.concerns.rollout import offloads_train
from hyrl.config.conditional_flags import SGLANG_ONLY
from hyrl.config.errors import HELP_HINT, ConfigError, flag_name
from hyrl.config.fields import (
    GROUP_TITLES,
    GROUPS,
    ResolvedConfig,
    RunConfig,
    old_log_probs_from_update,
)
from hyrl.config.parser import (
    EXCLUSIVE_FLAGS,
    RECIPE_MARKER,
    SGLANG_PASS_PREFIX,
    appended_wins,
    build_parser,
    field_parser,
    parse_args,
    parse_given,
)
from hyrl.config.resolve import resolve
from hyrl.config.resume import (
    RESUME_MAY_CHANGE,
    RUN_RECORD_KEYS,
    resume_allowed,
    resume_differences,
)
from hyrl.config.validate import (
    files_not_checked,
    load,
    validate,
    world_size_from_env,
)

__all__ = [
    "ARITH_PROMPT_TOKENS",
    "DATA_EXTENSIONS",
    "DEFAULT_LR",
    "EXCLUSIVE_FLAGS",
    "GROUPS",
    "GROUP_TITLES",
    "HELP_HINT",
    "RECIPE_MARKER",
    "RESUME_MAY_CHANGE",
    "RUN_RECORD_KEYS",
    "SGLANG_ONLY",
    "SGLANG_PASS_PREFIX",
    "TASK_VOCAB_SIZE",
    "ConfigError",
    "CriticView",
    "ResolvedConfig",
    "RunConfig",
    "appended_wins",
    "autopilot_batches",
    "batch_ramp_unit",
    "batch_schedule",
    "critic_autopilot_batches",
    "build_parser",
    "engine_returns_routing",
    "eval_max_response_len",
    "eval_pass_ks",
    "field_parser",
    "files_not_checked",
    "flag_name",
    "load",
    "offloads_train",
    "old_log_probs_from_update",
    "parse_args",
    "parse_given",
    "parse_target",
    "resume_allowed",
    "resume_differences",
    "resolve",
    "validate",
    "world_size_from_env",
]
