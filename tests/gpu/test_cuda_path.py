"""The same trainer on CUDA (NCCL, megatron-core on GPU). Skipped without CUDA.

Run on a GPU machine with `python -m pytest tests/gpu -q`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
ROOT = Path(__file__).resolve().parents[2]


def _tiny_recipe(*flags: str) -> subprocess.CompletedProcess:
    """recipes/tiny/grpo.sh FLAGS with this interpreter's folder first on PATH; it must pass."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", str(ROOT / "recipes/tiny/grpo.sh"), *flags],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def cuda_megatron():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=1)
    yield
    destroy_distributed()


@pytest.mark.parametrize("impl", ["local", "transformer_engine"])
def test_megatron_logits_match_transformers_on_cuda(cuda_megatron, impl):
    """Both layer specs; with Transformer Engine the experts are one grouped GEMM (TEGroupedMLP)
    whose weight{e} names the name table maps."""
    if impl == "transformer_engine":
        pytest.importorskip("transformer_engine", reason="Transformer Engine is not installed")
    from transformers import Qwen3MoeForCausalLM

    from hyrl.backends.megatron import weights
    from hyrl.backends.megatron.model import ParallelLayout, build_gpt_model, causal_attention_mask
    from hyrl.models.qwen3_moe import hf_mapping
    from hyrl.models.qwen3_moe.config import TINY

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    hf_model = Qwen3MoeForCausalLM(TINY.to_hf_config()).cuda().eval()
    model = build_gpt_model(TINY, ParallelLayout(), transformer_impl=impl).eval()
    if impl == "transformer_engine":
        assert model.config.moe_grouped_gemm
        assert any(".mlp.experts.linear_fc1.weight" in n for n, _ in model.named_parameters())
    assert next(model.parameters()).is_cuda
    weights.load_full_state_dict(
        model, hf_mapping.hf_to_megatron(hf_model.state_dict(), TINY), TINY
    )
    tokens = torch.randint(0, TINY.vocab_size, (3, 12), device="cuda")
    with torch.no_grad():
        expected = hf_model(tokens).logits
        positions = torch.arange(12, device="cuda").expand_as(tokens)
        got = model(tokens, positions, causal_attention_mask(12, tokens.device))
    assert (got - expected).abs().max().item() <= 1e-4


@pytest.mark.parametrize("impl", ["local", "transformer_engine"])
def test_packed_sequences_give_the_padded_log_probs_on_cuda(cuda_megatron, impl):
    """--qkv-format thd on CUDA: with Transformer Engine the packed micro-batch goes through
    its varlen (THD) attention with cu_seqlens, with the local spec through the block-diagonal
    mask; either way the log-probs on response positions equal the padded rows' (fp32)."""
    if impl == "transformer_engine":
        pytest.importorskip("transformer_engine", reason="Transformer Engine is not installed")
    import dataclasses

    from hyrl.algorithms.batch import pack
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout
    from hyrl.models.qwen3_moe.config import TINY

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    optim = OptimizerSettings(micro_batch_size=4, clip_grad=0.0, noise_scale_beta=None)
    actor = MegatronActor(TINY, ParallelLayout(), ActorSettings(optim=optim, transformer_impl=impl))
    generator = torch.Generator().manual_seed(4)
    lengths = [(2, 1), (9, 6), (3, 2), (2, 1), (4, 5), (2, 2), (7, 1), (2, 1)]
    prompts = [torch.randint(3, 15, (p,), generator=generator).tolist() for p, _ in lengths]
    responses = [torch.randint(3, 15, (r,), generator=generator).tolist() for _, r in lengths]
    batch = pack(prompts, responses, torch.linspace(-1, 1, 8), pad_id=0)
    padded, _ = actor.log_probs(batch)
    actor.optim = dataclasses.replace(optim, packed_sequences=True)
    assert all(mb.packing is not None for mb, _ in actor._micro_batches(batch))
    packed, _ = actor.log_probs(batch)
    mask = batch.loss_mask.bool()
    torch.testing.assert_close(packed[mask], padded[mask], rtol=0, atol=1e-4)


