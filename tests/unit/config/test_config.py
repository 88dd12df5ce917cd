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
    load,
    parse_args,
    parse_target,
    resolve,
    validate,
    world_size_from_env,
)
from hyrl.config.conditional_flags import SGLANG_ONLY
from hyrl.config.rollout_layout import rollout_layout


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
    ppo = resolve(RunConfig(advantage_estimator="gae"))
    for f in dataclasses.fields(RunConfig):
        if "choices" in f.metadata:
            value = getattr(cfg, f.name)
            assert value is None or value in f.metadata["choices"], f.name  # None: not given
            # unset under the default hf engine, "none" meaning off, or by --batch-ramp; the
            # wandb mode is read from WANDB_MODE when the mirror starts
            skipped = (
                *SGLANG_ONLY,
                "recompute_granularity",
                "recompute_method",
                "batch_schedule",
                "wandb_mode",
            )
            if f.name not in skipped:
                assert getattr(ppo, f.name) in f.metadata["choices"], f.name
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_experts, cfg.vocab_size) == (2, 64, 4, 16)
    assert cfg.global_batch_size is None  # not given: P x G after resolve
    assert (cfg.rollout_batch_size, cfg.n_samples_per_prompt, resolve(cfg).global_batch_size) == (
        16,
        8,
        128,
    )
    assert cfg.eps_clip_high is None and cfg.qk_layernorm is True and cfg.sequence_parallel is False
    assert cfg.lr is None and resolve(cfg).lr == 3e-4  # not given: the documented default
    lr_help = next(f for f in dataclasses.fields(RunConfig) if f.name == "lr").metadata["help"]
    assert "3e-4" in lr_help


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
    code = (
        "import sys, hyrl.config; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_config_module_nor_the_rollout_layout_imports_torch_or_megatron():
    code = (
        "import sys, hyrl.config.rollout_layout; from hyrl.config import *; "
        "import hyrl.config.conditional_flags, hyrl.config.docs, hyrl.config.validate; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- parsing


def test_defaults_validate_at_world_size_1(cfg_of):
    cfg = cfg_of()
    assert cfg == dataclasses.replace(RunConfig(), run_dir=cfg.run_dir)
    validate(cfg, 1)


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


def test_world_size_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert world_size_from_env() == 1
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert world_size_from_env() == 8


# --------------------------------------------------------------------------- derived values


def test_derived_values(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "8",
        "--global-batch-size",
        "16",
        "--tensor-model-parallel-size",
        "2",
    )
    assert cfg.responses_per_rollout == 32
    assert cfg.optimizer_steps_per_rollout == 2
    assert cfg.data_parallel_size(8) == 4
    assert cfg.resolved_eps_clip_high == pytest.approx(0.2)
    assert cfg_of("--eps-clip-high", "0.28").resolved_eps_clip_high == pytest.approx(0.28)


def test_to_dict_has_every_field_and_the_derived_values_and_is_json(cfg_of):
    d = resolve(cfg_of()).to_dict(2)
    for key in (
        "rollout_batch_size",
        "n_samples_per_prompt",
        "global_batch_size",
        "lr",
        "data_parallel_size",
        "world_size",
        "responses_per_rollout",
        "optimizer_steps_per_rollout",
    ):
        assert key in d
    assert {f.name for f in dataclasses.fields(RunConfig)} <= set(d)
    assert d["data_parallel_size"] == 2 and d["responses_per_rollout"] == 128
    assert d["optimizer_steps_per_rollout"] == 1
    assert "critic_steps_per_rollout" not in d  # grpo: no critic
    assert json.loads(json.dumps(d)) == d


def test_to_dict_and_step_counts_need_a_resolved_config(cfg_of):
    with pytest.raises(ValueError, match="resolve"):
        cfg_of().to_dict(1)
    with pytest.raises(ValueError, match="--critic-lr"):
        cfg_of("--advantage-estimator", "gae", "--global-batch-size", "64").to_dict(1)
    with pytest.raises(ValueError, match="resolve"):
        cfg_of().optimizer_steps_per_rollout  # noqa: B018


def test_to_dict_has_critic_steps_per_rollout_under_gae(cfg_of):
    cfg = resolve(cfg_of("--advantage-estimator", "gae", "--critic-global-batch-size", "16"))
    d = cfg.to_dict(1)
    assert d["critic_steps_per_rollout"] == 8 and cfg.critic_steps_per_rollout == 8
    assert d["optimizer_steps_per_rollout"] == 1
    assert json.loads(json.dumps(d)) == d


# --------------------------------------------------------------------------- parallel layouts


def test_tp2_ep2_with_sequence_parallel_is_valid_at_world_size_2(cfg_of):
    cfg = cfg_of(
        "--tensor-model-parallel-size",
        "2",
        "--expert-model-parallel-size",
        "2",
        "--sequence-parallel",
        "--micro-batch-size",
        "8",
    )
    validate(cfg, 2)
    assert cfg.data_parallel_size(2) == 1


def test_world_size_not_divisible_by_tp_is_rejected_naming_the_world_size(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "2", "--sequence-parallel")
    err = assert_rejected(cfg, "--tensor-model-parallel-size", 2, world_size=3)
    assert "world size 3" in str(err)


def test_pipeline_stages_must_split_the_layers_evenly_and_exclude_routing_replay(cfg_of):
    validate(cfg_of("--pipeline-model-parallel-size", "2"), 2)  # 2 layers, 2 stages
    err = assert_rejected(
        cfg_of("--pipeline-model-parallel-size", "2", "--num-layers", "3"),
        "--pipeline-model-parallel-size",
        2,
        world_size=2,
    )
    assert "3 layers (--num-layers) do not split evenly into 2 stages" in str(err)
    assert err.allowed == "a PP dividing 3: [1, 3]"
    err = assert_rejected(
        cfg_of("--pipeline-model-parallel-size", "2", "--use-rollout-routing-replay"),
        "--use-rollout-routing-replay",
        True,
        world_size=2,
    )
    assert "routers of one model, not of a pipeline stage (PP=2)" in str(err)


def test_overlap_grad_reduce_is_refused_with_the_noise_scale_under_data_parallelism(cfg_of):
    validate(cfg_of("--overlap-grad-reduce"), 1)  # DP = 1: nothing is reduced early
    validate(cfg_of("--overlap-grad-reduce", "--noise-scale-beta", "none"), 2)
    err = assert_rejected(
        cfg_of("--overlap-grad-reduce"), "--overlap-grad-reduce", True, world_size=2
    )
    assert "reads each data-parallel rank's gradient before the reduction (DP=2)" in str(err)


def test_heads_not_divisible_by_tp_are_rejected_naming_the_heads(cfg_of):
    cfg = cfg_of(
        "--tensor-model-parallel-size",
        "4",
        "--sequence-parallel",
        "--num-attention-heads",
        "6",
        "--num-query-groups",
        "2",
        "--micro-batch-size",
        "4",
    )
    err = assert_rejected(cfg, "--tensor-model-parallel-size", 4, world_size=4)
    assert "heads" in str(err)


def test_query_groups_not_divisible_by_tp_are_rejected(cfg_of):
    cfg = cfg_of(
        "--tensor-model-parallel-size",
        "4",
        "--sequence-parallel",
        "--num-attention-heads",
        "8",
        "--num-query-groups",
        "2",
    )
    err = assert_rejected(cfg, "--tensor-model-parallel-size", 4, world_size=4)
    assert "query groups" in str(err)


def test_heads_not_divisible_by_query_groups_are_rejected(cfg_of):
    cfg = cfg_of("--num-attention-heads", "4", "--num-query-groups", "3")
    assert_rejected(cfg, "--num-query-groups", 3)


def test_vocab_not_divisible_by_tp_is_rejected(cfg_of):
    cfg = cfg_of("--tensor-model-parallel-size", "2", "--sequence-parallel", "--vocab-size", "17")
    assert_rejected(cfg, "--vocab-size", 17, world_size=2)


def test_ffn_hidden_size_not_divisible_by_tp_is_rejected(cfg_of):
    cfg = cfg_of(
        "--tensor-model-parallel-size", "2", "--sequence-parallel", "--ffn-hidden-size", "127"
    )
    assert_rejected(cfg, "--ffn-hidden-size", 127, world_size=2)


def test_expert_tensor_parallelism_is_rejected_as_not_supported(cfg_of):
    err = assert_rejected(
        cfg_of("--expert-tensor-parallel-size", "2"),
        "--expert-tensor-parallel-size",
        2,
        world_size=2,
    )
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
    cfg = cfg_of(
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "6",
        "--global-batch-size",
        "16",
        "--micro-batch-size",
        "4",
    )
    err = assert_rejected(cfg, "--global-batch-size", 16)
    assert "4 x 6 = 24" in str(err)
    assert "[1, 2, 3, 4, 6, 8, 12, 24]" in str(err)


def test_global_batch_not_dividing_over_data_parallel_is_rejected(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size",
        "3",
        "--n-samples-per-prompt",
        "2",
        "--global-batch-size",
        "3",
        "--micro-batch-size",
        "1",
    )
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


def layout_of(cfg: RunConfig, world_size: int = 1):
    validate(cfg, world_size)
    return rollout_layout(resolve(cfg), world_size)


def test_hf_engine_runs_in_process_unless_engines_are_asked_for(cfg_of):
    default = layout_of(cfg_of())
    assert (default.engine, default.in_process, default.uses_ray) == ("hf", True, False)
    fleet = layout_of(cfg_of("--rollout-num-engines", "2", "--rollout-concurrency", "8"))
    assert (fleet.in_process, fleet.num_engines, fleet.gpus_per_engine, fleet.uses_ray) == (
        False,
        2,
        0,
        True,
    )
    assert fleet.concurrency_per_engine == 8
    assert layout_of(cfg_of("--reward-num-workers", "2")).uses_ray


@pytest.mark.parametrize(
    "argv, flag, value",
    [
        (("--colocate",), "--colocate", True),
        (("--update-weight-transport", "disk"), "--update-weight-transport", "disk"),
        (("--sglang-mem-fraction-static", "0.5"), "--sglang-mem-fraction-static", 0.5),
        (("--rollout-num-gpus-per-engine", "1"), "--rollout-num-gpus-per-engine", 1),
    ],
)
def test_sglang_flags_with_the_hf_engine_are_refused_not_ignored(cfg_of, argv, flag, value):
    assert_rejected(cfg_of(*argv), flag, value)


def test_sglang_engine_counts_from_gpus_or_engines_and_they_must_agree(cfg_of):
    sg = ("--rollout-engine", "sglang")
    layout = layout_of(cfg_of(*sg, "--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "2"))
    assert (layout.num_engines, layout.num_gpus, layout.update_weight_mode) == (4, 8, "distributed")
    assert layout_of(cfg_of(*sg, "--rollout-num-engines", "3")).num_gpus == 3
    err = assert_rejected(
        cfg_of(*sg, "--rollout-num-gpus", "8", "--rollout-num-engines", "3"),
        "--rollout-num-engines",
        3,
    )
    assert "8 rollout GPUs at 1 per engine" in str(err) and err.allowed.startswith("8,")
    err = assert_rejected(
        cfg_of(*sg, "--rollout-num-gpus", "4", "--rollout-num-gpus-per-engine", "3"),
        "--rollout-num-gpus-per-engine",
        3,
    )
    assert "[1, 2, 4]" in err.allowed
    assert_rejected(cfg_of(*sg), "--rollout-num-gpus", "none")  # neither given, not colocated


def test_colocated_sglang_uses_the_training_gpus_and_refuses_nccl_sync(cfg_of):
    sg = ("--rollout-engine", "sglang", "--colocate")
    layout = layout_of(
        cfg_of(
            *sg,
            "--tensor-model-parallel-size",
            "2",
            "--sequence-parallel",
            "--rollout-num-gpus-per-engine",
            "2",
        ),
        world_size=4,
    )
    assert (layout.num_engines, layout.num_gpus, layout.update_weight_mode) == (2, 4, "tensor")
    assert_rejected(cfg_of(*sg, "--rollout-num-gpus", "2"), "--rollout-num-gpus", 2, world_size=4)
    err = assert_rejected(
        cfg_of(*sg, "--update-weight-transport", "distributed"),
        "--update-weight-transport",
        "distributed",
    )
    assert "one GPU" in str(err)


def test_offload_train_follows_colocate_and_is_refused_without_it(cfg_of):
    from hyrl.config import offloads_train, validate

    sg = ("--rollout-engine", "sglang")
    colocated = cfg_of(*sg, "--colocate")
    validate(colocated, 1)
    assert offloads_train(colocated)  # none = on with --colocate
    assert not offloads_train(cfg_of(*sg, "--colocate", "--no-offload-train"))
    assert not offloads_train(cfg_of(*sg, "--rollout-num-gpus", "1"))
    err = assert_rejected(
        cfg_of(*sg, "--rollout-num-gpus", "1", "--offload-train"), "--offload-train", True
    )
    assert "--colocate" in str(err) and "--colocate" in err.allowed
    assert_rejected(cfg_of("--offload-train"), "--offload-train", True)  # hf: never colocated


def test_old_log_probs_come_from_the_update_only_when_exactly_on_policy(cfg_of):
    from hyrl.config import old_log_probs_from_update, resolve

    def old_log_probs_from_update_of(*argv):
        return old_log_probs_from_update(resolve(cfg_of(*argv)))

    batch = ("--rollout-batch-size", "4", "--n-samples-per-prompt", "2")
    assert old_log_probs_from_update_of(*batch, "--global-batch-size", "8")  # 1 step
    assert not old_log_probs_from_update_of(*batch, "--global-batch-size", "4")  # 2 steps
    assert not old_log_probs_from_update_of(
        *batch, "--global-batch-size", "8", "--recompute-old-log-probs"
    )
    # the reward's KL penalty needs the old log-probs before the update
    gae = ("--advantage-estimator", "gae", "--global-batch-size", "8")
    assert old_log_probs_from_update_of(*batch, *gae)
    assert not old_log_probs_from_update_of(*batch, *gae, "--kl-coef", "0.1")
    # generated ahead by older weights: off-policy, the separate pass gives the old log-probs
    assert not old_log_probs_from_update_of(*batch, "--global-batch-size", "8", "--async-rollout")
    assert not old_log_probs_from_update_of(
        *batch, "--global-batch-size", "8", "--async-rollout", "--max-staleness", "0"
    )


def test_a_negative_max_staleness_is_refused_naming_the_flag(cfg_of):
    err = assert_rejected(cfg_of("--async-rollout", "--max-staleness", "-1"), "--max-staleness", -1)
    assert ">= 0" in err.allowed
    validate(cfg_of("--async-rollout", "--max-staleness", "0"), 1)  # 0: the synchronous order


def test_an_overlong_buffer_must_fit_in_the_response_length(cfg_of):
    flags = ("--rollout-max-response-len", "4", "--overlong-buffer-len")
    err = assert_rejected(cfg_of(*flags, "5"), "--overlong-buffer-len", 5)
    assert "[1, 4]" in err.allowed
    assert_rejected(cfg_of(*flags, "0"), "--overlong-buffer-len", 0)
    assert_rejected(
        cfg_of(*flags, "2", "--overlong-penalty-factor", "0"), "--overlong-penalty-factor", 0.0
    )


def test_router_url_attaches_and_refuses_engine_flags_and_tensor_sync(cfg_of):
    sg = ("--rollout-engine", "sglang", "--sglang-router-url", "http://10.0.0.5:30000")
    layout = layout_of(cfg_of(*sg))
    assert (layout.num_engines, layout.update_weight_mode) == (0, "distributed")
    assert_rejected(cfg_of(*sg, "--rollout-num-engines", "2"), "--rollout-num-engines", 2)
    assert_rejected(
        cfg_of(*sg, "--update-weight-transport", "tensor"), "--update-weight-transport", "tensor"
    )
    assert_rejected(
        cfg_of("--rollout-engine", "sglang", "--sglang-router-url", "10.0.0.5:30000"),
        "--sglang-router-url",
        "10.0.0.5:30000",
    )


def test_undeclared_sglang_flags_pass_through_and_near_misses_are_typos(cfg_of):
    cfg = cfg_of(
        "--rollout-engine",
        "sglang",
        "--colocate",
        "--sglang-server-args",
        "--log-level warning",
        "--sglang-attention-backend",
        "fa3",
        "--sglang-disable-radix-cache",
        "--sglang-chunked-prefill-size=4096",
    )
    assert cfg.sglang_server_args == (
        "--log-level warning --attention-backend fa3 "
        "--disable-radix-cache --chunked-prefill-size 4096"
    )
    with pytest.raises(ConfigError) as info:
        cfg_of("--rollout-engine", "sglang", "--sglang-router-ur", "http://h:1")
    assert info.value.flag == "--sglang-router-ur" and "--sglang-router-url" in info.value.allowed


@pytest.mark.parametrize(
    "argv, flag, value",
    [
        (("--reward-timeout-s", "0"), "--reward-timeout-s", 0.0),
        (("--reward-num-workers", "-1"), "--reward-num-workers", -1),
        (("--rollout-max-restarts", "-1"), "--rollout-max-restarts", -1),
        (("--update-weight-buffer-size", "1000"), "--update-weight-buffer-size", 1000),
        (
            ("--rollout-engine", "sglang", "--sglang-request-timeout-s", "0"),
            "--sglang-request-timeout-s",
            0.0,
        ),
    ],
)
def test_reward_and_fleet_ranges_are_checked(cfg_of, argv, flag, value):
    assert_rejected(cfg_of(*argv), flag, value)


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
    assert "already holds a run; choose a new directory" in str(err) and "--load" in str(err)


def _a_run_in(run_dir, *flags: str) -> None:
    """What hyrl train leaves in a run directory: config.json and metrics.jsonl."""
    (run_dir / "config.json").write_text(
        json.dumps(resolve(parse_args(["--run-dir", str(run_dir), *flags])).to_dict(1))
    )
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')


def test_run_dir_holding_a_run_is_resumed_only_with_load_and_the_same_configuration(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _a_run_in(run, "--num-steps", "3", "--lr", "1e-4")
    same = ["--run-dir", str(run), "--lr", "1e-4", "--load", str(tmp_path / "ckpt")]
    # the length, checkpoint and reporting flags may change on resume
    validate(
        parse_args(
            [
                *same,
                "--num-steps",
                "6",
                "--save",
                "ck",
                "--save-interval",
                "2",
                "--no-progress",
                "--max-skipped-steps",
                "5",
            ]
        ),
        1,
    )
    err = assert_rejected(parse_args([*same, "--lr", "2e-4"]), "--run-dir", str(run))
    assert "--lr: 0.0001 in config.json, 0.0002 now" in str(err)
    # the parallel layout and world size may change too: weights and optimizer states reshard
    validate(parse_args([*same, "--expert-model-parallel-size", "2"]), 2)
    err = assert_rejected(parse_args([*same, "--bf16"]), "--run-dir", str(run))
    assert "--bf16: False in config.json, True now" in str(err)


def test_save_interval_without_save_is_rejected(run_dir):
    assert_rejected(
        parse_args(["--run-dir", run_dir, "--save-interval", "2"]), "--save-interval", 2
    )
    assert_rejected(
        parse_args(["--run-dir", run_dir, "--save", "ck", "--save-interval", "0"]),
        "--save-interval",
        0,
    )
    assert_rejected(
        parse_args(["--run-dir", run_dir, "--max-skipped-steps", "0"]), "--max-skipped-steps", 0
    )
    for flag, value in (("--keep-last-checkpoints", -1), ("--keep-checkpoint-every", 0)):
        assert_rejected(
            parse_args(["--run-dir", run_dir, "--save", "ck", flag, str(value)]), flag, value
        )


def test_run_dir_that_is_a_file_is_rejected(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    assert_rejected(parse_args(["--run-dir", str(path)]), "--run-dir", str(path))


# --------------------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    "name",
    [
        "num_layers",
        "hidden_size",
        "ffn_hidden_size",
        "num_attention_heads",
        "num_query_groups",
        "kv_channels",
        "num_experts",
        "moe_ffn_hidden_size",
        "moe_router_topk",
        "vocab_size",
        "max_position_embeddings",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "rollout_batch_size",
        "n_samples_per_prompt",
        "global_batch_size",
        "micro_batch_size",
        "rollout_concurrency",
        "rollout_max_response_len",
        "task_max_operand",
        "num_steps",
        "base_global_batch_size",
        "n_samples_per_eval_prompt",
    ],
)
def test_counts_and_sizes_below_one_are_rejected(cfg_of, name):
    cfg = cfg_of(f"{flag_name(name)}=0")
    assert_rejected(cfg, flag_name(name), 0)


@pytest.mark.parametrize(
    "flag, value",
    [
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
        ("--base-lr", "0"),
        ("--base-lr", "-1e-4"),
        ("--eval-interval", "-1"),
        ("--eval-temperature", "-0.5"),
        ("--task-eval-fraction", "1.0"),
        ("--task-eval-fraction", "-0.1"),
    ],
)
def test_out_of_range_values_are_rejected_naming_the_flag(cfg_of, flag, value):
    cfg = cfg_of(f"{flag}={value}")
    err = rejected(cfg)
    assert err.flag == flag
    assert f"{flag}={getattr(cfg, flag[2:].replace('-', '_'))}" in str(err)
    assert "allowed" in str(err)


def test_in_range_edge_values_are_accepted(cfg_of):
    validate(
        cfg_of(
            "--min-lr=3e-4",
            "--adam-beta1=0",
            "--clip-grad=0",
            "--rollout-top-p=1",
            "--lr-warmup-steps=999",
            "--task-max-operand=1",
        ),
        1,
    )


def test_wrong_python_type_in_a_programmatic_config_is_rejected(run_dir):
    cfg = RunConfig(run_dir=run_dir, num_layers="2")  # type: ignore[arg-type]
    assert_rejected(cfg, "--num-layers", "2")


def test_world_size_below_one_is_rejected(cfg_of):
    err = rejected(cfg_of(), world_size=0)
    assert err.flag == "WORLD_SIZE"


# --------------------------------------------------------------------------- PPO: parsing


def test_ppo_group_and_flags_are_declared(cfg_of):
    titles = [g.title for g in build_parser()._action_groups]
    assert "algorithm (GRPO, PPO)" in titles
    assert any(t.startswith("critic") for t in titles)
    assert GROUPS.index("critic") == GROUPS.index("algorithm") + 1
    cfg = cfg_of()
    for name in (
        "gamma",
        "lambd",
        "normalize_advantages",
        "num_steps_per_rollout",
        "critic_global_batch_size",
        "critic_micro_batch_size",
        "critic_lr",
        "critic_min_lr",
        "critic_lr_warmup_steps",
        "critic_lr_decay_style",
        "critic_weight_decay",
        "critic_clip_grad",
        "value_clip",
        "critic_load",
        "critic_lr_scaling",
        "critic_base_lr",
        "critic_base_global_batch_size",
    ):
        assert getattr(cfg, name) is None, name
    assert cfg.kl_coef == 0.0 and cfg.num_critic_only_steps == 0


def test_ppo_values_are_parsed_and_optional_flags_take_none(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--gamma",
        "0.99",
        "--lambd=0.95",
        "--critic-global-batch-size",
        "32",
        "--critic-lr",
        "1e-5",
        "--critic-lr-decay-style",
        "cosine",
        "--critic-load",
        "/some/dir",
        "--num-steps-per-rollout",
        "4",
        "--value-clip",
        "0",
    )
    assert cfg.advantage_estimator == "gae"
    assert (cfg.gamma, cfg.lambd, cfg.critic_lr) == pytest.approx((0.99, 0.95, 1e-5))
    assert cfg.critic_global_batch_size == 32 and isinstance(cfg.critic_global_batch_size, int)
    assert cfg.critic_lr_decay_style == "cosine" and cfg.critic_load == "/some/dir"
    assert cfg.num_steps_per_rollout == 4 and cfg.value_clip == 0.0
    back = cfg_of(
        "--critic-global-batch-size",
        "32",
        "--critic-global-batch-size",
        "none",
        "--critic-lr-decay-style",
        "linear",
        "--critic-lr-decay-style=None",
        "--critic-load",
        "x",
        "--critic-load",
        "none",
        "--global-batch-size",
        "none",
    )
    assert back.critic_global_batch_size is None and back.critic_lr_decay_style is None
    assert back.critic_load is None and back.global_batch_size is None


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


# --------------------------------------------------------------------------- PPO: resolve


def test_resolve_under_grpo_leaves_the_critic_and_ppo_values_none(cfg_of):
    cfg = cfg_of()
    r = resolve(cfg)
    assert r is not cfg and cfg.global_batch_size is None  # a new config; the input unchanged
    assert r.global_batch_size == 128
    for name in (
        "critic_global_batch_size",
        "critic_micro_batch_size",
        "critic_lr",
        "critic_min_lr",
        "critic_lr_warmup_steps",
        "critic_lr_decay_style",
        "critic_weight_decay",
        "critic_clip_grad",
        "value_clip",
        "critic_load",
        "gamma",
        "lambd",
        "normalize_advantages",
        "critic_lr_scaling",
        "critic_base_lr",
        "critic_base_global_batch_size",
    ):
        assert getattr(r, name) is None, name
    assert r.critic_steps_per_rollout is None
    assert resolve(r) == r


def test_resolve_under_gae_takes_the_actors_values(cfg_of):
    r = resolve(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--global-batch-size",
            "64",
            "--micro-batch-size",
            "8",
            "--lr",
            "1e-4",
            "--min-lr",
            "1e-5",
            "--lr-warmup-steps",
            "3",
            "--lr-decay-style",
            "linear",
            "--weight-decay",
            "0.01",
            "--clip-grad",
            "0.5",
        )
    )
    assert (r.critic_global_batch_size, r.critic_micro_batch_size) == (64, 8)
    assert (r.critic_lr, r.critic_min_lr, r.critic_lr_warmup_steps) == (1e-4, 1e-5, 3)
    assert (r.critic_lr_decay_style, r.critic_weight_decay, r.critic_clip_grad) == (
        "linear",
        0.01,
        0.5,
    )
    assert (r.gamma, r.lambd, r.value_clip, r.normalize_advantages) == (1.0, 1.0, 0.2, True)
    assert r.critic_load is None
    assert resolve(r) == r


def test_resolve_under_gae_keeps_the_values_given(cfg_of):
    r = resolve(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--critic-global-batch-size",
            "32",
            "--critic-micro-batch-size",
            "4",
            "--critic-lr",
            "1e-5",
            "--critic-min-lr",
            "0",
            "--critic-lr-warmup-steps",
            "5",
            "--critic-lr-decay-style",
            "cosine",
            "--critic-weight-decay",
            "0.1",
            "--critic-clip-grad",
            "2",
            "--gamma",
            "0.9",
            "--lambd",
            "0.8",
            "--value-clip",
            "0",
            "--no-normalize-advantages",
        )
    )
    assert (r.critic_global_batch_size, r.critic_micro_batch_size) == (32, 4)
    assert (r.critic_lr, r.critic_min_lr, r.critic_lr_warmup_steps) == (1e-5, 0.0, 5)
    assert (r.critic_lr_decay_style, r.critic_weight_decay, r.critic_clip_grad) == (
        "cosine",
        0.1,
        2.0,
    )
    assert (r.gamma, r.lambd, r.value_clip, r.normalize_advantages) == (0.9, 0.8, 0.0, False)
    assert r.global_batch_size == 128


def test_critic_batch_resolves_from_the_resolved_actor_batch(cfg_of):
    r = resolve(cfg_of("--advantage-estimator", "gae", "--num-steps-per-rollout", "4"))
    assert r.global_batch_size == 32 and r.critic_global_batch_size == 32


def test_num_steps_per_rollout_sets_the_global_batch(cfg_of):
    r = resolve(
        cfg_of(
            "--rollout-batch-size",
            "16",
            "--n-samples-per-prompt",
            "8",
            "--num-steps-per-rollout",
            "2",
        )
    )
    assert r.global_batch_size == 64 and r.optimizer_steps_per_rollout == 2
    agreeing = cfg_of("--num-steps-per-rollout", "2", "--global-batch-size", "64")
    assert resolve(agreeing).global_batch_size == 64


def test_num_steps_per_rollout_not_dividing_the_rollout_is_rejected(cfg_of):
    with pytest.raises(ConfigError) as info:
        resolve(cfg_of("--num-steps-per-rollout", "3"))
    assert_names(info.value, "--num-steps-per-rollout", 3)
    assert "[1, 2, 4, 8, 16, 32, 64, 128]" in str(info.value)
    assert_rejected(cfg_of("--num-steps-per-rollout", "3"), "--num-steps-per-rollout", 3)


def test_num_steps_per_rollout_disagreeing_with_global_batch_is_rejected(cfg_of):
    cfg = cfg_of("--num-steps-per-rollout", "2", "--global-batch-size", "32")
    with pytest.raises(ConfigError) as info:
        resolve(cfg)
    err = info.value
    assert_names(err, "--num-steps-per-rollout", 2)
    assert "--global-batch-size=32" in str(err) and "--global-batch-size=64" in err.allowed
    assert_rejected(cfg, "--num-steps-per-rollout", 2)


def test_load_returns_a_validated_resolved_config(run_dir):
    cfg = load(
        ["--run-dir", run_dir, "--advantage-estimator", "gae", "--num-steps-per-rollout", "2"], 1
    )
    assert cfg.global_batch_size == 64 and cfg.critic_global_batch_size == 64
    assert cfg.gamma == 1.0 and cfg.normalize_advantages is True
    assert cfg.to_dict(1)["critic_steps_per_rollout"] == 2
    assert load(["--run-dir", run_dir], 1) == resolve(parse_args(["--run-dir", run_dir]))
    with pytest.raises(ConfigError) as info:
        load(["--run-dir", run_dir, "--critic-lr", "1e-5"], 1)
    assert info.value.flag == "--critic-lr"


# --------------------------------------------------------------------------- PPO: validation


def test_gae_defaults_validate_and_allow_one_sample_per_prompt(cfg_of):
    validate(cfg_of("--advantage-estimator", "gae"), 1)
    validate(resolve(cfg_of("--advantage-estimator", "gae")), 1)  # resolved input is fine too
    validate(cfg_of("--advantage-estimator", "gae", "--n-samples-per-prompt", "1"), 1)
    validate(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--value-clip",
            "0",
            "--gamma",
            "0",
            "--lambd",
            "1",
            "--num-critic-only-steps",
            "999",
        ),
        1,
    )


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--critic-global-batch-size", "64"),
        ("--critic-micro-batch-size", "8"),
        ("--critic-lr", "1e-5"),
        ("--critic-min-lr", "0"),
        ("--critic-lr-warmup-steps", "2"),
        ("--critic-lr-decay-style", "cosine"),
        ("--critic-weight-decay", "0.1"),
        ("--critic-clip-grad", "1"),
        ("--num-critic-only-steps", "3"),
        ("--value-clip", "0.2"),
        ("--critic-load", "/some/model"),
        ("--gamma", "0.99"),
        ("--lambd", "0.95"),
        ("--kl-coef", "0.01"),
        ("--critic-lr-scaling", "sqrt"),
        ("--critic-base-lr", "1e-5"),
        ("--critic-base-global-batch-size", "32"),
    ],
)
def test_ppo_only_flags_under_grpo_are_rejected(cfg_of, flag, value):
    cfg = cfg_of(f"{flag}={value}")
    err = rejected(cfg)
    assert err.flag == flag
    assert f"{flag}={getattr(cfg, flag[2:].replace('-', '_'))}" in str(err)
    assert "only used by PPO (--advantage-estimator gae)" in str(err)
    assert err.allowed == "remove it, or use --advantage-estimator gae"


