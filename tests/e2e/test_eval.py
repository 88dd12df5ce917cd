"""`hyrl eval` end to end on the tiny recipe's checkpoint: saved by 2 ranks at EP=2 and evaluated
in one process (resharded at load), it repeats the run's own evaluation of that step number for
number; its weights as a Hugging Face directory evaluate through --hf-checkpoint; a flag that
contradicts the checkpoint exits 2 naming it."""

import json
import os
import subprocess
import sys

import pytest
from recipe_runs import records, run_recipe
from testpaths import DATA, ROOT

from hyrl.evaluation.cli import main


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """2 rollout steps of the tiny recipe on NPROC=2 ranks at EP=2, evaluating 4 samples per
    held-out prompt before the first step and after the last, saved after the last:
    (run directory, --save directory)."""
    root = tmp_path_factory.mktemp("eval")
    proc = run_recipe(
        root / "run",
        "--num-steps",
        "2",
        "--eval-interval",
        "2",
        "--n-samples-per-eval-prompt",
        "4",
        "--expert-model-parallel-size",
        "2",
        "--save",
        str(root / "ck"),
        nproc=2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", root / "ck"


def run_hyrl(*args: str) -> subprocess.CompletedProcess:
    """`python -m hyrl ARGS` in the repository, one process (torchrun's variables removed)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "hyrl", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_the_issue_command_repeats_the_runs_own_evaluation_of_that_step(saved_run):
    run_dir, ckpt = saved_run
    proc = run_hyrl("eval", "--load", str(ckpt), "--n-samples", "4", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)  # stdout holds the report alone; progress went to stderr
    logged = [r for r in records(run_dir) if "eval/accuracy" in r][-1]
    assert logged["rollout_step"] == 2
    run_id = json.loads((run_dir / "config.json").read_text())["run_id"]
    assert report["model"] == {
        "path": str(ckpt / "step_2"),  # the --save directory's latest step
        "kind": "checkpoint",
        "rollout_step": 2,
        "samples": logged["samples"],
        "run_id": run_id,
        "run_dir": str(run_dir),
    }
    settings = report["settings"]
    assert settings["world_size"] == 1 and settings["sampling_rng"] == "checkpoint"
    assert settings["n_samples_per_eval_prompt"] == 4 and settings["eval_pass_k"] == [1, 2, 4]
    assert settings["eval_temperature"] == 1.0 and settings["task"] == "arith_mod10"
    # The same model (EP=2 shards resharded into one rank), the same 20 held-out prompts, the
    # same sampling stream (rank 0's RNG state saved right after the run evaluated): the run's
    # own numbers exactly, the response lengths included.
    assert report["metrics"] == {k: v for k, v in logged.items() if k.startswith("eval/")}
    [held_out] = report["sets"]
    assert held_out["prompts"] == 20 and held_out["num_responses"] == 80
    assert held_out["accuracy"] == logged["eval/accuracy"]
    assert held_out["pass@4"] == logged["eval/pass@4"]


@pytest.mark.slow
def test_its_weights_as_a_hugging_face_directory_evaluate_from_a_seed(saved_run, tmp_path):
    _, ckpt = saved_run
    hf_dir, out = tmp_path / "hf", tmp_path / "out"
    actor = str(ckpt / "step_2" / "actor")
    proc = run_hyrl("convert", "mcore-to-hf", "--load", actor, "--out", str(hf_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # no run: the model flags come from config.json, the held-out set is the task's split
    args = ["--hf-checkpoint", str(hf_dir), "--task", "arith_mod10", "--n-samples", "4"]
    proc = run_hyrl("eval", *args, "--seed", "5", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "eval.json").read_text())
    assert report["model"]["kind"] == "hf" and report["settings"]["sampling_rng"] == "seed 5"
    metrics = report["metrics"]
    assert metrics["eval/num_responses"] == 20 * 4
    # exact_match rewards are 0 or 1: pass@1 is the mean@4 accuracy, and pass@k grows with k
    assert metrics["eval/pass@1"] == pytest.approx(metrics["eval/accuracy"], abs=1e-12)
    assert metrics["eval/pass@1"] <= metrics["eval/pass@2"] <= metrics["eval/pass@4"] <= 1.0
    assert 1.0 <= metrics["eval/response_len_mean"] <= 2.0  # --rollout-max-response-len 2
    table = (out / "eval.md").read_text()
    assert proc.stdout == table  # without --json stdout is the markdown
    assert "| set | prompts | responses | mean@4 accuracy | pass@1 | pass@2 | pass@4 |" in table
    assert f"| 20 | 80 | {metrics['eval/accuracy']:.4f} |" in table


def test_flags_that_contradict_the_checkpoint_are_refused_naming_them(saved_run, capsys):
    _, ckpt = saved_run
    assert main(["--load", str(ckpt), "--num-experts", "8"]) == 2
    err = capsys.readouterr().err
    assert f"hyrl eval: error: --load={ckpt / 'step_2'}: the checkpoint's architecture" in err
    assert "--num-experts: 4 in the checkpoint, 8 in the flags" in err
    data = str(DATA / "tiny_arith.jsonl")
    assert main(["--load", str(ckpt), "--eval-prompt-data", data]) == 2
    err = capsys.readouterr().err  # the run's task is the built-in one: no data files
    assert "hyrl eval: error: --eval-prompt-data=" in err
    assert "applies to --task prompt_data, not arith_mod10" in err
