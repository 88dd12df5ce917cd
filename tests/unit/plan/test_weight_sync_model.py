"""hyrl plan's weight-sync model (hyrl/plan/sync.py): its arithmetic on hand-computed numbers,
the link each collective crosses, the Qwen3-30B-A3B layouts of the recipes worked by hand,
and the plan's text and JSON (a model: no GPU, no timing)."""

import dataclasses
import json

import pytest
from testpaths import ROOT

from hyrl import plan as hplan
from hyrl.config import RunConfig, resolve
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B
from hyrl.plan.sync import Links, group_bus_bandwidth, sync_seconds

QWEN = RunConfig(**QWEN3_30B_A3B.as_dict())
# Qwen3-30B-A3B by hand (test_plan.py checks the counts against the published sizes):
TOTAL = 30_532_122_624
EXPERTS = 48 * 128 * 3 * 2048 * 768  # 28,991,029,248
ATTENTION = 2048 * 32 * 128 + 2 * 2048 * 4 * 128 + 32 * 128 * 2048  # q, k, v, o of one layer
VOCAB_LAYER = 151936 * 2048  # embedding; the output layer is as large (untied)
TP_SPLIT = 48 * ATTENTION + 2 * VOCAB_LAYER  # 1,528,299,520


def qwen(**changes) -> RunConfig:
    base = dict(
        tensor_model_parallel_size=4,
        sequence_parallel=True,
        bf16=True,
        transformer_impl="transformer_engine",
        rollout_engine="sglang",
        gpus_per_node=8,
        micro_batch_size=1,
    )
    return resolve(dataclasses.replace(QWEN, **{**base, **changes}))


def test_sync_seconds_by_hand():
    got = sync_seconds(
        model_bytes=10e9,
        tp_split_bytes=2e9,
        expert_bytes=8e9,
        tp=4,
        ep=8,
        pp=1,
        tp_bw=400e9,
        ep_bw=50e9,
        pp_bw=50e9,
        broadcast_bw=None,
        flatten=True,
        engine_tp=4,
        hbm_bw=2000e9,
    )
    assert got["tp_gather"] == pytest.approx(2e9 * 3 / 4 / 400e9)  # 3.75 ms
    assert got["ep_gather"] == pytest.approx(8e9 * 7 / 8 / 50e9)  # 0.14 s
    assert got["pp_broadcast"] == 0.0 and got["broadcast"] == 0.0
    assert got["gpu_copies"] == pytest.approx(2 * (10e9 + 10e9 / 4) / 2000e9)  # 12.5 ms
    assert got["total"] == pytest.approx(0.00375 + 0.14 + 0.0125)

    # engines elsewhere, two pipeline stages: a broadcast each, no flatten copy
    other = sync_seconds(
        model_bytes=10e9,
        tp_split_bytes=2e9,
        expert_bytes=8e9,
        tp=1,
        ep=1,
        pp=2,
        tp_bw=400e9,
        ep_bw=400e9,
        pp_bw=25e9,
        broadcast_bw=50e9,
        flatten=False,
        engine_tp=2,
        hbm_bw=2000e9,
    )
    assert other["tp_gather"] == 0.0 and other["ep_gather"] == 0.0  # nothing split
    assert other["pp_broadcast"] == pytest.approx(10e9 / 25e9)  # 0.4 s
    assert other["broadcast"] == pytest.approx(10e9 / 50e9)  # 0.2 s
    assert other["gpu_copies"] == pytest.approx(2 * 5e9 / 2000e9)  # 5 ms
    assert other["total"] == pytest.approx(0.4 + 0.2 + 0.005)


def test_a_group_across_nodes_gets_one_nic_per_gpu_on_a_node_capped_by_nvlink():
    links = Links()  # 450 GB/s NVLink, 400 Gb/s = 50 GB/s InfiniBand per GPU
    assert group_bus_bandwidth(8, 1, links)[0] == 450
    assert group_bus_bandwidth(16, 2, links)[0] == 400  # 8 GPUs a node x 50 GB/s
    assert group_bus_bandwidth(2, 2, links)[0] == 50  # a PP pair: one NIC
    assert group_bus_bandwidth(16, 2, Links(ib_gbit_s=800))[0] == 450  # 8 x 100, capped