def test_normalize_advantages_under_grpo_is_rejected(cfg_of):
    for argv, value in ((["--normalize-advantages"], True), (["--no-normalize-advantages"], False)):
        err = assert_rejected(cfg_of(*argv), "--normalize-advantages", value)
        assert "only used by PPO" in str(err)


def test_ppo_flags_at_their_defaults_under_grpo_are_accepted(cfg_of):
    validate(cfg_of("--kl-coef", "0", "--num-critic-only-steps", "0", "--gamma", "none"), 1)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--value-clip", "-0.1"),
        ("--gamma", "1.5"),
        ("--gamma", "-0.1"),
        ("--lambd", "1.01"),
        ("--kl-coef", "-0.01"),
        ("--critic-lr", "0"),
        ("--critic-min-lr", "-1e-6"),
        ("--critic-min-lr", "1.0"),
        ("--critic-clip-grad", "-1"),
        ("--critic-weight-decay", "-0.1"),
        ("--num-critic-only-steps", "-1"),
        ("--num-critic-only-steps", "1000"),
        ("--critic-lr-warmup-steps", "-1"),
        ("--critic-global-batch-size", "0"),
        ("--critic-micro-batch-size", "0"),
        ("--num-steps-per-rollout", "0"),
        ("--critic-base-lr", "0"),
        ("--critic-base-global-batch-size", "0"),
    ],
)
def test_ppo_out_of_range_values_are_rejected_naming_the_flag(cfg_of, flag, value):
    cfg = cfg_of("--advantage-estimator", "gae", f"{flag}={value}")
    err = rejected(cfg)
    assert err.flag == flag
    assert f"{flag}={getattr(cfg, flag[2:].replace('-', '_'))}" in str(err)
    assert "allowed" in str(err)


