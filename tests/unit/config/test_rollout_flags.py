"""Rollout (hyrl.config.concerns.rollout and the layout of hyrl.config.rollout_layout): the hf
engine runs in process unless engines are asked for, and refuses SGLang's flags rather than
ignoring them; SGLang engines are counted from GPUs or engines, which must agree; colocated
engines use the training GPUs, offload them by default and refuse NCCL weight sync; a router
URL attaches to engines started elsewhere; and --max-staleness, the reward workers and the
fleet's ranges are checked."""

from __future__ import annotations

import pytest
from config_errors import assert_rejected

from hyrl.config import RunConfig, resolve, validate
from hyrl.config.rollout_layout import rollout_layout


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
    assert (layout.num_engines, layout.num_gpus, layout.update_weight_transport) == (
        4,
        8,
        "distributed",
    )
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
    assert (layout.num_engines, layout.num_gpus, layout.update_weight_transport) == (2, 4, "tensor")
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


def test_a_negative_max_staleness_is_refused_naming_the_flag(cfg_of):
    err = assert_rejected(cfg_of("--async-rollout", "--max-staleness", "-1"), "--max-staleness", -1)
    assert ">= 0" in err.allowed
    validate(cfg_of("--async-rollout", "--max-staleness", "0"), 1)  # 0: the synchronous order


def test_router_url_attaches_and_refuses_engine_flags_and_tensor_sync(cfg_of):
    sg = ("--rollout-engine", "sglang", "--sglang-router-url", "http://10.0.0.5:30000")
    layout = layout_of(cfg_of(*sg))
    assert (layout.num_engines, layout.update_weight_transport) == (0, "distributed")
    assert_rejected(cfg_of(*sg, "--rollout-num-engines", "2"), "--rollout-num-engines", 2)
    assert_rejected(
        cfg_of(*sg, "--update-weight-transport", "tensor"), "--update-weight-transport", "tensor"
    )
    assert_rejected(
        cfg_of("--rollout-engine", "sglang", "--sglang-router-url", "10.0.0.5:30000"),
        "--sglang-router-url",
        "10.0.0.5:30000",
    )


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
