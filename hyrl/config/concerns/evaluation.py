"""Evaluation on held-out prompts (how often, how many samples, pass@k, the sampling and
response length) and the target a run is timed to (--target METRIC=VALUE)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hyrl.config.concerns.data import ARITH_PROMPT_TOKENS
from hyrl.config.errors import ConfigError, _fail
from hyrl.config.kinds import AppliesOnlyWith, _changed, _on, _opt
from hyrl.config.target import TARGET_ALLOWED, TargetSyntaxError
from hyrl.config.target import parse_target as _parse_target

if TYPE_CHECKING:
    from hyrl.config.concerns.data import DataFlags
    from hyrl.config.concerns.model import ModelFlags
    from hyrl.config.concerns.rollout import RolloutFlags


@dataclass
class EvalFlags:
    eval_interval: int = _opt(
        0,
        "rollout steps between evaluations on the held-out prompts (rollout steps; 0 = no "
        "evaluation); when > 0, evaluation also runs before the first step and after the last",
        "eval",
    )
    n_samples_per_eval_prompt: int = _opt(
        1, "responses sampled per held-out prompt, k of the mean@k accuracy (responses)", "eval"
    )
    eval_temperature: float | None = _opt(
        None,
        "sampling temperature for evaluation (dimensionless, >= 0; 0 = greedy); "
        "none = --rollout-temperature",
        "eval",
    )
    eval_pass_k: str | None = _opt(
        None,
        "k values of the logged pass@k, comma-separated, e.g. 1,4 (responses, each at most "
        "--n-samples-per-eval-prompt); the unbiased estimator of Chen et al. 2021 from n = "
        "--n-samples-per-eval-prompt samples per prompt; none = 1, 2, 4, ... below n, and n",
        "eval",
    )
    eval_pass_threshold: float = _opt(
        1.0,
        "a response counts as correct for pass@k when its reward is at least this (reward "
        "units; 1.0 = full marks for the built-in rewards, which lie in [0, 1])",
        "eval",
    )
    eval_max_response_len: int | None = _opt(
        None,
        "longest generated response during evaluation (tokens); none = --rollout-max-response-len",
        "eval",
    )
    target: str | None = _opt(
        None,
        "METRIC=VALUE, e.g. eval/accuracy=0.77 (METRIC under eval/ or train/): the run "
        "records the step, responses and seconds at which METRIC first reaches VALUE; "
        "none = no target",
        "eval",
        run_output=True,
    )
    stop_at_target: bool = _opt(
        False,
        "end the run after the rollout step whose record first reaches --target (on/off; "
        "the checkpoint, summary.json and the records are written as at the last step)",
        "eval",
        run_output=True,
    )


@dataclass(frozen=True)
class EvalView:
    """The evaluation concern's settings, resolved (`ResolvedConfig.evaluation`)."""

    eval_interval: int
    n_samples_per_eval_prompt: int
    eval_temperature: float
    eval_pass_k: str | None
    eval_pass_threshold: float
    eval_max_response_len: int | None
    target: str | None
    stop_at_target: bool


POSITIVE_COUNTS = ("n_samples_per_eval_prompt", "eval_max_response_len")

# Flags that apply only under a condition (see hyrl.config.conditional_flags): evaluation's
# settings, only when it runs.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[EvalFlags], ...] = (
    AppliesOnlyWith(
        ("eval_pass_k", "eval_pass_threshold", "eval_max_response_len"),
        "--eval-interval N (N > 0)",
        lambda c: c.eval_interval > 0,
        "only used by evaluation, which is off (--eval-interval=0)",
        "add --eval-interval N, or remove it",
        _changed,
    ),
)
# --stop-at-target, only with --target: a tuple of its own, as hyrl.config.conditional_flags
# checks it earlier than the row above.
TARGET_APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[EvalFlags], ...] = (
    AppliesOnlyWith(
        ("stop_at_target",),
        "--target",
        lambda c: c.target is not None,
        "ends the run at --target, which is not given",
        "add --target METRIC=VALUE, or remove it",
        _on,
    ),
)


def check_given(c: EvalFlags) -> None:
    """The evaluation interval and temperature."""
    if c.eval_interval < 0:
        _fail(
            "eval_interval",
            c.eval_interval,
            "must not be negative",
            "an integer >= 0 (0 = no evaluation)",
        )
    if c.eval_temperature is not None and not c.eval_temperature >= 0:
        _fail(
            "eval_temperature",
            c.eval_temperature,
            "must not be negative",
            "a number >= 0 (0 = greedy), or none (= --rollout-temperature)",
        )


def resolve(cfg: EvalFlags, *, rollout: RolloutFlags) -> dict[str, Any]:
    """--eval-temperature <- --rollout-temperature."""
    if cfg.eval_temperature is None:
        return {"eval_temperature": rollout.rollout_temperature}
    return {}


