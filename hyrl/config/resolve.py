"""Resolution: each flag not given ("none") -> the value it stands for. The rules are the
concerns' own (`hyrl.config.concerns`); this is their order: the actor's side first (B, the
learning rate scaled to it, evaluation, algorithm and task defaults), then the critic's from
the resolved actor."""

from __future__ import annotations

import dataclasses
from typing import Any

from hyrl.config.concerns import algorithm, batch, critic, data, evaluation, optimizer
from hyrl.config.fields import ResolvedConfig, RunConfig, _fields
from hyrl.config.kinds import _check_types


def _with(cfg: RunConfig, updates: dict[str, Any]) -> RunConfig:
    """`cfg` with a concern's resolved values `updates` (field name -> value)."""
    return dataclasses.replace(cfg, **updates)


def resolve(cfg: RunConfig) -> ResolvedConfig:
    """A new config, a ResolvedConfig, with every flag not given (None) replaced by the value
    it stands for; values given are kept, and resolving a resolved config changes nothing.

    --global-batch-size: P x G / --num-steps-per-rollout when that is given, else P x G
    (`batch.resolve`). --lr: with --base-lr, scaled_lr(--base-lr, B, B0,
    --lr-scaling) for the resolved B, with --base-global-batch-size B0 <- B when not given; else
    3e-4 (`optimizer.resolve`). --eval-temperature <- --rollout-temperature
    (`evaluation`). --loss-agg-mode <- token-mean, seq-mean-token-mean under --policy-loss gspo;
    under gae --gamma and --lambd 1.0, --normalize-advantages on (`algorithm`). --task and
    --rm-type (`data`). Under --advantage-estimator gae each --critic-* setting takes the
    actor's resolved value, except that --critic-base-lr, when given, sets the critic's rate
    from the critic batch as --base-lr does the actor's; --value-clip 0.2; --critic-load stays
    none (`critic.resolve`). Under grpo those stay None.

    Raises ConfigError when --num-steps-per-rollout does not divide P x G or disagrees with
    --global-batch-size, when --lr and --base-lr are both given (and disagree), and when
    --lr-scaling (other than none) or --base-global-batch-size is given without --base-lr (the
    same for the --critic-* forms).
    """
    _check_types(cfg)
    # The concerns of the actor's side in the order they resolve, each on the values resolved
    # before it (the rate is scaled to the resolved B) and given the earlier concerns' flags;
    # the critic resolves last, from the actor's.
    cfg = _with(cfg, batch.resolve(cfg, algorithm=cfg))
    cfg = _with(cfg, optimizer.resolve(cfg, batch=cfg))
    cfg = _with(cfg, evaluation.resolve(cfg, rollout=cfg))
    cfg = _with(cfg, algorithm.resolve(cfg))
    cfg = _with(cfg, data.resolve(cfg))
    resolved = ResolvedConfig(**{f.name: getattr(cfg, f.name) for f in _fields()})
    return dataclasses.replace(
        resolved,
        **critic.resolve(resolved, algorithm=resolved, batch=resolved, optimizer=resolved),
    )
