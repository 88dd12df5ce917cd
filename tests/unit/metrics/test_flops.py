"""hyrl.metrics.flops: active parameters and model FLOPs by hand, the peak table, and the two
perf/* fields in a tiny run's records."""

import pytest
import torch

from hyrl.algorithms.batch import pack
from hyrl.metrics import flops
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B, TINY


def test_tiny_active_params_by_hand():
    # h=64, 4 heads x 16 (q: 64 wide), 2 groups x 16 (k, v: 32 wide)
    attention = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64  # q, k, v, o = 12288
    router, experts = 64 * 4, 2 * 3 * 64 * 64  # top-2 of moe_ffn 64, SwiGLU: 3 matrices
    assert flops.attention_params_per_layer(TINY) == attention == 12288
    assert flops.moe_params_per_token_per_layer(TINY) == router + experts == 24832
    layers = 2 * (attention + router + experts)  # 74240
    assert flops.active_params_per_token(TINY) == layers + 64 * 16 == 75264  # logits: vocab 16
    assert flops.active_params_per_token(TINY, value_head=True) == layers + 64 == 74304


def test_qwen3_30b_a3b_active_params():
    # per layer: q 2048x4096, k/v 2048x512, o 4096x2048; router 2048x128; 8 x 3 x 2048x768
    per_layer = 18_874_368 + 262_144 + 37_748_736
    output_layer = 2048 * 151_936
    active = flops.active_params_per_token(QWEN3_30B_A3B)
    assert active == 48 * per_layer + output_layer == 3_041_656_832
    # the model card's "3.3B activated" counts the embedding table and lm_head
    with_embedding = active + flops.embedding_params(QWEN3_30B_A3B)
    assert with_embedding == 3_352_821_760
    assert 3.3e9 <= with_embedding < 3.4e9


def test_forward_flops_by_hand():
    # 2 x params per token, plus causal QK^T and AV: 2 x layers x 64 (q width) x n^2
    assert flops.forward_flops(TINY, [8]) == 2 * 75264 * 8 + 2 * 2 * 64 * 64 == 1_220_608
    assert flops.forward_flops(TINY, [3, 5]) == 2 * 75264 * 8 + 2 * 2 * 64 * (9 + 25)
    assert flops.forward_flops(TINY, [8], value_head=True) == 2 * 74304 * 8 + 2 * 2 * 64 * 64
    assert flops.forward_flops(TINY, []) == 0.0


def test_agrees_with_megatrons_formula_but_for_the_router():
    """Megatron-LM's num_floating_point_operations (megatron/training/training.py), GQA and
    MoE-in-every-layer case, written out here for B sequences of s tokens."""
    a, B, s = QWEN3_30B_A3B, 4, 4096
    query, key_value = a.kv_channels * a.num_attention_heads, a.kv_channels * a.num_query_groups
    attention = (
        3
        * 2
        * (a.hidden_size * (query + 2 * key_value) + query * s / 2 * 2 + query * a.hidden_size)
    )
    megatron = (
        B
        * s
        * (
            3 * 2 * a.hidden_size * (a.moe_ffn_hidden_size * a.moe_router_topk * 3) * a.num_layers
            + attention * a.num_layers
            + 3 * 2 * a.hidden_size * a.vocab_size
        )
    )
    router = 3 * 2 * a.hidden_size * a.num_experts * a.num_layers * B * s
    passes = flops.StepPasses(actor_update=True, actor_forwards=0)
    assert flops.step_flops(a, [s] * B, passes) == pytest.approx(megatron + router, rel=1e-12)


def test_step_flops_counts_each_pass():
    lengths = [7, 4]
    actor = flops.forward_flops(TINY, lengths)
    critic = flops.forward_flops(TINY, lengths, value_head=True)
    grpo_on_policy = flops.StepPasses(actor_update=True, actor_forwards=0)
    assert flops.step_flops(TINY, lengths, grpo_on_policy) == 3 * actor
    with_old_and_ref = flops.StepPasses(actor_update=True, actor_forwards=2)
    assert flops.step_flops(TINY, lengths, with_old_and_ref) == 5 * actor
    ppo = flops.StepPasses(
        actor_update=True, actor_forwards=1, critic_update=True, critic_forwards=1
    )
    assert flops.step_flops(TINY, lengths, ppo) == 4 * actor + 4 * critic
    critic_warm_up = flops.StepPasses(
        actor_update=False, actor_forwards=1, critic_update=True, critic_forwards=1
    )
    assert flops.step_flops(TINY, lengths, critic_warm_up) == actor + 4 * critic


