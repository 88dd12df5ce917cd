"""--policy-loss gspo and --loss-agg-mode through the recipe: resolved, trained, recorded."""

import json
import math

from recipe_runs import records, run_recipe


def test_gspo_resolves_its_own_aggregation_and_trains_on_two_data_parallel_ranks(tmp_path):
    run_dir = tmp_path / "run"
    # dynamic sampling: groups of equal rewards (most, untrained) dropped, so A != 0
    flags = ("--num-steps", "2", "--policy-loss", "gspo", "--dynamic-sampling")
    proc = run_recipe(run_dir, *flags, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["loss_agg_mode"] == "seq-mean-token-mean"  # the paper's, when not given
    assert (config["gspo_eps_clip"], config["gspo_eps_clip_high"]) == (3e-4, 4e-4)
    for row in records(run_dir):
        assert math.isfinite(row["actor/grad_norm"]) and row["actor/grad_norm"] > 0
        assert "actor/noise_scale" in row  # measured on the loss's own normalisation


def test_a_gspo_clip_without_gspo_is_refused(tmp_path):
    proc = run_recipe(tmp_path / "run", "--gspo-eps-clip", "1e-3")
    assert proc.returncode == 2
    assert "--gspo-eps-clip" in proc.stderr and "--policy-loss gspo" in proc.stderr


def test_overlong_penalty_and_filtering_are_counted_in_the_records(tmp_path):
    # up to 4 tokens, the last 2 penalised: a 3-token response loses 0.5, a cut one (4) 1.0
    run_dir = tmp_path / "run"
    flags = ("--rollout-max-response-len", "4", "--overlong-buffer-len", "2")
    proc = run_recipe(run_dir, "--num-steps", "3", *flags, "--overlong-filtering")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in records(run_dir):
        truncated = row["train/truncated_frac"]
        assert row["train/overlong_filtered_frac"] == truncated  # the cut ones, masked out
        assert row["train/overlong_penalized_frac"] >= truncated  # ... and all penalised
        assert -1.0 <= row["train/overlong_penalty_mean"] <= -truncated  # -1 each at the limit
    assert any(row["train/truncated_frac"] > 0 for row in records(run_dir))  # it had some
