"""Specification of the run directory (hyrl.metrics.run_dir) and stage timers (hyrl.metrics.timers).

Analysis tools read metrics.jsonl while a run is still going and after it was resumed, so every
logged step must be on disk at once, and a reopened run must only ever add lines.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from testpaths import ROOT

from hyrl.batchsize.runs import load_run
from hyrl.metrics import timers as timers_module
from hyrl.metrics.run_dir import RunDirectory, read_metrics, start_tensorboard
from hyrl.metrics.step_record import update_record
from hyrl.metrics.timers import StageTimers


def lines(path) -> list[str]:
    return (path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()


def strict_json(line: str) -> dict:
    """json.loads that rejects the non-standard NaN / Infinity tokens."""

    def reject(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(line, parse_constant=reject)


# --- metrics.jsonl --------------------------------------------------------------------------


def test_each_log_appends_one_line_readable_before_close(tmp_path):
    run = RunDirectory(tmp_path / "run")
    try:
        run.log({"step": 1, "loss": 0.5})
        assert lines(tmp_path / "run") == ['{"step": 1, "loss": 0.5}']
        assert read_metrics(tmp_path / "run") == [{"step": 1, "loss": 0.5}]

        run.log({"step": 2, "loss": 0.25})
        assert len(lines(tmp_path / "run")) == 2
        assert read_metrics(tmp_path / "run") == [
            {"step": 1, "loss": 0.5},
            {"step": 2, "loss": 0.25},
        ]
    finally:
        run.close()


def test_creates_missing_parent_directories(tmp_path):
    run = RunDirectory(tmp_path / "a" / "b" / "run")
    run.close()
    assert (tmp_path / "a" / "b" / "run" / "metrics.jsonl").exists()


def test_reopening_an_existing_run_directory_appends_and_never_truncates(tmp_path):
    first = RunDirectory(tmp_path)
    first.log({"step": 1, "reward": 0.0})
    first.log({"step": 2, "reward": 0.5})
    first.close()

    resumed = RunDirectory(tmp_path)
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]  # opening alone keeps them
    resumed.log({"step": 3, "reward": 1.0})
    resumed.close()

    assert read_metrics(tmp_path) == [
        {"step": 1, "reward": 0.0},
        {"step": 2, "reward": 0.5},
        {"step": 3, "reward": 1.0},
    ]


def test_nan_and_infinities_are_null_and_named_in_nonfinite_in_strict_json(tmp_path):
    run = RunDirectory(tmp_path)
    run.log(
        {
            "step": 1,
            "loss": float("nan"),
            "grad_norm": float("inf"),
            "kl": float("-inf"),
            "reward": 0.5,
        }
    )
    run.close()

    (line,) = lines(tmp_path)
    record = strict_json(line)  # no bare NaN / Infinity tokens in the file
    assert record == {
        "step": 1,
        "loss": None,
        "grad_norm": None,
        "kl": None,
        "reward": 0.5,
        "nonfinite": ["grad_norm", "kl", "loss"],
    }
    assert read_metrics(tmp_path) == [record]


def test_log_mirrors_to_wandb_without_the_step_key_and_close_finishes_it(tmp_path):
    class FakeWandbRun:
        def __init__(self):
            self.calls, self.finished = [], False

        def log(self, data, step):
            self.calls.append((data, step))

        def finish(self):
            self.finished = True

    wandb_run = FakeWandbRun()
    run = RunDirectory(tmp_path, wandb_run=wandb_run)
    run.log({"step": 7, "loss": 0.5})
    assert wandb_run.calls == [({"loss": 0.5}, 7)]
    run.close()
    assert wandb_run.finished


def _tensorboard_scalars(log_dir) -> dict[str, dict[int, float]]:
    """tag -> {step: value} as TensorBoard's own reader finds them in log_dir's event files."""
    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {
        tag: {e.step: e.value for e in accumulator.Scalars(tag)}
        for tag in accumulator.Tags()["scalars"]
    }


def test_log_mirrors_numeric_values_to_tensorboard_on_disk_before_close(tmp_path):
    tb = tmp_path / "tb"
    run = RunDirectory(tmp_path / "run", tensorboard=start_tensorboard(tb))
    try:
        run.log({"step": 0, "eval/accuracy": 0.25, "eval/pass@4": 0.75, "samples": 0})
        run.log(
            {
                "step": 1,
                "train/loss": 0.125,
                "samples": 128,
                "note": "text",  # not numeric: skipped
                "actor/skipped": False,  # a bool is no scalar
                "list": [1, 2],
                "none": None,
                "nan": math.nan,
            }
        )
        scalars = _tensorboard_scalars(tb)  # flushed per record: readable while the run goes
    finally:
        run.close()
    assert scalars.keys() == {"eval/accuracy", "eval/pass@4", "samples", "train/loss", "nan"}
    assert scalars["samples"] == {0: 0.0, 1: 128.0}
    assert scalars["eval/pass@4"] == {0: 0.75}
    assert scalars["train/loss"] == {1: 0.125}
    assert math.isnan(scalars["nan"][1])  # metrics.jsonl keeps it too (null, in "nonfinite")
    after_close = _tensorboard_scalars(tb)
    del after_close["nan"], scalars["nan"]  # NaN != NaN
    assert after_close == scalars  # close adds nothing and loses nothing


def test_a_resumed_run_adds_an_event_file_and_tensorboard_reads_both(tmp_path):
    tb = tmp_path / "tb"
    for step in (1, 2):
        run = RunDirectory(tmp_path / "run", tensorboard=start_tensorboard(tb))
        run.log({"step": step, "train/loss": float(step)})
        run.close()
    assert len(list(tb.glob("events.out.tfevents.*"))) == 2
    assert _tensorboard_scalars(tb)["train/loss"] == {1: 1.0, 2: 2.0}


# --- config.json ----------------------------------------------------------------------------


def test_write_config_writes_json_with_sorted_keys(tmp_path):
    run = RunDirectory(tmp_path)
    run.write_config({"zeta": 1, "alpha": {"y": 2, "b": 3}, "mid": [3, 1]})
    run.close()

    text = (tmp_path / "config.json").read_text(encoding="utf-8")
    assert json.loads(text) == {"zeta": 1, "alpha": {"y": 2, "b": 3}, "mid": [3, 1]}
    assert (
        text == json.dumps({"alpha": {"b": 3, "y": 2}, "mid": [3, 1], "zeta": 1}, indent=2) + "\n"
    )
    assert text.index('"alpha"') < text.index('"mid"') < text.index('"zeta"')
    assert text.index('"b"') < text.index('"y"')


def test_write_config_replaces_the_previous_config_and_leaves_no_temp_file(tmp_path):
    run = RunDirectory(tmp_path)
    run.write_config({"lr": 1.0, "old_key": True})
    run.write_config({"lr": 2.0})
    run.close()
    assert json.loads((tmp_path / "config.json").read_text()) == {"lr": 2.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "metrics.jsonl"]


# --- StageTimers ----------------------------------------------------------------------------


@pytest.fixture
def clock(monkeypatch):
    """perf_counter returns the next value from `clock.ticks` on each call."""

    class Clock:
        def __init__(self):
            self.ticks: list[float] = []

        def __call__(self):
            return self.ticks.pop(0)

    fake = Clock()
    monkeypatch.setattr(timers_module.time, "perf_counter", fake)
    return fake


def test_two_uses_of_the_same_stage_accumulate(clock):
    timers = StageTimers()
    clock.ticks = [10.0, 12.5, 20.0, 21.0, 30.0, 30.25]
    with timers("rollout"):  # 2.5 s
        pass
    with timers("rollout"):  # 1.0 s
        pass
    with timers("train"):  # 0.25 s
        pass
    assert timers.seconds == {"rollout": 3.5, "train": 0.25}


def test_pop_returns_perf_stage_seconds_keys_then_resets(clock):
    timers = StageTimers()
    clock.ticks = [0.0, 2.0, 5.0, 6.5]
    with timers("rollout"):
        pass
    with timers("train"):
        pass
    assert timers.pop() == {"perf/rollout_s": 2.0, "perf/train_s": 1.5}
    assert timers.pop() == {}

    clock.ticks = [100.0, 100.5]
    with timers("rollout"):
        pass
    assert timers.pop() == {"perf/rollout_s": 0.5}  # counted from zero again


def test_a_stage_that_raises_is_still_timed(clock):
    timers = StageTimers()
    clock.ticks = [1.0, 4.0]
    with pytest.raises(RuntimeError):
        with timers("reward"):
            raise RuntimeError("reward server down")
    assert timers.pop() == {"perf/reward_s": 3.0}


def test_real_clock_measures_nonnegative_seconds():
    timers = StageTimers()
    with timers("noop"):
        pass
    (seconds,) = timers.pop().values()
    assert 0.0 <= seconds < 1.0


def test_a_step_relogged_after_a_resume_is_read_once_with_the_later_values(tmp_path):
    run = RunDirectory(tmp_path)
    for step, reward in ((1, 0.0), (2, 0.5), (3, 0.6)):
        run.log({"step": step, "reward": reward})
    run.close()
    resumed = RunDirectory(tmp_path)  # resumed from the step-1 checkpoint: 2 and 3 logged again
    for step, reward in ((2, 0.4), (3, 0.7)):
        resumed.log({"step": step, "reward": reward})
    resumed.close()

    assert read_metrics(tmp_path) == [
        {"step": 1, "reward": 0.0},
        {"step": 2, "reward": 0.4},
        {"step": 3, "reward": 0.7},
    ]


def rollout_record(rollout_step: int, step: int, skipped: int, reward: float, elapsed_s: float):
    """A record as the loop writes it: step_record.update_record, then RunLog's stamps."""
    record = update_record(step, 64 * step, 64 * rollout_step, skipped)
    return {**record, "rollout_step": rollout_step, "elapsed_s": elapsed_s, "reward": reward}