def test_value_clip_error_says_zero_disables(cfg_of):
    err = assert_rejected(
        cfg_of("--advantage-estimator", "gae", "--value-clip", "-1"), "--value-clip", -1.0
    )
    assert err.allowed == ">= 0; 0 disables clipping"


def test_critic_min_lr_is_checked_against_the_critic_lr(cfg_of):
    gae = ("--advantage-estimator", "gae")
    err = assert_rejected(
        cfg_of(*gae, "--critic-lr", "1e-5", "--critic-min-lr", "1e-4"), "--critic-min-lr", 1e-4
    )
    assert "--critic-lr" in str(err)
    validate(cfg_of(*gae, "--critic-lr", "1e-5", "--critic-min-lr", "1e-5"), 1)
    # --critic-min-lr not given takes --min-lr, which must not exceed --critic-lr
    err = assert_rejected(
        cfg_of(*gae, "--min-lr", "1e-4", "--critic-lr", "1e-5"), "--critic-lr", 1e-5
    )
    assert "--min-lr" in str(err) and "--critic-min-lr" in err.allowed


def test_critic_batch_not_dividing_the_rollout_is_rejected(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--critic-global-batch-size",
        "48",
        "--critic-micro-batch-size",
        "8",
    )
    err = assert_rejected(cfg, "--critic-global-batch-size", 48)
    assert "16 x 8 = 128" in str(err) and "[1, 2, 4, 8, 16, 32, 64, 128]" in str(err)


