"""Specification of hyrl.backends.megatron.logprobs at tensor-parallel size 1.

With one TP rank the shard is the whole vocabulary, so the result must be exactly what torch
computes from the full logits: log_softmax(logits / T)[target] and the entropy of
Categorical(logits / T), with the same gradients.
"""

from __future__ import annotations

import math

import pytest
import torch

from hyrl.backends.megatron.logprobs import vocab_parallel_log_probs_and_entropy

VOCAB = 16


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=1)
    yield
    destroy_distributed()


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
        logits, targets, temperature=temperature, with_entropy=True)
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
        ours_in, targets, temperature=temperature, with_entropy=True)
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
        logits, targets, temperature=0.5, with_entropy=True)
    assert torch.allclose(log_probs, torch.full((2, 3), -math.log(16)), atol=1e-6)
    assert torch.allclose(entropy, torch.full((2, 3), math.log(16)), atol=1e-6)


def test_huge_logits_do_not_overflow():
    # softmax over [1000, 0, ..., 0]: p(token 0) = 1 / (1 + 15 e^-1000) -> log p = 0, H = 0
    logits = torch.zeros(1, 1, VOCAB)
    logits[0, 0, 0] = 1000.0
    log_probs, entropy = vocab_parallel_log_probs_and_entropy(
        logits, torch.tensor([[0]]), with_entropy=True)
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
