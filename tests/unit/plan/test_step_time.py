"""hyrl plan's step-time and save-time estimates (hyrl/plan/step_time.py) and the host memory
--offload-train pins (hyrl/plan/host.py), on numbers worked by hand for Qwen3-30B-A3B as the
30B GRPO recipe runs it (estimates from assumed throughputs: no GPU, no timing)."""

import dataclasses
import math

import pytest

from hyrl.config import ResolvedConfig, RunConfig, old_log_probs_from_update, resolve
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B
from hyrl.plan.make import make_plan
from hyrl.plan.memory import GIB
from hyrl.plan.step_time import LEAD_MARGIN, Throughput, format_step_time, step_passes

# recipes/qwen3_30b_a3b/grpo.sh: 16 ranks on 2 nodes of 8, TP 4, EP 16, 2 colocated engines of
# 8 GPUs, P x G = 128 x 8 responses of up to 8192 tokens after prompts of up to 1024
GRPO = dict(
    tensor_model_parallel_size=4, sequence_parallel=True, expert_model_parallel_size=16,
    bf16=True, use_distributed_optimizer=True, transformer_impl="transformer_engine",
    gpus_per_node=8, micro_batch_size=1,
    rollout_engine="sglang", colocate=True, rollout_num_gpus_per_engine=8,
    rollout_batch_size=128, n_samples_per_prompt=8, global_batch_size=1024,
    rollout_max_prompt_len=1024, rollout_max_response_len=8192,
)  # fmt: skip
WORLD = 16

# Qwen3-30B-A3B by hand: the matmul weights one token goes through (hyrl.metrics.flops):
ATTENTION = 2048 * (2 * 32 * 128 + 2 * 4 * 128)  # q, o 32 heads; k, v 4 groups; of 128
MOE = 2048 * 128 + 8 * 3 * 2048 * 768  # router over 128 experts + top-8 SwiGLU experts
OUTPUT = 2048 * 151936
ACTIVE = 48 * (ATTENTION + MOE) + OUTPUT  # 3,041,656,832
SEQ = 1024 + 8192
# one forward pass of one 9216-token sequence: 2 x weights x tokens + causal QK^T and AV,
# 2 x layers x (heads x head dim) x n^2 (PaLM appendix B, as megatron counts it)
FORWARD = 2 * ACTIVE * SEQ + 2 * 48 * (32 * 128) * SEQ**2
SAVE_BYTES = 14 * 30_532_122_624  # hyrl.plan.disk: 0.427 TB under bf16


def grpo(**changes) -> ResolvedConfig:
    return resolve(RunConfig(**{**QWEN3_30B_A3B.as_dict(), **GRPO, **changes}))


def test_the_30b_grpo_step_and_save_by_hand():
    est = make_plan(grpo(), WORLD)["step_time"]
    assert est["kind"] == "estimate"
    # 1024 responses x 8192 tokens over 16 engine GPUs at 1000 tokens/s each
    assert est["decode_tokens"] == 8_388_608
    assert est["rollout_s"] == pytest.approx(8_388_608 / 16_000)  # 524.3 s
    # on policy, no KL: the actor's update only, forward + backward = 3 forwards
    assert est["model_flops"] == pytest.approx(3 * 1024 * FORWARD)  # 2.75e17
    assert est["training_s"] == pytest.approx(3 * 1024 * FORWARD / (16 * 989.4e12 * 0.20))
    assert 86 < est["training_s"] < 88
    # two training nodes write at 2 GB/s each
    assert est["save_s"] == pytest.approx(SAVE_BYTES / 4e9)  # 106.9 s
    step = est["rollout_s"] + est["training_s"] + est["sync_s"]
    assert est["step_s"] == pytest.approx(step) and 0 < est["sync_s"] < 1
    assert est["lead_s"] == math.ceil((step + est["save_s"]) * 1.25) == 898
    assert LEAD_MARGIN == 0.25


def test_each_assumption_scales_its_own_term():
    base = make_plan(grpo(), WORLD)["step_time"]
    faster = Throughput(decode_tokens_per_s_per_gpu=2000, mfu=0.4, fs_write_gb_s=8)
    other = make_plan(grpo(), WORLD, throughput=faster)["step_time"]
    assert other["rollout_s"] == pytest.approx(base["rollout_s"] / 2)
    assert other["training_s"] == pytest.approx(base["training_s"] / 2)
    assert other["save_s"] == pytest.approx(base["save_s"] / 4)
    assert other["sync_s"] == base["sync_s"]
    half_peak = make_plan(grpo(), WORLD, throughput=Throughput(peak_tflops=989.4 / 2))
    assert half_peak["step_time"]["training_s"] == pytest.approx(2 * base["training_s"])


