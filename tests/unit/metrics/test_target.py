"""Samples-to-target, time-to-target and summary.json, from metrics records."""

import json
import math

from hyrl.metrics.run_dir import write_summary
from hyrl.metrics.target import RunTotals, TargetTracker, summary


def test_tracker_keeps_the_first_record_that_reaches_the_target():
    tracker = TargetTracker("eval/accuracy", 0.8)
    assert not tracker.update({"step": 1, "samples": 128, "elapsed_s": 1.0, "train/loss": 0.1})
    assert not tracker.update({"step": 2, "samples": 256, "elapsed_s": 2.0, "eval/accuracy": 0.79})
    assert not tracker.update({"step": 3, "samples": 384, "elapsed_s": 3.0, "eval/accuracy": "nan"})
    assert tracker.update({"step": 4, "samples": 512, "elapsed_s": 4.5, "eval/accuracy": 0.8})
    assert not tracker.update({"step": 5, "samples": 640, "elapsed_s": 5.0, "eval/accuracy": 0.9})
    assert tracker.reached_at == {"step": 4, "samples": 512, "elapsed_s": 4.5}


def test_summary_reports_throughput_and_stage_shares_of_the_training_clock(tmp_path):
    tracker = TargetTracker("eval/accuracy", 0.5)
    totals = RunTotals()
    records = [
        {"step": 0, "samples": 0, "elapsed_s": 0.0, "eval/accuracy": 0.1, "perf/eval_s": 7.0},
        {
            "step": 1,
            "samples": 100,
            "elapsed_s": 2.0,
            "perf/rollout_s": 0.5,
            "perf/actor_train_s": 1.5,
            "perf/step_s": 2.0,
            "perf/setup_s": 9.0,
            "perf/rollout_tokens_per_s": 900.0,
        },  # a rate, not a stage
        {
            "step": 2,
            "samples": 200,
            "elapsed_s": 4.0,
            "perf/rollout_s": 0.5,
            "perf/actor_train_s": 1.5,
            "perf/step_s": 2.0,
            "eval/accuracy": 0.6,
            "perf/eval_s": 3.0,
        },
    ]
    for record in records:
        totals.update(record)
        tracker.update(record)
    content = summary(tracker, totals)
    assert content["reached"] is True
    assert (
        content["samples_to_target"],
        content["time_to_target_s"],
        content["steps_to_target"],
    ) == (200, 4.0, 2)
    assert content["throughput_responses_per_s"] == 50.0  # 200 responses in 4 s
    assert content["stage_share"] == {"actor_train": 0.75, "rollout": 0.25}
    assert content["eval_s"] == 10.0
    write_summary(tmp_path, content)
    assert json.loads((tmp_path / "summary.json").read_text())["samples_to_target"] == 200


def test_summary_of_a_run_that_never_reaches_the_target_says_so():
    tracker = TargetTracker("eval/accuracy", 0.99)
    totals = RunTotals()
    for record in ({"step": 1, "samples": 10, "elapsed_s": 1.0, "eval/accuracy": 0.2},):
        totals.update(record)
        tracker.update(record)
    content = summary(tracker, totals)
    assert content["reached"] is False
    assert content["samples_to_target"] is None and content["time_to_target_s"] is None
    assert content["target"] == {"metric": "eval/accuracy", "value": 0.99}
    assert math.isclose(content["throughput_responses_per_s"], 10.0)