def test_a_skipped_optimizer_step_is_a_record_of_its_own_and_a_resume_replaces_it(tmp_path):
    """One optimizer step per rollout; rollout 2's is skipped (a NaN loss), so its record keeps
    step 1, the applied updates, and counts the skip. A resume from the rollout-1 checkpoint
    logs rollouts 2 and 3 again. Once read, rollout 2 had overwritten rollout 1."""
    run = RunDirectory(tmp_path)
    run.log(rollout_record(1, step=1, skipped=0, reward=0.25, elapsed_s=1.0))
    run.log(rollout_record(2, step=1, skipped=1, reward=0.5, elapsed_s=2.0))
    run.log(rollout_record(3, step=2, skipped=1, reward=0.75, elapsed_s=3.0))
    run.close()
    resumed = RunDirectory(tmp_path)
    resumed.log(rollout_record(2, step=1, skipped=1, reward=0.5, elapsed_s=2.5))
    resumed.log(rollout_record(3, step=2, skipped=1, reward=0.75, elapsed_s=3.5))
    resumed.close()

    read = read_metrics(tmp_path)
    assert [(r["rollout_step"], r["step"], r["train/skipped_steps"]) for r in read] == [
        (1, 1, 0),
        (2, 1, 1),
        (3, 2, 1),
    ]
    assert [r["reward"] for r in read] == [0.25, 0.5, 0.75]
    assert [r["elapsed_s"] for r in read] == [1.0, 2.5, 3.5]  # the re-logged lines win
    # hyrl analyze reads the same records
    assert [r["rollout_step"] for r in load_run(tmp_path).records] == [1, 2, 3]


