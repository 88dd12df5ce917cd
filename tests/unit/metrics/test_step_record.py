"""A rollout step's records (hyrl.metrics.step_record) from plain values, checked by hand."""

import pytest

from hyrl.metrics import step_record


def test_an_update_record_carries_its_counters_and_train_loss_is_the_actor_loss():
    record = step_record.update_record(3, 384, 400, 1, {"actor/loss": 0.5}, time=10.0)
    assert record == {
        "step": 3,
        "samples": 384,
        "samples_generated": 400,
        "time": 10.0,
        "actor/loss": 0.5,
        "train/loss": 0.5,
        "train/skipped_steps": 1,
    }
    assert list(record)[-1] == "train/skipped_steps"


def test_a_critic_only_warm_up_record_has_no_actor_metrics():
    assert step_record.update_record(0, 0, 128, 0) == {
        "step": 0,
        "samples": 0,
        "samples_generated": 128,
        "train/skipped_steps": 0,
    }


def test_critic_metrics_average_each_statistic_over_the_steps_that_have_it():
    history = [
        {"critic/loss": 1.0, "critic/noise_scale": 8.0, "critic/skipped": 0,
         "critic/optimizer_steps": 5, "critic/lr": 1e-3},
        {"critic/loss": 3.0, "critic/skipped": 1, "critic/optimizer_steps": 5, "critic/lr": 1e-3},
        {"critic/loss": 2.0, "critic/noise_scale": 4.0, "critic/skipped": 0,
         "critic/optimizer_steps": 6, "critic/lr": 5e-4},
    ]  # fmt: skip
    averaged = step_record.critic_metrics(history)
    assert averaged["critic/loss"] == pytest.approx(2.0)  # (1 + 3 + 2) / 3
    assert averaged["critic/noise_scale"] == pytest.approx(6.0)  # the skipped step has none
    assert averaged["critic/skipped"] == 1  # a count, not a mean
    assert averaged["critic/optimizer_steps"] == 6 and averaged["critic/lr"] == 5e-4  # the last


def test_closing_a_step_puts_rollout_metrics_first_and_timings_last():
    records = [{"step": 1, "time": 1.0}, {"step": 2, "time": 4.0}]
    step_record.close_rollout_step(
        records,
        {"rollout/reward_mean": 0.25},
        {"perf/rollout_s": 2.5, "perf/actor_train_s": 1.0},
        step_s=5.0,
        sync_metrics={"perf/sync_bytes": 7},
        setup_s=9.0,
    )
    assert records[0] == {"step": 1, "time": 1.0, "rollout/reward_mean": 0.25, "perf/setup_s": 9.0}
    assert records[1]["perf/rollout_s"] == 2.5
    assert records[1]["perf/overhead_s"] == pytest.approx(1.5)  # 5 - (2.5 + 1)
    assert records[1]["perf/sync_bytes"] == 7
    assert "perf/tokens_per_s_per_gpu" not in records[1]  # no work given: not rank 0


def test_the_initial_evaluation_is_the_record_of_step_0():
    assert step_record.initial_evaluation_record({"eval/accuracy": 0.5}, 2.0) == {
        "step": 0,
        "rollout_step": 0,
        "samples": 0,
        "elapsed_s": 0.0,
        "eval/accuracy": 0.5,
        "perf/eval_s": 2.0,
    }
