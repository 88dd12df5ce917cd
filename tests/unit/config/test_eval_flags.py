"""Specification of the evaluation flags and the target: --eval-interval,
--n-samples-per-eval-prompt, --eval-temperature, --eval-pass-k, --eval-pass-threshold,
--eval-max-response-len, --tensorboard-dir (defaults, what they apply with, their errors) and
--target METRIC=VALUE (parsed, needing evaluation for an eval/ metric, a pass@K that
evaluation logs)."""

from __future__ import annotations

import json

import pytest
from config_errors import assert_names, assert_rejected

from hyrl.config import (
    GROUPS,
    RESUME_MAY_CHANGE,
    ConfigError,
    build_parser,
    eval_max_response_len,
    eval_pass_ks,
    parse_target,
    resolve,
    validate,
)


def rejected(cfg, flag: str, value) -> ConfigError:
    """validate refuses cfg, naming the flag, the value and what is allowed."""
    with pytest.raises(ConfigError) as info:
        validate(cfg, 1)
    err = info.value
    assert err.flag == flag and err.value == value, str(err)
    assert flag in str(err) and str(value) in str(err) and "allowed" in str(err)
    return err


@pytest.mark.parametrize(
    ("n", "ks"), [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])]
)
def test_pass_k_defaults_to_the_powers_of_two_below_n_and_n(cfg_of, n, ks):
    cfg = cfg_of("--eval-interval", "1", "--n-samples-per-eval-prompt", str(n))
    validate(cfg, 1)
    assert eval_pass_ks(resolve(cfg)) == ks


def test_pass_k_given_is_sorted(cfg_of):
    cfg = cfg_of("--eval-interval", "1", "--n-samples-per-eval-prompt", "8", "--eval-pass-k", "8,1")
    validate(cfg, 1)
    assert eval_pass_ks(cfg) == [1, 8]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1,5", "pass@5 needs 5 samples per prompt, and --n-samples-per-eval-prompt is 4"),
        ("0", "pass@0 needs 0 samples"),
        ("1,x", "not comma-separated integers"),
        ("1,", "not comma-separated integers"),
        ("2,2", "a k appears twice"),
    ],
)
def test_pass_k_outside_one_to_n_or_repeated_is_refused(cfg_of, text, problem):
    cfg = cfg_of("--eval-interval", "1", "--n-samples-per-eval-prompt", "4", "--eval-pass-k", text)
    err = rejected(cfg, "--eval-pass-k", text)
    assert problem in err.problem
    assert "[1, 4]" in err.allowed


@pytest.mark.parametrize(
    ("flag", "value", "shown"),
    [
        ("--eval-pass-k", "1", "1"),
        ("--eval-pass-threshold", "0.5", 0.5),
        ("--eval-max-response-len", "3", 3),
    ],
)
def test_eval_flags_apply_only_when_evaluating(cfg_of, flag, value, shown):
    err = rejected(cfg_of(flag, value), flag, shown)
    assert "--eval-interval=0" in err.problem
    validate(cfg_of("--eval-interval", "1", flag, value), 1)


def test_eval_max_response_len_defaults_to_the_rollout_length_and_must_fit_the_positions(cfg_of):
    base = ("--eval-interval", "1", "--max-position-embeddings", "9")
    cfg = cfg_of(*base, "--rollout-max-response-len", "3")
    resolved = resolve(cfg)
    assert eval_max_response_len(resolved, rollout=resolved) == 3
    fits = cfg_of(*base, "--eval-max-response-len", "4")  # 5-token arith prompt + 4 = 9
    validate(fits, 1)
    resolved = resolve(fits)
    assert eval_max_response_len(resolved, rollout=resolved) == 4
    err = rejected(cfg_of(*base, "--eval-max-response-len", "5"), "--eval-max-response-len", 5)
    assert "--max-position-embeddings=9" in err.problem and "at most 4" in err.allowed
    rejected(cfg_of(*base, "--eval-max-response-len", "0"), "--eval-max-response-len", 0)