def test_critic_batch_not_dividing_over_data_parallel_is_rejected(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--rollout-batch-size",
        "3",
        "--n-samples-per-prompt",
        "2",
        "--micro-batch-size",
        "1",
        "--global-batch-size",
        "6",
        "--critic-global-batch-size",
        "3",
    )
    err = assert_rejected(cfg, "--critic-global-batch-size", 3, world_size=2)
    assert "data-parallel size 2" in str(err)


def test_critic_micro_batch_times_dp_not_dividing_critic_batch_is_rejected(cfg_of):
    cfg = cfg_of(
        "--advantage-estimator",
        "gae",
        "--critic-global-batch-size",
        "32",
        "--critic-micro-batch-size",
        "32",
    )
    err = assert_rejected(cfg, "--critic-micro-batch-size", 32, world_size=2)
    assert "= 64" in str(err) and "critic batch 32" in str(err)
    # not given, the critic micro batch comes from --micro-batch-size (16): 16 x 4 > 32
    err = assert_rejected(
        cfg_of(
            "--advantage-estimator",
            "gae",
            "--micro-batch-size",
            "8",
            "--critic-global-batch-size",
            "16",
            "--critic-micro-batch-size",
            "none",
        ),
        "--critic-micro-batch-size",
        8,
        world_size=4,
    )
    assert "from --micro-batch-size" in str(err)