def test_trained_sequence_lengths_leave_out_padding_and_rows_without_loss():
    batch = pack(
        [[2, 3], [2], [2, 4, 5]],
        [[6, 7, 1], [8], [9, 1]],
        torch.zeros(3),
        pad_id=0,
        pad_to_multiple_of=8,
    )
    assert batch.tokens.shape == (3, 8)
    assert flops.trained_sequence_lengths(batch) == [5, 2, 5]
    batch.loss_mask[1] = 0.0  # as --overlong-filtering masks a truncated response
    assert flops.trained_sequence_lengths(batch) == [5, 5]


@pytest.mark.parametrize(
    ("device_name", "product", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4e12),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.5e12),
        ("NVIDIA H100 NVL", "H100 NVL", 835.5e12),
        ("NVIDIA H200", "H200 SXM", 989.4e12),
        ("NVIDIA H200 NVL", "H200 NVL", 835.5e12),
        ("NVIDIA A100-SXM4-80GB", "A100", 312e12),
        ("NVIDIA A100 80GB PCIe", "A100", 312e12),
        ("NVIDIA B200", "B200", 2.25e15),
        ("NVIDIA GB200", "GB200", 2.5e15),
        ("NVIDIA L40S", "L40S", 362.05e12),
        ("AMD Instinct MI300X", "MI300X", 1307.4e12),
        ("nvidia  h200 ", "H200 SXM", 989.4e12),  # case and spacing aside
    ],
)
def test_peak_table_by_torch_device_name(device_name, product, peak):
    gpu = flops.gpu_of(device_name)
    assert gpu is not None
    assert (gpu.product, gpu.peak_bf16_flops_per_s) == (product, peak)


@pytest.mark.parametrize("device_name", ["NVIDIA GeForce RTX 4090", "NVIDIA H100", "Tesla V100"])
def test_unknown_gpu_has_no_peak(device_name):
    assert flops.gpu_of(device_name) is None  # never the nearest entry


def test_device_gpu_none_on_cpu_and_says_once_for_an_unknown_gpu(monkeypatch, capsys):
    assert flops.device_gpu(torch.device("cpu")) is None
    flops.device_gpu.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Mystery X1")
    assert flops.device_gpu(torch.device("cuda", 0)) is None
    assert flops.device_gpu(torch.device("cuda", 0)) is None
    out = capsys.readouterr().out
    assert out.count("no perf/mfu") == 1 and "'Mystery X1'" in out and "H200 SXM" in out
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    flops.device_gpu.cache_clear()
    gpu = flops.device_gpu(torch.device("cuda", 0))
    assert gpu is not None and gpu.product == "H200 SXM"
    flops.device_gpu.cache_clear()


def test_step_perf():
    lengths, passes = [5, 5, 2], flops.StepPasses(actor_update=True, actor_forwards=1)
    perf = flops.step_perf(TINY, lengths, passes, step_s=2.0, world_size=4, gpu=None)
    assert perf == {"perf/tokens_per_s_per_gpu": 12 / 8}  # no peak: no perf/mfu
    h200 = flops.gpu_of("NVIDIA H200")
    perf = flops.step_perf(TINY, lengths, passes, step_s=2.0, world_size=4, gpu=h200)
    expected = 4 * flops.forward_flops(TINY, lengths) / 8 / 989.4e12
    assert perf["perf/mfu"] == pytest.approx(expected, rel=1e-12)
    assert flops.step_perf(TINY, lengths, passes, step_s=0.0, world_size=1, gpu=h200) == {}


def test_tiny_run_records_tokens_per_s_and_no_mfu_on_cpu(tmp_path):
    from recipe_runs import records, run_recipe

    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [r["rollout_step"] for r in rows] == [1, 2]  # one optimizer step per rollout
    assert not any("perf/mfu" in r for r in rows)
    for r in rows:
        assert r["perf/tokens_per_s_per_gpu"] > 0
        # 128 rows, each <bos> a + b = (5 tokens, hyrl/data/arith.py) + its response; one rank
        tokens = r["perf/tokens_per_s_per_gpu"] * r["perf/step_s"]
        assert tokens == pytest.approx(128 * (5 + r["train/response_len_mean"]), rel=1e-9)
