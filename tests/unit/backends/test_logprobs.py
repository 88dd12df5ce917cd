"""Specification of hyrl.backends.megatron.logprobs.

With one TP rank the shard is the whole vocabulary, so the result must be exactly what torch
computes from the full logits: log_softmax(logits / T)[target] and the entropy of
Categorical(logits / T), with the same gradients. The pass works in chunks of positions; it
equals the unchunked pass it replaced (tests/helpers/logprobs_worker.py) at TP=1 and TP=2, and
needs a fraction of its memory.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from logprobs_worker import unchunked_log_probs_and_entropy, values_and_grads
from testpaths import HELPERS
from torchrun_worker import run_ranks

from hyrl.backends.megatron import logprobs
from hyrl.backends.megatron.logprobs import vocab_parallel_log_probs_and_entropy

WORKER = HELPERS / "logprobs_worker.py"

VOCAB = 16


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=1)
    yield
    destroy_distributed()


@pytest.fixture(autouse=True)
def through_the_function(monkeypatch):
    """These tests specify the chunked autograd Function, which inputs this small would skip
    (SMALL_LOGITS; test_logprobs_small.py checks that pass against the Function)."""
    monkeypatch.setattr(logprobs, "SMALL_LOGITS", 0)


@pytest.fixture
def logits_and_targets():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, VOCAB, generator=gen) * 3.0
    targets = torch.randint(0, VOCAB, (3, 5), generator=gen)
    return logits, targets


def reference(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    scaled = logits.float() / temperature
    log_probs = torch.log_softmax(scaled, dim=-1).gather(-1, targets[..., None])[..., 0]
    entropy = torch.distributions.Categorical(logits=scaled).entropy()
    return log_probs, entropy


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_log_probs_and_entropy_equal_torch_on_the_full_vocabulary(logits_and_targets, temperature):
    logits, targets = logits_and_targets
    log_probs, entropy = vocab_parallel_log_probs_and_entropy(
        logits, targets, temperature=temperature, with_entropy=True
    )
    ref_log_probs, ref_entropy = reference(logits, targets, temperature)

    assert log_probs.shape == entropy.shape == (3, 5)
    assert torch.allclose(log_probs, ref_log_probs, atol=1e-5, rtol=0)
    assert torch.allclose(entropy, ref_entropy, atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_gradients_equal_those_of_the_torch_reference(logits_and_targets, temperature):
    logits, targets = logits_and_targets
    ours_in = logits.clone().requires_grad_(True)
    ref_in = logits.clone().requires_grad_(True)

    log_probs, entropy = vocab_parallel_log_probs_and_entropy(
        ours_in, targets, temperature=temperature, with_entropy=True
    )
    (grad,) = torch.autograd.grad(log_probs.sum() + entropy.sum(), ours_in)
    ref_log_probs, ref_entropy = reference(ref_in, targets, temperature)
    (ref_grad,) = torch.autograd.grad(ref_log_probs.sum() + ref_entropy.sum(), ref_in)

    assert grad.abs().max() > 0.01  # a nonzero gradient to compare
    assert torch.allclose(grad, ref_grad, atol=1e-5, rtol=0)


def test_uniform_logits_give_log_one_over_vocab_and_entropy_log_vocab():
    # all 16 tokens equally likely: log p = -log 16 = -2.7726, H = log 16, at any temperature
    logits = torch.zeros(2, 3, VOCAB)
    targets = torch.tensor([[0, 7, 15], [1, 2, 3]])
    log_probs, entropy = vocab_parallel_log_probs_and_entropy(
        logits, targets, temperature=0.5, with_entropy=True
    )
    assert torch.allclose(log_probs, torch.full((2, 3), -math.log(16)), atol=1e-6)
    assert torch.allclose(entropy, torch.full((2, 3), math.log(16)), atol=1e-6)


def test_huge_logits_do_not_overflow():
    # softmax over [1000, 0, ..., 0]: p(token 0) = 1 / (1 + 15 e^-1000) -> log p = 0, H = 0
    logits = torch.zeros(1, 1, VOCAB)
    logits[0, 0, 0] = 1000.0
    log_probs, entropy = vocab_parallel_log_probs_and_entropy(
        logits, torch.tensor([[0]]), with_entropy=True
    )
    assert torch.isfinite(log_probs).all() and torch.isfinite(entropy).all()
    assert log_probs.item() == pytest.approx(0.0, abs=1e-6)
    assert entropy.item() == pytest.approx(0.0, abs=1e-6)


def test_entropy_is_none_unless_requested(logits_and_targets):
    logits, targets = logits_and_targets
    log_probs, entropy = vocab_parallel_log_probs_and_entropy(logits, targets, temperature=1.0)
    assert entropy is None
    assert torch.allclose(log_probs, reference(logits, targets, 1.0)[0], atol=1e-5, rtol=0)


def test_bfloat16_logits_are_computed_in_float32(logits_and_targets):
    logits, targets = logits_and_targets
    log_probs, _ = vocab_parallel_log_probs_and_entropy(logits.bfloat16(), targets)
    assert log_probs.dtype == torch.float32
    expected, _ = reference(logits.bfloat16().float(), targets, 1.0)
    assert torch.allclose(log_probs, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("chunk_positions", [1, 4, 64])  # 15 positions: uneven, and one chunk
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunks_give_the_values_and_gradients_of_the_unchunked_pass(
    logits_and_targets, temperature, chunk_positions
):
    logits, targets = logits_and_targets
    gen = torch.Generator().manual_seed(1)
    weights = (torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen))

    def chunked(*args, **kwargs):
        return vocab_parallel_log_probs_and_entropy(
            *args, **kwargs, chunk_positions=chunk_positions
        )

    ours = values_and_grads(chunked, logits, targets, temperature, weights)
    reference = values_and_grads(
        unchunked_log_probs_and_entropy, logits, targets, temperature, weights
    )
    assert ours[2].abs().max() > 0.01
    for mine, theirs in zip(ours, reference):  # log p, H, gradient
        assert torch.allclose(mine, theirs, atol=1e-6, rtol=0)


def test_a_loss_of_log_probs_alone_gets_the_unchunked_gradient(logits_and_targets):
    # entropy not requested (no entropy term in backward) and requested but unused (its grad None)
    logits, targets = logits_and_targets
    expected = values_and_grads(
        unchunked_log_probs_and_entropy, logits, targets, 0.7, (torch.ones(3, 5), torch.zeros(3, 5))
    )[2]
    for with_entropy in (False, True):
        leaf = logits.clone().requires_grad_(True)
        log_probs, _ = vocab_parallel_log_probs_and_entropy(
            leaf, targets, temperature=0.7, with_entropy=with_entropy, chunk_positions=4
        )
        (grad,) = torch.autograd.grad(log_probs.sum(), leaf)
        assert torch.allclose(grad, expected, atol=1e-6, rtol=0)


def test_bfloat16_logits_get_a_bfloat16_gradient_equal_to_the_unchunked_one(logits_and_targets):
    logits, targets = logits_and_targets
    weights = (torch.ones(3, 5), torch.ones(3, 5))
    ours = values_and_grads(
        vocab_parallel_log_probs_and_entropy, logits.bfloat16(), targets, 1.0, weights
    )
    reference = values_and_grads(
        unchunked_log_probs_and_entropy, logits.bfloat16(), targets, 1.0, weights
    )
    assert ours[2].dtype == torch.bfloat16
    for mine, theirs in zip(ours, reference):
        assert torch.allclose(mine.float(), theirs.float(), atol=1e-6, rtol=0)


@pytest.mark.slow
def test_at_tp2_values_equal_the_unchunked_pass_and_gradients_equal_torchs(tmp_path):
    out = tmp_path / "tp2.json"
    run_ranks(WORKER, 2, "tp2", out)
    for temperature, result in json.loads(out.read_text()).items():
        log_prob_diff, entropy_diff, _ = result["chunked_vs_unchunked"]
        assert log_prob_diff <= 1e-6 and entropy_diff <= 1e-6, temperature
        assert result["log_prob_grad_chunked_vs_unchunked"] <= 1e-6, temperature
        assert result["grad_abs_max"] > 0.1
        # against torch on the full vocabulary: log p, H and the gradient of both
        assert max(result["chunked_vs_torch"]) <= 1e-5, temperature
        # the unchunked pass's entropy gradient lacked the other shard's part of d log Z
        # (its TP all-reduce has an identity backward): that is why it is not the reference
        assert result["unchunked_vs_torch"][2] > 0.1, temperature


def _peak_mib(impl: str, mode: str, positions: int, vocab: int) -> dict:
    proc = subprocess.run(
        [sys.executable, str(WORKER), "memory", impl, str(positions), str(vocab), mode],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_chunking_cuts_the_peak_memory_of_a_32k_vocabulary_pass():
    # 2,048 positions x 32,768 columns: 256 MiB of float32 logits; chunks of 512 positions
    for mode in ("no_grad", "backward"):
        chunked = _peak_mib("chunked", mode, 2048, 32768)
        unchunked = _peak_mib("unchunked", mode, 2048, 32768)
        logits_mib = chunked["logits_mib"]
        assert unchunked["peak_above_logits_mib"] > 3 * logits_mib, unchunked  # full-size copies
        assert chunked["peak_above_logits_mib"] < 0.4 * unchunked["peak_above_logits_mib"], (
            chunked,
            unchunked,
        )
        if mode == "no_grad":  # the log-prob pass: not one full-size copy
            assert chunked["peak_above_logits_mib"] < logits_mib, chunked
        else:  # the gradient (one logits' worth) and a few chunks
            assert chunked["peak_above_logits_mib"] < 2 * logits_mib, chunked