def test_eval_max_response_len_with_prompt_data_leaves_room_for_the_kept_prompts(cfg_of, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    base = (
        *("--prompt-data", str(data), "--tokenizer-path", str(tmp_path), "--rm-type", "math"),
        *("--eval-interval", "1", "--eval-prompt-data", "held", str(data)),
        *("--max-position-embeddings", "32", "--rollout-max-response-len", "8"),
    )
    # prompts of up to 32 - 8 = 24 tokens are kept, so evaluation may not answer longer than 8
    validate(cfg_of(*base, "--eval-max-response-len", "8"), 1)
    rejected(cfg_of(*base, "--eval-max-response-len", "9"), "--eval-max-response-len", 9)
    # with the prompts capped at 16 tokens, 16 are left for the answer
    capped = (*base, "--rollout-max-prompt-len", "16")
    validate(cfg_of(*capped, "--eval-max-response-len", "16"), 1)
    err = rejected(cfg_of(*capped, "--eval-max-response-len", "17"), "--eval-max-response-len", 17)
    assert "--rollout-max-prompt-len=16" in err.problem


def test_tensorboard_dir_must_be_a_directory_path_and_may_change_on_resume(cfg_of, tmp_path):
    validate(cfg_of("--tensorboard-dir", str(tmp_path / "tb")), 1)  # created when missing
    a_file = tmp_path / "file"
    a_file.write_text("")
    err = rejected(cfg_of("--tensorboard-dir", str(a_file)), "--tensorboard-dir", str(a_file))
    assert "not a directory" in err.problem
    rejected(cfg_of("--tensorboard-dir", ""), "--tensorboard-dir", "")
    assert "tensorboard_dir" in RESUME_MAY_CHANGE  # how a run reports, like --log-wandb


def test_eval_flags_defaults_are_valid(cfg_of):
    cfg = cfg_of()
    assert (
        cfg.eval_interval,
        cfg.n_samples_per_eval_prompt,
        cfg.eval_temperature,
        cfg.target,
        cfg.task_eval_fraction,
    ) == (0, 1, None, None, 0.2)
    validate(cfg, 1)
    assert GROUPS.index("eval") == GROUPS.index("critic") + 1
    assert any(g.title.startswith("evaluation") for g in build_parser()._action_groups)
    r = resolve(cfg)
    assert r.eval_temperature == r.rollout_temperature == 1.0  # none = the rollout's
    assert json.loads(json.dumps(r.to_dict(1)))["task_eval_fraction"] == 0.2


def test_eval_flags_are_parsed_and_validated(cfg_of):
    cfg = cfg_of(
        "--eval-interval",
        "10",
        "--n-samples-per-eval-prompt",
        "4",
        "--eval-temperature",
        "0",
        "--target",
        "eval/accuracy=0.77",
        "--task-eval-fraction",
        "0.25",
    )
    assert (cfg.eval_interval, cfg.n_samples_per_eval_prompt, cfg.eval_temperature) == (10, 4, 0.0)
    assert cfg.target == "eval/accuracy=0.77" and cfg.task_eval_fraction == 0.25
    validate(cfg, 1)
    assert resolve(cfg).eval_temperature == 0.0  # greedy, kept
    assert resolve(cfg_of("--rollout-temperature", "0.7")).eval_temperature == 0.7


def test_parse_target():
    assert parse_target("eval/accuracy=0.77") == ("eval/accuracy", 0.77)
    assert parse_target(" train/reward_mean = 1 ") == ("train/reward_mean", 1.0)
    assert parse_target("eval/loss=-2.5e-1") == ("eval/loss", -0.25)


@pytest.mark.parametrize(
    "text",
    [
        "eval/accuracy",
        "accuracy=0.77",
        "eval/=0.5",
        "perf/step_s=1",
        "eval/accuracy=high",
        "eval/accuracy=nan",
        "eval/accuracy=inf",
        "=0.5",
        "eval/accuracy=",
    ],
)
def test_bad_target_is_rejected(cfg_of, text):
    with pytest.raises(ConfigError) as info:
        parse_target(text)
    assert_names(info.value, "--target", text)
    assert info.value.allowed == "METRIC=VALUE, e.g. eval/accuracy=0.77"
    err = assert_rejected(cfg_of("--eval-interval", "5", "--target", text), "--target", text)
    assert err.allowed == "METRIC=VALUE, e.g. eval/accuracy=0.77"


def test_eval_target_needs_evaluation(cfg_of):
    err = assert_rejected(
        cfg_of("--target", "eval/accuracy=0.77"), "--target", "eval/accuracy=0.77"
    )
    assert err.allowed == "add --eval-interval N"
    validate(cfg_of("--target", "train/reward_mean=0.9"), 1)  # train metrics need no eval
    validate(cfg_of("--target", "eval/accuracy=0.77", "--eval-interval", "1"), 1)


def test_a_pass_at_k_target_must_be_a_k_evaluation_logs(cfg_of):
    on = ("--eval-interval", "1", "--n-samples-per-eval-prompt", "4")
    validate(cfg_of(*on, "--target", "eval/pass@4=0.9"), 1)  # default k: 1, 2, 4
    validate(cfg_of(*on, "--target", "eval/math/pass@2=0.9"), 1)  # a named eval set
    err = assert_rejected(cfg_of(*on, "--target", "eval/pass@8=0.9"), "--target", "eval/pass@8=0.9")
    assert "evaluation logs pass@1, pass@2, pass@4" in str(err)
    assert err.allowed == "a logged pass@K, or --eval-pass-k including 8"
    err = assert_rejected(
        cfg_of(*on, "--eval-pass-k", "1,4", "--target", "eval/pass@2=0.5"),
        "--target",
        "eval/pass@2=0.5",
    )
    assert "evaluation logs pass@1, pass@4" in str(err)
