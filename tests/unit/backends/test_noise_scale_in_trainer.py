"""The trainer feeds the noise-scale estimator the right small- and big-batch gradient norms."""

import pytest
import torch

from hyrl.algorithms.batch import pack
from hyrl.models.qwen3_moe.config import TINY


@pytest.fixture(scope="module")
def actor():
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=3)
    torch.manual_seed(0)
    settings = ActorSettings(optim=OptimizerSettings(micro_batch_size=4, clip_grad=0.0))
    yield MegatronActor(TINY, ParallelLayout(), settings)
    destroy_distributed()


def _batch(actor, response_len=lambda i: 1 + i % 2, rows: int = 8):
    generator = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(rows)]
    responses = [
        torch.randint(3, 15, (response_len(i),), generator=generator).tolist() for i in range(rows)
    ]
    batch = pack(prompts, responses, torch.linspace(-1, 1, rows), pad_id=0)
    batch.old_log_probs, _ = actor.log_probs(batch)
    return batch


def test_small_batch_norms_are_each_micro_batch_gradient_as_a_mean_over_its_tokens(actor):
    """Three micro-batches: the first read from the zeroed buffers, the second against a new
    snapshot, the third against the second's snapshot refilled in place."""
    batch = _batch(actor, rows=12)
    # lr 0: the weights never move, so every pass below sees the same model
    metrics = actor.train_step(batch, batch.num_response_tokens, lr=0.0)
    small_sq, b_small = actor._small_batch
    assert b_small == 4 and len(small_sq) == 3
    for index, rows in enumerate((slice(0, 4), slice(4, 8), slice(8, 12))):
        alone = batch.select(rows)  # one micro-batch, its own token mean: no per-micro measurement
        reference = (
            actor.train_step(alone, alone.num_response_tokens, lr=0.0)["actor/grad_norm"] ** 2
        )
        assert small_sq[index] == pytest.approx(reference, rel=1e-5)
    assert actor.noise_scale is not None and "actor/noise_scale" in metrics


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_small_batch_norms_follow_the_loss_aggregation(actor, mode):
    """Under a seq-mean --loss-agg-mode each micro-batch's gradient is rescaled by its share of
    the sequences, not of the tokens: 4 one-token responses, then 4 of three tokens, so the
    first micro-batch holds 1/4 of the tokens and 1/2 of the sequences. Rescaled, it equals the
    gradient of the same loss taken over that micro-batch alone."""
    from hyrl.algorithms.losses import loss_weights

    batch = _batch(actor, response_len=lambda i: 1 if i < 4 else 3)
    batch.loss_weights = loss_weights(batch.loss_mask, mode)
    actor.train_step(batch, batch.num_response_tokens, lr=0.0)
    small_sq, _ = actor._small_batch
    for index, rows in enumerate((slice(0, 4), slice(4, 8))):
        alone = batch.select(rows)
        alone.loss_weights = loss_weights(alone.loss_mask, mode)
        reference = (
            actor.train_step(alone, alone.num_response_tokens, lr=0.0)["actor/grad_norm"] ** 2
        )
        assert small_sq[index] == pytest.approx(reference, rel=1e-5)
