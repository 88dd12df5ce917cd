"""launch/sbatch.template under a real Slurm on this machine (tools/slurm_local.sh: Debian's
slurm-wlm and munge, one node with the machine's CPUs and memory): the tiny GRPO recipe as a
CPU job of 2 ranks, its #SBATCH GPU line overridden on the command line, launched the way a
cluster user launches it (the recipe goes through launch/srun.sh inside the job).

Those tests (marked `slurm`) are the Slurm tier: they run only with HYRL_SLURM=1 (`make
slurm-test`, which CI runs), and there a skip fails the tier (tests/conftest.py). The tier
starts a Slurm of its own, all its files under .slurm-local in the checkout, talks to it
through SLURM_CONF and stops it by its pids; tools/slurm_local.sh refuses to start beside a
Slurm or munge it did not start, and that refusal fails the tier. The template's preemption
lead check on the 30B recipe runs under stand-ins for srun, scontrol and squeue (no Slurm), in
every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from recipe_runs import ROOT

SLURM_LOCAL = ROOT / "tools" / "slurm_local.sh"


@pytest.fixture(scope="module")
def slurm():
    """A one-node Slurm of the tier's own, started here and stopped after; Slurm's commands in
    the tests reach it through SLURM_CONF (never a Slurm the tier did not start)."""
    started = subprocess.run(
        ["bash", str(SLURM_LOCAL), "start"], capture_output=True, text=True, timeout=600
    )
    if started.returncode != 0:
        pytest.fail(f"tools/slurm_local.sh start failed: {started.stderr[-2000:]}", pytrace=False)
    (conf,) = [ln for ln in started.stdout.splitlines() if ln.startswith("SLURM_CONF=")]
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", conf.removeprefix("SLURM_CONF="))
            yield
    finally:
        subprocess.run(["bash", str(SLURM_LOCAL), "stop"], capture_output=True, timeout=120)


CPUS = 2  # the job's --cpus-per-task (this machine has 2); every step must see them all


def _sbatch(
    tmp_path: Path, *flags: str, wait: bool = True, env: dict | None = None
) -> tuple[subprocess.Popen, Path]:
    """sbatch the template with the tiny recipe on 2 CPU ranks (the #SBATCH GPU line and the
    CPUs per task overridden; a time limit longer than the template's 1800-s preemption lead,
    which it requires); (the sbatch process, the run directory)."""
    run_dir = tmp_path / "run"
    env = {
        **{k: v for k, v in os.environ.items() if k != "SBATCH_SIGNAL"},
        "NPROC": "2",
        "RUN_DIR": str(run_dir),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **(env or {}),
    }
    cmd = [
        "sbatch", *(["--wait"] if wait else []), "--parsable", "--nodes", "1",
        "--gpus-per-node", "0", "--cpus-per-task", str(CPUS), "--time", "60",
        str(ROOT / "launch" / "sbatch.template"), "recipes/tiny/grpo.sh", *flags,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    return proc, run_dir


def _job_id(proc: subprocess.Popen) -> str:
    """The job id sbatch --parsable prints first (it comes before --wait waits)."""
    line = proc.stdout.readline().strip()
    job_id = line.split(";")[0]
    assert job_id.isdigit(), line
    return job_id


def _take_log(job_id: str) -> str:
    log = ROOT / "logs" / f"hyrl-{job_id}.out"  # the template's --output: logs/%x-%j.out
    text = log.read_text() if log.is_file() else ""
    log.unlink(missing_ok=True)
    return text


def _submit(tmp_path: Path, *flags: str, env: dict | None = None) -> tuple[int, str, Path]:
    """sbatch --wait the job; (its exit status, its log, its run directory)."""
    proc, run_dir = _sbatch(tmp_path, *flags, env=env)
    job_id = _job_id(proc)
    rc = proc.wait(timeout=900)
    return rc, _take_log(job_id), run_dir


def _job(job_id: str) -> dict:
    """scontrol's fields of the job (its state, its restarts)."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
    ).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