def test_critic_load_must_be_a_model_directory(cfg_of, tmp_path):
    gae = ("--advantage-estimator", "gae")
    missing = str(tmp_path / "missing")
    err = assert_rejected(cfg_of(*gae, "--critic-load", missing), "--critic-load", missing)
    assert "a local Hugging Face model directory" in err.allowed
    model = tmp_path / "model"
    model.mkdir()
    err = assert_rejected(cfg_of(*gae, "--critic-load", str(model)), "--critic-load", str(model))
    assert "config.json" in str(err)
    (model / "config.json").write_text("{}")
    validate(cfg_of(*gae, "--critic-load", str(model)), 1)


def test_default_global_batch_not_splitting_over_data_parallel_says_where_it_came_from(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size", "3", "--n-samples-per-prompt", "2", "--micro-batch-size", "1"
    )
    err = assert_rejected(cfg, "--global-batch-size", 6, world_size=4)
    assert "P x G, the default" in str(err)


# --------------------------------------------------------------------------- learning-rate scaling


def test_lr_scaling_flags_are_parsed_and_default_to_no_scaling(cfg_of):
    cfg = cfg_of()
    assert (cfg.lr, cfg.lr_scaling, cfg.base_lr, cfg.base_global_batch_size) == (
        None,
        "none",
        None,
        None,
    )
    cfg = cfg_of("--base-lr", "3e-4", "--base-global-batch-size", "32", "--lr-scaling", "sqrt")
    assert cfg.base_lr == pytest.approx(3e-4) and cfg.base_global_batch_size == 32
    assert cfg.lr_scaling == "sqrt" and cfg.lr is None
    err = parse_rejected(["--lr-scaling", "cubic"])
    assert_names(err, "--lr-scaling", "cubic")
    assert "none, sqrt, linear" in str(err)


