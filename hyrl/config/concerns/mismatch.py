"""MoE stability: the train-inference mismatch between the engine's and the trainer's
probabilities and routing, corrected by importance sampling (--use-tis, --use-mis) or rollout
routing replay (R3), or only measured."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from hyrl.config.concerns.parallel import ParallelFlags
from hyrl.config.errors import _fail
from hyrl.config.kinds import AppliesOnlyWith, _changed, _on, _opt


@dataclass
class MismatchFlags:
    use_tis: bool = _opt(
        False,
        "truncated importance sampling: weight each token's policy-gradient term by "
        "min(pi_old_train / pi_rollout, --tis-clip) (on/off)",
        "mismatch",
    )
    tis_clip: float = _opt(
        2.0, "upper bound C of the truncated importance weight (ratio)", "mismatch"
    )
    use_mis: bool = _opt(
        False,
        "masked importance sampling: drop tokens (or responses, --mis-level sequence) "
        "whose ratio pi_old_train / pi_rollout is outside [--mis-low, --mis-high] (on/off)",
        "mismatch",
    )
    mis_low: float = _opt(0.5, "lower bound L of the kept ratio range (ratio)", "mismatch")
    mis_high: float = _opt(2.0, "upper bound H of the kept ratio range (ratio)", "mismatch")
    mis_level: str = _opt(
        "token",
        "what --use-mis drops (name): token = single tokens; sequence = whole "
        "responses, by the geometric mean of their ratios",
        "mismatch",
        choices=("token", "sequence"),
    )
    use_rollout_routing_replay: bool = _opt(
        False,
        "rollout routing replay (R3): the engine returns the experts it routed every "
        "token to and the trainer's MoE routers reuse them (on/off)",
        "mismatch",
    )
    measure_routing_mismatch: bool = _opt(
        False,
        "the engine returns the experts it routed every token to and the trainer logs how "
        "often its own routing differs (mismatch/routing_diff_frac), without replaying them; "
        "implied by --use-rollout-routing-replay (on/off)",
        "mismatch",
    )


@dataclass(frozen=True)
class MismatchView:
    """The mismatch concern's settings, resolved (`ResolvedConfig.mismatch`)."""

    use_tis: bool
    tis_clip: float
    use_mis: bool
    mis_low: float
    mis_high: float
    mis_level: str
    use_rollout_routing_replay: bool
    measure_routing_mismatch: bool

    @property
    def engine_returns_routing(self) -> bool:
        """Whether the engines return the experts they routed each token to."""
        return self.use_rollout_routing_replay or self.measure_routing_mismatch


# Flags that apply only under a condition (see hyrl.config.conditional_flags): each correction's
# settings, only with it on; routing replay and its measurement, only without a pipeline.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[Any], ...] = (
    AppliesOnlyWith[MismatchFlags](
        ("tis_clip",),
        "--use-tis",
        lambda c: c.use_tis,
        "only used with --use-tis, which is off",
        "add --use-tis, or remove it",
        _changed,
    ),
    AppliesOnlyWith[MismatchFlags](
        ("mis_low", "mis_high", "mis_level"),
        "--use-mis",
        lambda c: c.use_mis,
        "only used with --use-mis, which is off",
        "add --use-mis, or remove it",
        _changed,
    ),
    AppliesOnlyWith[ParallelFlags](
        ("use_rollout_routing_replay", "measure_routing_mismatch"),
        "--pipeline-model-parallel-size 1",
        lambda c: c.pipeline_model_parallel_size == 1,
        "routing replay and its measurement map each layer's ids to the routers of one model, "
        "not of a pipeline stage (PP={pipeline_model_parallel_size})",
        "--pipeline-model-parallel-size 1, or no {flag}",
        _on,
    ),
)


def check_given(c: MismatchFlags) -> None:
    """The importance weights' bounds."""
    if not c.tis_clip >= 1:
        _fail(
            "tis_clip",
            c.tis_clip,
            "the truncation bound of an importance weight must be at "
            "least 1 (below 1 every on-policy token would be down-weighted)",
            "a number >= 1",
        )
    if not 0 <= c.mis_low < 1:
        _fail(
            "mis_low",
            c.mis_low,
            "the kept ratio range must contain 1 (on-policy tokens)",
            "a number in [0, 1)",
        )
    if not c.mis_high > 1:
        _fail(
            "mis_high",
            c.mis_high,
            "the kept ratio range must contain 1 (on-policy tokens)",
            "a number > 1",
        )


def engine_returns_routing(c: MismatchFlags) -> bool:
    """Whether the engines return the experts they routed each token to."""
    return bool(c.use_rollout_routing_replay or c.measure_routing_mismatch)


def check_routing_replay(
    c: MismatchFlags, *, rollout_engine: str, sglang_server_args: str | None
) -> None:
    """SGLang's expert-parallel load balancer and redundant experts make the ids a server
    returns physical expert slots, not the model's experts: replay would use wrong experts.
    `rollout_engine` and `sglang_server_args` are the rollout concern's flags."""

    if not engine_returns_routing(c) or rollout_engine != "sglang":
        return
    switch = (
        "use_rollout_routing_replay" if c.use_rollout_routing_replay else "measure_routing_mismatch"
    )
    tokens = shlex.split(sglang_server_args or "")
    for i, token in enumerate(tokens):
        flag, _, value = token.partition("=")
        if not value and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            value = tokens[i + 1]
        redundant = flag == "--ep-num-redundant-experts" and value not in ("", "0")
        if flag == "--enable-eplb" or redundant:
            _fail(
                switch,
                True,
                f"SGLang's {flag} makes the returned expert ids physical "
                "slots, not the model's experts",
                f"no {flag} in the server flags, or no --{switch.replace('_', '-')}",
            )
