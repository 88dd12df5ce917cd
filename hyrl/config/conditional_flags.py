"""Flags that apply only under a condition, gathered into one table: given without it, a flag
would do nothing, so validation refuses it instead of ignoring it.

Each concern (`hyrl.config.concerns`) declares the rows of its own flags beside them, in its
`APPLIES_ONLY_WITH` (`hyrl.config.kinds.AppliesOnlyWith`: the flags it restricts, the
condition, the problem and what is allowed). This module gathers them into `APPLIES_ONLY_WITH`
in one fixed order, the order in which `check_applies_only_with` evaluates them and
docs/flags.md lists them: a config that fails several rows is refused by the first.
"""

from __future__ import annotations

from typing import Any

from hyrl.config.concerns import (
    algorithm,
    autopilot,
    batch,
    critic,
    data,
    evaluation,
    logs,
    mismatch,
    parallel,
    rollout,
    run,
)
from hyrl.config.concerns.rollout import SGLANG_ONLY
from hyrl.config.errors import _fail, flag_name
from hyrl.config.fields import RunConfig, _fields
from hyrl.config.kinds import AppliesOnlyWith

__all__ = ["APPLIES_ONLY_WITH", "SGLANG_ONLY", "check_applies_only_with"]

# The concerns' rows, in the order they are checked. A concern whose rows are not contiguous
# in this order holds them in two tuples (evaluation: --stop-at-target's; parallel: the recompute
# settings'; batch: --max-tokens-per-gpu's). Where rows of two concerns refuse one config,
# the first names the problem: --critic-autopilot-min under grpo is refused as PPO-only
# (critic) before the autopilot's row, and --batch-ramp with --async-rollout under gae as
# not supported with PPO (batch) before --async-rollout's row (rollout).
# Each concern's rows read its own Flags or an earlier concern's: together, any config's.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[Any], ...] = (
    *logs.APPLIES_ONLY_WITH,
    *evaluation.TARGET_APPLIES_ONLY_WITH,
    *critic.APPLIES_ONLY_WITH,
    *mismatch.APPLIES_ONLY_WITH,
    *parallel.APPLIES_ONLY_WITH,
    *algorithm.APPLIES_ONLY_WITH,
    *evaluation.APPLIES_ONLY_WITH,
    *batch.APPLIES_ONLY_WITH,
    *autopilot.APPLIES_ONLY_WITH,
    *data.APPLIES_ONLY_WITH,
    *rollout.APPLIES_ONLY_WITH,
    *parallel.RECOMPUTE_APPLIES_ONLY_WITH,
    *batch.MICRO_BATCH_APPLIES_ONLY_WITH,
    *run.APPLIES_ONLY_WITH,
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
