"""The `hyrl train` command line (hyrl.config.parser): one flag per field in argument groups,
`--some-name` for `some_name`, values parsed with the field's type, `none` for optional values,
the last of a duplicated flag winning, boolean flags with a --no- form and optional booleans
that stay None unless given; and the errors of parsing (unknown or abbreviated flags with the
close match suggested, bad numbers, choices and stray values), each a ConfigError that names the
flag, the value and what is allowed, and survives pickling."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from config_errors import assert_names, parse_rejected

from hyrl.config import ConfigError, RunConfig, build_parser, flag_name, parse_args


def test_flag_name_turns_underscores_into_dashes():
    assert flag_name("global_batch_size") == "--global-batch-size"
    assert flag_name("lr") == "--lr"


def test_parser_has_one_flag_per_field_in_argument_groups():
    parser = build_parser()
    flags = {s for a in parser._actions for s in a.option_strings}
    for f in dataclasses.fields(RunConfig):
        assert flag_name(f.name) in flags
    titles = [g.title for g in parser._action_groups]
    assert any(t.startswith("parallelism") for t in titles)
    assert any(t.startswith("batch sizes") for t in titles)


def test_values_are_parsed_with_the_field_types(cfg_of):
    cfg = cfg_of(
        "--lr", "1e-3", "--num-layers", "3", "--normalization=LayerNorm", "--eps-clip-high", "0.28"
    )
    assert cfg.lr == pytest.approx(1e-3) and isinstance(cfg.lr, float)
    assert cfg.num_layers == 3 and isinstance(cfg.num_layers, int)
    assert cfg.normalization == "LayerNorm"
    assert cfg.eps_clip_high == pytest.approx(0.28)


def test_optional_float_accepts_the_word_none(cfg_of):
    assert cfg_of("--eps-clip-high", "0.3", "--eps-clip-high", "none").eps_clip_high is None
    assert cfg_of("--eps-clip-high=None").eps_clip_high is None


def test_last_duplicate_flag_wins(cfg_of):
    cfg = cfg_of(
        "--global-batch-size", "32", "--lr", "1e-4", "--global-batch-size=64", "--lr", "2e-4"
    )
    assert cfg.global_batch_size == 64
    assert cfg.lr == pytest.approx(2e-4)
    assert parse_args(["--run-dir", "a", "--run-dir", "b"]).run_dir == "b"


def test_boolean_flags_have_a_no_form_and_the_last_one_wins(cfg_of):
    assert cfg_of("--no-qk-layernorm").qk_layernorm is False
    assert cfg_of("--no-qk-layernorm", "--qk-layernorm").qk_layernorm is True
    assert cfg_of("--sequence-parallel").sequence_parallel is True
    assert cfg_of("--sequence-parallel", "--no-sequence-parallel").sequence_parallel is False
    assert cfg_of("--no-progress").progress is False


def test_unknown_flag_is_rejected_suggesting_the_close_match(run_dir):
    err = parse_rejected(["--run-dir", run_dir, "--global-batch-szie", "64"])
    assert err.flag == "--global-batch-szie"
    assert "unknown flag" in str(err)
    assert "allowed" in str(err)
    assert "did you mean --global-batch-size" in str(err)


def test_unknown_flag_with_equals_names_the_flag_and_value():
    err = parse_rejected(["--nm-steps=5"])
    assert_names(err, "--nm-steps", "5")
    assert "--num-steps" in str(err)


def test_abbreviated_flag_is_not_accepted():
    err = parse_rejected(["--global-batch", "64"])
    assert err.flag == "--global-batch"
    assert "unknown flag" in str(err)


def test_bad_float_names_the_flag_the_value_and_the_type():
    err = parse_rejected(["--lr", "abc"])
    assert_names(err, "--lr", "abc")
    assert "number" in err.allowed


def test_bad_int_names_the_flag_the_value_and_the_type():
    err = parse_rejected(["--num-layers", "2.5"])
    assert_names(err, "--num-layers", "2.5")
    assert "integer" in err.allowed


def test_non_finite_float_is_rejected():
    assert_names(parse_rejected(["--lr", "nan"]), "--lr", "nan")
    assert_names(parse_rejected(["--eps-clip-high", "inf"]), "--eps-clip-high", "inf")


def test_bad_choice_names_the_flag_the_value_and_the_choices():
    err = parse_rejected(["--lr-decay-style", "exponential"])
    assert_names(err, "--lr-decay-style", "exponential")
    assert "constant, linear, cosine" in str(err)


def test_bad_choice_with_wrong_case_suggests_the_right_spelling():
    err = parse_rejected(["--normalization", "rmsnorm"])
    assert_names(err, "--normalization", "rmsnorm")
    assert "did you mean RMSNorm" in str(err)


def test_missing_value_names_the_flag():
    err = parse_rejected(["--lr"])
    assert err.flag == "--lr"
    assert "allowed" in str(err)


def test_stray_positional_is_rejected():
    err = parse_rejected(["--lr", "1e-3", "oops"])
    assert_names(err, "<positional>", "oops")


def test_value_after_a_boolean_flag_is_rejected_with_a_hint():
    err = parse_rejected(["--qk-layernorm", "false"])
    assert "--no-qk-layernorm" in str(err)
    err = parse_rejected(["--qk-layernorm=false"])
    assert_names(err, "--qk-layernorm", "false")


def test_config_error_message_format_and_pickling():
    err = ConfigError("--lr", -1.0, "must be positive", "a number > 0")
    assert str(err) == "--lr=-1.0: must be positive; allowed: a number > 0"
    assert isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert (back.flag, back.value, str(back)) == ("--lr", -1.0, str(err))


def test_optional_bool_is_none_unless_given(cfg_of):
    assert cfg_of().normalize_advantages is None
    assert cfg_of("--normalize-advantages").normalize_advantages is True
    assert cfg_of("--no-normalize-advantages").normalize_advantages is False


def test_bad_optional_values_name_the_flag():
    assert_names(
        parse_rejected(["--critic-global-batch-size", "2.5"]), "--critic-global-batch-size", "2.5"
    )
    err = parse_rejected(["--critic-lr-decay-style", "exp"])
    assert_names(err, "--critic-lr-decay-style", "exp")
    assert "constant, linear, cosine, none" in str(err)
    assert_names(parse_rejected(["--advantage-estimator", "ppo"]), "--advantage-estimator", "ppo")
