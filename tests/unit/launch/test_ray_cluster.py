"""launch/ray_cluster.sh: the Ray cluster an sbatch job starts runs one auth mode with rank 0.

Ray 2.60's `ray start --head` turns token auth on when RAY_AUTH_MODE is unset and
~/.ray/auth_token exists (ray/_private/authentication/authentication_token_setup.py,
``maybe_enable_token_auth_if_token_available``), while hyrl's rank 0 joins with
RAY_AUTH_MODE=disabled (hyrl.rollout.build.start_ray): it could not join. A stand-in `ray` on
PATH records the environment each command ran with.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "launch" / "ray_cluster.sh"


@pytest.fixture
def recorded_ray(tmp_path):
    """A `ray` executable that appends `RAY_AUTH_MODE=<value> <args>` to a log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "ray.log"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(f'#!/bin/sh\necho "RAY_AUTH_MODE=${{RAY_AUTH_MODE-unset}} $*" >> {log}\n')
    ray.chmod(0o755)
    return bin_dir, log


def run(command: list[str], bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    environ.update(PATH=f"{bin_dir}{os.pathsep}{environ['PATH']}", NODE_IP="10.0.0.1", **env)
    return subprocess.run(
        ["bash", str(SCRIPT), *command], capture_output=True, text=True, env=environ, timeout=60
    )


@pytest.mark.parametrize(
    "command", [["start-head"], ["start-worker", "10.0.0.1:6379"]], ids=["head", "worker"]
)
def test_head_and_workers_run_with_auth_disabled_when_nothing_says_otherwise(recorded_ray, command):
    bin_dir, log = recorded_ray
    assert run(command, bin_dir).returncode == 0
    [line] = log.read_text().splitlines()
    assert line.startswith("RAY_AUTH_MODE=disabled start ")


def test_a_mode_the_job_sets_is_kept(recorded_ray):
    bin_dir, log = recorded_ray
    assert run(["start-head"], bin_dir, RAY_AUTH_MODE="token").returncode == 0
    assert log.read_text().startswith("RAY_AUTH_MODE=token start --head")


def test_rank_0_joins_with_the_mode_the_job_set_or_disabled(monkeypatch):
    """start_ray, joining a cluster (a stand-in ray.init records the mode it saw)."""
    import ray

    from hyrl.config import parse_args, resolve
    from hyrl.rollout import build

    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(os.environ.get("RAY_AUTH_MODE")))
    layout = type("Layout", (), {"uses_ray": True, "in_process": False, "num_engines": 1})()
    cfg = resolve(parse_args(["--ray-address", "10.0.0.1:6379"]))
    for preset in (None, "token"):
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
        if preset is not None:
            monkeypatch.setenv("RAY_AUTH_MODE", preset)
        assert build.start_ray(cfg.rollout, layout) is True
    assert seen == ["disabled", "token"]  # as the script's head and workers run
