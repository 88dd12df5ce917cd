"""`hyrl plan` tells the truth: the per-rank bytes of weights, gradients and optimizer states
counted from the live tensors of a model the trainer builds (after one optimizer step) match the
plan's lines within 5%, in four layouts of two gloo ranks.

The model is mid-size so the counts are not dominated by small tensors: 4 layers, hidden 512,
8 heads (4 query groups) of 48, 16 experts of 256, top-2, vocabulary 1024 (28.6M parameters);
the head size 48 gives 48-element qk-norm weights, which megatron's distributed-optimizer
buffers pad to 64: the measured ratios include that padding.
tests/helpers/plan_live_worker.py builds it (build_gpt_model + wrap_for_training; the PP=2 stages
with megatron-core directly, as the trainer has no pipeline parallelism yet) and counts the bytes.
"""

import dataclasses
import json
from pathlib import Path

import pytest
from testpaths import HELPERS
from torchrun_worker import run_ranks

from hyrl import plan as hplan
from hyrl.config import ResolvedConfig, RunConfig, resolve

WORKER = HELPERS / "plan_live_worker.py"
WORLD_SIZE = 2
MODEL = dict(
    num_layers=4,
    hidden_size=512,
    num_attention_heads=8,
    num_query_groups=4,
    kv_channels=48,
    num_experts=16,
    moe_ffn_hidden_size=256,
    moe_router_topk=2,
    vocab_size=1024,
)
LAYOUTS = {
    # DP = 2 (expert-DP = 2), bf16: master + m + v sharded over both ranks
    "dp2 bf16 distributed optimizer": dict(bf16=True, use_distributed_optimizer=True),
    # DP = 1, fp32: Adam m + v only, replicated
    "tp2 sp fp32": dict(tensor_model_parallel_size=2, sequence_parallel=True),
    # DP = 2, expert-DP = 1, fp32: dense states halved, expert states whole
    "ep2 fp32 distributed optimizer": dict(
        expert_model_parallel_size=2, use_distributed_optimizer=True
    ),
    # DP = 1, bf16: fp32 master + m + v of this stage's 2 layers
    "pp2 bf16": dict(pipeline_model_parallel_size=2, bf16=True),
}
LINES = {
    "weights": "actor weights",
    "gradients": "actor gradients",
    "optimizer": "actor optimizer (Adam)",
}
TOLERANCE = 0.05


def layout_config(name: str) -> ResolvedConfig:
    return resolve(dataclasses.replace(RunConfig(), **MODEL, **LAYOUTS[name]))


def plan_bytes(name: str) -> dict:
    lines = {
        x["name"]: x["bytes"]
        for x in hplan.make_plan(layout_config(name), WORLD_SIZE)["memory"]["lines"]
    }
    return {key: lines[line] for key, line in LINES.items()}


def _run(name: str, out_dir: Path) -> list[dict]:
    out_dir.mkdir()
    flags = {**MODEL, **LAYOUTS[name]}
    run_ranks(WORKER, WORLD_SIZE, out_dir, json.dumps(flags), timeout=600)
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan_live")
    return {name: _run(name, tmp / name.replace(" ", "_")) for name in LAYOUTS}


def test_the_model_is_mid_size():
    # 4 x (attention 3 x 512 x 384 + norms 2 x 48 + 2 x 512 + router 512 x 16
    #      + 16 experts x 3 x 512 x 256) + embedding and output 2 x 1024 x 512 + final norm 512
    assert (
        4 * (3 * 512 * 384 + 96 + 1024 + 8192 + 16 * 3 * 512 * 256) + 2 * 1024 * 512 + 512
        == 28_611_456
    )
    assert hplan.param_counts(layout_config("tp2 sp fp32").model)["total"] == 28_611_456


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_live_bytes_match_the_plan_within_5_percent(live, name):
    planned = plan_bytes(name)
    for rank in live[name]:
        assert rank["adam_state_tensors"] > 0  # the step ran: Adam states exist
        for key, plan_value in planned.items():
            ratio = rank[key] / plan_value
            assert abs(ratio - 1) <= TOLERANCE, (name, rank["rank"], key, rank[key], plan_value)


@pytest.mark.slow
def test_the_layouts_differ_where_the_plan_says(live):
    """Not four copies of one number: bf16 weights take 2 B, fp32 4 B per parameter; the
    distributed optimizer shards the dense states under EP; replicated bf16 keeps 12 B."""
    dp2, tp2 = live["dp2 bf16 distributed optimizer"][0], live["tp2 sp fp32"][0]
    ep2, pp2 = live["ep2 fp32 distributed optimizer"][0], live["pp2 bf16"][0]
    assert dp2["weights"] * 2 == pytest.approx(dp2["params"] * 4, rel=0.01)  # bf16
    assert tp2["weights"] == pytest.approx(tp2["params"] * 4, rel=0.01)  # fp32
    # dense states sharded over DP = 2 (the experts, 88% of the rank's params, are not: expert-DP 1)
    assert ep2["optimizer"] < 0.95 * 8 * ep2["params"]
    assert pp2["optimizer"] == pytest.approx(12 * pp2["params"], rel=0.01)  # replicated bf16


def plan_vs_live_table(live) -> str:
    """docs/plan.md's table: layout, line, plan bytes, live bytes of each rank, worst ratio."""
    rows = [
        "| layout (2 ranks) | line | plan (bytes) | live rank 0 | live rank 1 | live / plan |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in LAYOUTS:
        planned = plan_bytes(name)
        for key, plan_value in planned.items():
            lives = [rank[key] for rank in live[name]]
            worst = max((value / plan_value for value in lives), key=lambda r: abs(r - 1))
            rows.append(
                f"| {name} | {key} | {plan_value:,} | "
                + " | ".join(f"{value:,}" for value in lives)
                + f" | {worst:.6f} |"
            )
    return "\n".join(rows)


@pytest.mark.slow
def test_print_the_table(live, capsys):
    table = plan_vs_live_table(live)
    assert table.count("\n") == 2 + len(LAYOUTS) * len(LINES) - 1
    with capsys.disabled():
        print("\n" + table)
