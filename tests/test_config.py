"""Specification of hyrl.config: flags, parsing, validation and derived values."""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys

import pytest

from hyrl.config import (
    GROUPS,
    ConfigError,
    RunConfig,
    build_parser,
    flag_name,
    parse_args,
    validate,
    world_size_from_env,
)


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")


@pytest.fixture
def cfg_of(run_dir):
    """argv (without --run-dir) -> RunConfig with a fresh run directory under tmp_path."""

    def make(*argv: str) -> RunConfig:
        return parse_args(["--run-dir", run_dir, *argv])

    return make


def rejected(cfg: RunConfig, world_size: int = 1) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(cfg, world_size)
    return info.value


def parse_rejected(argv: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_args(argv)
    return info.value


def assert_names(err: ConfigError, flag: str, value) -> None:
    """The error names the flag, the offending value and what is allowed."""
    assert err.flag == flag
    text = str(err)
    assert flag in text
    assert str(value) in text
    assert "allowed" in text


def assert_rejected(cfg: RunConfig, flag: str, value, world_size: int = 1) -> ConfigError:
    err = rejected(cfg, world_size)
    assert_names(err, flag, value)
    assert err.value == value
    return err


# --------------------------------------------------------------------------- declaration


def test_every_field_has_help_and_a_known_group_and_groups_come_in_order():
    seen = []
    for f in dataclasses.fields(RunConfig):
        assert f.metadata["help"].strip(), f.name
        assert f.metadata["group"] in GROUPS, f.name
        if not seen or seen[-1] != f.metadata["group"]:
            seen.append(f.metadata["group"])
    assert seen == list(GROUPS)  # each group is one contiguous block, in the declared order


def test_defaults_are_valid_choices_and_the_tiny_cpu_model():
    cfg = RunConfig()
    for f in dataclasses.fields(RunConfig):
        if "choices" in f.metadata:
            assert getattr(cfg, f.name) in f.metadata["choices"], f.name
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_experts, cfg.vocab_size) == (2, 64, 4, 16)
    assert (cfg.rollout_batch_size, cfg.n_samples_per_prompt, cfg.global_batch_size) == (16, 8, 128)
    assert cfg.eps_clip_high is None and cfg.qk_layernorm is True and cfg.sequence_parallel is False


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


def test_config_module_imports_neither_torch_nor_megatron():
    code = ("import sys, hyrl.config; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- parsing


def test_defaults_validate_at_world_size_1(cfg_of):
    cfg = cfg_of()
    assert cfg == dataclasses.replace(RunConfig(), run_dir=cfg.run_dir)
    validate(cfg, 1)


def test_values_are_parsed_with_the_field_types(cfg_of):
    cfg = cfg_of("--lr", "1e-3", "--num-layers", "3", "--normalization=LayerNorm",
                 "--eps-clip-high", "0.28")
    assert cfg.lr == pytest.approx(1e-3) and isinstance(cfg.lr, float)
    assert cfg.num_layers == 3 and isinstance(cfg.num_layers, int)
    assert cfg.normalization == "LayerNorm"
    assert cfg.eps_clip_high == pytest.approx(0.28)


def test_optional_float_accepts_the_word_none(cfg_of):
    assert cfg_of("--eps-clip-high", "0.3", "--eps-clip-high", "none").eps_clip_high is None
    assert cfg_of("--eps-clip-high=None").eps_clip_high is None


def test_last_duplicate_flag_wins(cfg_of):
    cfg = cfg_of("--global-batch-size", "32", "--lr", "1e-4", "--global-batch-size=64",
                 "--lr", "2e-4")
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


def test_world_size_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert world_size_from_env() == 1
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert world_size_from_env() == 8


# --------------------------------------------------------------------------- derived values


def test_derived_values(cfg_of):
    cfg = cfg_of("--rollout-batch-size", "4", "--n-samples-per-prompt", "8",
                 "--global-batch-size", "16", "--tensor-model-parallel-size", "2")
    assert cfg.responses_per_rollout == 32
    assert cfg.optimizer_steps_per_rollout == 2
    assert cfg.data_parallel_size(8) == 4
    assert cfg.resolved_eps_clip_high == pytest.approx(0.2)
    assert cfg_of("--eps-clip-high", "0.28").resolved_eps_clip_high == pytest.approx(0.28)


def test_to_dict_has_every_field_and_the_derived_values_and_is_json(cfg_of):
    d = cfg_of().to_dict(2)
    for key in ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size", "lr",
                "data_parallel_size", "world_size", "responses_per_rollout",
                "optimizer_steps_per_rollout"):
        assert key in d
    assert {f.name for f in dataclasses.fields(RunConfig)} <= set(d)
    assert d["data_parallel_size"] == 2 and d["responses_per_rollout"] == 128
    assert json.loads(json.dumps(d)) == d


