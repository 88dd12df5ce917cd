"""Rank 0's progress: plain flushed lines every --log-interval steps without a terminal."""

import io

from hyrl.metrics.progress import ProgressReport


def test_plain_lines_every_log_interval_steps_and_at_the_last_step():
    out = io.StringIO()
    with ProgressReport(num_steps=5, first_step=1, log_interval=2, out=out, tty=False) as report:
        for step in range(1, 6):
            record = {"samples": 128 * step}
            if step == 4:
                record["eval/accuracy"] = 0.5
            report.step(step, {"train/reward_mean": 0.1 * step}, record)
    lines = out.getvalue().splitlines()
    assert [ln.split(" | ")[0] for ln in lines] == [
        "hyrl: step 2/5",
        "hyrl: step 4/5",
        "hyrl: step 5/5",  # the last step always
    ]
    fields = lines[1].split(" | ")
    assert fields[1] == "samples 512" and fields[2] == "reward 0.40"
    assert fields[3] == "eval 0.50 @ step 4" and fields[-2].endswith(" resp/s")
    assert fields[-1].startswith("ETA ") and lines[2].endswith("ETA 0:00:00")


def test_a_resumed_run_counts_from_its_first_step():
    out = io.StringIO()
    with ProgressReport(10, first_step=8, log_interval=1, samples=7 * 128, out=out, tty=False) as r:
        r.step(8, {}, {"samples": 8 * 128})
    (line,) = out.getvalue().splitlines()
    assert line.startswith("hyrl: step 8/10 | samples 1024 | step ")


def test_a_heartbeat_names_the_stage_in_progress_while_a_step_runs_without_a_line():
    import time

    from hyrl.metrics.timers import StageTimers

    out, timers = io.StringIO(), StageTimers()
    report = ProgressReport(num_steps=3, first_step=1, log_interval=1, out=out, tty=False)
    report.heartbeat(timers, every_s=0.05)
    with report:
        with timers("rollout"):
            time.sleep(0.3)  # a long stage: beats come while it runs
        report.step(1, {"train/reward_mean": 0.5}, {"samples": 128})
    beats = [ln for ln in out.getvalue().splitlines() if ln.startswith("hyrl: ... ")]
    assert len(beats) >= 2, out.getvalue()
    assert (
        beats[0].startswith("hyrl: ... rollout step 1/3: rollout for ")
        and "into the step" in beats[0]
    )
    assert out.getvalue().splitlines()[-1].startswith("hyrl: step 1/3")
    assert timers.current is None  # the stage ended


def test_a_heartbeat_counts_the_responses_of_the_engine_call_in_progress():
    import time

    from hyrl.metrics.timers import StageTimers
    from hyrl.rollout.base import GenerationProgress

    out, timers, generation = io.StringIO(), StageTimers(), GenerationProgress()
    report = ProgressReport(num_steps=3, first_step=1, log_interval=1, out=out, tty=False)
    report.heartbeat(timers, every_s=0.05, generation=generation)
    with report, timers("rollout"), generation.counting(1024):
        generation.add(300)
        time.sleep(0.2)
        generation.add(500)
        time.sleep(0.2)
    beats = [ln for ln in out.getvalue().splitlines() if ln.startswith("hyrl: ... ")]
    assert any(", 300/1024 responses generated (" in ln for ln in beats), beats
    assert ", 800/1024 responses generated (" in beats[-1], beats


def test_no_heartbeat_on_a_terminal_or_when_switched_off():
    from hyrl.metrics.timers import StageTimers

    report = ProgressReport(3, 1, 1, out=io.StringIO(), tty=True)
    report.heartbeat(StageTimers(), every_s=0.05)
    assert report._heartbeat is None
    report = ProgressReport(3, 1, 1, out=io.StringIO(), tty=False)
    report.heartbeat(StageTimers(), every_s=None)
    assert report._heartbeat is None