def test_resolve_records_the_scaled_lr(cfg_of):
    cfg = cfg_of(
        "--rollout-batch-size",
        "16",
        "--n-samples-per-prompt",
        "8",
        "--base-lr",
        "3e-4",
        "--base-global-batch-size",
        "32",
        "--lr-scaling",
        "sqrt",
    )
    r = resolve(cfg)
    assert r.global_batch_size == 128
    assert r.lr == pytest.approx(6e-4, rel=1e-12)
    assert (r.base_lr, r.base_global_batch_size, r.lr_scaling) == (3e-4, 32, "sqrt")
    assert resolve(r) == r
    validate(r, 1)  # a resolved config (lr equal to the scaled rate) validates
    d = r.to_dict(1)
    assert d["lr"] == r.lr and d["lr_scaling_exponent"] == 0.5
    assert json.loads(json.dumps(d)) == d


def test_scaling_uses_the_resolved_global_batch(cfg_of):
    # B = P x G / --num-steps-per-rollout = 64; linear from B0 = 256: a quarter of LR0
    r = resolve(
        cfg_of(
            "--num-steps-per-rollout",
            "2",
            "--base-lr",
            "4e-4",
            "--base-global-batch-size",
            "256",
            "--lr-scaling",
            "linear",
        )
    )
    assert r.global_batch_size == 64 and r.lr == pytest.approx(1e-4, rel=1e-12)
    assert r.to_dict(1)["lr_scaling_exponent"] == 1.0
    # no --lr-scaling (none): LR0 at every B
    assert resolve(cfg_of("--base-lr", "4e-4", "--base-global-batch-size", "256")).lr == 4e-4


def test_ref_global_batch_size_defaults_to_the_global_batch(cfg_of):
    r = resolve(cfg_of("--base-lr", "5e-4", "--lr-scaling", "sqrt", "--global-batch-size", "64"))
    assert r.base_global_batch_size == 64 and r.lr == 5e-4
    assert resolve(r) == r


def test_lr_given_alone_is_kept_and_default_is_3e_4(cfg_of):
    assert resolve(cfg_of("--lr", "1e-3")).lr == 1e-3
    r = resolve(cfg_of())
    assert r.lr == 3e-4 and r.base_global_batch_size is None
    assert r.to_dict(1)["lr"] == 3e-4 and r.to_dict(1)["lr_scaling_exponent"] == 0.0


def test_lr_together_with_ref_lr_is_rejected(cfg_of):
    cfg = cfg_of("--lr", "1e-3", "--base-lr", "3e-4", "--base-global-batch-size", "32")
    err = assert_rejected(cfg, "--lr", 1e-3)
    assert "--base-lr" in str(err)
    assert err.allowed == "one of them: --lr for a fixed rate, or --base-lr with --lr-scaling"
    with pytest.raises(ConfigError) as info:
        resolve(cfg)
    assert info.value.flag == "--lr"


def test_lr_scaling_without_ref_lr_is_rejected(cfg_of):
    for rule in ("sqrt", "linear"):
        err = assert_rejected(cfg_of("--lr-scaling", rule), "--lr-scaling", rule)
        assert err.allowed == (
            "add --base-lr LR0 and --base-global-batch-size B0, or --lr-scaling none"
        )
    validate(cfg_of("--lr-scaling", "none", "--lr", "1e-3"), 1)


def test_ref_global_batch_size_without_ref_lr_is_rejected(cfg_of):
    err = assert_rejected(cfg_of("--base-global-batch-size", "32"), "--base-global-batch-size", 32)
    assert "--base-lr" in str(err) and "--base-lr" in err.allowed


def test_min_lr_is_checked_against_the_scaled_lr(cfg_of):
    scaling = ("--base-lr", "3e-4", "--base-global-batch-size", "512", "--lr-scaling", "linear")
    # B = 128: 3e-4 x 128 / 512 = 7.5e-5, below --min-lr 1e-4 (which the unscaled 3e-4 allows)
    err = assert_rejected(cfg_of(*scaling, "--min-lr", "1e-4"), "--min-lr", 1e-4)
    assert "--base-lr" in str(err) and "7.5e-05" in err.allowed
    validate(cfg_of(*scaling, "--min-lr", "7.5e-5"), 1)
    # scaling up admits a min_lr above the reference rate
    validate(
        cfg_of(
            "--base-lr",
            "3e-4",
            "--base-global-batch-size",
            "32",
            "--lr-scaling",
            "sqrt",
            "--min-lr",
            "5e-4",
        ),
        1,
    )


def test_min_lr_above_the_default_lr_is_rejected_after_resolution(cfg_of):
    err = assert_rejected(cfg_of("--min-lr", "4e-4"), "--min-lr", 4e-4)
    assert "0.0003 (the default --lr)" in str(err) and err.allowed == "0 <= min_lr <= 0.0003"


# --------------------------------------------------------------------------- critic lr scaling


GAE = ("--advantage-estimator", "gae")