# --------------------------------------------------------------------------- parallel layouts


def test_tp2_ep2_with_sequence_parallel_is_valid_at_world_size_2(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "2",
                 "--sequence-parallel", "--micro-batch-size", "8")
    validate(cfg, 2)
    assert cfg.data_parallel_size(2) == 1


def test_world_size_not_divisible_by_tp_is_rejected_naming_the_world_size(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "2", "--sequence-parallel")
    err = assert_rejected(cfg, "--tensor-model-parallel-size", 2, world_size=3)
    assert "world size 3" in str(err)


def test_pipeline_parallelism_is_rejected_as_not_implemented(cfg_of):
    err = assert_rejected(cfg_of("--pipeline-model-parallel-size", "2"),
                          "--pipeline-model-parallel-size", 2, world_size=2)
    assert "not implemented" in str(err)
    assert err.allowed == "1"


def test_heads_not_divisible_by_tp_are_rejected_naming_the_heads(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "4", "--sequence-parallel",
                 "--num-attention-heads", "6", "--num-query-groups", "2",
                 "--micro-batch-size", "4")
    err = assert_rejected(cfg, "--tensor-model-parallel-size", 4, world_size=4)
    assert "heads" in str(err)


def test_query_groups_not_divisible_by_tp_are_rejected(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "4", "--sequence-parallel",
                 "--num-attention-heads", "8", "--num-query-groups", "2")
    err = assert_rejected(cfg, "--tensor-model-parallel-size", 4, world_size=4)
    assert "query groups" in str(err)


def test_heads_not_divisible_by_query_groups_are_rejected(cfg_of):
    cfg = cfg_of("--num-attention-heads", "4", "--num-query-groups", "3")
    assert_rejected(cfg, "--num-query-groups", 3)


def test_vocab_not_divisible_by_tp_is_rejected(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "2", "--sequence-parallel",
                 "--vocab-size", "17")
    assert_rejected(cfg, "--vocab-size", 17, world_size=2)


def test_ffn_hidden_size_not_divisible_by_tp_is_rejected(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "2", "--sequence-parallel",
                 "--ffn-hidden-size", "127")
    assert_rejected(cfg, "--ffn-hidden-size", 127, world_size=2)


def test_expert_tensor_parallelism_is_rejected_as_not_supported(cfg_of):
    err = assert_rejected(cfg_of("--expert-tensor-parallel-size", "2"),
                          "--expert-tensor-parallel-size", 2, world_size=2)
    assert "not supported yet" in str(err)
    assert err.allowed == "1"


def test_experts_not_divisible_by_ep_are_rejected_naming_the_experts(cfg_of):
    cfg = cfg_of("--expert-model-parallel-size", "3")
    err = assert_rejected(cfg, "--expert-model-parallel-size", 3, world_size=3)
    assert "4 experts" in str(err)


def test_router_topk_above_num_experts_is_rejected(cfg_of):
    assert_rejected(cfg_of("--moe-router-topk", "5"), "--moe-router-topk", 5)


def test_world_size_not_divisible_by_ep_is_rejected_naming_the_world_size(cfg_of):
    cfg = cfg_of("--expert-model-parallel-size", "2")
    err = assert_rejected(cfg, "--expert-model-parallel-size", 2, world_size=1)
    assert "world size 1" in str(err)


def test_tp_with_moe_without_sequence_parallel_is_rejected(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "2")
    err = assert_rejected(cfg, "--sequence-parallel", False, world_size=2)
    assert "Megatron requires sequence parallelism with MoE when TP > 1" in str(err)
    assert err.allowed == "add --sequence-parallel"


def test_sequence_parallel_without_tp_is_rejected(cfg_of):
    err = assert_rejected(cfg_of("--sequence-parallel"), "--sequence-parallel", True)
    assert "TP" in str(err)


# --------------------------------------------------------------------------- batch sizes


def test_global_batch_not_dividing_rollout_is_rejected_naming_the_flag(cfg_of):
    cfg = cfg_of("--rollout-batch-size", "4", "--n-samples-per-prompt", "6",
                 "--global-batch-size", "16", "--micro-batch-size", "4")
    err = assert_rejected(cfg, "--global-batch-size", 16)
    assert "4 x 6 = 24" in str(err)
    assert "[1, 2, 3, 4, 6, 8, 12, 24]" in str(err)


def test_global_batch_not_dividing_over_data_parallel_is_rejected(cfg_of):
    cfg = cfg_of("--rollout-batch-size", "3", "--n-samples-per-prompt", "2",
                 "--global-batch-size", "3", "--micro-batch-size", "1")
    assert_rejected(cfg, "--global-batch-size", 3, world_size=2)


