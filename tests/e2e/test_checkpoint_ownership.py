"""A checkpoint directory belongs to one run (hyrl.checkpoint.ownership), end to end on the
tiny recipe: another run cannot overwrite it, a resume cannot mix two runs or change flags,
and a resume into a new run directory is a fork that says so."""

import json

import pytest
from recipe_runs import records, run_recipe


def _state(ckpt, step: int) -> dict:
    return json.loads((ckpt / f"step_{step}" / "trainer_state.json").read_text())


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    """Run A: 2 steps, checkpointed into its --save directory."""
    root = tmp_path_factory.mktemp("owner")
    proc = run_recipe(root / "a", "--num-steps", "2", "--save", str(root / "ck_a"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, root / "a", root / "ck_a"


def test_the_save_directory_and_each_checkpoint_name_their_run(run_a):
    _, run_dir, ckpt = run_a
    run_id = json.loads((run_dir / "config.json").read_text())["run_id"]
    assert json.loads((ckpt / "run.json").read_text()) == {
        "run_id": run_id,
        "run_dir": str(run_dir),
    }
    state = _state(ckpt, 2)
    assert state["run_id"] == run_id and state["config"]["lr"] == 3e-4
    config = json.loads((run_dir / "config.json").read_text())
    assert config["initial_model"].startswith("initial model: fresh from seed 1234, the same at")


def test_another_run_saving_into_it_is_refused_and_nothing_is_overwritten(run_a):
    root, run_dir, ckpt = run_a
    before = (ckpt / "step_2" / "trainer_state.json").read_bytes()
    proc = run_recipe(
        root / "b", "--num-steps", "2", "--save", str(ckpt), "--seed", "7", "--lr", "1e-3"
    )
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("hyrl train: error:")]
    assert len(errors) == 1 and f"--save={ckpt}" in errors[0], proc.stderr[-2000:]
    assert f"--run-dir {run_dir}" in proc.stderr  # how to resume the run that owns it
    assert (ckpt / "step_2" / "trainer_state.json").read_bytes() == before
    assert not (root / "b").exists()


def test_a_resume_from_another_runs_checkpoint_is_refused(run_a):
    root, run_dir, _ = run_a
    other = root / "ck_c"
    proc = run_recipe(root / "c", "--num-steps", "1", "--save", str(other))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = len(records(run_dir))
    # run A resumed with its own flags, from run C's checkpoint
    proc = run_recipe(run_dir, "--num-steps", "3", "--load", str(other))
    assert proc.returncode == 2
    assert f"--load={other}/step_1" in proc.stderr and "belongs to run" in proc.stderr
    assert len(records(run_dir)) == rows  # nothing appended to A


def test_a_flag_the_checkpoint_was_not_saved_under_is_refused_on_a_fork(run_a):
    root, _, ckpt = run_a
    proc = run_recipe(root / "d", "--num-steps", "3", "--load", str(ckpt), "--seed", "7")
    assert proc.returncode == 2
    assert f"--load={ckpt}/step_2" in proc.stderr and "--seed: 1234 in the checkpoint, 7 now" in (
        proc.stderr
    ), proc.stderr[-2000:]
    assert not (root / "d").exists()


def test_a_resume_into_a_new_run_directory_is_a_fork_and_says_so(run_a):
    root, run_dir, ckpt = run_a
    parent = json.loads((run_dir / "config.json").read_text())["run_id"]
    fork, fork_ck = root / "fork", root / "ck_fork"
    proc = run_recipe(fork, "--num-steps", "3", "--load", str(ckpt), "--save", str(fork_ck))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hyrl: a fork: run " in proc.stdout and f"starts from {ckpt}/step_2" in proc.stdout
    config = json.loads((fork / "config.json").read_text())
    assert config["forked_from"] == {"run_id": parent, "checkpoint": f"{ckpt}/step_2"}
    assert config["run_id"] != parent
    assert (
        config["initial_model"].startswith("initial model: ")
        and "--load" in config["initial_model"]
    )
    assert [r["rollout_step"] for r in records(fork)] == [3]  # continues after step 2
    assert json.loads((fork_ck / "run.json").read_text())["run_id"] == config["run_id"]
    # the fork's own checkpoints resume into the fork: same id, its records continue
    proc = run_recipe(fork, "--num-steps", "4", "--load", str(fork_ck), "--save", str(fork_ck))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["rollout_step"] for r in records(fork)] == [3, 4]
    resumed = json.loads((fork / "config.json").read_text())
    assert resumed["run_id"] == config["run_id"]
    assert resumed["initial_model"] == config["initial_model"]  # the run's own, kept