def test_critic_lr_scaling_under_gae(cfg_of):
    r = resolve(
        cfg_of(
            *GAE,
            "--critic-global-batch-size",
            "32",
            "--critic-base-lr",
            "1e-5",
            "--critic-base-global-batch-size",
            "128",
            "--critic-lr-scaling",
            "sqrt",
        )
    )
    assert r.critic_global_batch_size == 32
    assert r.critic_lr == pytest.approx(5e-6, rel=1e-12)  # 1e-5 x (32 / 128)^(1/2)
    assert (r.critic_base_lr, r.critic_base_global_batch_size, r.critic_lr_scaling) == (
        1e-5,
        128,
        "sqrt",
    )
    assert r.lr == 3e-4  # the actor is not scaled
    assert resolve(r) == r
    validate(r, 1)
    d = r.to_dict(1)
    assert d["critic_lr"] == r.critic_lr and d["critic_lr_scaling_exponent"] == 0.5
    assert json.loads(json.dumps(d)) == d


def test_critic_lr_takes_the_resolved_actor_lr_when_not_given(cfg_of):
    r = resolve(
        cfg_of(*GAE, "--base-lr", "3e-4", "--base-global-batch-size", "32", "--lr-scaling", "sqrt")
    )
    assert r.critic_lr == r.lr == pytest.approx(6e-4, rel=1e-12)
    assert r.critic_lr_scaling == "none" and r.critic_base_global_batch_size is None
    assert r.to_dict(1)["critic_lr_scaling_exponent"] == 0.0
    # critic B0 defaults to the critic batch: the critic rate is LR0
    r = resolve(cfg_of(*GAE, "--critic-base-lr", "2e-5", "--critic-lr-scaling", "linear"))
    assert r.critic_lr == 2e-5 and r.critic_base_global_batch_size == 128


def test_critic_lr_together_with_critic_ref_lr_is_rejected(cfg_of):
    err = assert_rejected(
        cfg_of(*GAE, "--critic-lr", "1e-5", "--critic-base-lr", "2e-5"), "--critic-lr", 1e-5
    )
    assert "--critic-base-lr" in str(err)
    assert err.allowed == (
        "one of them: --critic-lr for a fixed rate, or --critic-base-lr with --critic-lr-scaling"
    )


def test_critic_lr_scaling_without_critic_ref_lr_is_rejected(cfg_of):
    err = assert_rejected(
        cfg_of(*GAE, "--critic-lr-scaling", "linear"), "--critic-lr-scaling", "linear"
    )
    assert err.allowed == (
        "add --critic-base-lr LR0 and --critic-base-global-batch-size B0, "
        "or --critic-lr-scaling none"
    )
    err = assert_rejected(
        cfg_of(*GAE, "--critic-base-global-batch-size", "32"), "--critic-base-global-batch-size", 32
    )
    assert "--critic-base-lr" in err.allowed


def test_critic_min_lr_is_checked_against_the_scaled_critic_lr(cfg_of):
    scaling = (
        "--critic-global-batch-size",
        "32",
        "--critic-base-lr",
        "1e-5",
        "--critic-base-global-batch-size",
        "128",
        "--critic-lr-scaling",
        "linear",
    )
    # critic lr = 1e-5 x 32 / 128 = 2.5e-6
    err = assert_rejected(
        cfg_of(*GAE, *scaling, "--critic-min-lr", "5e-6"), "--critic-min-lr", 5e-6
    )
    assert "--critic-base-lr" in str(err)
    err = assert_rejected(cfg_of(*GAE, *scaling, "--min-lr", "5e-6"), "--critic-base-lr", 1e-5)
    assert "--min-lr" in str(err) and "--critic-min-lr" in err.allowed
    validate(cfg_of(*GAE, *scaling, "--min-lr", "5e-6", "--critic-min-lr", "2.5e-6"), 1)


# --------------------------------------------------------------------------- eval and target


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


def test_task_eval_fraction_must_leave_prompts_for_training_and_evaluation(cfg_of):
    # --task-max-operand 1: 4 prompts; round(0.9 x 4) = 4 held out, none left to train on
    err = assert_rejected(
        cfg_of("--eval-interval", "5", "--task-max-operand", "1", "--task-eval-fraction", "0.9"),
        "--task-eval-fraction",
        0.9,
    )
    assert "4 of the 4 prompts" in str(err) and "0 for training" in str(err)
    # round(0.1 x 4) = 0 held out: nothing to evaluate on
    err = assert_rejected(
        cfg_of("--eval-interval", "5", "--task-max-operand", "1", "--task-eval-fraction", "0.1"),
        "--task-eval-fraction",
        0.1,
    )
    assert "0 of the 4 prompts" in str(err)
    # without evaluation nothing is held out, so any fraction in [0, 1) is fine
    validate(cfg_of("--task-max-operand", "1", "--task-eval-fraction", "0.9"), 1)
    validate(cfg_of("--task-eval-fraction", "0"), 1)
    # 0 with evaluation: evaluate on the training prompts (in-distribution), nothing held out
    validate(cfg_of("--eval-interval", "5", "--task-eval-fraction", "0"), 1)
    validate(
        cfg_of("--eval-interval", "5", "--task-max-operand", "1", "--task-eval-fraction", "0.25"), 1
    )


def test_noise_scale_beta_outside_zero_one_is_rejected_and_none_switches_it_off(cfg_of):
    assert_rejected(cfg_of("--noise-scale-beta", "1.0"), "--noise-scale-beta", 1.0)
    validate(cfg_of("--noise-scale-beta", "none"), 1)
    assert parse_args(["--noise-scale-beta", "none"]).noise_scale_beta is None


def test_batch_ramp_start_must_equal_the_first_global_batch(cfg_of):
    err = assert_rejected(cfg_of("--batch-ramp", "64:512:10"), "--batch-ramp", "64:512:10")
    assert "B=128" in str(err)


def test_batch_ramp_end_must_keep_micro_batches_and_prompt_groups_whole(cfg_of):
    # micro batch 16 x DP 1 and groups of G=8: END must be a multiple of 16
    err = assert_rejected(cfg_of("--batch-ramp", "128:520:10"), "--batch-ramp", "128:520:10")
    assert "multiple of 16" in str(err)
    validate(cfg_of("--batch-ramp", "128:512:10"), 1)


def test_batch_ramp_is_refused_with_ppo_and_when_malformed(cfg_of):
    assert_rejected(
        cfg_of("--advantage-estimator", "gae", "--batch-ramp", "128:256:5"),
        "--batch-ramp",
        "128:256:5",
    )
    assert_rejected(cfg_of("--batch-ramp", "128-512"), "--batch-ramp", "128-512")


def test_lr_and_ref_lr_on_one_command_line_are_refused_even_when_they_agree():
    from hyrl.config import load

    with pytest.raises(ConfigError) as info:
        load(["--lr", "3e-4", "--base-lr", "3e-4", "--run-dir", "/nonexistent/never"], 1)
    assert info.value.flag == "--lr" and "--base-lr=0.0003" in str(info.value)
    assert "allowed" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load(
            [
                "--advantage-estimator",
                "gae",
                "--critic-lr",
                "1e-3",
                "--critic-base-lr",
                "1e-3",
                "--run-dir",
                "/nonexistent/never",
            ],
            1,
        )
    assert info.value.flag == "--critic-lr"


# --------------------------------------------------------------------------- data, memory flags


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "1+1=", "label": "2"}\n')
    return str(path)


