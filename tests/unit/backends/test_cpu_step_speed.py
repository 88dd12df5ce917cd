"""What tools/profile_step.py's cuts of the CPU actor update keep exact: the noise scale's
norms read from megatron DDP's flat gradient buffers, torch's fused Adam under megatron's
optimizer, and torch's F.linear for megatron's parallel linears when the TP group has one
rank."""

import pytest
import torch

from hyrl.algorithms.batch import pack
from hyrl.backends.megatron import grads
from hyrl.backends.megatron.weights import is_expert
from hyrl.models.qwen3_moe.config import TINY


@pytest.fixture(scope="module")
def actor():
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=5)
    torch.manual_seed(0)
    settings = ActorSettings(optim=OptimizerSettings(micro_batch_size=4, clip_grad=0.0))
    yield MegatronActor(TINY, ParallelLayout(), settings)
    destroy_distributed()


def _filled_grads(actor):
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(8)]
    responses = [torch.randint(3, 15, (2,), generator=generator).tolist() for _ in range(8)]
    batch = pack(prompts, responses, torch.linspace(-1, 1, 8), pad_id=0)
    batch.old_log_probs, _ = actor.log_probs(batch)
    actor.train_step(batch, batch.num_response_tokens, lr=0.0)  # main_grads hold the gradient
    return {n: p.main_grad for n, p in actor.model.named_parameters() if p.requires_grad}


def _direct(tensors, experts: bool, dense: bool = True) -> float:
    return sum(
        float(t.double().pow(2).sum())
        for n, t in tensors.items()
        if (experts if is_expert(n) else dense)
    )


@pytest.mark.parametrize("include_experts", [True, False])
def test_buffer_norms_equal_the_per_parameter_sum(actor, include_experts):
    main_grads = _filled_grads(actor)
    assert any(is_expert(n) for n in main_grads) and _direct(main_grads, True) > 0
    norms = grads.GradBufferNorms(actor.ddp_chunks, actor.chunks, include_experts)
    # a float32 dot product per buffer, summed in float64 (grads._sq)
    assert norms.squared_norm() == pytest.approx(_direct(main_grads, include_experts), rel=1e-6)

    stale = norms.snapshot()
    for tensor in stale:
        tensor.fill_(7.0)
    snapshot = norms.snapshot(into=stale)  # refilled in place: no new buffers per micro-batch
    assert all(a is b for a, b in zip(snapshot, stale, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(snapshot, norms.snapshot(), strict=True))
    generator = torch.Generator().manual_seed(2)
    added = {n: torch.randn(g.shape, generator=generator) for n, g in main_grads.items()}
    for name, grad in main_grads.items():  # what a micro-batch's backward would add
        grad += added[name]
    since = norms.squared_norm(since=snapshot)
    assert since == pytest.approx(_direct(added, include_experts), rel=1e-6)
    assert _direct(added, experts=True, dense=False) > 0  # so leaving experts out is seen


def test_buffer_norms_count_replicated_tensors_on_tp_rank_0_only(actor, monkeypatch):
    """On a TP rank other than 0 a buffer mixes counted (TP-sharded) and uncounted (replicated)
    tensors: only the counted positions of the flat buffer are summed."""
    from types import SimpleNamespace

    from megatron.core import parallel_state

    sharded = torch.nn.Parameter(torch.zeros(3))
    sharded.tensor_model_parallel = True
    replicated = torch.nn.Parameter(torch.zeros(2))
    expert = torch.nn.Parameter(torch.zeros(4))
    model = torch.nn.Module()
    model.register_parameter("sharded", sharded)
    model.register_parameter("norm", replicated)
    model.layer = torch.nn.Module()
    model.layer.mlp = torch.nn.Module()
    model.layer.mlp.experts = torch.nn.Module()
    model.layer.mlp.experts.register_parameter("w", expert)
    dense_buffer = SimpleNamespace(  # padding at 3 and 6..7: never written, zero
        param_index_map={sharded: (0, 3, 0), replicated: (4, 6, 0)},
        grad_data=torch.tensor([1.0, 2.0, 3.0, 0.0, 10.0, 20.0, 0.0, 0.0]),
    )
    expert_buffer = SimpleNamespace(
        param_index_map={expert: (0, 4, 0)}, grad_data=torch.tensor([1.0, 1.0, 1.0, 1.0])
    )
    ddp = SimpleNamespace(buffers=[dense_buffer], expert_parallel_buffers=[expert_buffer])
    assert is_expert("layer.mlp.experts.w") and not is_expert("norm")
    rank_0 = grads.GradBufferNorms([ddp], [model], include_experts=True)
    assert rank_0.squared_norm() == 1 + 4 + 9 + 100 + 400 + 4
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 1)
    rank_1 = grads.GradBufferNorms([ddp], [model], include_experts=True)
    assert rank_1.squared_norm() == 1 + 4 + 9 + 4  # the norm's 10, 20 counted on rank 0 only
    snapshot = rank_1.snapshot()
    dense_buffer.grad_data[4] += 5.0  # a replicated tensor's change: not counted here
    dense_buffer.grad_data[1] += 1.0
    assert rank_1.squared_norm(since=snapshot) == 1.0
    assert grads.GradBufferNorms([ddp], [model], include_experts=False).squared_norm() == 1 + 9 + 9


