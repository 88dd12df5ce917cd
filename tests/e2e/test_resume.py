"""Checkpoint and resume (--save, --save-interval, --load) and preemption, end to end on the
tiny recipe: a resumed run logs what an uninterrupted one logs."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from recipe_runs import PP2_VIRTUAL_STAGES, RECIPE, ROOT, records, run_recipe
from subprocess_hooks import hook_env

# Keys that measure time, not training: they differ between any two runs.
TIME_KEYS = ("elapsed_s",)


def comparable(row: dict) -> dict:
    return {
        k: v
        for k, v in row.items()
        if isinstance(v, (int, float)) and not k.startswith("perf/") and k not in TIME_KEYS
    }


@pytest.fixture(scope="module")
def three_saved_steps(tmp_path_factory):
    """A 3-step run that checkpoints at the end: (run directory, --save directory)."""
    root = tmp_path_factory.mktemp("saved")
    proc = run_recipe(root / "run", "--num-steps", "3", "--save", str(root / "ckpt"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", root / "ckpt"


@pytest.mark.slow
def test_three_steps_then_three_resumed_steps_log_what_six_steps_in_one_go_log(
    tmp_path, three_saved_steps
):
    run_dir, ckpt = three_saved_steps
    assert (ckpt / "latest").read_text().strip() == "step_3"
    assert {p.name for p in (ckpt / "step_3").iterdir()} == {
        "actor",
        "actor_optimizer",
        "manifest.json",
        "rank_00000-of-00001.pt",
        "trainer_state.json",
    }
    before = (run_dir / "metrics.jsonl").read_text()
    proc = run_recipe(run_dir, "--num-steps", "6", "--load", str(ckpt), "--save", str(ckpt))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "metrics.jsonl").read_text().startswith(before)  # appended, not rewritten
    assert (ckpt / "latest").read_text().strip() == "step_6"

    whole = tmp_path / "whole"
    proc = run_recipe(whole, "--num-steps", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed, uninterrupted = records(run_dir), records(whole)
    assert [r["rollout_step"] for r in resumed] == [1, 2, 3, 4, 5, 6]
    for got, want in zip(resumed[3:], uninterrupted[3:]):
        got, want = comparable(got), comparable(want)
        assert got.keys() == want.keys()
        assert all(got[k] == pytest.approx(want[k], abs=1e-6) for k in want), got["step"]
    assert resumed[3]["elapsed_s"] > resumed[2]["elapsed_s"]  # the clock continues
    for row in resumed:  # every response is either stopped by eos or cut at the length limit
        assert row["train/stop_frac"] + row["train/truncated_frac"] == pytest.approx(1.0)


@pytest.mark.slow
def test_hyrl_plans_one_save_at_the_bytes_a_real_save_writes(three_saved_steps):
    """hyrl plan's size of one save (12 B per parameter in float32: the weights 4, Adam's m
    and v 8) against the tiny recipe's real step: per-tensor metadata adds about a fifth at
    this size (0.13M parameters) and vanishes at 30B; a missed or extra copy of the weights
    (4 B more a parameter, 1.33x) would fall outside."""
    from hyrl.config import RunConfig, resolve
    from hyrl.plan.make import make_plan

    _, ckpt = three_saved_steps
    step = ckpt / "step_3"
    written = sum(p.stat().st_size for d in ("actor", "actor_optimizer") for p in
                  (step / d).rglob("*") if p.is_file())  # fmt: skip
    planned = make_plan(resolve(RunConfig(save=str(ckpt))), 1)["checkpoints"]["save_bytes"]
    assert 1.0 <= written / planned <= 1.3, (written, planned)


@pytest.mark.slow
def test_a_crash_in_the_middle_of_a_save_leaves_the_previous_checkpoint_to_resume_from(tmp_path):
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    env = hook_env(HYRL_TEST_CRASH_IN_SAVE="2")  # die half-way through step 2's save
    proc = run_recipe(
        run_dir, "--num-steps", "3", "--save", str(ckpt), "--save-interval", "1", extra_env=env
    )
    assert proc.returncode == 17, proc.stderr[-3000:]
    assert (ckpt / "latest").read_text().strip() == "step_1"
    assert (ckpt / ".tmp-step_2").is_dir() and not (ckpt / "step_2").exists()

    proc = run_recipe(run_dir, "--num-steps", "3", "--load", str(ckpt), "--save", str(ckpt))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)  # step 2 was logged before the crash, and again after the resume
    assert [(r["rollout_step"], r["step"], r["samples"]) for r in rows] == [
        (1, 1, 128),
        (2, 2, 256),
        (2, 2, 256),
        (3, 3, 384),
    ]
    assert comparable(rows[1]) == pytest.approx(comparable(rows[2]), abs=1e-6)
    # no --save-interval now: only the end is saved, and the stale .tmp-step_2 is gone
    assert sorted(p.name for p in ckpt.iterdir()) == ["latest", "run.json", "step_1", "step_3"]


@pytest.mark.slow
def test_a_full_disk_during_a_save_stops_the_run_naming_it_and_leaves_the_earlier_step(tmp_path):
    """Every rank's save of step 2 fails with ENOSPC after the actor is written (2 ranks, EP=2).
    At c42290d the OSError's traceback ended the run with the half-written .tmp-step_2 left."""
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    proc = run_recipe(
        run_dir,
        "--num-steps", "3", "--save", str(ckpt), "--save-interval", "1",
        "--expert-model-parallel-size", "2",
        nproc=2,
        extra_env=hook_env(HYRL_TEST_ENOSPC_IN_SAVE="2"),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    [said] = [line for line in proc.stderr.splitlines() if "hyrl train: error:" in line]
    assert "rollout step 2 ran out of disk space" in said
    assert str(ckpt / ".tmp-step_2" / "optimizer" / "__0_0.distcp") in said
    assert "(step_1's size)" in said and "are free" in said
    # no rank's own traceback (torchrun still prints its ChildFailedError for the exit code 1)
    assert not [line for line in proc.stderr.splitlines() if line.startswith("[rank")]
    assert (ckpt / "latest").read_text().strip() == "step_1"
    assert sorted(p.name for p in ckpt.iterdir()) == ["latest", "run.json", "step_1"]
    assert json.loads((run_dir / "summary.json").read_text())["ended"] == "error"
    assert [r["rollout_step"] for r in records(run_dir)] == [1, 2]  # step 2 itself was logged


@pytest.mark.slow
def test_old_checkpoints_are_pruned_but_milestones_the_loaded_step_and_forked_steps_stay(
    tmp_path,
):
    """--keep-last-checkpoints and --keep-checkpoint-every: a run saving every step keeps the
    newest two and the even steps; a fork from step 2 marks it; the run resumed with
    --keep-last-checkpoints 1 and no milestones keeps its newest, the step it resumed from and
    the forked step 2."""
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    saves = ("--save", str(ckpt), "--save-interval", "1")
    proc = run_recipe(
        run_dir, "--num-steps", "5", *saves, "--keep-last-checkpoints", "2",
        "--keep-checkpoint-every", "2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = sorted(p.name for p in ckpt.iterdir() if p.name.startswith("step_"))
    assert steps == ["step_2", "step_4", "step_5"]
    assert "hyrl: pruned step_1 (--keep-last-checkpoints 2)" in proc.stdout
    assert "hyrl: pruned step_3 (--keep-last-checkpoints 2)" in proc.stdout

    fork = run_recipe(tmp_path / "fork", "--num-steps", "3", "--load", str(ckpt / "step_2"))
    assert fork.returncode == 0, fork.stderr[-3000:]
    assert json.loads((ckpt / "step_2" / "forked_by.json").read_text())[0]["run_dir"] == str(
        tmp_path / "fork"
    )

    proc = run_recipe(
        run_dir, "--num-steps", "8", "--load", str(ckpt), *saves, "--keep-last-checkpoints", "1"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = sorted(p.name for p in ckpt.iterdir() if p.name.startswith("step_"))
    assert steps == ["step_2", "step_5", "step_8"]  # forked, resumed from, the newest
    assert not any(p.name.startswith(".") for p in ckpt.iterdir())


def _refused(proc, *phrases):
    assert proc.returncode != 0
    assert all(p in proc.stderr for p in phrases), proc.stderr[-3000:]


@pytest.mark.slow
def test_truncated_and_incomplete_checkpoints_are_refused_before_training(
    tmp_path, three_saved_steps
):
    _, ckpt = three_saved_steps
    truncated = tmp_path / "truncated"
    shutil.copytree(ckpt / "step_3", truncated)
    (truncated / "rank_00000-of-00001.pt").unlink()
    proc = run_recipe(tmp_path / "a", "--num-steps", "4", "--load", str(truncated))
    _refused(proc, "--load=", "damaged checkpoint: rank_00000-of-00001.pt: missing")
    assert proc.returncode == 2 and not (tmp_path / "a").exists()

    only_tmp = tmp_path / "only_tmp"  # a first save that a crash interrupted
    shutil.copytree(ckpt / "step_3", only_tmp / ".tmp-step_3")
    proc = run_recipe(tmp_path / "b", "--num-steps", "4", "--load", str(only_tmp))
    _refused(proc, "--load=", "no 'latest' file")
    assert proc.returncode == 2


@pytest.mark.slow
def test_a_checkpoint_of_another_architecture_is_refused_naming_it(tmp_path, three_saved_steps):
    _, ckpt = three_saved_steps
    step = str(ckpt / "step_3")
    proc = run_recipe(
        tmp_path / "a", "--num-steps", "4", "--load", step, "--moe-ffn-hidden-size", "32"
    )
    _refused(proc, "--moe-ffn-hidden-size: 64 in the checkpoint, 32 in the flags")
    assert proc.returncode == 2


# Under EP=2 the tiny recipe's steps 11 and 12 have non-zero gradients: step 12 is the first
# one whose gradient depends on an update made with the resumed Adam states.
SAVED_AT, RESUMED_TO = 10, 12


@pytest.fixture(scope="module")
def ep2_runs(tmp_path_factory):
    """Under NPROC=2 EP=2 with the distributed optimizer: SAVED_AT steps saved, and RESUMED_TO
    in one go."""
    root = tmp_path_factory.mktemp("ep2")
    flags = ("--expert-model-parallel-size", "2", "--use-distributed-optimizer")
    proc = run_recipe(
        root / "saved", "--num-steps", str(SAVED_AT), "--save", str(root / "ckpt"), *flags, nproc=2
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_recipe(root / "whole", "--num-steps", str(RESUMED_TO), *flags, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


RESHARDED_LAYOUTS = {
    "ep2 itself": (2, ("--expert-model-parallel-size", "2", "--use-distributed-optimizer")),
    "one rank": (1, ("--use-distributed-optimizer",)),
    "tp2+sp": (
        2,
        ("--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer"),
    ),
    "pp2": (2, ("--pipeline-model-parallel-size", "2", "--use-distributed-optimizer")),
}


def _resumed(
    runs: Path, tmp_path: Path, nproc: int, flags, resumed_to: int = RESUMED_TO
) -> tuple[list, list]:
    """A copy of `runs`' saved run resumed to `resumed_to` from its checkpoint under `nproc`
    ranks and `flags`: (its records, the uninterrupted run's)."""
    run_dir = tmp_path / "run"
    shutil.copytree(runs / "saved", run_dir)
    proc = run_recipe(
        run_dir,
        "--num-steps",
        str(resumed_to),
        "--load",
        str(runs / "ckpt"),
        *flags,
        nproc=nproc,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return records(run_dir), records(runs / "whole")


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(RESHARDED_LAYOUTS))
def test_a_run_saved_under_ep2_resumes_resharded_under_another_layout(tmp_path, ep2_runs, layout):
    """Weights and Adam states reshard: the resumed run continues the step sequence and its
    records follow the uninterrupted EP=2 run's: exactly under EP=2 itself, within float32
    reduction-order noise elsewhere (measured at step 12: 6e-8 relative under TP=2; 1.7e-3 when
    the Adam states are not loaded)."""
    resumed, uninterrupted = _resumed(ep2_runs, tmp_path, *RESHARDED_LAYOUTS[layout])
    steps = list(range(1, RESUMED_TO + 1))
    assert [r["rollout_step"] for r in resumed] == steps and [r["step"] for r in resumed] == steps
    assert resumed[SAVED_AT]["samples"] == uninterrupted[SAVED_AT]["samples"]
    # rank 0 resumes its sampling generator: the first resumed rollout is the same one
    assert resumed[SAVED_AT]["train/reward_mean"] == uninterrupted[SAVED_AT]["train/reward_mean"]
    for got, want in zip(resumed[SAVED_AT:], uninterrupted[SAVED_AT:]):
        assert want["actor/grad_norm"] > 0  # a step that moves the weights
        for key in ("actor/grad_norm", "actor/loss"):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), (got["step"], key)


# Saved one step earlier than the EP=2 run: from the seed's initial model (the same at every
# layout) every rollout of step 12 earns the same reward, a step that does not
# move the weights; steps 10 and 11 do (measured: grad norm 0.41, 0.38, 0 at steps 10-12).
VPP_SAVED_AT, VPP_RESUMED_TO = SAVED_AT - 1, RESUMED_TO - 1


@pytest.fixture(scope="module")
def vpp_runs(tmp_path_factory):
    """Under NPROC=2 PP=2 with 2 virtual stages per rank: VPP_SAVED_AT steps saved, and
    VPP_RESUMED_TO in one go."""
    root = tmp_path_factory.mktemp("vpp")
    proc = run_recipe(
        root / "saved",
        "--num-steps",
        str(VPP_SAVED_AT),
        "--save",
        str(root / "ckpt"),
        *PP2_VIRTUAL_STAGES,
        nproc=2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_recipe(
        root / "whole", "--num-steps", str(VPP_RESUMED_TO), *PP2_VIRTUAL_STAGES, nproc=2
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


VPP_RESUMED_LAYOUTS = {
    "pp2 vp2 itself": (2, PP2_VIRTUAL_STAGES),
    "pp2 without virtual stages": (2, PP2_VIRTUAL_STAGES[:4]),
    "one rank": (1, PP2_VIRTUAL_STAGES[:2]),
}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(VPP_RESUMED_LAYOUTS))
def test_a_run_saved_with_virtual_pipeline_stages_resumes_across_a_change_of_them(
    tmp_path, vpp_runs, layout
):
    """Each chunk's weights and Adam states are saved under their global layer numbers: a
    checkpoint of PP=2 x 2 virtual stages resumes under the same layout (the records equal
    the uninterrupted run's), under PP=2 with one chunk per rank and on one rank (they follow
    it within float32 reduction-order noise)."""
    nproc, flags = VPP_RESUMED_LAYOUTS[layout]
    resumed, uninterrupted = _resumed(vpp_runs, tmp_path, nproc, flags, VPP_RESUMED_TO)
    steps = list(range(1, VPP_RESUMED_TO + 1))
    assert [r["rollout_step"] for r in resumed] == steps
    first = VPP_SAVED_AT  # the first resumed step's record
    assert resumed[first]["train/reward_mean"] == uninterrupted[first]["train/reward_mean"]
    exact = layout == "pp2 vp2 itself"
    for got, want in zip(resumed[first:], uninterrupted[first:]):
        assert want["actor/grad_norm"] > 0  # a step that moves the weights
        for key in ("actor/grad_norm", "actor/loss"):
            if exact:
                assert got[key] == want[key], (got["step"], key)
            else:
                assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), (got["step"], key)


@pytest.fixture(scope="module")
def straight_runs(tmp_path_factory):
    """{nproc: the records of an uninterrupted 40-step run on nproc ranks}, made on first use."""
    made: dict[int, list[dict]] = {}

    def get(nproc: int) -> list[dict]:
        if nproc not in made:
            run_dir = tmp_path_factory.mktemp(f"straight{nproc}") / "run"
            proc = run_recipe(run_dir, "--num-steps", "40", nproc=nproc)
            assert proc.returncode == 0, proc.stderr[-3000:]
            made[nproc] = records(run_dir)
        return made[nproc]

    return get


# (ranks, where the signal goes). One rank: the recipe and launcher exec, so the launcher's pid
# is the rank itself. Two ranks: the launcher is torchrun, which forwards the signal to the
# ranks; a group signal also reaches megatron's checkpoint-writer helper of each rank.
DELIVERIES = [(1, "launcher"), (1, "group"), (2, "launcher"), (2, "group")]


@pytest.mark.slow
@pytest.mark.parametrize("nproc,delivery", DELIVERIES)
def test_sigterm_saves_at_the_step_boundary_and_the_resume_continues_exactly(
    tmp_path, straight_runs, nproc, delivery
):
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(
        NPROC=str(nproc),
        OMP_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    proc = subprocess.Popen(
        ["bash", str(RECIPE), "--run-dir", str(run_dir), "--no-progress", "--num-steps", "100",
         "--save", str(ckpt), "--save-interval", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,  # its own process group, as under a supervisor
    )  # fmt: skip
    # A checkpoint before the signal: megatron's writer helper runs from the first save on.
    deadline = time.monotonic() + 180
    while not (ckpt / "latest").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if delivery == "group":
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=180)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ended"] == "preempted", stderr[-3000:]
    # the ranks exit 0; torchrun itself reports the signal it was sent (exit 1)
    assert proc.returncode == (0 if nproc == 1 else 1), stderr[-3000:]
    rows = records(run_dir)
    last = rows[-1]["rollout_step"]
    assert 2 <= last < 38
    assert "SIGTERM received" in stdout and f"{ckpt}/step_{last} written" in stdout
    assert (ckpt / "latest").read_text().strip() == f"step_{last}"
    assert not [p.name for p in ckpt.iterdir() if p.name.startswith(".tmp")]

    proc = run_recipe(run_dir, "--num-steps", str(last + 2), "--load", str(ckpt), nproc=nproc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = records(run_dir)[len(rows) :]
    straight = straight_runs(nproc)[last : last + 2]
    assert [r["rollout_step"] for r in resumed] == [last + 1, last + 2]
    for got, want in zip(resumed, straight, strict=True):
        got, want = comparable(got), comparable(want)
        assert got.keys() == want.keys()
        assert all(got[k] == pytest.approx(want[k], abs=1e-6) for k in want), got["step"]
    assert json.loads((run_dir / "summary.json").read_text())["ended"] == "num_steps"
