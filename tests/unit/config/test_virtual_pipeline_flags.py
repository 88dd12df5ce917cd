"""--num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank: Megatron's
names and meaning (V = L / PP / N chunks per pipeline rank), refused before anything starts
where megatron's interleaved schedule cannot run them."""

from __future__ import annotations

import pytest

from hyrl.config import ConfigError, parse_args, resolve, validate

PP2_4_LAYERS = ("--pipeline-model-parallel-size", "2", "--num-layers", "4")


@pytest.fixture
def cfg_of(tmp_path):
    def make(*argv: str):
        return parse_args(["--run-dir", str(tmp_path / "run"), *argv])

    return make


def rejected(cfg, flag: str, value, world_size: int = 2) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(cfg, world_size)
    err = info.value
    assert err.flag == flag and err.value == value
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ("--num-layers-per-virtual-pipeline-stage", "1"),
        ("--num-virtual-stages-per-pipeline-rank", "2"),
    ],
)
def test_either_flag_gives_two_chunks_of_one_layer_on_each_of_two_stages(cfg_of, argv):
    cfg = cfg_of(*PP2_4_LAYERS, *argv)
    validate(cfg, 2)
    assert resolve(cfg).virtual_pipeline_model_parallel_size == 2  # 4 layers / PP 2 / 1 layer


def test_no_flag_means_no_virtual_stages(cfg_of):
    assert resolve(cfg_of(*PP2_4_LAYERS)).virtual_pipeline_model_parallel_size is None


def test_virtual_stages_without_a_pipeline_are_refused(cfg_of):
    err = rejected(
        cfg_of("--num-layers", "4", "--num-layers-per-virtual-pipeline-stage", "1"),
        "--num-layers-per-virtual-pipeline-stage",
        1,
        world_size=1,
    )
    assert "there is no pipeline (PP=1)" in str(err)
    assert err.allowed.startswith("--pipeline-model-parallel-size > 1")


def test_layers_per_virtual_stage_must_split_a_ranks_layers_into_several_chunks(cfg_of):
    err = rejected(
        cfg_of(*PP2_4_LAYERS, "--num-layers-per-virtual-pipeline-stage", "2"),
        "--num-layers-per-virtual-pipeline-stage",
        2,
    )
    assert "L / PP = 4 / 2 = 2 layers" in str(err) and "one chunk" in str(err)
    assert err.allowed == "a divisor of 2 below it: [1]"
    err = rejected(
        cfg_of(
            "--pipeline-model-parallel-size",
            "2",
            "--num-layers",
            "6",
            "--num-layers-per-virtual-pipeline-stage",
            "2",
        ),
        "--num-layers-per-virtual-pipeline-stage",
        2,
    )
    assert "3 layers, which 2-layer virtual stages do not split evenly" in str(err)


def test_virtual_stages_per_rank_must_divide_a_ranks_layers(cfg_of):
    err = rejected(
        cfg_of(*PP2_4_LAYERS, "--num-virtual-stages-per-pipeline-rank", "3"),
        "--num-virtual-stages-per-pipeline-rank",
        3,
    )
    assert "do not split evenly into 3 virtual stages" in str(err)
    assert err.allowed == "a divisor of 2 from 2: [2]"
    err = rejected(
        cfg_of(*PP2_4_LAYERS, "--num-virtual-stages-per-pipeline-rank", "1"),
        "--num-virtual-stages-per-pipeline-rank",
        1,
    )
    assert "one virtual stage is the plain schedule" in str(err)


def test_the_two_flags_together_are_refused(cfg_of):
    err = rejected(
        cfg_of(
            *PP2_4_LAYERS,
            "--num-virtual-stages-per-pipeline-rank",
            "2",
            "--num-layers-per-virtual-pipeline-stage",
            "1",
        ),
        "--num-virtual-stages-per-pipeline-rank",
        2,
    )
    assert err.allowed == "one of the two flags"


def test_micro_batches_per_step_must_be_a_multiple_of_pp(cfg_of):
    """megatron-core 0.16.1's interleaved schedule runs groups of PP micro-batches: B=96 in
    micro-batches of 32 at DP=1 makes 3, refused; of 16 it makes 6, accepted."""
    batch = ("--rollout-batch-size", "12", "--global-batch-size", "96")
    vpp = ("--num-layers-per-virtual-pipeline-stage", "1")
    validate(cfg_of(*PP2_4_LAYERS, *vpp, *batch, "--micro-batch-size", "16"), 2)
    err = rejected(
        cfg_of(*PP2_4_LAYERS, *vpp, *batch, "--micro-batch-size", "32"),
        "--micro-batch-size",
        32,
    )
    assert "B=96 over DP=1 makes 3 micro-batches per step" in str(err)
    assert "a multiple of PP" in str(err) and "48" in err.allowed
    # the same batch without virtual stages runs megatron's plain 1F1B, which takes any count
    validate(cfg_of(*PP2_4_LAYERS, *batch, "--micro-batch-size", "32"), 2)


def test_dynamic_micro_batches_are_not_counted_in_advance(cfg_of):
    """Packed by tokens, the count is known only at run time: the trainer pads it with
    loss-free micro-batches (pipeline.interleavable)."""
    validate(
        cfg_of(
            *PP2_4_LAYERS,
            "--num-layers-per-virtual-pipeline-stage",
            "1",
            "--rollout-batch-size",
            "12",
            "--global-batch-size",
            "96",
            "--micro-batch-size",
            "32",
            "--use-dynamic-batch-size",
            "--max-tokens-per-gpu",
            "256",
        ),
        2,
    )