def test_megatron_optimizer_runs_torch_fused_adam_and_agrees_with_the_plain_loop(actor):
    inner = [sub.optimizer for sub in actor.optimizer.chained_optimizers]
    assert inner and all(isinstance(o, torch.optim.AdamW) for o in inner)
    assert all(g["fused"] is True and not g["foreach"] for o in inner for g in o.param_groups)

    params = [p for o in inner for g in o.param_groups for p in g["params"]]
    before = [p.detach().clone() for p in params]
    step_grads = [torch.randn_like(p) * 1e-2 for p in params]
    plain = [b.clone().requires_grad_() for b in before]
    reference = torch.optim.AdamW(plain, lr=1e-3, weight_decay=0.0, foreach=False, fused=False)
    for o in inner:  # the same fresh Adam state on both sides
        o.state.clear()
    for p, g in zip(params, step_grads):
        p.grad = g.clone()
    for p, g in zip(plain, step_grads):
        p.grad = g.clone()
    for o in inner:
        for group in o.param_groups:
            group["lr"] = 1e-3
        o.step()
    reference.step()
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(params, before))
    worst = max(float((p.detach() - q.detach()).abs().max()) for p, q in zip(params, plain))
    assert moved > 1e-4  # Adam's first step moves each weight by about lr
    assert worst <= 1e-7  # float32 rounding of weights of order 0.1, not a different update


def test_linears_on_one_tp_rank_are_torch_linear_with_megatron_gradients(actor):
    """At TP = 1 on CPU the actor's linears run F.linear (no Python autograd Function), and
    give megatron's own function's output and gradients; with the input-gradient all-reduce
    asked for, megatron's function runs."""
    from megatron.core.tensor_parallel import layers

    megatron_linear = layers.linear_with_grad_accumulation_and_async_allreduce.__wrapped__
    qkv = actor.model.decoder.layers[0].self_attention.linear_qkv
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(6, 2, qkv.input_size, generator=generator)
    upstream = torch.randn(6, 2, qkv.output_size_per_partition, generator=generator)

    def output_and_grads(run):
        inp = hidden.clone().requires_grad_()
        weight = qkv.weight.detach().clone().requires_grad_()
        out = run(inp, weight)
        (out * upstream).sum().backward()
        return out.detach(), inp.grad, weight.grad, out.grad_fn

    ours = output_and_grads(lambda inp, weight: qkv(inp, weight=weight)[0])
    theirs = output_and_grads(
        lambda inp, weight: megatron_linear(inp, weight, None, False, False, False)
    )
    assert "LinearWithGradAccumulation" in type(theirs[3]).__name__
    assert "LinearWithGradAccumulation" not in type(ours[3]).__name__
    for mine, reference in zip(ours[:3], theirs[:3]):
        assert mine.shape == reference.shape
        torch.testing.assert_close(mine, reference, rtol=1e-6, atol=1e-6)
    assert float(ours[2].abs().max()) > 0  # the weight gradient is there to compare

    routed = layers.linear_with_grad_accumulation_and_async_allreduce(
        hidden.clone().requires_grad_(), qkv.weight, None, False, True, False
    )
    assert "LinearWithGradAccumulation" in type(routed.grad_fn).__name__
    assert layers.copy_to_tensor_model_parallel_region(hidden) is hidden
    assert layers.reduce_from_tensor_model_parallel_region(hidden) is hidden


