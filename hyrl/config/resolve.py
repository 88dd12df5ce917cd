"""Resolution: each flag not given ("none") -> the value it stands for (batch, rates, critic)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hyrl.config.concerns import algorithm, batch, critic, data, evaluation, optimizer
from hyrl.config.fields import ResolvedConfig, RunConfig, _fields
from hyrl.config.kinds import _check_types


def resolve(cfg: RunConfig) -> ResolvedConfig:
    """A new config, a ResolvedConfig, with every flag not given (None) replaced by the value
    it stands for.

    --global-batch-size: P x G / --num-steps-per-rollout when that is given, else P x G.
    --lr: with --base-lr, scaled_lr(--base-lr, B, B0, --lr-scaling) for the resolved B, with
    --base-global-batch-size B0 <- B when not given; else 3e-4. --eval-temperature <-
    --rollout-temperature. --loss-agg-mode <- token-mean, seq-mean-token-mean under
    --policy-loss gspo.
    Under --advantage-estimator gae: each --critic-* setting takes the actor's value
    (--critic-lr <- the resolved --lr, ...; the critic batch <- the resolved actor batch)
    except that --critic-base-lr, when given, sets the critic's rate the same way from the
    critic batch (--critic-lr-scaling <- none, --critic-base-global-batch-size <- the critic
    batch); --gamma and --lambd 1.0, --normalize-advantages on, --value-clip 0.2;
    --critic-load stays none (the actor's initial weights). Under grpo those stay None. Values
    given are kept; resolving a resolved config changes nothing. Raises ConfigError when
    --num-steps-per-rollout does not divide P x G or disagrees with --global-batch-size, when
    --lr and --base-lr are both given (and disagree), and when --lr-scaling (other than none) or
    --base-global-batch-size is given without --base-lr (the same for the --critic-* forms).
    """
    _check_types(cfg)
    b = batch.resolve_global_batch_size(cfg)
    lr, base_b = optimizer.resolve_rate(cfg, "", b, optimizer.DEFAULT_LR)
    cfg = dataclasses.replace(cfg, global_batch_size=b, lr=lr, base_global_batch_size=base_b)
    updates: dict[str, Any] = {}
    updates.update(evaluation.resolve_eval(cfg))
    updates.update(algorithm.resolve_algorithm(cfg))
    updates.update(data.resolve_data(cfg))
    actor = dataclasses.replace(cfg, **updates)
    resolved = ResolvedConfig(**{f.name: getattr(actor, f.name) for f in _fields()})
    return dataclasses.replace(resolved, **critic.resolve_critic(resolved))