@pytest.mark.slow
@pytest.mark.slurm
def test_the_tiny_recipe_trains_as_a_slurm_job_through_srun(slurm, tmp_path):
    rc, log, run_dir = _submit(tmp_path, "--num-steps", "3")
    assert rc == 0, log[-3000:]
    # the recipe went through launch/srun.sh (one srun step, torchrun with 2 ranks in it)
    assert "+ MASTER_ADDR=" in log and "srun --overlap --nodes 1 --ntasks 1" in log, log[-3000:]
    assert "+ no Ray: the recipe's rollout engine needs none" in log
    # the preemption lead Slurm got (the job's copy of the template) against the plan's need
    assert "+ preemption lead 1800 s (#SBATCH --signal=B:USR1@1800) >= 1 s that one" in log
    assert "hyrl: 2 rank(s) on cpu (gloo)" in log
    # the step got the job's CPUs: Slurm >= 22.05 binds a step to what it asks for, which
    # without SRUN_CPUS_PER_TASK is one CPU per task (tools/slurm_local.sh binds to cores)
    assert f"this rank's process may run on {CPUS} CPU(s)" in log, log[-3000:]
    assert "run directory: " in log
    # the job's log shows the run's progress and metrics while it runs: a line per step
    steps = [ln for ln in log.splitlines() if ln.startswith("hyrl: step ")]
    assert [ln.split(" | ")[0] for ln in steps] == [f"hyrl: step {s}/3" for s in (1, 2, 3)]
    assert " | samples 384 | reward " in steps[-1] and "resp/s" in steps[-1], steps
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_step"] for r in rows] == [1, 2, 3]
    assert json.loads((run_dir / "summary.json").read_text())["samples"] == 3 * 128
    assert (run_dir / "checkpoints" / "step_3").is_dir()


@pytest.mark.slow
@pytest.mark.slurm
def test_a_refused_flag_ends_the_job_with_status_2_and_one_message(slurm, tmp_path):
    rc, log, run_dir = _submit(tmp_path, "--global-batch-size", "100")
    assert rc == 2, log[-3000:]
    errors = [ln for ln in log.splitlines() if ln.startswith("hyrl train: error:")]
    assert len(errors) == 1 and "--global-batch-size=100" in errors[0], log[-3000:]
    assert "srun" not in log  # nothing launched: no Ray, no training step
    assert not (run_dir / "metrics.jsonl").exists()


@pytest.mark.slow
@pytest.mark.slurm
def test_a_lead_shorter_than_the_plans_step_plus_save_is_refused_before_training(slurm, tmp_path):
    # at an assumed 1 token/s the tiny recipe's step is 128 responses x 2 tokens = 256 s of
    # decode (plus a few microseconds of training and save), x 1.25 = 320 s: over 300 s
    env = {"SBATCH_SIGNAL": "B:USR1@300", "PLAN_ASSUMPTIONS": "--decode-tokens-per-s-per-gpu 1"}
    rc, log, run_dir = _submit(tmp_path, "--num-steps", "3", env=env)
    assert rc == 2, log[-3000:]
    (error,) = [ln for ln in log.splitlines() if "error:" in ln]
    assert error.startswith(
        "launch/sbatch.template: error: SBATCH_SIGNAL=B:USR1@300: a preemption lead time of "
        "300 s is shorter than the 321 s one rollout step and one save need"
    ), log[-3000:]
    assert "allowed: SBATCH_SIGNAL=B:USR1@321 or longer" in error
    assert "srun" not in log  # nothing launched: no Ray, no training step
    assert not (run_dir / "metrics.jsonl").exists()


