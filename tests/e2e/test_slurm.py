"""launch/sbatch.template under a real Slurm on this machine (tools/slurm_local.sh: Debian's
slurm-wlm and munge, one node with the machine's CPUs and memory): the tiny GRPO recipe as a
CPU job of 2 ranks, its #SBATCH GPU line overridden on the command line, launched the way a
cluster user launches it (the recipe goes through launch/srun.sh inside the job).

Outside CI the tests skip where Slurm is not installed or cannot be started (it needs root);
in CI (CI=true) they install and start it, and a skip is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_runs import ROOT

SLURM_LOCAL = ROOT / "tools" / "slurm_local.sh"
IN_CI = os.environ.get("CI") == "true"


def _up() -> bool:
    return subprocess.run(["bash", str(SLURM_LOCAL), "status"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def slurm():
    """A running one-node Slurm: the one already up, else started here (and stopped after)."""
    if _up():
        yield
        return
    can = os.geteuid() == 0 and (shutil.which("apt-get") or shutil.which("slurmctld"))
    if not can and not IN_CI:
        pytest.skip("no Slurm here and no root to install it (tools/slurm_local.sh)")
    started = subprocess.run(
        ["bash", str(SLURM_LOCAL), "start"], capture_output=True, text=True, timeout=600
    )
    if started.returncode != 0:
        message = f"tools/slurm_local.sh start failed: {started.stderr[-2000:]}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    yield
    subprocess.run(["bash", str(SLURM_LOCAL), "stop"], capture_output=True, timeout=120)


def _submit(tmp_path: Path, *flags: str) -> tuple[int, str, Path]:
    """sbatch --wait the template with the tiny recipe on 2 CPU ranks; (the job's exit status,
    its log, its run directory)."""
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "NPROC": "2",
        "RUN_DIR": str(run_dir),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    cmd = [
        "sbatch", "--wait", "--parsable", "--nodes", "1", "--gpus-per-node", "0",
        "--cpus-per-task", str(os.cpu_count() or 2), "--time", "20",
        str(ROOT / "launch" / "sbatch.template"), "recipes/tiny/grpo.sh", *flags,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    job_id = proc.stdout.strip().split(";")[0]
    assert job_id.isdigit(), proc.stdout + proc.stderr
    log = ROOT / "logs" / f"hyrl-{job_id}.out"  # the template's --output: logs/%x-%j.out
    text = log.read_text() if log.is_file() else ""
    log.unlink(missing_ok=True)
    return proc.returncode, text, run_dir


@pytest.mark.slow
def test_the_tiny_recipe_trains_as_a_slurm_job_through_srun(slurm, tmp_path):
    rc, log, run_dir = _submit(tmp_path, "--num-steps", "3")
    assert rc == 0, log[-3000:]
    # the recipe went through launch/srun.sh (one srun step, torchrun with 2 ranks in it)
    assert "+ MASTER_ADDR=" in log and "srun --overlap --nodes 1 --ntasks 1" in log, log[-3000:]
    assert "+ no Ray: the recipe's rollout engine needs none" in log
    assert "hyrl: 2 rank(s) on cpu (gloo)" in log
    assert "run directory: " in log
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_step"] for r in rows] == [1, 2, 3]
    assert json.loads((run_dir / "summary.json").read_text())["samples"] == 3 * 128
    assert (run_dir / "checkpoints" / "step_3").is_dir()


@pytest.mark.slow
def test_a_refused_flag_ends_the_job_with_status_2_and_one_message(slurm, tmp_path):
    rc, log, run_dir = _submit(tmp_path, "--global-batch-size", "100")
    assert rc == 2, log[-3000:]
    errors = [ln for ln in log.splitlines() if ln.startswith("hyrl train: error:")]
    assert len(errors) == 1 and "--global-batch-size=100" in errors[0], log[-3000:]
    assert "srun" not in log  # nothing launched: no Ray, no training step
    assert not (run_dir / "metrics.jsonl").exists()