@pytest.mark.parametrize(
    "changes, forwards, critic",
    [
        ({}, 0, False),  # on policy: the update's own forward gives the old log-probs
        ({"kl_loss_coef": 0.01}, 1, False),  # the reference's forward
        ({"global_batch_size": 512}, 1, False),  # two optimizer steps: an old-log-prob pass
        ({"advantage_estimator": "gae"}, 0, True),  # the critic's values and update
    ],
    ids=["on-policy", "kl", "two-steps", "gae"],
)
def test_the_passes_follow_the_algorithm(changes, forwards, critic):
    c = grpo(**changes)
    passes = step_passes(c.algorithm, c.critic, old_log_probs_from_update(c))
    assert passes.actor_update and passes.actor_forwards == forwards
    assert passes.critic_update == critic and passes.critic_forwards == int(critic)
    flops = make_plan(c, WORLD)["step_time"]["model_flops"]
    assert flops >= (3 + forwards) * 1024 * FORWARD * (1 - 1e-12)


def test_a_batch_ramp_plans_its_largest_step():
    c = grpo(batch_ramp="1024:4096:100")
    assert make_plan(c, WORLD)["step_time"]["decode_tokens"] == 4096 * 8192


def test_engines_behind_a_router_are_not_modelled_and_say_so():
    c = grpo(colocate=False, sglang_router_url="http://router:30000")
    est = make_plan(c, WORLD)["step_time"]
    assert "lead_s" not in est and "--sglang-router-url" in est["why"]
    assert format_step_time(est) == [f"  step time (estimate): not modelled: {est['why']}"]


def test_the_table_labels_every_number_an_estimate_with_its_basis():
    lines = format_step_time(make_plan(grpo(), WORLD)["step_time"])
    assert lines[0].startswith("  step time: 611 s predicted for the longest rollout step (an ")
    assert "an estimate from assumed throughputs, not a measurement" in lines[0]
    assert "524 s  rollout: 1024 responses x 8192 tokens" in lines[1]
    assert "(16 engine GPU(s) x 1000 tokens/s each, assumed)" in lines[1]
    assert "x 989.4 TFLOP/s peak x MFU 0.2, assumed)" in lines[2]
    assert lines[4].startswith("  save time: 107 s predicted for one checkpoint (an estimate)")
    assert "427 GB / (2 training node(s) x 2 GB/s file-system write a node, assumed)" in lines[4]


def test_offload_pins_weights_and_optimizer_states_per_gpu_on_every_gpu_of_a_node():
    plan = make_plan(grpo(), WORLD)  # colocated: --offload-train is on
    lines = {line["name"]: line["bytes"] for line in plan["memory"]["lines"]}
    host = plan["host_memory"]
    per_gpu = lines["actor weights"] + lines["actor optimizer (Adam)"]  # gradients are freed
    assert host["per_gpu_bytes"] == per_gpu and host["per_node_bytes"] == 8 * per_gpu
    # by hand, per GPU: experts 48 layers x 8 of 3 x 2048 x 768; dense 48 x (attention / TP 4
    # + norms + router) + embedding and output / TP 4 + the final norm
    experts = 48 * 8 * 3 * 2048 * 768
    dense = 48 * (ATTENTION // 4 + 2 * 128 + 2 * 2048 + 2048 * 128) + 2 * OUTPUT // 4 + 2048
    weights, states = 2 * (dense + experts), 12 * (dense / 4 + experts)  # DP 4, expert-DP 1
    assert per_gpu == pytest.approx(weights + states, abs=8)  # 25.46 GiB
    assert round(host["per_node_bytes"] / GIB, 1) == 203.7
    with_kl = make_plan(grpo(kl_loss_coef=0.01), WORLD)["host_memory"]
    assert with_kl["parked"] == ["actor weights", "actor optimizer (Adam)", "reference weights"]
    # a save gathers the fp32 param, m and v of the rank's whole model-parallel shard
    assert host["save_per_gpu_bytes"] == pytest.approx(12 * (dense + experts), abs=8)
    assert round(host["save_per_gpu_bytes"] / 1e9, 1) == 26.5  # GB
    assert host["save_per_node_bytes"] == 8 * host["save_per_gpu_bytes"]
    unparked = make_plan(grpo(offload_train=False), WORLD)["host_memory"]
    assert unparked["offloading"] is False and "per_gpu_bytes" not in unparked
    assert unparked["save_per_gpu_bytes"] == host["save_per_gpu_bytes"]
    plain_adam = make_plan(grpo(use_distributed_optimizer=False), WORLD)["host_memory"]
    assert "save_per_gpu_bytes" not in plain_adam
    no_nodes = make_plan(dataclasses.replace(grpo(), gpus_per_node=None), WORLD)
    assert "per_node_bytes" not in no_nodes["host_memory"]
