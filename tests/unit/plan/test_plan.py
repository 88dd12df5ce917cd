"""hyrl plan: parameter counts, per-GPU memory lines, rank layout and the fit check (pure)."""

import dataclasses
import importlib.util

import pytest

from hyrl import plan as hplan
from hyrl.config import ResolvedConfig, RunConfig, resolve
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B
from hyrl.plan import sglang_kv

TINY = RunConfig()  # the defaults are the tiny model: h 64, 4 heads, 2 groups, d 16, 4 experts
QWEN = RunConfig(**QWEN3_30B_A3B.as_dict())


def tiny(**changes) -> ResolvedConfig:
    return resolve(dataclasses.replace(TINY, **changes))


def qwen(**changes) -> ResolvedConfig:
    # the GPU setting (bf16, Transformer Engine): the plan does not depend on this machine
    base = dict(
        tensor_model_parallel_size=4,
        sequence_parallel=True,
        bf16=True,
        transformer_impl="transformer_engine",
        expert_model_parallel_size=8,
        rollout_max_response_len=8192,
        rollout_batch_size=32,
        micro_batch_size=1,
    )
    return resolve(dataclasses.replace(QWEN, **{**base, **changes}))


def activations(c: ResolvedConfig, tokens: int, seq_len: int) -> dict:
    """hplan.activation_memory of one micro-batch of `tokens` under c's settings."""
    return hplan.activation_memory(c.model, c.parallel, c.batch, tokens, seq_len)


def line(plan: dict, name: str) -> float:
    """A memory line in bytes."""
    return next(x for x in plan["memory"]["lines"] if x["name"] == name)["bytes"]


def test_qwen3_30b_a3b_parameter_counts_match_the_published_sizes():
    counts = hplan.param_counts(resolve(QWEN).model)
    assert counts["total"] == pytest.approx(30.5e9, rel=0.02)  # 30,532,122,624
    assert counts["active"] == pytest.approx(3.3e9, rel=0.02)  # 3,353,032,704
    # experts: 48 layers x 128 experts x 3 x 2048 x 768
    assert counts["experts"] == 48 * 128 * 3 * 2048 * 768


def test_tiny_parameter_counts_by_hand():
    counts = hplan.param_counts(resolve(TINY).model)
    # attention 64*64 + 2*64*32 + 64*64 = 12288; qk-norm 2*16; norms 2*64; router 64*4
    assert counts["attention_per_layer"] == 12288
    assert counts["expert"] == 3 * 64 * 64 == 12288
    per_layer_dense = 12288 + 32 + 128 + 256
    # 2 layers x (dense + 4 experts) + embedding 16*64 + output 16*64 + final norm 64
    assert counts["total"] == 2 * (per_layer_dense + 4 * 12288) + 1024 + 1024 + 64 == 125824
    assert counts["active"] == 2 * (per_layer_dense + 2 * 12288) + 2112 == 76672


def test_weights_grads_and_optimizer_bytes_per_parameter_follow_the_precision_flags():
    # fp32 (the default): 4 B weights, 4 B grads, Adam m + v = 8 B (no master copy)
    fp32 = hplan.make_plan(tiny(), 1)
    assert line(fp32, "actor weights") == 4 * 125824
    assert line(fp32, "actor gradients") == 4 * 125824
    assert line(fp32, "actor optimizer (Adam)") == 8 * 125824
    # --bf16: 2 B weights, fp32 main grads, fp32 master + m + v = 12 B
    bf16 = hplan.make_plan(tiny(bf16=True), 1)
    assert line(bf16, "actor weights") == 2 * 125824
    assert line(bf16, "actor gradients") == 4 * 125824
    assert line(bf16, "actor optimizer (Adam)") == 12 * 125824
    # --bf16 --no-accumulate-allreduce-grads-in-fp32: bf16 gradient buffers
    bf16_grads = hplan.make_plan(tiny(bf16=True, accumulate_allreduce_grads_in_fp32=False), 1)
    assert line(bf16_grads, "actor gradients") == 2 * 125824


def test_tp_splits_dense_and_ep_splits_experts():
    c = tiny(tensor_model_parallel_size=2, sequence_parallel=True, expert_model_parallel_size=2)
    per_gpu = hplan.params_per_gpu(c.model, c.parallel, hplan.param_counts(c.model))
    # dense: 2 layers x (12288 / 2 + 160 norms + 256 router) + (1024 + 1024) / 2 + 64
    assert per_gpu["dense"] == 2 * (6144 + 160 + 256) + 1024 + 64
    # experts: 2 layers x (4 / 2) experts x 12288
    assert per_gpu["experts"] == 2 * 2 * 12288