def test_critic_only_warm_up_rollouts_and_the_first_evaluation_are_apart_at_step_0(tmp_path):
    """PPO's --num-critic-only-steps rollouts train no actor: their records all have step 0,
    as does the evaluation before training (rollout step 0)."""
    run = RunDirectory(tmp_path)
    run.log({"step": 0, "rollout_step": 0, "samples": 0, "elapsed_s": 0.0, "eval/accuracy": 0.1})
    run.log(rollout_record(1, step=0, skipped=0, reward=0.25, elapsed_s=1.0))
    run.log(rollout_record(2, step=0, skipped=0, reward=0.5, elapsed_s=2.0))
    run.log(rollout_record(3, step=1, skipped=0, reward=0.75, elapsed_s=3.0))
    run.close()

    read = read_metrics(tmp_path)
    assert [r["rollout_step"] for r in read] == [0, 1, 2, 3]
    assert [r.get("reward") for r in read] == [None, 0.25, 0.5, 0.75]
    assert "reward" not in read[0] and read[0]["eval/accuracy"] == 0.1


def test_a_half_written_last_line_is_skipped_and_noted(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    notes = []
    assert read_metrics(tmp_path, notes) == [{"step": 1, "reward": 0.5}]
    assert notes == [f"{tmp_path / 'metrics.jsonl'}: skipped 1 unreadable line(s)"]


def test_plot_run_counts_a_relogged_step_once(tmp_path):
    """tools/plot_run.py reads through read_metrics: 3 steps logged, step 2 twice, plot 3."""
    pytest.importorskip("matplotlib")
    lines_written = [
        {"step": 1, "elapsed_s": 1.0, "train/reward_mean": 0.25},
        {"step": 2, "elapsed_s": 2.0, "train/reward_mean": 0.25},
        {"step": 2, "elapsed_s": 2.5, "train/reward_mean": 0.75},
        {"step": 3, "elapsed_s": 3.5, "train/reward_mean": 0.75},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines_written))
    tool = ROOT / "tools" / "plot_run.py"
    done = subprocess.run(
        [sys.executable, str(tool), str(tmp_path), "--window", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "steps 3, wall-clock 3.5 s" in done.stdout
    # the later line of step 2 wins: the first window (step 1) 0.25, the last (step 3) 0.75
    assert "first 1 steps 0.250, last 1 steps 0.750" in done.stdout
    assert (tmp_path / "reward.png").is_file()


def test_plot_run_draws_every_logged_quantity_against_samples(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [
        {"step": s, "samples": 128 * s, "elapsed_s": float(s), "perf/step_s": 2.0,
         "train/reward_mean": 0.1 * s, "train/response_len_mean": 3.0, "actor/grad_norm": 0.5,
         "actor/approx_kl": 0.01}
        for s in range(1, 5)
    ]  # fmt: skip
    rows[1]["eval/accuracy"] = 0.4  # eval on one step; no entropy logged
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "plot_run.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "curves against samples: reward, eval accuracy, response length, KL, gradient norm, "
        "throughput" in done.stdout
    )
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_opening_a_run_directory_writes_config_and_appends_to_metrics(tmp_path):
    from hyrl.config import parse_args, resolve
    from hyrl.metrics.run_dir import open_run_directory

    logs = resolve(parse_args(["--tensorboard-dir", str(tmp_path / "tb")])).logs
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')  # a resumed run's earlier record
    directory = open_run_directory(logs, run_dir, {"run_id": "r1"})
    directory.log({"step": 2, "train/loss": 0.5})
    directory.close()
    assert json.loads((run_dir / "config.json").read_text()) == {"run_id": "r1"}
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]
    mirrored = EventAccumulator(str(tmp_path / "tb")).Reload().Scalars("train/loss")
    assert [(e.step, e.value) for e in mirrored] == [(2, 0.5)]  # the TensorBoard mirror
