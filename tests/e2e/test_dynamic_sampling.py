"""--dynamic-sampling end to end on the tiny recipe: groups of equal rewards are dropped and
more prompts generated; `samples` counts what the update consumed, `samples_generated` what
the engine decoded."""

from recipe_runs import records, run_recipe


def test_dropped_groups_are_regenerated_and_counted_apart_from_the_consumed_samples(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir, "--num-steps", "4", "--dynamic-sampling", "--dynamic-sampling-max-rounds", "3"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [r["samples"] for r in rows] == [128, 256, 384, 512]  # P x G per step, exactly
    generated = 0
    for row in rows:
        rounds = row["train/dynamic_sampling_rounds"]
        assert 1 <= rounds <= 3
        generated += rounds * 128  # every round decodes P x G
        assert row["samples_generated"] == generated >= row["samples"]
        filtered = round(row["train/filtered_groups_frac"] * rounds * 16)
        kept = rounds * 16 - filtered
        # fewer than P = 16 kept only when the rounds ran out, then filtered groups fill the step
        assert row["train/dynamic_sampling_filled_groups"] == max(0, 16 - kept)
        assert rounds == 3 or kept >= 16
    # the untrained policy rarely answers right: most groups are all-zero, so it had to refill
    assert rows[0]["samples_generated"] > rows[0]["samples"]


def test_a_custom_filter_that_keeps_every_group_generates_once(tmp_path):
    (tmp_path / "keep_all.py").write_text("def keep(rewards, finish_reasons):\n    return True\n")
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "2",
        "--dynamic-sampling",
        "--dynamic-sampling-filter-path",
        "keep_all:keep",
        extra_env={"PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in records(run_dir):
        assert row["train/dynamic_sampling_rounds"] == 1
        assert row["train/filtered_groups_frac"] == 0.0
        assert row["samples_generated"] == row["samples"]


def test_a_filter_that_does_not_import_is_refused_before_any_process_group(tmp_path):
    proc = run_recipe(
        tmp_path / "run",
        "--dynamic-sampling",
        "--dynamic-sampling-filter-path",
        "no_such_module_here:keep",
    )
    assert proc.returncode == 2
    assert "--dynamic-sampling-filter-path" in proc.stderr and "no_such_module_here" in proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
