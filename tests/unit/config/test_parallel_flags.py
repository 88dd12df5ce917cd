"""The parallel layout (hyrl.config.concerns.parallel): tensor, pipeline and expert parallelism
must divide the world size, the layers, heads, query groups, vocabulary, FFN width and experts;
sequence parallelism goes with TP (and is required for MoE under TP); expert tensor
parallelism is refused as not supported; early gradient reduction is refused where the noise
scale reads each rank's gradient; the memory flags (recomputation, dynamic batches, GPU memory)
that cannot work are refused; and --distributed-timeout-minutes defaults to Megatron's ten.
The virtual pipeline flags are in test_virtual_pipeline_flags.py."""

from __future__ import annotations

import pytest
from config_errors import assert_rejected

from hyrl.config import parse_args, validate


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
