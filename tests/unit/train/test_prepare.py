"""What every row needs before training (hyrl.train.prepare.RolloutPreparation): which passes
run, what they set on the batch and the advantages they give, on one rank with the backend
faked."""

from types import SimpleNamespace

import pytest
import torch

from hyrl.algorithms.advantages import AdvantageSettings
from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.mismatch import Corrections
from hyrl.algorithms.overlong import OverlongShaping
from hyrl.metrics.timers import StageTimers
from hyrl.rollout.base import RolloutBatch
from hyrl.train.data_parallel import DataParallelRows
from hyrl.train.prepare import RolloutPreparation


class _Actor:
    def __init__(self, reference: bool):
        self.ref_chunks = object() if reference else None
        self.passes: list[str] = []

    def log_probs(self, batch, reference=False):
        self.passes.append("reference" if reference else "old")
        value = -2.0 if reference else -1.0
        return torch.full(batch.loss_mask.shape, value), torch.full(batch.loss_mask.shape, 0.5)


class _Critic:
    def values(self, batch):
        return torch.full(batch.loss_mask.shape, 0.25)


def _backend(reference=False, critic=False):
    return SimpleNamespace(
        actor=_Actor(reference),
        critic=_Critic() if critic else None,
        gather_rows=lambda outputs: outputs,  # one rank: its share is every row
    )


def _rollout_and_batch(rewards, lengths=None, sampled=None):
    n = len(rewards)
    mask = torch.tensor([[0.0, 1.0, 1.0]] * n)
    batch = TokenBatch(
        tokens=torch.zeros(n, 3, dtype=torch.long),
        targets=torch.zeros(n, 3, dtype=torch.long),
        loss_mask=mask,
        advantages=torch.zeros(n),
        rollout_log_probs=torch.full((n, 3), -1.0),
    )
    responses = [[1] * length for length in (lengths or [2] * n)]
    rollout = RolloutBatch(
        prompts=[[1]] * n,
        responses=responses,
        rollout_log_probs=[[-1.0] * len(response) for response in responses],
        finish_reasons=["stop"] * n,
        rewards=list(rewards),
        reward_failures=0,
        reward_timeouts=0,
        sampled=sampled,
    )
    return rollout, batch


def _preparation(backend, estimator="grpo", buffer_len=None, max_len=2):
    settings = AdvantageSettings(estimator=estimator, group_size=2)
    corrections = Corrections(False, 2.0, False, 0.5, 2.0, "token")
    overlong = OverlongShaping(max_len, buffer_len, 1.0, False)
    return RolloutPreparation(
        backend, DataParallelRows(0, 1, 1), overlong, settings, corrections, False
    )


def test_grpo_off_policy_runs_the_old_pass_and_gives_group_advantages():
    backend = _backend()
    rollout, batch = _rollout_and_batch([1.0, 0.0, 0.0, 0.0])
    metrics = _preparation(backend).prepare(rollout, batch, False, StageTimers())
    assert backend.actor.passes == ["old"]
    assert batch.old_log_probs is not None and batch.old_log_probs.eq(-1.0).all()
    assert batch.ref_log_probs is None
    # group 1 (rewards 1, 0): +-1/std; group 2 (0, 0): no signal
    per_row = batch.advantages.tolist()  # GRPO: one advantage a row
    assert per_row[0] > 0 > per_row[1] and per_row[2:] == [0.0, 0.0]
    assert metrics["train/entropy"] == pytest.approx(0.5)  # the old pass's metrics


def test_on_policy_leaves_the_old_log_probs_to_the_update_and_runs_the_reference_pass():
    backend = _backend(reference=True)
    rollout, batch = _rollout_and_batch([1.0, 0.0, 1.0, 0.0])
    metrics = _preparation(backend).prepare(rollout, batch, True, StageTimers())
    assert backend.actor.passes == ["reference"]
    assert batch.old_log_probs is None and batch.ref_log_probs.eq(-2.0).all()
    assert "train/entropy" not in metrics


def test_gae_takes_the_critics_values_and_sets_returns():
    backend = _backend(critic=True)
    rollout, batch = _rollout_and_batch([1.0, 0.0])
    _preparation(backend, estimator="gae").prepare(rollout, batch, False, StageTimers())
    assert batch.old_values is not None and batch.old_values[:, 1:].eq(0.25).all()
    assert batch.old_values[:, 0].eq(0.0).all()  # values masked to the response tokens
    assert batch.returns is not None


def test_the_advantages_take_the_over_long_shaped_rewards():
    backend = _backend()
    # one group, both rewards 1, responses of 1 and 2 tokens; the limit 2 with a 1-token buffer
    # takes (2 - (2 - 1)) / 1 x 1.0 = 1 off the longer one only: (1, 0), a signal that the
    # unshaped rewards (1, 1) would not give
    rollout, batch = _rollout_and_batch([1.0, 1.0], lengths=[1, 2])
    metrics = _preparation(backend, buffer_len=1).prepare(rollout, batch, False, StageTimers())
    assert metrics["train/overlong_penalized_frac"] == 0.5
    per_row = batch.advantages.tolist()  # GRPO: one advantage a row
    assert per_row[0] > 0 > per_row[1]


def test_an_environments_tokens_do_not_make_a_response_over_long():
    # both responses hold 2 tokens, but the first's second token an environment wrote: the
    # model sampled 1 and 2, so the shaping is that of the test above, (1, 0)
    backend = _backend()
    rollout, batch = _rollout_and_batch([1.0, 1.0], lengths=[2, 2], sampled=[[1, 0], [1, 1]])
    metrics = _preparation(backend, buffer_len=1).prepare(rollout, batch, False, StageTimers())
    assert metrics["train/overlong_penalized_frac"] == 0.5
    per_row = batch.advantages.tolist()
    assert per_row[0] > 0 > per_row[1]
