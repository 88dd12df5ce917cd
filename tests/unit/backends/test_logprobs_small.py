"""The log-prob pass on small inputs (hyrl.backends.megatron.logprobs.SMALL_LOGITS): torch's
own ops instead of the chunked autograd Function, with the Function's values and gradients."""

from __future__ import annotations

import pytest
import torch
from logprobs_worker import values_and_grads

from hyrl.backends.megatron import logprobs
from hyrl.backends.megatron.logprobs import vocab_parallel_log_probs_and_entropy


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=1)
    yield
    destroy_distributed()


@pytest.fixture
def logits_and_targets():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(3, 5, 16, generator=gen) * 3.0, torch.randint(0, 16, (3, 5), generator=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_small_inputs_take_torch_ops_with_the_functions_values_and_gradients(
    logits_and_targets, monkeypatch, temperature, dtype
):
    """Up to SMALL_LOGITS logits in one chunk on one TP rank the pass is torch's log_softmax
    (no custom Function): log p, H and the gradients of a loss of both equal the Function's;
    more positions than a chunk, or more logits, go through the Function."""
    logits, targets = logits_and_targets
    logits = logits.to(dtype)
    gen = torch.Generator().manual_seed(2)
    weights = (torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen))
    small = values_and_grads(
        vocab_parallel_log_probs_and_entropy, logits, targets, temperature, weights
    )
    leaf = logits.clone().requires_grad_(True)
    log_probs, entropy = vocab_parallel_log_probs_and_entropy(leaf, targets, temperature, True)
    assert "LogProbsAndEntropy" not in type(log_probs.grad_fn).__name__
    assert entropy is not None and entropy.dtype == log_probs.dtype == torch.float32
    assert vocab_parallel_log_probs_and_entropy(leaf, targets, temperature)[1] is None
    with monkeypatch.context() as patch:
        patch.setattr(logprobs, "SMALL_LOGITS", 0)
        function = values_and_grads(
            vocab_parallel_log_probs_and_entropy, logits, targets, temperature, weights
        )
    assert small[2].dtype == dtype and small[2].abs().max() > 0.01
    for mine, theirs in zip(small, function, strict=True):  # log p, H, gradient
        assert torch.allclose(mine.float(), theirs.float(), atol=1e-5, rtol=0)
    # 15 positions in chunks of 4: the Function
    chunked, _ = vocab_parallel_log_probs_and_entropy(leaf, targets, temperature, chunk_positions=4)
    assert "LogProbsAndEntropy" in type(chunked.grad_fn).__name__
    # one logit more than SMALL_LOGITS: the Function
    monkeypatch.setattr(logprobs, "SMALL_LOGITS", logits.numel() - 1)
    chunked, _ = vocab_parallel_log_probs_and_entropy(leaf, targets, temperature)
    assert "LogProbsAndEntropy" in type(chunked.grad_fn).__name__
