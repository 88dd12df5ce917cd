"""The SGLang backend against a real SGLang server on one GPU. Skipped without CUDA or sglang.

Run on a GPU machine with sglang==0.5.23 installed: `python -m pytest tests/gpu/test_sglang.py -q`
(about 1-3 minutes, mostly server start-up). The server gets a tiny Qwen3-MoE checkpoint and runs
with --skip-tokenizer-init (hyrl sends token ids), so the tokenizer saved next to it is unused.

After a tensor weight sync the model becomes a "successor" machine whose greedy output a person can
predict: embeddings are one-hot (token c -> unit vector e_c), attention and expert outputs are zero
(o_proj = down_proj = 0) so the last hidden state is e_c, and lm_head row t is 10 * e_{t-1}, so
after RMSNorm (e_c -> 8 e_c, hidden 64) the logit of c + 1 is 80 and every other logit is 0:
greedy decoding counts up by one, mod 16, and stops after EOS (id 1).
"""

import pytest
import torch
from sglang_gpu import counting_weights

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

EOS = 1


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from transformers import Qwen3MoeForCausalLM

    from hyrl.data.tokenizer import build_tokenizer
    from hyrl.models.qwen3_moe.config import TINY

    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(TINY.to_hf_config())
    path = tmp_path_factory.mktemp("tiny_qwen3_moe")
    model.save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path, model


def test_real_sglang_generates_and_takes_new_weights_from_tensor(tiny_checkpoint, tmp_path):
    pytest.importorskip("sglang", reason="sglang is not installed")
    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.base import SamplingParams
    from hyrl.rollout.sglang.engine import SGLangEngine
    from hyrl.rollout.sglang.server import SGLangServerProcess, free_port

    path, model = tiny_checkpoint
    server = SGLangServerProcess(
        str(path),
        port=free_port(),
        tp_size=1,
        mem_fraction_static=0.2,
        max_running_requests=8,
        random_seed=0,
        log_path=tmp_path / "sglang.log",
        # head_dim 16 and fp32 weights: triton attention, bf16 compute, no CUDA graphs (start-up).
        extra_flags=[
            "--sglang-attention-backend",
            "triton",
            "--sglang-dtype",
            "bfloat16",
            "--sglang-disable-cuda-graph",
        ],
    )
    engine = SGLangEngine.launch(
        server,
        startup_timeout_s=240,
        concurrency=4,
        stop_token_ids=[EOS],
        weight_sync="tensor",
        buffer_bytes=64 * 1024,
        weight_sync_options={"device": "cuda:0"},
    )
    try:
        greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
        before = engine.generate([[3], [12]], greedy)
        for gen in before:  # random weights: only the protocol's invariants hold
            assert 1 <= len(gen.response_ids) <= 6
            assert len(gen.response_log_probs) == len(gen.response_ids)
            assert all(0 <= t < TINY.vocab_size for t in gen.response_ids)
            assert all(lp <= 1e-6 for lp in gen.response_log_probs)
            assert (gen.finish_reason == "stop") == (gen.response_ids[-1] == EOS)

        new_weights = counting_weights(model.state_dict(), TINY.vocab_size, 1)
        engine.update_weights(new_weights)
        stats = engine.last_sync_stats
        assert stats.buckets > 1 and stats.tensor_bytes == sum(
            t.numel() * t.element_size() for t in new_weights.values()
        )

        after = engine.generate([[3], [12]], SamplingParams(max_new_tokens=4, temperature=0.0))
        assert (after[0].response_ids, after[0].finish_reason) == ([4, 5, 6, 7], "length")
        after_stop = engine.generate([[12]], SamplingParams(max_new_tokens=8, temperature=0.0))[0]
        assert (after_stop.response_ids, after_stop.finish_reason) == ([13, 14, 15, 0, EOS], "stop")
        assert min(after_stop.response_log_probs) > -1e-3  # margin 80: probability ~1

        # transformers, with the same weights, predicts the same continuation
        model.load_state_dict(new_weights)
        hf = model.generate(
            torch.tensor([[12]]),
            attention_mask=torch.ones(1, 1, dtype=torch.long),
            do_sample=False,
            max_new_tokens=8,
            eos_token_id=EOS,
            pad_token_id=0,
        )
        assert hf[0, 1:].tolist() == after_stop.response_ids
    finally:
        engine.shutdown()


def test_real_sglang_returns_the_experts_transformers_routes_to(tiny_checkpoint, tmp_path):
    """--use-rollout-routing-replay on SGLang: a server started with --enable-return-routed-experts
    gives [prompt + response - 1, layers, top-k] ids that agree with transformers' own routing of
    the same tokens (bf16 server vs fp32 transformers: a few near-ties may flip)."""
    pytest.importorskip("sglang", reason="sglang is not installed")
    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.base import SamplingParams
    from hyrl.rollout.sglang.engine import SGLangEngine
    from hyrl.rollout.sglang.server import SGLangServerProcess, free_port

    path, model = tiny_checkpoint
    server = SGLangServerProcess(
        str(path),
        port=free_port(),
        tp_size=1,
        mem_fraction_static=0.2,
        max_running_requests=8,
        random_seed=0,
        log_path=tmp_path / "sglang.log",
        return_routed_experts=True,
        extra_flags=[
            "--sglang-attention-backend",
            "triton",
            "--sglang-dtype",
            "bfloat16",
            "--sglang-disable-cuda-graph",
        ],
    )
    engine = SGLangEngine.launch(
        server,
        startup_timeout_s=240,
        concurrency=4,
        stop_token_ids=[EOS],
        weight_sync="tensor",
        buffer_bytes=64 * 1024,
        weight_sync_options={"device": "cuda:0"},
        return_routed_experts=True,
        num_moe_layers=TINY.num_layers,
        moe_top_k=TINY.moe_router_topk,
    )
    try:
        generations = engine.generate(
            [[3, 4, 5], [12, 7]], SamplingParams(max_new_tokens=6, temperature=1.0)
        )
    finally:
        engine.shutdown()
    recorded = []
    hooks = [
        layer.mlp.gate.register_forward_hook(lambda m, i, o: recorded.append(o[2]))
        for layer in model.model.layers
    ]
    agree = total = 0
    try:
        for g in generations:
            rows = len(g.prompt_ids) + len(g.response_ids) - 1
            assert g.routed_experts.shape == (rows, TINY.num_layers, TINY.moe_router_topk)
            recorded.clear()
            with torch.no_grad():
                model(torch.tensor([(g.prompt_ids + g.response_ids)[:rows]]))
            hf_ids = torch.stack(recorded, dim=1)  # [rows, layers, k]
            same = (hf_ids.sort(-1).values == g.routed_experts.long().sort(-1).values).all(-1)
            agree += int(same.sum())
            total += same.numel()
    finally:
        for hook in hooks:
            hook.remove()
    assert agree >= 0.9 * total, f"{agree} of {total} (token, layer) routings agree"
