"""Every runnable recipe plans at its intended world size through `hyrl plan RECIPE`; an
impossible edit exits non-zero naming the flag. Every Qwen3-30B-A3B recipe, the sweep included,
dry-runs without GPU, data or Slurm; launch/srun.sh refuses a flag once, before srun."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testpaths import ROOT, training_recipes

from hyrl import plan as hplan

# Runnable recipes (the study scripts run several configurations, not one `hyrl plan` could
# read; the sweeps' dry run: below).
RECIPES = training_recipes()
QWEN_GRPO = ROOT / "recipes/qwen3_30b_a3b/grpo.sh"
QWEN_RECIPES = sorted(
    p for p in ROOT.glob("recipes/qwen3_30b_a3b/*.sh") if p.read_text().startswith("#!")
)


@pytest.fixture(autouse=True)
def _clean_layout_env(monkeypatch):
    for name in (
        "NNODES",
        "NPROC",
        "GPUS_PER_NODE",
        "GPU_MEMORY_GIB",
        "ROLLOUT_NODES",
        "SLURM_JOB_ID",
        "DATA",
        "HF_CHECKPOINT",
        "EVAL_DATA",
        "RAY_ADDRESS",
    ):
        monkeypatch.delenv(name, raising=False)


def test_recipes_are_found():
    names = {f"{p.parent.name}/{p.name}" for p in RECIPES}
    assert {"tiny/grpo.sh", "tiny/ppo.sh", "qwen3_30b_a3b/grpo.sh", "qwen3_30b_a3b/ppo.sh"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recipe_plans_at_its_intended_world_size(recipe, capsys):
    assert hplan.main([str(recipe)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "layout  TP=" in out and "memory per GPU (GiB)" in out and "training peak" in out
    print(out)  # the table, for `pytest -s`


def test_qwen3_recipes_state_their_layout_and_fit():
    grpo = json.loads(_plan_json(QWEN_GRPO))
    assert grpo["world_size"] == 16  # NNODES 2 x GPUS_PER_NODE 8
    assert grpo["gpus"]["total"] == 16 and grpo["gpus"]["colocated"]
    assert grpo["problems"] == [] and grpo["gpu_memory_gib"] == 80
    ppo = json.loads(_plan_json(ROOT / "recipes/qwen3_30b_a3b/ppo.sh"))
    assert ppo["world_size"] == 32
    assert (ppo["gpus"]["rollout"], ppo["gpus"]["nodes"]) == (8, 5)
    assert ppo["problems"] == []


def _plan_json(recipe: Path, *extra: str) -> str:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert hplan.main([str(recipe), "--json", *extra]) == 0
    return buffer.getvalue()


def test_tiny_recipe_plans_the_world_size_of_nproc(monkeypatch):
    monkeypatch.setenv("NPROC", "2")
    plan = json.loads(
        _plan_json(ROOT / "recipes/tiny/grpo.sh", "--", "--expert-model-parallel-size", "2")
    )
    assert plan["world_size"] == 2 and plan["layout"]["ep"] == 2


def test_an_expert_split_the_model_refuses_names_the_flag(capsys):
    assert hplan.main([str(QWEN_GRPO), "--", "--expert-model-parallel-size", "3"]) == 2
    assert "--expert-model-parallel-size=3" in capsys.readouterr().err


def test_tp_across_nodes_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("GPUS_PER_NODE", "2")
    monkeypatch.setenv("NNODES", "8")  # the same 16 GPUs as 8 nodes of 2
    assert hplan.main([str(QWEN_GRPO)]) == 1
    assert "--tensor-model-parallel-size=4" in capsys.readouterr().err


def test_a_layout_that_does_not_fit_names_the_flags(capsys):
    assert hplan.main([str(QWEN_GRPO), "--", "--expert-model-parallel-size", "2"]) == 1
    err = capsys.readouterr().err
    assert "--gpu-memory-gib" in err and "--use-distributed-optimizer" in err


def test_more_rollout_gpus_than_the_colocated_world_is_refused(capsys):
    assert hplan.main([str(QWEN_GRPO), "--", "--rollout-num-gpus", "24"]) == 2
    assert "--rollout-num-gpus=24" in capsys.readouterr().err


# --- launch/srun.sh: the flags are checked in one process before srun starts any rank ---------

SRUN_REFUSAL = "--sequence-parallel=False: Megatron requires sequence parallelism"


def _fake_slurm(tmp_path: Path, hosts: str = "node1") -> tuple[dict, Path]:
    """(environment, calls file) of a faked Slurm job: `srun` and `scontrol` on PATH are
    stand-ins; the fake srun appends its arguments to the calls file, never runs anything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "srun.calls"
    fakes = {"srun": f'echo "$@" >> {calls}\n', "scontrol": f"printf '%s\\n' {hosts}\n"}
    for name, body in fakes.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": hosts,
    }
    return env, calls


