"""tools/bench_vs_trl.py: the pure parts (arguments, the target rule, ratios, the report's shape).

No TRL and no training here: the benchmark itself is run by hand (docs/performance.md).
"""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from testpaths import ROOT
from trl_runs import comparison_run

TOOL = ROOT / "tools" / "bench_vs_trl.py"
_spec = importlib.util.spec_from_file_location("bench_vs_trl", TOOL)
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_vs_trl"] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)


def test_defaults_are_three_seeds_and_a_bounded_run():
    args = bench.parse_args([])
    assert (args.seeds, args.first_seed, args.window, args.threads) == (3, 1, 10, 1)
    assert 0 < args.target <= 1 and args.max_steps >= args.window
    assert args.out is None and not args.json and args.trl_worker is None


def test_flags_are_read():
    args = bench.parse_args(
        [
            "--seeds",
            "5",
            "--target",
            "0.9",
            "--max-steps",
            "300",
            "--window",
            "20",
            "--out",
            "o",
            "--json",
        ]
    )
    assert (args.seeds, args.target, args.max_steps, args.window) == (5, 0.9, 300, 20)
    assert args.out == Path("o") and args.json


@pytest.mark.parametrize(
    "flags",
    [
        ["--seeds", "0"],
        ["--target", "0"],
        ["--target", "1.5"],
        ["--window", "0"],
        ["--max-steps", "5", "--window", "10"],
        ["--threads", "0"],
    ],
)
def test_bad_flags_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(flags)
    assert "allowed" in capsys.readouterr().err


def test_target_needs_a_full_window_whose_mean_reaches_it():
    # windows of 2: (0+1)/2, (1+1)/2 -> reached at step 3, not at step 2 where one step is 1.0
    assert bench.step_reaching_target([0.0, 1.0, 1.0], target=1.0, window=2) == 3
    # a lucky first step alone does not count: the window is not full
    assert bench.step_reaching_target([1.0, 0.0, 0.0], target=0.9, window=2) is None
    # mean of (0.6, 0.8, 1.0) = 0.8 at step 4
    assert bench.step_reaching_target([0.0, 0.6, 0.8, 1.0], target=0.8, window=3) == 4
    assert bench.step_reaching_target([], target=0.5, window=1) is None


def test_outcome_reads_steps_samples_and_time_at_the_reaching_step():
    records = [
        {"step": i, "samples": 128 * i, "elapsed_s": 0.5 * i, "train/reward_mean": r}
        for i, r in enumerate([0.0, 0.5, 1.0, 1.0], start=1)
    ]
    out = bench.run_outcome(records, target=0.75, window=2)
    assert out["reached"] and out["steps_to_target"] == 3
    assert out["samples_to_target"] == 384 and out["time_to_target_s"] == 1.5
    assert out["steps"] == 4 and out["samples"] == 512 and out["elapsed_s"] == 2.0
    assert out["responses_per_s"] == 256.0  # 512 responses in 2 s
    missed = bench.run_outcome(records, target=1.0, window=4)
    assert not missed["reached"] and missed["time_to_target_s"] is None


def test_stage_shares_sum_each_stage_over_the_loop_time():
    records = [
        {
            "perf/rollout_s": 1.0,
            "perf/actor_train_s": 2.0,
            "perf/step_s": 3.0,
            "perf/rollout_tokens_per_s": 99.0,
            "perf/setup_s": 7.0,
        }
    ] * 2
    assert bench.stage_shares(records, elapsed_s=8.0) == {"actor_train": 0.5, "rollout": 0.25}


def test_a_seed_only_one_side_reached_is_that_sides_win_not_a_missing_value():
    per_seed = bench.target_ratios([10.0, None, 30.0, None], [5.0, 4.0, None, None])
    assert per_seed == [2.0, math.inf, 0.0, None]
    # without hyrl's miss the median would be 1.0; with it, hyrl's worst seeds count
    assert bench.spread(bench.target_ratios([1.0, None, None], [1.0, 2.0, 2.0]))["median"] == (
        math.inf
    )


def test_ratios_skip_missing_values_and_spread_takes_min_median_max():
    per_seed = bench.ratios([10.0, None, 30.0, 8.0], [5.0, 4.0, 10.0, 8.0])
    assert per_seed == [2.0, None, 3.0, 1.0]
    assert bench.spread(per_seed) == {"min": 1.0, "median": 2.0, "max": 3.0, "count": 3}
    assert bench.spread([None]) == {"min": None, "median": None, "max": None, "count": 0}


def _run(framework, seed, time_s, rate):
    return comparison_run(framework, seed, time_s, rate, stage_share={"rollout": 0.25})


def test_report_has_per_seed_lists_medians_and_the_machine():
    machine = {
        "cpu_model": "cpu",
        "cores": 2,
        "python": "3.11",
        "torch": "t",
        "transformers": "x",
        "torch_trl_env": "t",
        "transformers_trl_env": "x",
        "trl": "1.16.0",
        "accelerate": "a",
    }
    runs = [
        _run("hyrl", 1, 10.0, 200.0),
        _run("trl", 1, 20.0, 100.0),
        _run("hyrl", 2, None, 300.0),
        _run("trl", 2, 30.0, 100.0),
        _run("hyrl", 3, 12.0, 240.0),
        _run("trl", 3, 24.0, 120.0),
    ]
    report = bench.build_report(
        seeds=[1, 2, 3],
        runs=runs,
        machine=machine,
        settings=bench.GrpoSettings(),
        target=0.8,
        window=10,
        max_steps=800,
        threads=1,
        command="python tools/bench_vs_trl.py",
    )
    json.dumps(report)  # one JSON object, nothing unserialisable
    assert report["seeds"] == [1, 2, 3]
    assert report["hyrl_time_to_target_s"] == [10.0, None, 12.0]
    assert report["trl_time_to_target_s"] == [20.0, 30.0, 24.0]
    # seeds 1 and 3: 0.5 and 0.5; seed 2, which only TRL reached, counts as hyrl's loss (inf)
    assert report["ratios_hyrl_over_trl"]["time_to_target"]["per_seed"] == [0.5, math.inf, 0.5]
    assert report["time_to_target_ratio_median"] == 0.5
    assert report["throughput_ratio_median"] == 2.0  # 2.0, 3.0, 2.0
    assert report["ratios_hyrl_over_trl"]["time_to_target"]["count"] == 3
    assert report["settings"]["responses_per_step"] == 128
    assert report["machine"]["trl"] == "1.16.0"
    assert report["hyrl_stage_share_median"] == {"rollout": 0.25}
    table = bench.render_markdown(report)
    assert (
        "| 2 | hyrl | not reached |" in table
        and "| time to target | 0.50 | 0.50 | inf (hyrl not reached) | 3 |" in table
    )


def test_missing_bench_environment_is_refused_with_the_commands(monkeypatch, tmp_path, capsys):
    trl_side = sys.modules["bench_vs_trl_trl"]  # the TRL side, imported by the tool
    monkeypatch.setattr(trl_side, "BENCH_PYTHON", tmp_path / "no-venv" / "bin" / "python")
    monkeypatch.setattr(trl_side, "REPO", tmp_path)
    assert bench.main([]) == 2
    err = capsys.readouterr().err
    assert "python3 -m venv .venv-bench" in err and "trl==" in err