def test_cuda_as_cpu_mode_places_cuda_tensors_on_the_cpu():
    """What megatron's optimizers need from the mode, each branch of its fast path: device
    keywords naming CUDA, `.cuda()` with and without arguments, `.type()` naming CUDA types;
    everything else passes through untouched."""
    from hyrl.backends.megatron.cpu_compat.cuda_as_cpu import CudaAsCpu

    tensor = torch.ones(3)
    with CudaAsCpu():
        made = [
            torch.zeros(2, device="cuda"),
            torch.tensor([1.0], device=torch.device("cuda", 0)),
            torch.empty(1, dtype=torch.float64, device=0),
        ]
        assert tensor.cuda() is tensor and tensor.cuda(device=0) is tensor
        assert tensor.type() == "torch.cuda.FloatTensor"
        assert tensor.type(torch.float64).dtype == torch.float64  # a conversion, not a name
        assert torch.add(tensor, tensor, alpha=2).tolist() == [3.0, 3.0, 3.0]
        assert (tensor * 2).sum().item() == 6.0
    assert [t.device.type for t in made] == ["cpu"] * 3
    assert made[2].dtype == torch.float64


def test_core_attention_is_torch_sdpa_with_megatron_outputs_and_gradients(actor, monkeypatch):
    """On CPU megatron's DotProductAttention runs as torch's scaled_dot_product_attention (4
    query heads over 2 KV groups, as the tiny model has) and gives megatron's own forward's
    output and gradients; a mask that leaves a query no key goes to megatron's forward."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    from hyrl.backends.megatron.model import causal_attention_mask

    attention = actor.model.decoder.layers[0].self_attention.core_attention
    heads, groups = attention.num_attention_heads_per_partition, 2
    assert attention.num_query_groups_per_partition == groups < heads
    generator = torch.Generator().manual_seed(4)
    seq, rows, dim = 7, 3, attention.hidden_size_per_attention_head
    shapes = [(seq, rows, heads, dim), (seq, rows, groups, dim), (seq, rows, groups, dim)]
    qkv = [torch.randn(*shape, generator=generator) for shape in shapes]
    upstream = torch.randn(seq, rows, heads * dim, generator=generator)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda *a, **k: calls.append(1) or sdpa(*a, **k),
    )

    def output_and_grads(forward, mask):
        leaves = [t.clone().requires_grad_() for t in qkv]
        out = forward(attention, *leaves, mask)
        (out * upstream).sum().backward()
        return [out.detach(), *(t.grad for t in leaves)]

    mask = causal_attention_mask(seq, torch.device("cpu"))
    ours = output_and_grads(DotProductAttention.forward, mask)
    assert len(calls) == 1
    theirs = output_and_grads(DotProductAttention.forward.__wrapped__, mask)
    for mine, reference in zip(ours, theirs):
        assert mine.shape == reference.shape
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)
    assert all(float(g.abs().max()) > 0 for g in ours[1:])

    blind = mask.clone()
    blind[..., 2, :] = True  # query 2 sees no key: megatron's softmax is uniform there
    fallback = output_and_grads(DotProductAttention.forward, blind)
    assert len(calls) == 1  # not called again
    reference = output_and_grads(DotProductAttention.forward.__wrapped__, blind)
    torch.testing.assert_close(fallback[0], reference[0], rtol=0, atol=0)


def test_one_cuda_as_cpu_mode_on_the_stack_and_none_in_torchs_optimizer_step(actor):
    """megatron's wrapped optimizer methods call each other: one mode stays on the stack (each
    mode on it would see every torch call again); torch's own Adam step runs without it."""
    from hyrl.backends.megatron.cpu_compat.cuda_as_cpu import CudaAsCpu, under_cuda_as_cpu

    def modes():
        stack = torch.overrides._get_current_function_mode_stack()
        return sum(isinstance(mode, CudaAsCpu) for mode in stack)

    seen = []
    inner = under_cuda_as_cpu(lambda: seen.append(("inner", modes())))
    outer = under_cuda_as_cpu(lambda: (seen.append(("outer", modes())), inner()))
    outer()
    assert seen == [("outer", 1), ("inner", 1)] and modes() == 0

    adam = actor.optimizer.chained_optimizers[0].optimizer
    assert adam.step._hyrl_outside_cuda_as_cpu
    for group in adam.param_groups:  # an earlier test's grads: this step must change nothing
        for param in group["params"]:
            param.grad = None
    inside_step = []
    handle = adam.register_step_pre_hook(lambda *_: inside_step.append(modes()))
    try:
        # as megatron's step_with_ready_grads calls it (parameters without a grad: no update)
        under_cuda_as_cpu(adam.step)()
    finally:
        handle.remove()
    assert inside_step == [0]