def _srun_launch(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    """launch/srun.sh inside a faked one-node Slurm allocation of 2 GPUs."""
    env, calls = _fake_slurm(tmp_path)
    env.update(SLURM_NNODES="1", SLURM_GPUS_ON_NODE="2", NNODES="1", NPROC="2")
    script = (
        f"source {ROOT}/recipes/tiny/model.sh; exec bash {ROOT}/launch/srun.sh "
        '"${MODEL_ARGS[@]}" "$@"'
    )
    proc = subprocess.run(
        ["bash", "-c", script, "srun-test", *flags],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, calls


def test_srun_launcher_reports_a_refused_flag_once_and_never_calls_srun(tmp_path):
    proc, calls = _srun_launch(tmp_path, "--tensor-model-parallel-size", "2")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()  # hyrl's message is all there is
    assert len(lines) == 1 and SRUN_REFUSAL in lines[0] and "hyrl train: error:" in lines[0]
    assert not calls.exists()


def test_srun_launcher_passes_a_valid_flag_line_to_srun(tmp_path):
    proc, calls = _srun_launch(tmp_path, "--expert-model-parallel-size", "2")
    assert proc.returncode == 0, proc.stderr
    (call,) = calls.read_text().splitlines()
    assert "--nodes 1 --ntasks 1" in call and "--nodelist node1" in call
    assert call.endswith(
        "launch/torchrun.sh " + " ".join(_tiny_model_flags()) + " --expert-model-parallel-size 2"
    )


def test_sbatch_template_reports_a_refused_flag_once_before_ray_or_any_srun_step(tmp_path):
    env, calls = _fake_slurm(tmp_path, hosts="node1 node2")
    env.update(SLURM_NNODES="2", SLURM_SUBMIT_DIR=str(tmp_path), RUN_DIR=str(tmp_path / "run"))
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "launch/sbatch.template"),
            str(QWEN_GRPO),
            "--expert-model-parallel-size",
            "3",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("hyrl train: error: --expert-model-parallel-size=3")
    assert not calls.exists() and not (tmp_path / "run").exists()


def _tiny_model_flags() -> list[str]:
    out = subprocess.run(
        ["bash", "-c", f'source {ROOT}/recipes/tiny/model.sh; printf "%s\\n" "${{MODEL_ARGS[@]}}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


# --- every Qwen3-30B-A3B recipe dry-runs here: no GPU, no data, no Slurm ------------------------


def _dry_run(recipe: Path, env: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        ["bash", str(recipe), "--dry-run"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_qwen3_recipe_is_covered_by_the_dry_run_test():
    assert [p.name for p in QWEN_RECIPES] == ["grpo.sh", "ppo.sh", "sweep_grpo.sh"]


@pytest.mark.parametrize("slurm_env", [{}, {"SLURM_JOB_ID": "1"}], ids=["here", "in-slurm-job"])
@pytest.mark.parametrize("recipe", QWEN_RECIPES, ids=lambda p: p.name)
def test_qwen3_recipe_dry_runs_without_gpu_data_or_slurm(recipe, slurm_env):
    """A dry run skips the machine checks (inside a Slurm job too: no srun is called) and uses
    data.sh's stand-ins for the missing DATA, HF_CHECKPOINT and EVAL_DATA."""
    proc = _dry_run(recipe, slurm_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if recipe.name == "sweep_grpo.sh":
        _assert_sweep_plan(proc.stdout)
        return
    config = json.loads(proc.stdout)  # the resolved configuration, as `hyrl train --dry-run`
    assert config["world_size"] == {"grpo.sh": 16, "ppo.sh": 32}[recipe.name]
    assert config["prompt_data"].endswith("recipes/qwen3_30b_a3b/dry_run/prompts.jsonl")
    assert (config["global_batch_size"], config["lr"]) == (1024, 1e-6)


def _sweep_members(stdout: str) -> dict[str, tuple[dict, list[str]]]:
    """`hyrl sweep --dry-run`'s lines, `NAME: KEY=VALUE ...; appends: FLAGS` -> {NAME: (values,
    flags)}, in the order printed."""
    members = {}
    for line in stdout.strip().splitlines():
        name, rest = line.split(": ", 1)
        values, flags = rest.split("; appends: ")
        members[name] = (dict(kv.split("=", 1) for kv in values.split()), flags.split())
    return members


def _assert_sweep_plan(stdout: str) -> None:
    """One line per member of the two sweeps (main, p64): P = 128 x m prompts, B = 1024 x m,
    lr = 1e-6 x sqrt(m), every member 1,000,000 responses long; the control at B = 2048 keeps
    1e-6; p64's one member B = 512 at 1e-6 x sqrt(1/2)."""
    members = _sweep_members(stdout)
    main = [f"b{1024 * m}-sqrt-s1234" for m in (2, 4, 8, 16)]
    assert list(members) == ["b1024-ref-s1234", *main, "b2048-fixed-s1234", "b512-ref-s1234"]
    for m in (1, 2, 4, 8, 16):
        values, flags = members[f"b{1024 * m}-{'ref' if m == 1 else 'sqrt'}-s1234"]
        assert int(values["rollout_batch_size"]) == 128 * m
        assert int(values["global_batch_size"]) == 1024 * m
        assert float(values["lr"]) == pytest.approx(1e-6 * m**0.5)
        assert int(values["num_steps"]) == -(-1_000_000 // (128 * m * 8))
        assert flags[flags.index("--global-batch-size") + 1] == str(1024 * m)
        assert Path(flags[flags.index("--run-dir") + 1]).parent.name == "main"
    fixed, fixed_flags = members["b2048-fixed-s1234"]
    assert (fixed["global_batch_size"], float(fixed["lr"]), fixed["lr_scaling"]) == (
        "2048",
        1e-6,
        "none",
    )
    assert Path(fixed_flags[fixed_flags.index("--run-dir") + 1]).parent.name == "main"
    p64, p64_flags = members["b512-ref-s1234"]
    assert p64["global_batch_size"] == "512"
    assert float(p64["lr"]) == pytest.approx(1e-6 * 0.5**0.5)
    assert Path(p64_flags[p64_flags.index("--run-dir") + 1]).parent.name == "p64"
    assert {v["target"] for v, _ in members.values()} == {"eval/heldout/accuracy=0.77"}
    assert {v["world_size"] for v, _ in members.values()} == {"16"}


def test_a_sweep_member_the_flags_cannot_run_names_the_flag_in_the_dry_run():
    proc = _dry_run(ROOT / "recipes/qwen3_30b_a3b/sweep_grpo.sh", {"NNODES": "1"})
    assert proc.returncode == 2
    assert proc.stderr.startswith("hyrl sweep: error: RECIPE ")  # the sweep's own message
    (refusal,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("hyrl train: error:")]
    assert refusal.startswith("hyrl train: error: --expert-model-parallel-size=16")
    assert proc.stdout == ""


def test_tiny_sweep_dry_run_prints_its_members_and_creates_nothing(tmp_path):
    """The testbed: B = 128 x m (m = 1, 2, 4, 8) at lr 3e-4 x sqrt(m) from the base checkpoint,
    the control at B = 512 and 3e-4; each member at most 80,000 responses long, i.e.
    ceil(80000 / (128 m)) rollout steps of 16 m x 8 responses, stopped at the target. One seed
    (--seeds 1234) keeps the dry runs few; the recipe's default is seeds 1 to 5. The base the
    dry runs read is built in a temporary directory and removed."""
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "recipes/tiny/sweep_grpo.sh"),
            "--seeds",
            "1234",
            str(out),
            "--dry-run",
        ],  # fmt: skip
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    members = _sweep_members(proc.stdout)
    assert list(members) == [
        "b128-ref-s1234",
        "b256-sqrt-s1234",
        "b512-sqrt-s1234",
        "b1024-sqrt-s1234",
        "b512-fixed-s1234",
    ]
    for name, m, lr in [
        ("b128-ref-s1234", 1, 3e-4),
        ("b256-sqrt-s1234", 2, 3e-4 * 2**0.5),
        ("b512-sqrt-s1234", 4, 6e-4),
        ("b1024-sqrt-s1234", 8, 3e-4 * 8**0.5),
        ("b512-fixed-s1234", 4, 3e-4),
    ]:
        values, flags = members[name]
        assert int(values["rollout_batch_size"]) == 16 * m
        assert int(values["global_batch_size"]) == 128 * m
        assert float(values["lr"]) == pytest.approx(lr)
        assert int(values["num_steps"]) == math.ceil(80000 / (128 * m))
        assert values["target"] == "eval/accuracy=0.75"
        assert flags[flags.index("--run-dir") + 1] == str(out.resolve() / name)
    # then the throughput probes: 4 rounds of the 5 members, their first round dry-run too
    assert "then 20 throughput probes (4 rounds of about 8,192 responses each" in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds"], "--seeds needs a value"),
        (["a", "b"], "OUT_DIR given twice (a, b)"),
    ],
)
def test_a_sweep_recipes_own_arguments_are_checked(tmp_path, args, message):
    proc = subprocess.run(
        ["bash", str(ROOT / "recipes/tiny/sweep_grpo.sh"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and message in proc.stderr
    assert list(tmp_path.iterdir()) == []


# --- a bad data file is found in the launcher's one process, not on the ranks ----------------


def _bad_data(tmp_path: Path) -> Path:
    """A prompt file whose records lack the label key the recipe names (--label-key label)."""
    path = tmp_path / "no_labels.jsonl"
    path.write_text('{"prompt": "1+1="}\n{"prompt": "2+2="}\n')
    return path


def _one_error(stderr: str) -> str:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("hyrl train: error:")]
    assert len(errors) == 1, stderr[-3000:]
    assert "Traceback" not in stderr and "ChildFailedError" not in stderr, stderr[-3000:]
    return errors[0]


def test_a_bad_data_file_under_torchrun_gives_one_message_and_exit_2(tmp_path):
    bad = _bad_data(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(
        NPROC="2",
        DATA=str(bad),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    proc = subprocess.run(
        ["bash", str(ROOT / "recipes" / "tiny" / "grpo_data.sh"), "--run-dir",
         str(tmp_path / "run"), "--num-steps", "1", "--no-progress"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    error = _one_error(proc.stderr)
    assert f"--prompt-data={bad}" in error and "label" in error, error
    assert "torchrun" not in proc.stderr  # no rank was started
    assert not (tmp_path / "run").exists()


def test_srun_launcher_reports_a_bad_data_file_once_and_never_calls_srun(tmp_path):
    bad = _bad_data(tmp_path)
    proc, calls = _srun_launch(
        tmp_path, "--prompt-data", str(bad), "--input-key", "prompt", "--label-key", "label",
        "--tokenizer-path", str(ROOT / "tests" / "data" / "tiny_tokenizer"),
        "--rm-type", "exact_match",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"--prompt-data={bad}" in _one_error(proc.stderr)
    assert not calls.exists()


@pytest.mark.parametrize("recipe,nodes", [("grpo.sh", 2), ("ppo.sh", 4)])
def test_the_30b_recipes_take_nproc_as_ranks_per_node(recipe, nodes):
    env = {**os.environ, "NPROC": "4", "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(ROOT / "recipes" / "qwen3_30b_a3b" / recipe), "--dry-run"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert f"+ WORLD_SIZE={nodes * 4} " in proc.stderr, proc.stderr[-2000:]
