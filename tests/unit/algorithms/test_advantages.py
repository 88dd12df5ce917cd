"""Specification of hyrl.algorithms.advantages: which advantage a rollout gets, by hand."""

from __future__ import annotations

import pytest
import torch

from hyrl.algorithms.advantages import AdvantageSettings, compute_advantages


def test_grpo_advantages_are_group_relative_and_need_no_values():
    settings = AdvantageSettings(estimator="grpo", group_size=2)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])  # group 0 split, group 1 all equal
    result = compute_advantages(settings, rewards, torch.ones(4, 3))
    # group 0: mean 0.5, population std 0.5 -> +-0.5 / (0.5 + 1e-6); group 1 carries no signal
    assert result.advantages.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0], abs=1e-5)
    assert result.returns is None and result.metrics == {}
    assert not settings.needs_values


def test_grpo_without_std_normalization_subtracts_the_group_mean_only():
    settings = AdvantageSettings(estimator="grpo", group_size=2, grpo_std_normalization=False)
    result = compute_advantages(settings, torch.tensor([3.0, 1.0]), torch.ones(2, 1))
    assert result.advantages.tolist() == [1.0, -1.0]


def test_gae_subtracts_the_k1_kl_penalty_per_token_before_the_advantages():
    # One row, response at positions 1..2, reward 1, gamma = lambda = 1, no whitening.
    # k1 = old - ref = [0, 0.2, 0.6]; token rewards = [0, -0.5*0.2, 1 - 0.5*0.6] = [0, -0.1, 0.7]
    #   A_2 = 0.7 - 0.25 = 0.45;  A_1 = -0.1 + 0.25 - 0.5 + 0.45 = 0.1
    #   returns = A + V = [0.6, 0.7]
    settings = AdvantageSettings(
        estimator="gae", group_size=1, kl_coef=0.5, gamma=1.0, lambd=1.0, normalize_advantages=False
    )
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    result = compute_advantages(
        settings,
        torch.tensor([1.0]),
        mask,
        old_log_probs=torch.tensor([[0.0, -1.0, -1.0]]),
        ref_log_probs=torch.tensor([[0.0, -1.2, -1.6]]),
        values=torch.tensor([[0.0, 0.5, 0.25]]),
    )
    assert result.advantages[0].tolist() == pytest.approx([0.0, 0.1, 0.45])
    assert result.returns[0].tolist() == pytest.approx([0.0, 0.6, 0.7])
    assert result.metrics["train/kl_penalty"] == pytest.approx(0.4)  # (0.2 + 0.6) / 2 tokens
    assert result.metrics["critic/value_mean"] == pytest.approx(0.375)
    assert result.metrics["critic/return_mean"] == pytest.approx(0.65)
    assert settings.needs_values


def test_gae_whitens_the_advantages_over_the_masked_tokens_and_skips_kl_at_zero_coef():
    settings = AdvantageSettings(estimator="gae", group_size=1)  # whitening on, kl_coef 0
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    result = compute_advantages(
        settings, torch.tensor([1.0]), mask, values=torch.tensor([[0.0, 0.5, 0.25]])
    )
    # raw A = [0.5, 0.75] (returns 1 at both tokens): whitened to mean 0, unit variance
    response = result.advantages[0, 1:]
    assert float(response.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(response[1] - response[0]) > 0
    assert "train/kl_penalty" not in result.metrics
