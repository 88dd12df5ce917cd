"""--policy-loss gspo and --loss-agg-mode against numbers computed by hand."""

import math

import pytest
import torch

from hyrl.algorithms.losses import grpo_loss, loss_weights, sequence_policy_loss

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # responses of 2 and 1 tokens


def test_loss_weights_of_each_aggregation():
    assert loss_weights(MASK, "token-mean") is None  # masked_token_mean divides by 3 tokens
    assert loss_weights(MASK, "seq-mean-token-mean").tolist() == [[0.25, 0.25, 0.0], [0.5, 0, 0]]
    assert loss_weights(MASK, "seq-mean-token-sum").tolist() == [[0.5, 0.5, 0.0], [0.5, 0, 0]]
    norm = loss_weights(MASK, "seq-mean-token-sum-norm", max_response_len=4)
    assert norm.tolist() == [[0.125, 0.125, 0.0], [0.125, 0.0, 0.0]]  # 1 / (N x L_max)
    with pytest.raises(ValueError, match="longest response"):
        loss_weights(MASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="allowed: token-mean"):
        loss_weights(MASK, "sum")


def test_the_loss_is_the_weighted_sum_of_its_token_terms():
    # on policy (ratio 1): pg_t = -A; A = (1, -2) per row
    log_probs = torch.zeros(2, 3, requires_grad=True)
    advantages = torch.tensor([1.0, -2.0])
    common = dict(eps_clip=0.2, total_tokens=3.0)
    token_mean, _ = grpo_loss(log_probs, log_probs.detach(), advantages, MASK, **common)
    assert float(token_mean.detach()) == pytest.approx((-1 - 1 + 2) / 3)  # 0
    weights = loss_weights(MASK, "seq-mean-token-mean")
    seq_mean, stats = grpo_loss(
        log_probs, log_probs.detach(), advantages, MASK, weights=weights, **common
    )
    assert float(seq_mean.detach()) == pytest.approx(
        0.5 * (-1) + 0.5 * 2
    )  # mean of the rows' means
    assert float(stats["clip_frac"]) == 0.0
    seq_mean.backward()  # d/dlog pi_t = -A_t w_t
    assert log_probs.grad.tolist() == [[-0.25, -0.25, 0.0], [1.0, 0.0, 0.0]]


def test_gspo_takes_one_ratio_per_response_and_clips_it():
    # row 0: log-ratios 0.1 and 0.3, s = e^0.2 inside [0.7, 1.3]; row 1: e^0.5 = 1.65 > 1.3
    old = torch.zeros(2, 3)
    log_probs = torch.tensor([[0.1, 0.3, 9.0], [0.5, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([[1.0], [1.0]])
    loss, clipped = sequence_policy_loss(log_probs, old, advantages, mask, 0.3, 0.3)
    s0 = math.exp(0.2)
    assert loss[0, :2].detach().tolist() == pytest.approx(
        [-s0, -s0]
    )  # the sequence's ratio on each token
    assert float(loss[1, 0].detach()) == pytest.approx(-1.3) and clipped[1, 0] == 1.0
    (loss * mask).sum().backward()
    # unclipped: d/dlog pi_t (-s_i,t A) = -s_i A; clipped: no gradient; padding: none
    assert log_probs.grad.flatten().tolist() == pytest.approx([-s0, -s0, 0.0, 0.0, 0.0, 0.0])


def test_grpo_loss_with_gspo_is_the_sequence_objective():
    log_probs = torch.tensor([[0.1, 0.3, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = grpo_loss(
        log_probs,
        torch.zeros(1, 3),
        torch.tensor([2.0]),
        mask,
        eps_clip=3e-4,
        eps_clip_high=4e-4,
        policy_loss_kind="gspo",
        weights=loss_weights(mask, "seq-mean-token-mean"),
    )
    assert float(loss.detach()) == pytest.approx(-(1 + 4e-4) * 2.0)  # s = e^0.2 clipped to 1 + 4e-4
    with pytest.raises(ValueError, match="allowed: ppo, gspo"):
        grpo_loss(
            log_probs, log_probs, torch.tensor([1.0]), mask, eps_clip=0.2, policy_loss_kind="x"
        )