def test_micro_batch_times_dp_not_dividing_global_batch_is_rejected(cfg_of):
    cfg = cfg_of("--micro-batch-size", "48")
    err = assert_rejected(cfg, "--micro-batch-size", 48, world_size=2)
    assert "= 96" in str(err) and "B=128" in str(err)
    assert "data-parallel size 2" in str(err)


def test_grpo_with_one_sample_per_prompt_is_rejected(cfg_of):
    cfg = cfg_of("--n-samples-per-prompt", "1", "--global-batch-size", "16")
    err = assert_rejected(cfg, "--n-samples-per-prompt", 1)
    assert "GRPO" in str(err)


# --------------------------------------------------------------------------- rollout, task, run


def test_sglang_engine_is_rejected_as_not_implemented(cfg_of):
    err = assert_rejected(cfg_of("--rollout-engine", "sglang"), "--rollout-engine", "sglang")
    assert "not implemented yet" in str(err)
    assert err.allowed == "hf"


@pytest.mark.parametrize("operand", [0, 10])
def test_task_max_operand_outside_single_digits_is_rejected(cfg_of, operand):
    assert_rejected(cfg_of("--task-max-operand", str(operand)), "--task-max-operand", operand)


def test_response_longer_than_the_position_embeddings_allow_is_rejected(cfg_of):
    cfg = cfg_of("--max-position-embeddings", "8", "--rollout-max-response-len", "4")
    err = assert_rejected(cfg, "--rollout-max-response-len", 4)
    assert "at most 3" in str(err)
    validate(cfg_of("--max-position-embeddings", "9", "--rollout-max-response-len", "4"), 1)


def test_vocab_smaller_than_the_task_tokenizer_is_rejected(cfg_of):
    assert_rejected(cfg_of("--vocab-size", "8"), "--vocab-size", 8)


def test_run_dir_holding_a_run_is_rejected(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    cfg = parse_args(["--run-dir", str(run)])
    validate(cfg, 1)  # an existing directory without a run is fine
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    err = assert_rejected(cfg, "--run-dir", str(run))
    assert "already holds a run; choose a new directory" in str(err)


def test_run_dir_that_is_a_file_is_rejected(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    assert_rejected(parse_args(["--run-dir", str(path)]), "--run-dir", str(path))


# --------------------------------------------------------------------------- ranges


@pytest.mark.parametrize("name", [
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
    "kv_channels", "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "vocab_size",
    "max_position_embeddings", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "rollout_batch_size",
    "n_samples_per_prompt", "global_batch_size", "micro_batch_size", "rollout_concurrency",
    "rollout_max_response_len", "task_max_operand", "num_steps",
])
def test_counts_and_sizes_below_one_are_rejected(cfg_of, name):
    cfg = cfg_of(f"{flag_name(name)}=0")
    assert_rejected(cfg, flag_name(name), 0)


@pytest.mark.parametrize("flag, value", [
    ("--lr", "0"),
    ("--min-lr", "-1e-5"),
    ("--min-lr", "1.0"),
    ("--weight-decay", "-0.1"),
    ("--adam-beta1", "1.0"),
    ("--adam-beta2", "-0.5"),
    ("--adam-eps", "0"),
    ("--clip-grad", "-1"),
    ("--eps-clip", "0"),
    ("--eps-clip-high", "-0.2"),
    ("--kl-loss-coef", "-0.01"),
    ("--entropy-coef", "-0.01"),
    ("--rollout-temperature", "0"),
    ("--rollout-top-p", "0"),
    ("--rollout-top-p", "1.5"),
    ("--lr-warmup-steps", "-1"),
    ("--lr-warmup-steps", "1000"),
    ("--norm-epsilon", "0"),
    ("--seed", "-1"),
])
def test_out_of_range_values_are_rejected_naming_the_flag(cfg_of, flag, value):
    cfg = cfg_of(f"{flag}={value}")
    err = rejected(cfg)
    assert err.flag == flag
    assert f"{flag}={getattr(cfg, flag[2:].replace('-', '_'))}" in str(err)
    assert "allowed" in str(err)


def test_in_range_edge_values_are_accepted(cfg_of):
    validate(cfg_of("--min-lr=3e-4", "--adam-beta1=0", "--clip-grad=0", "--rollout-top-p=1",
                    "--lr-warmup-steps=999", "--task-max-operand=1"), 1)


def test_wrong_python_type_in_a_programmatic_config_is_rejected(run_dir):
    cfg = RunConfig(run_dir=run_dir, num_layers="2")  # type: ignore[arg-type]
    assert_rejected(cfg, "--num-layers", "2")


def test_world_size_below_one_is_rejected(cfg_of):
    err = rejected(cfg_of(), world_size=0)
    assert err.flag == "WORLD_SIZE"