def test_expert_bias_count_runs_eagerly_with_megatrons_counting(actor):
    """On CPU megatron's torch.compile'd router bookkeeping runs undecorated (no dynamo frame
    guards per router call) and still counts each expert's tokens while training only."""
    from types import SimpleNamespace

    from megatron.core.transformer.moe.router import TopKRouter

    count = TopKRouter._apply_expert_bias
    assert not hasattr(count, "_torchdynamo_orig_callable") and not hasattr(count, "__wrapped__")
    router = SimpleNamespace(enable_expert_bias=True, local_tokens_per_expert=torch.zeros(4))
    routing_map = torch.tensor([[True, False, True, False], [True, True, False, False]])
    count(router, routing_map)
    assert router.local_tokens_per_expert.tolist() == [2.0, 1.0, 1.0, 0.0]
    count(router, routing_map, padding_mask=torch.tensor([[False], [True]]))  # row 2 is padding
    assert router.local_tokens_per_expert.tolist() == [3.0, 1.0, 2.0, 0.0]
    with torch.no_grad():  # evaluation and recomputation count nothing
        count(router, routing_map)
    assert router.local_tokens_per_expert.tolist() == [3.0, 1.0, 2.0, 0.0]


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_reuses_cos_sin_and_equals_megatrons_bit_for_bit(
    actor, monkeypatch, interleaved
):
    """On CPU the unfused RoPE computes cos and sin once per freqs tensor: the output and the
    input gradient are megatron's own, bit for bit; a partial rotation runs megatron's."""
    from megatron.core.models.common.embeddings import rope_utils

    fast = rope_utils._apply_rotary_pos_emb_bshd
    megatron_apply = fast.__wrapped__
    assert fast._hyrl_cached_cos_sin and not hasattr(megatron_apply, "_hyrl_cached_cos_sin")
    generator = torch.Generator().manual_seed(5)
    freqs = torch.randn(7, 1, 1, 16, generator=generator)  # [s, 1, 1, rotary dim]
    t = torch.randn(7, 3, 4, 16, generator=generator, requires_grad=True)
    grad_out = torch.randn(7, 3, 4, 16, generator=generator)

    def run(apply):
        out = apply(t, freqs, rotary_interleaved=interleaved, mscale=1.5)
        (grad,) = torch.autograd.grad(out, t, grad_out)
        return out, grad

    expected = run(megatron_apply)
    first = run(fast)
    calls = []
    real_cos = torch.cos
    monkeypatch.setattr(torch, "cos", lambda x: calls.append(x) or real_cos(x))
    second = run(fast)
    assert calls == []  # the same freqs tensor: cos and sin are not computed again
    for got in (first, second):
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    run(fast.__wrapped__)
    assert len(calls) == 1  # megatron's own computes them per call (the spy works)

    partial = torch.randn(7, 1, 1, 8, generator=generator)  # rotates half of each head
    assert torch.equal(
        fast(t, partial, rotary_interleaved=interleaved),
        megatron_apply(t, partial, rotary_interleaved=interleaved),
    )
    assert len(calls) == 3  # megatron's function ran for it, and again for the reference