def test_fused_permutation_gives_the_unfused_log_probs_with_routing_replay_on_cuda(cuda_megatron):
    """--moe-permute-fusion (TE's moe_permute/unpermute) follows the routing the router chose,
    or replayed: the log-probs equal the unfused permutation's, and replay still dispatches
    every token to the engine's experts."""
    pytest.importorskip("transformer_engine", reason="Transformer Engine is not installed")
    from hyrl.algorithms.batch import pack
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout
    from hyrl.models.qwen3_moe.config import TINY

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    optim = OptimizerSettings(micro_batch_size=4, clip_grad=0.0, noise_scale_beta=None)

    def actor(fused: bool):
        settings = ActorSettings(optim=optim, transformer_impl="transformer_engine")
        return MegatronActor(TINY, ParallelLayout(moe_permute_fusion=fused), settings)

    unfused, fused = actor(False), actor(True)
    assert fused.model.config.moe_permute_fusion and not unfused.model.config.moe_permute_fusion
    fused.model.load_state_dict(unfused.model.state_dict())
    generator = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(8)]
    responses = [torch.randint(3, 15, (3,), generator=generator).tolist() for _ in range(8)]
    batch = pack(prompts, responses, torch.zeros(8), pad_id=0)
    expected, _ = unfused.log_probs(batch)
    got, _ = fused.log_probs(batch)
    mask = batch.loss_mask.bool()
    torch.testing.assert_close(got[mask], expected[mask], rtol=0, atol=1e-4)


def test_tiny_recipe_runs_three_steps_on_cuda(tmp_path):
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    run_dir = tmp_path / "run"
    proc = _tiny_recipe("--num-steps", "3", "--run-dir", str(run_dir), "--no-progress")
    assert "on cuda (nccl)" in proc.stdout
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["samples"] for r in rows] == [128, 256, 384]
    assert all(r["perf/tokens_per_s_per_gpu"] > 0 for r in rows)
    from hyrl.metrics import flops

    gpu = flops.gpu_of(torch.cuda.get_device_name())
    if gpu is None:  # the run said so once; the table lacks this GPU (add it, with its source)
        assert "no perf/mfu" in proc.stdout + proc.stderr
        assert all("perf/mfu" not in r for r in rows)
    else:  # the tiny model on one GPU uses a sliver of it, but a real, positive one
        assert all(0 < r["perf/mfu"] < 1 for r in rows), [r.get("perf/mfu") for r in rows]


def test_bf16_with_the_distributed_optimizer_trains_on_cuda(tmp_path):
    """The 30B recipes' training path (megatron's Float16Module, DDP and distributed optimizer
    on NCCL): three steps run, every update applied, the gradient norm finite."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    run_dir = tmp_path / "run"
    _tiny_recipe(
        "--num-steps",
        "3",
        "--bf16",
        "--use-distributed-optimizer",
        "--run-dir",
        str(run_dir),
        "--no-progress",
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["actor/skipped"] for r in rows] == [0.0, 0.0, 0.0]
    assert all(r["actor/grad_norm"] >= 0 and r["actor/grad_norm"] < float("inf") for r in rows)


def test_bf16_with_the_distributed_optimizer_resumes_on_cuda(tmp_path):
    """A run saved after 2 steps resumes to 4 on the GPU: megatron's dist-checkpointing of the
    distributed optimizer on NCCL, with torch's Adam where TE and Apex are missing (its `step`
    broke the reshardable load there before cpu_compat fixed it on every device)."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    flags = ["--bf16", "--use-distributed-optimizer", "--run-dir", str(run_dir), "--no-progress"]
    _tiny_recipe("--num-steps", "2", *flags, "--save", str(ckpt))
    _tiny_recipe("--num-steps", "4", *flags, "--load", str(ckpt))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_step"] for r in rows] == [1, 2, 3, 4]
    assert [r["samples"] for r in rows] == [128, 256, 384, 512]
    assert [r["actor/skipped"] for r in rows] == [0.0] * 4
    assert all(0 <= r["actor/grad_norm"] < float("inf") for r in rows)