def eval_pass_ks(cfg: EvalFlags) -> list[int]:
    """The k values of pass@k, ascending: --eval-pass-k, or 1, 2, 4, ... below n and n itself
    (n = --n-samples-per-eval-prompt; the powers of 2 verl logs, with pass@1 added). Raises
    ConfigError when --eval-pass-k is not distinct integers in [1, n]."""
    n = cfg.n_samples_per_eval_prompt
    if cfg.eval_pass_k is None:
        ks, k = [], 1
        while k < n:
            ks.append(k)
            k *= 2
        return [*ks, n]
    allowed = f"distinct integers in [1, {n}] (--n-samples-per-eval-prompt), comma-separated"
    parts = [p.strip() for p in cfg.eval_pass_k.split(",")]
    try:
        ks = [int(p) for p in parts]
    except ValueError:
        _fail("eval_pass_k", cfg.eval_pass_k, "not comma-separated integers", allowed)
    outside = [k for k in ks if not 1 <= k <= n]
    if outside:
        _fail(
            "eval_pass_k",
            cfg.eval_pass_k,
            f"pass@{outside[0]} needs {outside[0]} samples per prompt, and "
            f"--n-samples-per-eval-prompt is {n}",
            allowed,
        )
    if len(set(ks)) != len(ks):
        _fail("eval_pass_k", cfg.eval_pass_k, "a k appears twice", allowed)
    return sorted(ks)


def eval_max_response_len(cfg: EvalFlags, *, rollout: RolloutFlags) -> int:
    """The longest response evaluation generates: --eval-max-response-len, or
    --rollout-max-response-len when not given."""
    if cfg.eval_max_response_len is None:
        return rollout.rollout_max_response_len
    return cfg.eval_max_response_len


def check_eval(c: EvalFlags, *, model: ModelFlags, data: DataFlags, rollout: RolloutFlags) -> None:
    """pass@k's k values, and the evaluation's response length against the positions (on a
    resolved config: --task is set)."""
    eval_pass_ks(c)
    if c.eval_max_response_len is not None:
        if data.task == "arith_mod10":
            prompt_len, what = ARITH_PROMPT_TOKENS, f"a {ARITH_PROMPT_TOKENS}-token prompt"
        elif data.rollout_max_prompt_len is not None:
            prompt_len = data.rollout_max_prompt_len
            what = f"a prompt of --rollout-max-prompt-len={prompt_len} tokens"
        else:
            prompt_len = model.max_position_embeddings - rollout.rollout_max_response_len
            what = (
                f"a prompt of up to {prompt_len} tokens (--max-position-embeddings="
                f"{model.max_position_embeddings} - --rollout-max-response-len="
                f"{rollout.rollout_max_response_len}, the prompts kept when loading)"
            )
        if prompt_len + c.eval_max_response_len > model.max_position_embeddings:
            room = model.max_position_embeddings - c.eval_max_response_len  # for the prompt
            shorter = (
                f", or --rollout-max-prompt-len at most {room} (drops longer prompts)"
                if data.task == "prompt_data" and room >= 1
                else ""
            )
            _fail(
                "eval_max_response_len",
                c.eval_max_response_len,
                f"{what} plus the response exceeds "
                f"--max-position-embeddings={model.max_position_embeddings}",
                f"at most {model.max_position_embeddings - prompt_len}, or none "
                f"(= --rollout-max-response-len){shorter}",
            )


def parse_target(text: str) -> tuple[str, float]:
    """--target "METRIC=VALUE" -> (METRIC, VALUE) under eval/ or train/ (the rules are
    `hyrl.config.target.parse_target`'s); raises ConfigError on --target otherwise."""
    try:
        return _parse_target(text)
    except TargetSyntaxError as err:
        raise ConfigError("--target", text, err.problem, TARGET_ALLOWED) from None


def check_target(c: EvalFlags) -> None:
    """--target names a metric the run logs."""
    if c.target is None:
        return
    metric, _ = parse_target(c.target)
    if metric.startswith("eval/") and c.eval_interval == 0:
        _fail(
            "target",
            c.target,
            f"{metric} is only measured by evaluation, which is off (--eval-interval=0)",
            "add --eval-interval N",
        )
    match = re.fullmatch(r"eval/(?:[^/]+/)?pass@(\d+)", metric)
    if match and int(match.group(1)) not in eval_pass_ks(c):
        logged = ", ".join(f"pass@{k}" for k in eval_pass_ks(c))
        _fail(
            "target",
            c.target,
            f"{metric} is never logged: evaluation logs {logged} (--eval-pass-k)",
            f"a logged pass@K, or --eval-pass-k including {match.group(1)}",
        )
