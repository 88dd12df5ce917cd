"""Evaluation's pass@k and the TensorBoard mirror end to end on the tiny recipe: pass@k next to
mean@k in metrics.jsonl, and the same scalars in the TensorBoard event file."""

import math

import pytest
from recipe_runs import records, run_recipe
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def test_pass_at_k_is_logged_and_tensorboard_holds_the_records(tmp_path):
    run_dir, tb_dir = tmp_path / "run", tmp_path / "tb"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "2",
        "--eval-interval",
        "2",
        "--n-samples-per-eval-prompt",
        "4",
        "--eval-pass-k",
        "1,4",
        "--tensorboard-dir",
        str(tb_dir),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    evals = [r for r in rows if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2]  # before training and after the last step
    for r in evals:
        # exact_match rewards are 0 or 1, so with the default threshold 1.0 a response is correct
        # exactly when its reward is 1, and pass@1 = mean over prompts of c/n = mean@k accuracy
        assert r["eval/pass@1"] == pytest.approx(r["eval/accuracy"], abs=1e-12)
        assert r["eval/pass@1"] <= r["eval/pass@4"] <= 1.0
        assert "eval/pass@2" not in r  # only the k values asked for
        assert r["eval/num_responses"] == 20 * 4  # round(0.2 x 100) held-out prompts x n

    accumulator = EventAccumulator(str(tb_dir))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    for key in ("train/reward_mean", "samples", "eval/accuracy", "eval/pass@1", "eval/pass@4"):
        assert key in tags, sorted(tags)
        expected = {int(r["step"]): r[key] for r in rows if key in r}
        got = {e.step: e.value for e in accumulator.Scalars(key)}
        assert set(got) == set(expected), key
        for step, value in expected.items():
            assert math.isclose(got[step], value, rel_tol=1e-6, abs_tol=1e-7), (key, step)
    assert "step" not in tags  # the step is the event's own step, not a scalar