def test_experts_run_as_grouped_gemms_with_megatrons_outputs_and_gradients(actor, monkeypatch):
    """On CPU megatron's SequentialMLP runs its experts as two grouped GEMMs over their own
    weights: output and the gradients of the tokens, the routing probabilities and every
    expert's weights equal megatron's per-expert loop (an expert with no tokens included); a
    module hook on an expert sends the call to megatron's loop."""
    from megatron.core.transformer.mlp import MLP
    from megatron.core.transformer.moe.experts import SequentialMLP

    experts = actor.model.decoder.layers[0].mlp.experts
    assert isinstance(experts, SequentialMLP) and experts.num_local_experts == 4
    weights = [p for e in experts.local_experts for p in (e.linear_fc1.weight, e.linear_fc2.weight)]
    generator = torch.Generator().manual_seed(6)
    tokens_per_expert = torch.tensor([3, 0, 5, 2])
    hidden = torch.randn(10, TINY.hidden_size, generator=generator)
    probs = torch.rand(10, generator=generator)
    upstream = torch.randn(10, TINY.hidden_size, generator=generator)
    module_calls = []
    mlp_forward = MLP.forward
    monkeypatch.setattr(
        MLP, "forward", lambda *a, **k: module_calls.append(1) or mlp_forward(*a, **k)
    )

    def output_and_grads(forward):
        leaves = [hidden.clone().requires_grad_(), probs.clone().requires_grad_()]
        out, bias = forward(experts, leaves[0], tokens_per_expert, leaves[1])
        assert bias is None
        # autograd.grad: DDP's hooks on the weights' gradient accumulators do not fire
        grads_ = torch.autograd.grad(out, [*leaves, *weights], upstream)
        return [out.detach(), *grads_]

    ours = output_and_grads(SequentialMLP.forward)
    assert module_calls == []  # no expert module ran
    theirs = output_and_grads(SequentialMLP.forward.__wrapped__)
    assert len(module_calls) == 4
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)
    # [output, tokens, probs, then fc1 and fc2 of each expert]: expert 1 saw no tokens
    assert float(ours[5].abs().max()) == float(ours[6].abs().max()) == 0.0
    assert all(float(g.abs().max()) > 0 for g in ours[1:5] + ours[7:])

    handle = experts.local_experts[2].linear_fc1.register_forward_pre_hook(lambda *a: None)
    try:
        hooked = output_and_grads(SequentialMLP.forward)
    finally:
        handle.remove()
    assert len(module_calls) == 8  # megatron's loop ran
    torch.testing.assert_close(hooked[0], theirs[0], rtol=0, atol=0)


