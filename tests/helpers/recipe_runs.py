"""Running a tiny recipe the way a user does (bash RECIPE FLAGS, through launch/torchrun.sh) and
reading what it wrote: shared by the end-to-end tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

from testpaths import ROOT

RECIPE = ROOT / "recipes" / "tiny" / "grpo.sh"
PPO_RECIPE = ROOT / "recipes" / "tiny" / "ppo.sh"
# Virtual pipeline stages on the tiny model: 4 layers, so PP=2 holds 2 chunks of 1 layer per rank.
PP2_VIRTUAL_STAGES = (
    "--num-layers",
    "4",
    "--pipeline-model-parallel-size",
    "2",
    "--num-layers-per-virtual-pipeline-stage",
    "1",
)


def run_recipe(
    run_dir: Path,
    *flags: str,
    nproc: int = 1,
    timeout: int = 300,
    recipe: Path = RECIPE,
    extra_env: dict | None = None,
):
    """`bash RECIPE --run-dir RUN_DIR --no-progress FLAGS` on NPROC gloo ranks, torchrun's
    variables of an enclosing run removed; the CompletedProcess (text, captured)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(
        NPROC=str(nproc),
        OMP_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **(extra_env or {}),
    )
    return subprocess.run(
        ["bash", str(recipe), "--run-dir", str(run_dir), "--no-progress", *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def records(run_dir: Path) -> list[dict]:
    """metrics.jsonl as written, a record per line (re-logged steps not merged)."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