def grpo_by_hand() -> dict:
    # recipes/qwen3_30b_a3b/grpo.sh: 16 ranks on 2 nodes of 8, TP 4, EP 16, engines of 8 GPUs
    # on the training GPUs (CUDA IPC)
    c = qwen(expert_model_parallel_size=16, colocate=True, rollout_num_gpus_per_engine=8)
    return hplan.make_plan(c, 16)["weight_sync"]


def ppo_by_hand() -> dict:
    # recipes/qwen3_30b_a3b/ppo.sh: 32 ranks on 4 nodes, EP 32, 8 rollout GPUs of their own
    # (engines of 4), --update-weight-transport distributed
    c = qwen(expert_model_parallel_size=32, rollout_num_gpus=8, rollout_num_gpus_per_engine=4)
    return hplan.make_plan(c, 32)["weight_sync"]


def test_grpo_recipe_layout_colocated_by_hand():
    sync = grpo_by_hand()
    model = 2 * TOTAL  # bf16
    tp_gather = 2 * TP_SPLIT * 3 / 4 / 450e9  # TP group inside a node: NVLink
    ep_gather = 2 * EXPERTS * 15 / 16 / 400e9  # EP group over 2 nodes, 8 NICs a node
    copies = 2 * (model + model / 8) / 3350e9  # flatten + an engine TP rank's eighth, in HBM
    assert sync["kind"] == "model" and sync["model_bytes"] == model
    assert sync["terms_s"]["tp_gather"] == pytest.approx(tp_gather)
    assert sync["terms_s"]["ep_gather"] == pytest.approx(ep_gather)
    assert sync["terms_s"]["gpu_copies"] == pytest.approx(copies)
    assert sync["terms_s"]["broadcast"] == 0.0 and sync["terms_s"]["pp_broadcast"] == 0.0
    assert sync["seconds"] == pytest.approx(tp_gather + ep_gather + copies)
    assert sync["buckets_at_least"] == -(-model // (512 * 2**20))  # 114 buckets of 512 MiB


def test_ppo_recipe_layout_broadcasts_through_rank_0s_nic_by_hand():
    sync = ppo_by_hand()
    model = 2 * TOTAL
    want = (
        2 * TP_SPLIT * 3 / 4 / 450e9  # TP over NVLink
        + 2 * EXPERTS * 31 / 32 / 400e9  # EP over 4 nodes, 8 NICs a node
        + model / 50e9  # the NCCL broadcast, 400 Gb/s out of rank 0
        + 2 * (model / 4) / 3350e9  # an engine TP rank's quarter, no flatten copy
    )
    assert sync["transport"] == "distributed"
    assert sync["terms_s"]["broadcast"] == pytest.approx(model / 50e9)
    assert sync["seconds"] == pytest.approx(want)


@pytest.mark.parametrize(
    "recipe, by_hand", [("grpo.sh", grpo_by_hand), ("ppo.sh", ppo_by_hand)], ids=["grpo", "ppo"]
)
def test_the_30b_recipes_plan_the_layouts_worked_by_hand(capsys, recipe, by_hand):
    # what docs/rollout.md quotes: `hyrl plan recipes/qwen3_30b_a3b/{grpo,ppo}.sh`
    assert hplan.main(["--json", str(ROOT / "recipes" / "qwen3_30b_a3b" / recipe)]) == 0
    sync = json.loads(capsys.readouterr().out)["weight_sync"]
    assert sync["terms_s"] == pytest.approx(by_hand()["terms_s"])


def test_ep_inside_a_node_runs_over_nvlink_and_pp_across_nodes_over_one_nic():
    c = qwen(expert_model_parallel_size=8, colocate=True, rollout_num_gpus_per_engine=8)
    inside = hplan.make_plan(c, 16)["weight_sync"]
    assert inside["terms_s"]["ep_gather"] == pytest.approx(2 * EXPERTS * 7 / 8 / 450e9)
    staged = hplan.make_plan(
        qwen(
            expert_model_parallel_size=8,
            pipeline_model_parallel_size=2,
            rollout_num_gpus=8,
            rollout_num_gpus_per_engine=8,
        ),
        16,
    )["weight_sync"]
    # PP groups [r, r + 8]: one GPU on each of 2 nodes -> one 50 GB/s NIC
    assert staged["terms_s"]["pp_broadcast"] == pytest.approx(2 * TOTAL / 50e9)


def test_paths_the_model_does_not_cover_say_so():
    hf = hplan.make_plan(resolve(RunConfig()), 1)
    assert hf["weight_sync"] == {
        "modelled": False,
        "why": "hf rollout engine (SGLang engines only)",
    }
    assert "weight sync (model): not modelled for the hf rollout engine" in hplan.format_plan(hf)
    disk = hplan.make_plan(
        qwen(expert_model_parallel_size=8, rollout_num_gpus=8, update_weight_transport="disk"), 16
    )
    assert disk["weight_sync"]["modelled"] is False and "disk" in disk["weight_sync"]["why"]


def test_plan_text_prints_the_prediction_as_a_model_with_its_assumptions():
    c = qwen(expert_model_parallel_size=16, colocate=True, rollout_num_gpus_per_engine=8)
    plan = hplan.make_plan(c, 16)
    text = hplan.format_plan(plan)
    [headline] = [x for x in text.splitlines() if x.startswith("  weight sync:")]
    assert f"{plan['weight_sync']['seconds']:.3f} s predicted" in headline
    assert "a lower bound (a model from link bandwidths, not a measurement" in headline
    assert "61.06 GB = 30,532,122,624 params x 2 B (bf16" in headline
    for expected in (
        "TP all-gather: 3.06 GB (attention, embedding, output) x 3/4 over NVLink 450 GB/s",
        "x 15/16 over InfiniBand (2 nodes; 8 GPU(s) a node x 50 GB/s, at most NVLink 450) "
        "= 400 GB/s",
        "CUDA IPC (colocated, --update-weight-transport tensor)",
        "assumes: nominal link peaks",
        "not modelled: per-bucket HTTP calls",
        # SGLang 0.5.23 loads each tensor in Python: 48 layers x 128 experts x 3 on every rank
        "one by one in Python on every engine TP rank (18,432 expert tensors alone",
    ):
        assert expected in text


FLAGS = [
    "--world-size",
    "2",
    "--rollout-engine",
    "sglang",
    "--colocate",
    "--expert-model-parallel-size",
    "2",
    "--gpus-per-node",
    "1",
]


def test_link_options_change_the_prediction_and_reach_the_json(capsys):
    assert hplan.main(["--json", "--", *FLAGS]) == 0
    default = json.loads(capsys.readouterr().out)["weight_sync"]
    assert hplan.main(["--json", "--ib-gbit-s", "200", "--hbm-gb-s=1000", "--", *FLAGS]) == 0
    slow = json.loads(capsys.readouterr().out)["weight_sync"]
    assert default["kind"] == slow["kind"] == "model"
    assert slow["links"]["ib_gb_s"] == 25 and slow["links"]["hbm_gb_s"] == 1000
    # the tiny model's experts (fp32) over an EP pair on two nodes of one GPU: one NIC
    experts = 4 * 2 * 4 * 3 * 64 * 64  # 4 B x 2 layers x 4 experts x 3 x h x f
    assert default["terms_s"]["ep_gather"] == pytest.approx(experts / 2 / 50e9)
    assert slow["terms_s"]["ep_gather"] == pytest.approx(experts / 2 / 25e9)
    assert slow["terms_s"]["gpu_copies"] == pytest.approx(
        default["terms_s"]["gpu_copies"] * 3350 / 1000
    )
    assert hplan.main(["--", *FLAGS]) == 0
    assert "weight sync: " in capsys.readouterr().out


@pytest.mark.parametrize("value", ["fast", "0", "-5"])
def test_a_bad_link_option_is_refused_naming_it(capsys, value):
    assert hplan.main(["--nvlink-gb-s", value, "--", *FLAGS]) == 2
    assert f"--nvlink-gb-s={value}" in capsys.readouterr().err
