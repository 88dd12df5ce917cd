"""Specification of hyrl.rollout.base.RolloutBatch (engine output to algorithm) and of the
evaluation schedule, with numbers checked by hand."""

from types import SimpleNamespace

import pytest
import torch

from hyrl.rollout.base import Generation, RolloutBatch
from hyrl.train.heldout import eval_schedule


def _batch() -> RolloutBatch:
    generations = [
        Generation([1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], "stop"),
        Generation([1, 2], [6], [-0.5], "length"),
    ]
    scored = SimpleNamespace(rewards=[1.0, 0.0], failures=1, timeouts=0)
    return RolloutBatch.of(generations, scored)


def test_a_rollout_batch_keeps_each_generation_in_order_with_its_reward():
    batch = _batch()
    assert len(batch) == 2
    assert batch.responses == [[3, 4, 5], [6]] and batch.finish_reasons == ["stop", "length"]
    assert batch.rewards_tensor().tolist() == [1.0, 0.0]
    assert batch.routed_experts is None


def test_rollout_metrics_by_hand():
    metrics = _batch().metrics(rollout_s=2.0)
    assert metrics["train/reward_mean"] == 0.5
    assert metrics["train/response_len_mean"] == 2.0  # (3 + 1) / 2
    assert metrics["train/stop_frac"] == 0.5 and metrics["train/truncated_frac"] == 0.5
    assert metrics["train/reward_failures"] == 1 and metrics["train/reward_timeouts"] == 0
    assert metrics["perf/rollout_tokens_per_s"] == 2.0  # 4 tokens in 2 s
    assert _batch().metrics(rollout_s=0.0)["perf/rollout_tokens_per_s"] == 0.0


def test_the_token_batch_masks_exactly_the_response_tokens():
    token_batch = _batch().to_token_batch(pad_to_multiple_of=1)
    assert token_batch.loss_mask.sum().item() == 4
    assert torch.equal(token_batch.advantages, torch.zeros(2))
    masked = token_batch.rollout_log_probs[token_batch.loss_mask.bool()]
    assert masked.tolist() == pytest.approx([-0.1, -0.2, -0.3, -0.5])


def test_a_generation_with_environment_tokens_keeps_them_out_of_the_loss():
    # one row's tokens 5 and 6 came from an environment (a tool's output); the other row was
    # all sampled (None): the batch carries a full mask, and the loss sees model tokens only
    generations = [
        Generation(
            [1, 2], [3, 5, 6, 4], [-0.1, 0.0, 0.0, -0.4], "stop", response_sampled=[1, 0, 0, 1]
        ),
        Generation([1, 2], [7], [-0.5], "length"),
    ]
    batch = RolloutBatch.of(
        generations, SimpleNamespace(rewards=[1.0, 0.0], failures=0, timeouts=0)
    )
    assert batch.sampled == [[1, 0, 0, 1], [1]]
    token_batch = batch.to_token_batch(pad_to_multiple_of=1)
    assert token_batch.loss_mask.sum().item() == 3
    assert token_batch.targets[token_batch.loss_mask.bool()].tolist() == [3, 4, 7]
    assert _batch().sampled is None  # single turn: no mask carried
    # lengths count the model's tokens: 2 + 1 (not 4 + 1); 3 tokens generated in 1.5 s
    assert batch.model_lengths == [2, 1] and _batch().model_lengths == [3, 1]
    metrics = batch.metrics(rollout_s=1.5)
    assert metrics["train/response_len_mean"] == 1.5 and metrics["perf/rollout_tokens_per_s"] == 2.0


def test_a_rollout_batch_pickled_before_the_sampled_mask_loads_without_one():
    # queued --async-rollout batches of an older checkpoint have no `sampled` attribute
    import pickle

    old = _batch()
    del old.__dict__["sampled"]
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.sampled is None
    assert loaded.to_token_batch(pad_to_multiple_of=1).loss_mask.sum().item() == 4


def test_evaluation_runs_before_training_every_interval_and_after_the_last_step():
    run = SimpleNamespace(num_steps=10)
    assert eval_schedule(SimpleNamespace(eval_interval=4), run) == {0, 4, 8, 10}
    assert eval_schedule(SimpleNamespace(eval_interval=0), run) == set()
