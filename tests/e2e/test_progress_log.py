"""A job's log shows progress while the run trains: the tiny recipe with stdout going to a file
(as under `sbatch --output`), read while the process still runs. Each engine call is made slower
than --log-interval-s (a test hook), as a large model's rollout is: on an idle machine the tiny
recipe's whole step takes less than the heartbeat's interval."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from recipe_runs import RECIPE
from subprocess_hooks import hook_env
from testpaths import ROOT


def test_step_lines_and_heartbeats_reach_the_log_file_before_the_run_ends(tmp_path):
    log_path = tmp_path / "job.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(
        NPROC="1",
        OMP_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **hook_env(HYRL_TEST_GENERATION_DELAY_S="1"),  # >= 1 s a rollout
    )
    flags = ["--num-steps", "500", "--log-interval", "1", "--log-interval-s", "0.2"]
    flags += ["--rollout-concurrency", "16"]  # eight engine calls' worth of chunks per rollout
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            ["bash", str(RECIPE), "--run-dir", str(tmp_path / "run"), *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
    try:
        deadline, text = time.monotonic() + 120, ""
        while time.monotonic() < deadline and process.poll() is None:
            text = log_path.read_text()
            if "hyrl: step 2/500 | samples 256 | " in text and "hyrl: ... rollout step" in text:
                break
            time.sleep(0.2)
        running = process.poll() is None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # preempted: it checkpoints nothing (no --save)
        process.wait(timeout=60)
    assert running, f"the run ended before its progress was read:\n{text[-3000:]}"
    lines = text.splitlines()
    steps = [ln for ln in lines if ln.startswith("hyrl: step ")]
    assert len(steps) >= 2 and all(" resp/s | ETA " in ln for ln in steps), steps[:3]
    beats = [ln for ln in lines if ln.startswith("hyrl: ... rollout step ")]
    assert beats and all("s into the step)" in ln for ln in beats), (beats[:3], text[-3000:])
    assert any(": rollout for " in ln and "/128 responses generated" in ln for ln in beats), beats