def test_distributed_optimizer_divides_adam_by_dp_and_experts_by_expert_dp():
    # world 4, EP 4: DP = 4, expert-DP = 4 / 4 = 1
    c = tiny(
        expert_model_parallel_size=4,
        use_distributed_optimizer=True,
        rollout_batch_size=16,
        micro_batch_size=4,
    )
    plan = hplan.make_plan(c, 4)
    assert plan["layout"]["dp"] == 4 and plan["layout"]["expert_dp"] == 1
    dense = 2 * (12288 + 160 + 256) + 2048 + 64  # 27520
    experts = 2 * 1 * 12288  # 24576
    assert line(plan, "actor optimizer (Adam)") == 8 * (dense / 4 + experts / 1)
    bf16 = hplan.make_plan(dataclasses.replace(c, bf16=True), 4)
    assert line(bf16, "actor optimizer (Adam)") == 12 * (dense / 4 + experts / 1)
    # weights and gradients stay whole on every rank
    assert line(bf16, "actor gradients") == 4 * (dense + experts)
    replicated = hplan.make_plan(dataclasses.replace(c, use_distributed_optimizer=False), 4)
    assert line(replicated, "actor optimizer (Adam)") == 8 * (dense + experts)


def test_activation_bytes_per_token_by_hand():
    bf16 = tiny(transformer_impl="transformer_engine", bf16=True)
    te_bf16 = hplan.activation_bytes_per_token(bf16.model, bf16.parallel, seq_len=7)
    assert te_bf16["norms"] == 2 * (64 + 64)
    # 2 x (QKV input 64 + Q,K,V (4 + 2*2) x 16 + qk-norm inputs (4 + 2) x 16 + core output 64)
    assert te_bf16["attention"] == 2 * (64 + 128 + 96 + 64) == 704
    # 2*64 router input + 4*4 fp32 logits + top-2 x 2 B x (64 + 2*64 + 64) + 2 x 2 B x 64
    assert te_bf16["moe"] == 128 + 16 + 1024 + 256 == 1424
    assert te_bf16["attention_scores"] == 0  # flash attention keeps no s x s scores
    fp32 = tiny(transformer_impl="transformer_engine")
    te_fp32 = hplan.activation_bytes_per_token(fp32.model, fp32.parallel, 7)
    assert (te_fp32["norms"], te_fp32["attention"]) == (4 * 128, 4 * 352)
    assert te_fp32["moe"] == 4 * 64 + 16 + 2 * 4 * 256 + 2 * 4 * 64 == 2832
    # unfused (local spec): a = 4 heads x s = 7 scores per token, fp32 softmax output (4 B),
    # plus under bf16 its bf16 copy (2 B)
    local, local_bf16 = tiny(transformer_impl="local"), tiny(transformer_impl="local", bf16=True)
    assert (
        hplan.activation_bytes_per_token(local.model, local.parallel, 7)["attention_scores"]
        == 4 * 4 * 7
    )
    assert (
        hplan.activation_bytes_per_token(local_bf16.model, local_bf16.parallel, 7)[
            "attention_scores"
        ]
        == 6 * 4 * 7
    )


