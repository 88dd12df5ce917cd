"""Validation as a whole (hyrl.config.validate): the defaults validate at world size 1, the world
size comes from WORLD_SIZE and must be at least 1, every count and size below one and every
value out of its range is refused naming the flag, the edge values of the ranges are accepted,
a programmatic config of the wrong Python type is refused; and `load` (parse, validate,
resolve) returns a validated, resolved config."""

from __future__ import annotations

import dataclasses

import pytest
from config_errors import assert_rejected, rejected

from hyrl.config import (
    ConfigError,
    RunConfig,
    flag_name,
    load,
    parse_args,
    resolve,
    validate,
    world_size_from_env,
)


def test_defaults_validate_at_world_size_1(cfg_of):
    cfg = cfg_of()
    assert cfg == dataclasses.replace(RunConfig(), run_dir=cfg.run_dir)
    validate(cfg, 1)


def test_world_size_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert world_size_from_env() == 1
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert world_size_from_env() == 8


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
