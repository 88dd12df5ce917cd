"""The optimizer steps of one rollout (hyrl.train.updates.RolloutUpdates): each step's rows,
token count, lr and loss weights, on one rank with the backend faked."""

from types import SimpleNamespace

import pytest
import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.mismatch import Corrections
from hyrl.train.data_parallel import DataParallelRows
from hyrl.train.updates import RolloutUpdates


class _Trained:
    def __init__(self, prefix):
        self.prefix, self.optimizer_steps, self.calls = prefix, 0, []

    def train_step(self, batch, total_tokens, lr):
        self.calls.append((batch.tokens[:, 0].tolist(), total_tokens, lr, batch.loss_weights))
        self.optimizer_steps += 1
        p = self.prefix
        return {f"{p}/loss": float(self.optimizer_steps), f"{p}/skipped": 0,
                f"{p}/optimizer_steps": self.optimizer_steps, f"{p}/lr": lr}  # fmt: skip


def _batch():
    # four responses with 1, 2, 3 and 4 response tokens; tokens[:, 0] names the row
    mask = torch.tensor([[float(t < n) for t in range(4)] for n in (1, 2, 3, 4)])
    tokens = torch.arange(4).repeat_interleave(4).view(4, 4)
    return TokenBatch(tokens=tokens, targets=tokens, loss_mask=mask, advantages=torch.zeros(4))


def _updates(loss_agg_mode="token-mean"):
    backend = SimpleNamespace(actor=_Trained("actor"), critic=_Trained("critic"))
    plan = SimpleNamespace(
        actor_lr=lambda steps, b: 1e-3 * (steps + 1),
        critic_batch=lambda: 2,
        critic_lr=lambda steps, size, n: 0.5,
    )
    algorithm = SimpleNamespace(loss_agg_mode=loss_agg_mode)
    rollout = SimpleNamespace(rollout_max_response_len=4)
    corrections = Corrections(False, 2.0, False, 0.5, 2.0, "token")
    rows = DataParallelRows(0, 1, 2)
    return backend, RolloutUpdates(backend, rows, plan, corrections, algorithm, rollout)


def test_actor_step_k_trains_on_its_rows_with_their_token_count_and_lr():
    backend, updates = _updates()
    batch = _batch()
    assert updates.actor_step(batch, 0, 2, on_policy=False)[1] is None
    updates.actor_step(batch, 1, 2, on_policy=False)
    # step 0: rows 0, 1 (1 + 2 tokens) at 1e-3; step 1: rows 2, 3 (3 + 4 tokens) at 2e-3
    assert [c[:3] for c in backend.actor.calls] == [([0, 1], 3.0, 1e-3), ([2, 3], 7.0, 2e-3)]
    assert backend.actor.calls[0][3] is None  # token-mean: no weights


def test_sequence_mean_weights_cover_only_the_steps_global_batch():
    backend, updates = _updates("seq-mean-token-sum")
    updates.actor_step(_batch(), 1, 2, on_policy=False)
    # w = 1 / N over the step's 2 responses, on their response tokens; the local rows are 2, 3
    weights = backend.actor.calls[0][3]
    assert weights[0].tolist() == pytest.approx([0.5, 0.5, 0.5, 0.0])
    assert weights[1].tolist() == pytest.approx([0.5] * 4)


def test_the_critic_steps_over_the_rollout_average_their_statistics():
    backend, updates = _updates()
    metrics = updates.critic_steps(_batch())
    assert [c[:3] for c in backend.critic.calls] == [([0, 1], 3.0, 0.5), ([2, 3], 7.0, 0.5)]
    assert metrics["critic/loss"] == pytest.approx(1.5)  # (1 + 2) / 2
    assert metrics["critic/optimizer_steps"] == 2