def test_auto_attention_follows_whether_transformer_engine_is_installed(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert hplan.attention_implementation(tiny().model)[0] == "unfused"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert hplan.attention_implementation(tiny().model)[0] == "flash"
    assert hplan.attention_implementation(tiny(transformer_impl="local").model)[0] == "unfused"


def test_activation_memory_no_recompute_and_full_recompute_by_hand():
    tokens = 16 * 7  # micro-batch 16 x (5-token prompt + 2-token response)
    c = tiny(transformer_impl="transformer_engine", bf16=True)
    none = activations(c, tokens, 7)
    assert none["layers"] == 2 * tokens * 2384  # 2 layers x tokens x (256 + 704 + 1424) B
    # fp32 logits kept + their fp32 gradient (8 B) + 3 fp32 copies of one chunk (all 112 tokens)
    assert none["logits"] == (8 * tokens + 12 * tokens) * 16
    assert none["attention_workspace"] == 0
    full = activations(dataclasses.replace(c, recompute_granularity="full"), tokens, 7)
    # uniform groups of 1: each layer's input (2 B x h) + one layer rebuilt in the backward
    assert full["layers"] == 2 * (2 * tokens * 64) + tokens * 2384


def test_interleaved_pipeline_holds_more_activations_on_the_first_stage_by_hand():
    """Korthikanti et al. 2022, section 4.2.3: V virtual stages per rank multiply the first
    stage's activations by 1 + (PP - 1) / (PP x V); at PP=2, V=2: 1.25."""
    tokens = 16 * 7
    flags = dict(transformer_impl="transformer_engine", bf16=True, num_layers=4)
    plain = activations(tiny(**flags, pipeline_model_parallel_size=2), tokens, 7)
    interleaved_config = tiny(
        **flags, pipeline_model_parallel_size=2, num_layers_per_virtual_pipeline_stage=1
    )
    interleaved = activations(interleaved_config, tokens, 7)
    assert plain["layers"] == 4 * tokens * 2384
    assert interleaved["layers"] == 1.25 * 4 * tokens * 2384
    plan = hplan.make_plan(interleaved_config, 2)
    assert plan["layout"]["vp"] == 2
    assert "PP=2 (x2 virtual stages)" in hplan.format_plan(plan)


def test_unfused_attention_adds_scores_and_one_layers_workspace():
    tokens = 16 * 7
    c = tiny(transformer_impl="local")  # fp32
    act = activations(c, tokens, 7)
    # per token per layer: 512 norms + 1408 attention + 112 scores + 2832 MoE
    assert act["layers"] == 2 * tokens * (512 + 1408 + 112 + 2832)
    # 112 tokens x 4 heads x 7 scores x (4 B matmul buffer + 3 x 4 B fp32 copies)
    assert act["attention_workspace"] == tokens * 4 * 7 * 16
    selective = activations(dataclasses.replace(c, recompute_granularity="selective"), tokens, 7)
    assert selective["layers"] == 2 * tokens * (512 + 1408 + 2832)
    assert selective["attention_workspace"] == act["attention_workspace"]


def test_packed_unfused_attention_scores_span_the_whole_micro_batch():
    """--qkv-format thd on the local spec: the micro-batch is one sequence under a
    block-diagonal mask, so each token's scores cover all its tokens, not its own row's."""
    tokens = 16 * 7
    packed = activations(tiny(transformer_impl="local", qkv_format="thd"), tokens, 7)
    # per token per layer: 512 norms + 1408 attention + 4 heads x 112 keys x 4 B + 2832 MoE
    assert packed["layers"] == 2 * tokens * (512 + 1408 + 4 * 112 * 4 + 2832)
    assert packed["attention_workspace"] == tokens * 4 * 112 * 16
    flash = tiny(transformer_impl="transformer_engine", qkv_format="thd")
    assert activations(flash, tokens, 7)["attention_workspace"] == 0


def test_qwen3_unfused_fp32_attention_at_9k_tokens_by_hand():
    # the trainer's local spec in fp32, TP 4: one 9216-token sequence, 32 / 4 heads
    plan = hplan.make_plan(
        qwen(
            bf16=False,
            transformer_impl="local",
            rollout_max_prompt_len=1024,
            recompute_granularity="full",
        ),
        32,
    )
    assert line(plan, "actor attention workspace") == 9216 * 8 * 9216 * (4 + 12)  # 10.1 GiB
    # the logits: 8 B x 9216 x 151936 / 4 + 12 B x 512 x 151936 / 4
    assert line(plan, "actor logits") == 8 * 9216 * 37984 + 12 * 512 * 37984


def test_logprob_chunk_is_the_trainers():
    logprobs = pytest.importorskip("hyrl.backends.megatron.logprobs")
    assert hplan.LOGPROB_CHUNK_POSITIONS == logprobs.CHUNK_POSITIONS


def test_recompute_reduces_activations_on_qwen3():
    acts = {}
    for name, changes in (
        ("none", {}),
        ("selective", {"recompute_granularity": "selective"}),
        ("full", {"recompute_granularity": "full"}),
    ):
        plan = hplan.make_plan(qwen(transformer_impl="local", **changes), 32)
        acts[name] = line(plan, "actor activations")
    assert acts["full"] < acts["selective"] < acts["none"]
    assert acts["none"] / acts["full"] > 10


def test_sequence_parallel_divides_activations_by_tp():
    one = activations(qwen(tensor_model_parallel_size=1, sequence_parallel=False), 9216, 9216)
    four = activations(qwen(), 9216, 9216)
    assert four["layers"] == pytest.approx(one["layers"] / 4)


def test_kv_cache_and_sequences_of_a_separate_engine_by_hand():
    c = qwen(
        rollout_engine="sglang",
        rollout_num_gpus=8,
        rollout_num_gpus_per_engine=8,
        sglang_mem_fraction_static=0.5,
        gpu_memory_gib=80.0,
        rollout_max_prompt_len=1024,
        task="prompt_data",
    )
    sg = hplan.make_plan(c, 16)["sglang"]
    weights = 2 * 30532122624 / 8
    kv = 0.5 * 80 * 2**30 - weights  # nothing else on the GPU: free before loading = 80 GiB
    per_token = 2 * 48 * 1 * 128 * 2  # 4 kv heads over 8 GPUs: one (replicated) head per GPU
    assert sg["kv_bytes_per_token"] == per_token
    assert sg["kv_tokens"] == int(kv / per_token)
    assert sg["sequences"] == int(kv / per_token) // (1024 + 8192)


def test_kv_bytes_per_token_split_the_kv_heads_over_the_engine_gpus():
    """SGLang's cell (get_num_kv_heads): max(1, 4 kv heads // TP) x (K + V of 128) x 48 x 2 B."""
    per_head = (128 + 128) * 48 * 2  # 24 KiB
    for tp_size, heads in ((1, 4), (2, 2), (4, 1), (8, 1)):  # past 4 GPUs each keeps a copy
        assert sglang_kv.kv_bytes_per_token(resolve(QWEN).model, tp_size) == heads * per_head


def colocated_engine(fraction: float) -> dict:
    c = qwen(
        rollout_engine="sglang",
        colocate=True,
        rollout_num_gpus_per_engine=8,
        sglang_mem_fraction_static=fraction,
        gpu_memory_gib=80.0,
    )
    return hplan.make_plan(c, 16)


def test_colocated_engine_kv_cache_is_its_fraction_of_what_the_trainer_leaves_free():
    """SGLang 0.5.23: KV = free after its weights - free before x (1 - fraction), so with the
    trainer's 67.87 GiB on the GPU (weights 7.486 + grads 14.971 + Adam 44.913 + bucket 0.5):
    free before = 80 - 67.87 = 12.13 GiB, KV = 0.85 x 12.13 - 7.109 weights = 3.202 GiB.
    (The pre-0.5.23 model, 0.85 x 80 - 7.109 - 67.87, left nothing.)"""
    plan = colocated_engine(0.85)
    sg = plan["sglang"]
    assert plan["memory"]["resident_gib"] == pytest.approx(67.87)
    assert sg["free_before_load_gib"] == pytest.approx(12.13)
    weights = 2 * 30532122624 / 8
    kv = 0.85 * (80 - 67.87) * 2**30 - weights
    assert sg["kv_gib"] == pytest.approx(3.202, abs=0.001)
    assert sg["kv_tokens"] == int(kv) // (2 * 48 * 1 * 128 * 2) == 139883
    assert sg["sequences"] == 139883 // (5 + 8192) == 17  # the arithmetic task's 5-token prompts


def test_colocated_engine_whose_fraction_leaves_less_than_its_weights_does_not_fit():
    plan = colocated_engine(0.5)  # 0.5 x 12.13 GiB free = 6.07 GiB < 7.11 GiB of weights
    assert plan["sglang"]["kv_tokens"] == 0
    [problem] = [p for p in hplan.check_fit(plan) if p.startswith("--sglang-mem-fraction-static")]
    assert "0.5 x 12.1 GiB free before loading (80 GiB - the actor's resident 67.9 GiB" in problem
    assert "--no-colocate" in problem


def test_fits_when_memory_allows_and_names_the_flags_when_not():
    fits = hplan.make_plan(
        qwen(expert_model_parallel_size=16, recompute_granularity="full", gpu_memory_gib=80.0), 16
    )
    assert hplan.check_fit(fits) == []
    too_big = hplan.make_plan(qwen(expert_model_parallel_size=2, gpu_memory_gib=80.0), 16)
    [problem] = hplan.check_fit(too_big)
    assert "80 GiB --gpu-memory-gib" in problem and "72.0 GiB" in problem
    for flag in (
        "--use-distributed-optimizer",
        "--recompute-granularity full",
        "--expert-model-parallel-size 4",
    ):
        assert flag in problem


def test_tp_crossing_a_node_is_an_error_and_ep_crossing_a_warning():
    plan = hplan.make_plan(qwen(gpus_per_node=2, expert_model_parallel_size=4), 8)
    assert any(p.startswith("--tensor-model-parallel-size=4") for p in hplan.check_fit(plan))
    assert any(w.startswith("--expert-model-parallel-size=4") for w in plan["warnings"])
    inside = hplan.make_plan(qwen(gpus_per_node=8), 16)
    assert hplan.check_fit(inside) == [] and inside["warnings"] == []


def test_rank_groups_follow_megatron_order():
    # world 16, TP 2, PP 2 -> DP 4; order tp-cp-ep-dp-pp: TP neighbours, DP stride 2, PP stride 8
    dense = {"tp": 2, "cp": 1, "ep": 1, "dp": 4, "pp": 2}
    assert hplan.rank_groups(dense, "tp")[:2] == [[0, 1], [2, 3]]
    assert hplan.rank_groups(dense, "dp")[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert hplan.rank_groups(dense, "pp")[0] == [0, 8]


def test_rank_groups_equal_megatron_core():
    ps = pytest.importorskip("megatron.core.parallel_state")
    for sizes in (
        {"tp": 2, "cp": 1, "ep": 1, "dp": 4, "pp": 2},
        {"tp": 1, "cp": 1, "ep": 4, "dp": 2, "pp": 2},
        {"tp": 4, "cp": 1, "ep": 1, "dp": 3, "pp": 1},
    ):
        gen = ps.RankGenerator(
            tp=sizes["tp"],
            ep=sizes["ep"],
            dp=sizes["dp"],
            pp=sizes["pp"],
            cp=1,
            order="tp-cp-ep-dp-pp",
        )
        for token in ("tp", "dp", "ep", "pp", "tp-ep"):
            assert hplan.rank_groups(sizes, token) == gen.get_ranks(token), (sizes, token)


def test_rollout_gpus_add_to_the_training_gpus_unless_colocated():
    c = qwen(
        rollout_engine="sglang", rollout_num_gpus=8, rollout_num_gpus_per_engine=4, gpus_per_node=8
    )
    gpus = hplan.make_plan(c, 16)["gpus"]
    assert (gpus["training"], gpus["rollout"], gpus["total"], gpus["nodes"]) == (16, 8, 24, 3)
    colocated = dataclasses.replace(
        c, rollout_num_gpus=None, colocate=True, update_weight_transport=None
    )
    assert hplan.make_plan(colocated, 16)["gpus"]["total"] == 16


def test_reference_and_critic_add_their_lines():
    kl = hplan.make_plan(tiny(kl_loss_coef=0.01), 1)
    assert line(kl, "reference weights") == pytest.approx(line(kl, "actor weights"))
    ppo = hplan.make_plan(tiny(advantage_estimator="gae"), 1)
    # the critic swaps the 16 x 64 output layer for a 1 x 64 value head
    assert line(ppo, "critic weights") == pytest.approx(2 * (125824 - 1024 + 64), abs=2**30 * 1e-3)


def test_format_plan_prints_layout_memory_and_formulas():
    text = hplan.describe_for_dry_run(
        hplan.make_plan(
            qwen(gpu_memory_gib=80.0, recompute_granularity="full", expert_model_parallel_size=16),
            16,
        )
    )
    for expected in (
        "TP=4",
        "EP=16",
        "expert-DP=1",
        "tp groups",
        "actor optimizer (Adam)",
        "Korthikanti",
        "training peak",
        "fit: yes",
        "total 30.532B",
    ):
        assert expected in text


def test_main_with_flags_exits_non_zero_naming_the_flag(capsys):
    assert (
        hplan.main(
            ["--", "--world-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"]
        )
        == 0
    )
    assert "TP=2" in capsys.readouterr().out
    assert hplan.main(["--", "--world-size", "3", "--expert-model-parallel-size", "2"]) == 2
    assert "--expert-model-parallel-size" in capsys.readouterr().err
    assert hplan.main(["--", "--world-size", "1", "--gpu-memory-gib", "0.001"]) == 1
    assert "--gpu-memory-gib" in capsys.readouterr().err