def test_gradient_norm_and_clip_use_foreach_ops_with_megatrons_results(actor):
    """On CPU megatron's stand-ins for Apex's multi-tensor norm and scale (a Python loop per
    tensor) are torch's _foreach_ ops: the same norm and the same scaled tensors, bit for bit;
    a scale into other tensors keeps megatron's loop."""
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads

    from hyrl.backends.megatron.cpu_compat.cuda_as_cpu import CudaAsCpu

    assert clip_grads.l2_norm_impl is not utils.local_multi_tensor_l2_norm
    assert clip_grads.multi_tensor_scale_impl is not utils.local_multi_tensor_scale
    generator = torch.Generator().manual_seed(7)
    tensors = [torch.randn(*shape, generator=generator) for shape in ((3, 5), (7,), (2, 2, 4))]
    flag = torch.zeros(1, dtype=torch.int)
    with CudaAsCpu():  # megatron's code names device="cuda"; the optimizer's mode
        expected, _ = utils.local_multi_tensor_l2_norm(2048, flag, [tensors], False)
        norm, _ = clip_grads.l2_norm_impl(2048, flag, [tensors], False)
        total = clip_grads.get_grad_norm_fp32(tensors, grad_stats_parallel_group=None)
    assert norm.shape == (1,) and torch.equal(norm, expected)
    mixed = [tensors[0], tensors[1].bfloat16()]  # not all float32: megatron's loop, its rounding
    with CudaAsCpu():
        expected, _ = utils.local_multi_tensor_l2_norm(2048, flag, [mixed], False)
        norm, _ = clip_grads.l2_norm_impl(2048, flag, [mixed], False)
    assert torch.equal(norm, expected)
    assert total == pytest.approx(float(torch.cat([t.flatten() for t in tensors]).norm()))

    scaled = [t.clone() for t in tensors]
    clip_grads.multi_tensor_scale_impl(2048, flag, [scaled, scaled], 0.3)
    reference = [t.clone() for t in tensors]
    utils.local_multi_tensor_scale(2048, flag, [reference, reference], 0.3)
    assert all(torch.equal(a, b) for a, b in zip(scaled, reference, strict=True))
    assert not torch.equal(scaled[0], tensors[0])
    into = [torch.zeros_like(t, dtype=torch.float64) for t in tensors]
    clip_grads.multi_tensor_scale_impl(2048, flag, [tensors, into], 2.0)
    assert all(torch.equal(b, (a * 2.0).double()) for a, b in zip(tensors, into, strict=True))


def test_router_gemm_is_torch_linear_with_megatrons_gradients(actor):
    """On CPU, with tokens, weight and router dtype all float32, the router's logits come from
    torch's F.linear: the output and gradients of megatron's autograd Function; a router
    dtype that differs (float64 logits) runs megatron's Function."""
    from megatron.core.transformer.moe import moe_utils, router

    gating = router.router_gating_linear
    assert gating._hyrl_plain
    generator = torch.Generator().manual_seed(8)
    tokens = torch.randn(7, 3, TINY.hidden_size, generator=generator)
    weight = torch.randn(TINY.num_experts, TINY.hidden_size, generator=generator)
    upstream = torch.randn(7, 3, TINY.num_experts, generator=generator)

    def output_and_grads(function, dtype):
        leaves = [tokens.clone().requires_grad_(), weight.clone().requires_grad_()]
        out = function(*leaves, None, dtype)
        return [out.detach(), *torch.autograd.grad(out, leaves, upstream.to(out.dtype))]

    ours = output_and_grads(gating, torch.float32)
    assert ours[0].shape == (7, 3, TINY.num_experts)
    theirs = output_and_grads(moe_utils.router_gating_linear, torch.float32)
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-6, atol=1e-6)
    leaves = [tokens.clone().requires_grad_(), weight.clone().requires_grad_()]
    plain = type(gating(*leaves, None, torch.float32).grad_fn).__name__
    converted = type(gating(*leaves, None, torch.float64).grad_fn).__name__
    assert "RouterGatingLinearFunction" not in plain
    assert "RouterGatingLinearFunction" in converted  # float64 logits: megatron's Function