@pytest.mark.slow
@pytest.mark.slurm
def test_sigusr1_checkpoints_requeues_and_the_requeued_job_resumes_the_run(slurm, tmp_path):
    steps = 40
    proc, run_dir = _sbatch(tmp_path, "--num-steps", str(steps), wait=False)
    job_id = _job_id(proc)
    assert proc.wait(timeout=60) == 0
    deadline = time.monotonic() + 300
    while len(_rows(run_dir)) < 2:  # training, past its first steps
        assert time.monotonic() < deadline, _take_log(job_id)[-3000:]
        time.sleep(0.5)
    # a process that looks like a training rank but belongs to no job: it must be left alone
    decoy = subprocess.Popen(["bash", "-c", 'exec -a "python -m hyrl train decoy" sleep 600'])
    # what Slurm sends before a time limit (--signal=B:USR1@1800), to the batch shell only
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
    deadline = time.monotonic() + 600
    while (job := _job(job_id))["JobState"] not in ("COMPLETED", "FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, _take_log(job_id)[-3000:]
        time.sleep(1)
    log = _take_log(job_id)  # both runs of the job append to it (--open-mode=append)
    alive = decoy.poll() is None
    decoy.kill()
    assert alive, "the decoy outside the job got the job's SIGUSR1"
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", (job, log[-3000:])
    assert f"SIGUSR1 to 2 training rank(s) of job {job_id}" in log, log[-3000:]
    stopped = [ln for ln in log.splitlines() if "received: stopping after rollout step" in ln]
    assert len(stopped) == 1, log[-3000:]
    k = int(stopped[0].split("rollout step ")[1].split(";")[0])
    assert 2 <= k < steps, stopped
    assert f"+ scontrol requeue {job_id}" in log
    assert f"+ resuming from {run_dir}/checkpoints/step_{k}" in log, log[-3000:]
    assert f"hyrl: resuming from {run_dir}/checkpoints/step_{k} (after rollout step {k})" in log
    rows = _rows(run_dir)  # one run directory, its steps continuous across the requeue
    assert [r["rollout_step"] for r in rows] == list(range(1, steps + 1))
    assert [r["samples"] for r in rows] == [128 * s for s in range(1, steps + 1)]
    elapsed = [r["elapsed_s"] for r in rows]
    assert elapsed == sorted(elapsed)  # the clock continued from the checkpoint
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ended"] == "num_steps" and summary["samples"] == steps * 128


# -- the preemption lead check of the 30B recipe: stand-ins for srun, scontrol and squeue -------


def _fake_job(
    tmp_path: Path, time_limit: str, **env: str
) -> tuple[subprocess.CompletedProcess, Path]:
    """The template as a 2-node job of the 30B GRPO recipe, its Slurm commands stand-ins (srun
    records its arguments and runs nothing; squeue prints the time limit); (the run, the srun
    calls file)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "srun.calls"
    fakes = {
        "srun": f'echo "$@" >> {calls}',
        "scontrol": "printf '%s\\n' node1 node2",
        "squeue": f"echo {time_limit}",
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    job_env = {
        **{k: v for k, v in os.environ.items() if k != "SBATCH_SIGNAL"},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "node1 node2",
        "SLURM_NNODES": "2",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "RUN_DIR": str(tmp_path / "run"),
        **env,
    }
    recipe = ROOT / "recipes" / "qwen3_30b_a3b" / "grpo.sh"
    proc = subprocess.run(
        ["bash", str(ROOT / "launch" / "sbatch.template"), str(recipe)],
        env=job_env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc, calls


def test_the_30b_recipe_is_refused_the_old_300_s_lead_naming_the_need(tmp_path):
    proc, calls = _fake_job(tmp_path, "2-00:00:00", SBATCH_SIGNAL="B:USR1@300")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        "launch/sbatch.template: error: SBATCH_SIGNAL=B:USR1@300: a preemption lead time of "
        "300 s is shorter than the 898 s one rollout step and one save need (an estimate: "
        "(step 611 s + save 107 s) x 1.25 margin"
    )
    assert not calls.exists() and not (tmp_path / "run").exists()


def test_the_30b_recipe_passes_the_templates_own_lead_then_meets_the_file_checks(tmp_path):
    proc, calls = _fake_job(tmp_path, "2-00:00:00")
    assert "+ preemption lead 1800 s (#SBATCH --signal=B:USR1@1800) >= 898 s" in proc.stdout
    # past the lead check, the preflight refuses the placeholder data path (no data here)
    assert proc.returncode == 2 and "--prompt-data=" in proc.stderr, proc.stderr
    assert "preemption" not in proc.stderr and not calls.exists()


def test_a_lead_not_shorter_than_the_jobs_time_limit_is_refused(tmp_path):
    proc, calls = _fake_job(tmp_path, "20:00")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "a preemption lead time of 1800 s is not shorter than the job's time limit of " in line
    assert "1200 s (--time)" in line and not calls.exists()