def test_prompt_data_sets_the_task_and_needs_a_tokenizer_and_a_reward(cfg_of, data_file, tmp_path):
    tok = str(tmp_path)
    resolved = resolve(
        cfg_of("--prompt-data", data_file, "--tokenizer-path", tok, "--rm-type", "math")
    )
    assert resolved.task == "prompt_data" and resolved.rm_type == "math"
    assert resolve(cfg_of()).task == "arith_mod10" and resolve(cfg_of()).rm_type == "exact_match"
    assert_rejected(
        cfg_of("--prompt-data", data_file, "--rm-type", "math"), "--tokenizer-path", "none"
    )
    assert_rejected(
        cfg_of("--prompt-data", data_file, "--tokenizer-path", tok), "--rm-type", "none"
    )
    assert_rejected(cfg_of("--task", "prompt_data"), "--task", "prompt_data")
    assert_rejected(
        cfg_of(
            "--prompt-data", str(tmp_path / "x.csv"), "--tokenizer-path", tok, "--rm-type", "math"
        ),
        "--prompt-data",
        str(tmp_path / "x.csv"),
    )
    assert_rejected(
        cfg_of("--rm-type", "math", "--custom-rm-path", "m:f"), "--custom-rm-path", "m:f"
    )
    assert_rejected(cfg_of("--custom-rm-path", "nocolon"), "--custom-rm-path", "nocolon")
    # data flags under the built-in task are refused, not ignored
    assert_rejected(cfg_of("--apply-chat-template"), "--apply-chat-template", True)


def test_eval_prompt_data_takes_name_file_pairs(cfg_of, data_file, tmp_path):
    base = ("--prompt-data", data_file, "--tokenizer-path", str(tmp_path), "--rm-type", "math")
    cfg = cfg_of(*base, "--eval-prompt-data", "aime", data_file, "gpqa", data_file)
    validate(cfg, 1)
    assert cfg.eval_prompt_data == ["aime", data_file, "gpqa", data_file]
    err = assert_rejected(cfg_of(*base, "--eval-prompt-data", "aime"), "--eval-prompt-data", "aime")
    assert "pair" in str(err)
    assert "twice" in str(
        rejected(cfg_of(*base, "--eval-prompt-data", "a", data_file, "a", data_file))
    )
    assert "is not a name" in str(rejected(cfg_of(*base, "--eval-prompt-data", data_file, "a")))


@pytest.mark.parametrize(
    "argv, flag, value",
    [
        (("--recompute-method", "uniform"), "--recompute-method", "uniform"),
        (
            ("--recompute-granularity", "selective", "--recompute-num-layers", "1"),
            "--recompute-num-layers",
            1,
        ),
        (
            ("--recompute-granularity", "full", "--recompute-num-layers", "3"),
            "--recompute-num-layers",
            3,
        ),
        (("--use-dynamic-batch-size",), "--max-tokens-per-gpu", "none"),
        (("--max-tokens-per-gpu", "64"), "--max-tokens-per-gpu", 64),
        (("--use-dynamic-batch-size", "--max-tokens-per-gpu", "4"), "--max-tokens-per-gpu", 4),
        (("--gpu-memory-gib", "0"), "--gpu-memory-gib", 0.0),
    ],
)
def test_memory_flags_that_cannot_work_are_refused(cfg_of, argv, flag, value):
    assert_rejected(cfg_of(*argv), flag, value)


def test_distributed_timeout_defaults_to_megatrons_ten_minutes_and_must_be_positive(run_dir):
    assert parse_args(["--run-dir", run_dir]).distributed_timeout_minutes == 10.0
    validate(parse_args(["--run-dir", run_dir, "--distributed-timeout-minutes", "0.5"]), 1)
    for value in ("0", "-5"):
        err = assert_rejected(
            parse_args(["--run-dir", run_dir, "--distributed-timeout-minutes", value]),
            "--distributed-timeout-minutes",
            float(value),
        )
        assert "minutes > 0" in str(err)


def test_a_run_written_before_a_flag_existed_resumes_when_that_flag_is_at_its_default(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _a_run_in(run, "--num-steps", "3")
    saved = json.loads((run / "config.json").read_text())
    # an older hyrl had neither field (nor the derived loss-aggregation default it resolves to)
    for key in ("loss_agg_mode", "dynamic_sampling", "eval_pass_threshold"):
        del saved[key]
    (run / "config.json").write_text(json.dumps(saved))
    resumed = ["--run-dir", str(run), "--load", str(tmp_path / "ckpt")]
    validate(parse_args([*resumed, "--num-steps", "6"]), 1)
    validate(parse_args([*resumed, "--loss-agg-mode", "token-mean"]), 1)  # the default, given
    # the older run ran without dynamic sampling and with token-mean: anything else differs
    err = assert_rejected(parse_args([*resumed, "--dynamic-sampling"]), "--run-dir", str(run))
    assert "--dynamic-sampling: False (its default: not in config.json), True now" in str(err)
    err = assert_rejected(
        parse_args([*resumed, "--loss-agg-mode", "seq-mean-token-mean"]), "--run-dir", str(run)
    )
    assert "--loss-agg-mode: 'token-mean' (its default: not in config.json)" in str(err)


def test_offload_train_may_change_on_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    colocated = ("--rollout-engine", "sglang", "--colocate")
    _a_run_in(run, *colocated, "--num-steps", "3")  # offloaded (on by default with --colocate)
    resumed = ["--run-dir", str(run), "--load", str(tmp_path / "ckpt"), *colocated]
    validate(parse_args([*resumed, "--num-steps", "3", "--no-offload-train"]), 1)
    # a flag outside RESUME_MAY_CHANGE still counts
    err = assert_rejected(parse_args([*resumed, "--lr", "2e-4"]), "--run-dir", str(run))
    assert "--lr: 0.0003 in config.json, 0.0002 now" in str(err)


def test_distributed_timeout_may_change_on_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _a_run_in(run, "--num-steps", "3")
    validate(
        parse_args(
            [
                "--run-dir",
                str(run),
                "--load",
                str(tmp_path / "ckpt"),
                "--distributed-timeout-minutes",
                "60",
            ]
        ),
        1,
    )


def test_fused_permutation_is_refused_with_the_local_spec_and_without_te_here(cfg_of):
    err = assert_rejected(
        cfg_of("--moe-permute-fusion", "--transformer-impl", "local"), "--moe-permute-fusion", True
    )
    assert "Transformer Engine kernel" in str(err) and "--transformer-impl local" in str(err)
    cfg = cfg_of("--moe-permute-fusion")
    validate(cfg, 1)  # auto: a dry run plans for a cluster with TE from any machine
    from hyrl.backends.megatron.backend import check_machine
    from hyrl.backends.megatron.model import transformer_engine_importable

    if transformer_engine_importable():
        check_machine(cfg)
    else:  # this machine: refused before any process group, by preflight
        with pytest.raises(ConfigError, match="does not import on this machine") as info:
            check_machine(cfg)
        assert_names(info.value, "--moe-permute-fusion", True)


def test_megatrons_fused_cross_entropy_is_refused_with_the_reason(cfg_of):
    err = assert_rejected(
        cfg_of("--cross-entropy-loss-fusion"), "--cross-entropy-loss-fusion", True
    )
    assert "temperature 1" in str(err) and "entropy" in str(err)
