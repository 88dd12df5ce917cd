"""Specification of hyrl.config.conditional_flags: a flag that applies only under a condition is
refused, not ignored, when given without it; each concern's rows say which of its flags and
when, and one table gathers them."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

from hyrl.config import ConfigError, RunConfig, build_parser, concerns, parse_args, validate
from hyrl.config.conditional_flags import APPLIES_ONLY_WITH
from hyrl.config.kinds import AppliesOnlyWith


def test_the_table_gathers_every_row_of_every_concern_once():
    declared = [
        row
        for info in pkgutil.iter_modules(concerns.__path__)
        for value in vars(importlib.import_module(f"{concerns.__name__}.{info.name}")).values()
        if isinstance(value, tuple) and value and all(isinstance(r, AppliesOnlyWith) for r in value)
        for row in value
    ]
    assert len(declared) == len(APPLIES_ONLY_WITH)
    assert sorted(map(id, declared)) == sorted(map(id, APPLIES_ONLY_WITH))


def test_every_row_restricts_declared_fields_under_a_condition_in_flag_terms():
    names = {f.name for f in dataclasses.fields(RunConfig)}
    flags = {s for a in build_parser()._actions for s in a.option_strings}
    for rule in APPLIES_ONLY_WITH:
        assert rule.fields and set(rule.fields) <= names, rule.fields
        assert any(word in flags for word in rule.condition.split()), rule.condition
        assert rule.problem and rule.allowed


def test_defaults_satisfy_every_row():
    """Nothing given: no flag is refused (the defaults are not 'given')."""
    cfg = RunConfig()
    for rule in APPLIES_ONLY_WITH:
        if not rule.holds(cfg):
            defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
            assert not any(rule.given(getattr(cfg, n), defaults[n]) for n in rule.fields)


# One case per row: (argv, world size, the refused flag, its value, words of the problem).
CASES = [
    (("--wandb-group", "g"), 1, "--wandb-group", "g", "sets up the wandb mirror, which is off"),
    (("--wandb-project", "p"), 1, "--wandb-project", "p", "names a wandb project, but the"),
    (("--stop-at-target",), 1, "--stop-at-target", True, "ends the run at --target"),
    (("--gamma", "0.9"), 1, "--gamma", 0.9, "only used by PPO"),
    (("--critic-lr", "1e-5"), 1, "--critic-lr", 1e-5, "only used by PPO"),
    (("--tis-clip", "3"), 1, "--tis-clip", 3.0, "only used with --use-tis, which is off"),
    (("--mis-high", "3"), 1, "--mis-high", 3.0, "only used with --use-mis, which is off"),
    (
        ("--overlong-penalty-factor", "0.5"),
        1,
        "--overlong-penalty-factor",
        0.5,
        "only used with --overlong-buffer-len",
    ),
    (
        ("--gspo-eps-clip", "1e-3"),
        1,
        "--gspo-eps-clip",
        1e-3,
        "only used with --policy-loss gspo",
    ),
    (
        ("--dynamic-sampling-max-rounds", "3"),
        1,
        "--dynamic-sampling-max-rounds",
        3,
        "only used with --dynamic-sampling, which is off",
    ),
    (
        ("--advantage-estimator", "gae", "--dynamic-sampling"),
        1,
        "--dynamic-sampling",
        True,
        "not for PPO's values",
    ),
    (
        ("--pipeline-model-parallel-size", "2", "--measure-routing-mismatch"),
        2,
        "--measure-routing-mismatch",
        True,
        "not of a pipeline stage (PP=2)",
    ),
    (
        ("--num-layers", "4", "--num-virtual-stages-per-pipeline-rank", "2"),
        1,
        "--num-virtual-stages-per-pipeline-rank",
        2,
        "virtual pipeline stages split each pipeline rank's layers, and there is no pipeline",
    ),
    (
        ("--sequence-parallel",),
        1,
        "--sequence-parallel",
        True,
        "sequence parallelism needs tensor parallelism",
    ),
    (
        ("--eval-pass-k", "1"),
        1,
        "--eval-pass-k",
        "1",
        "only used by evaluation, which is off",
    ),
    (
        ("--advantage-estimator", "gae", "--batch-ramp", "128:256:10"),
        1,
        "--batch-ramp",
        "128:256:10",
        "is not supported with PPO yet",
    ),
    (
        ("--autopilot-max", "256"),
        1,
        "--autopilot-max",
        256,
        "only used by the batch-size autopilot, which is off",
    ),
    (
        ("--rollout-max-prompt-len", "8"),
        1,
        "--rollout-max-prompt-len",
        8,
        "applies to --task prompt_data, not arith_mod10",
    ),
    (
        ("--apply-chat-template",),
        1,
        "--apply-chat-template",
        True,
        "applies to --task prompt_data, not arith_mod10",
    ),
    (("--colocate",), 1, "--colocate", True, "applies to --rollout-engine sglang only"),
    (
        ("--rollout-num-gpus-per-engine", "1"),
        1,
        "--rollout-num-gpus-per-engine",
        1,
        "the hf engine runs inside the trainer",
    ),
    (
        (
            "--rollout-engine",
            "sglang",
            "--sglang-router-url",
            "http://h:1",
            "--rollout-num-gpus",
            "2",
        ),
        1,
        "--rollout-num-gpus",
        2,
        "hyrl starts no engine",
    ),
    (
        ("--rollout-engine", "sglang", "--sglang-router-url", "http://h:1", "--colocate"),
        1,
        "--colocate",
        True,
        "attached servers cannot release",
    ),
    (
        ("--rollout-engine", "sglang", "--rollout-num-gpus", "1", "--offload-train"),
        1,
        "--offload-train",
        True,
        "--colocate is off",
    ),
    (
        ("--recompute-num-layers", "1"),
        1,
        "--recompute-num-layers",
        1,
        "applies to --recompute-granularity full only",
    ),
    (
        ("--max-tokens-per-gpu", "64"),
        1,
        "--max-tokens-per-gpu",
        64,
        "applies only with --use-dynamic-batch-size",
    ),
    (("--save-interval", "5"), 1, "--save-interval", 5, "given without --save"),
    (("--keep-last-checkpoints", "5"), 1, "--keep-last-checkpoints", 5, "given without --save"),
    (("--keep-checkpoint-every", "50"), 1, "--keep-checkpoint-every", 50, "given without --save"),
    (("--max-staleness", "2"), 1, "--max-staleness", 2, "only used with --async-rollout"),
    (
        ("--stale-policy", "regenerate"),
        1,
        "--stale-policy",
        "regenerate",
        "only used with --async-rollout",
    ),
    (
        ("--inflight-weight-updates",),
        1,
        "--inflight-weight-updates",
        True,
        "--async-rollout is off",
    ),
    (
        ("--async-rollout", "--max-staleness", "0", "--inflight-weight-updates"),
        1,
        "--inflight-weight-updates",
        True,
        "no weight sync lands inside one",
    ),
    (
        ("--async-rollout", "--inflight-segment-tokens", "8"),
        1,
        "--inflight-segment-tokens",
        8,
        "only used with --inflight-weight-updates, which is off",
    ),
    (
        ("--async-rollout", "--inflight-weight-updates", "--measure-routing-mismatch"),
        1,
        "--inflight-weight-updates",
        True,
        "routed again by the new weights",
    ),
    (
        ("--rollout-engine", "sglang", "--colocate", "--offload-train", "--async-rollout"),
        1,
        "--async-rollout",
        True,
        "--offload-train hands the trainer's GPU memory",
    ),
    (
        ("--rollout-engine", "sglang", "--colocate", "--async-rollout"),
        1,
        "--async-rollout",
        True,
        "colocated engines share the training GPUs",
    ),
    (
        ("--batch-ramp", "128:256:10", "--async-rollout"),
        1,
        "--async-rollout",
        True,
        "a dropped stale batch would shift",
    ),
    (
        (
            "--batch-schedule",
            "auto",
            "--autopilot-min",
            "64",
            "--autopilot-max",
            "256",
            "--base-lr",
            "3e-4",
            "--async-rollout",
        ),
        1,
        "--async-rollout",
        True,
        "before the autopilot sets the next step's",
    ),
    (
        ("--dynamic-sampling", "--async-rollout", "--stale-policy", "regenerate"),
        1,
        "--stale-policy",
        "regenerate",
        "draw prompts of their own",
    ),
]


def test_the_cases_cover_every_row():
    covered = {
        next(
            i
            for i, rule in enumerate(APPLIES_ONLY_WITH)
            if flag[2:].replace("-", "_") in rule.fields
            and problem
            in rule.problem.format_map(
                {
                    "task": "arith_mod10",
                    "flag": flag,
                    "pipeline_model_parallel_size": 2,
                    "policy_loss": "ppo",
                }
            )
        )
        for _, _, flag, _, problem in CASES
    }
    assert covered == set(range(len(APPLIES_ONLY_WITH)))


@pytest.mark.parametrize("argv, world_size, flag, value, problem", CASES)
def test_a_flag_given_without_its_condition_is_refused_naming_it(
    tmp_path, argv, world_size, flag, value, problem
):
    cfg = parse_args(["--run-dir", str(tmp_path / "run"), *argv])
    with pytest.raises(ConfigError) as info:
        validate(cfg, world_size)
    err = info.value
    assert (err.flag, err.value) == (flag, value)
    assert problem in err.problem
