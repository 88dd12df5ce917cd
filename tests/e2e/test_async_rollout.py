"""--async-rollout end to end on the tiny recipe: K = 0 is the synchronous run, record for
record; K = 1 trains every response once within one policy version of the weights that
sampled it, with the in-process hf engine and with two hf engines on Ray; a checkpoint keeps
the rollouts generated ahead, so a resumed run trains them first and loses no prompt."""

import json

import pytest
from recipe_runs import records, run_recipe

CLOCKS = ("elapsed_s",)
QUEUE_KEYS = (
    "rollout/staleness_mean",
    "rollout/staleness_max",
    "rollout/stale_dropped",
    "rollout/stale_regenerated",
    "rollout/partial_frac",
    "perf/engine_idle_s",
)


def training(row: dict) -> dict:
    """A record without its clocks, perf/* and the queue's own rollout/staleness_* account."""
    return {
        k: v
        for k, v in row.items()
        if not k.startswith("perf/") and k not in CLOCKS and k not in QUEUE_KEYS
    }


def check_async_records(rows: list[dict], steps: int, k: int) -> None:
    assert [r["rollout_step"] for r in rows] == list(range(1, steps + 1))
    assert [r["samples"] for r in rows] == [128 * s for s in range(1, steps + 1)]
    assert [r["samples_generated"] for r in rows] == [r["samples"] for r in rows]  # none dropped
    for row in rows:
        assert set(QUEUE_KEYS) | {"perf/trainer_idle_s"} <= row.keys()
        assert 0 <= row["rollout/staleness_mean"] <= row["rollout/staleness_max"] <= k
        assert row["rollout/stale_dropped"] == 0 and row["rollout/partial_frac"] == 0.0
        assert row["perf/trainer_idle_s"] >= 0 and row["perf/engine_idle_s"] >= 0
        assert "perf/rollout_s" not in row  # generation runs on the worker, off the trainer


@pytest.mark.slow
def test_max_staleness_0_reproduces_the_synchronous_run_record_for_record(tmp_path):
    sync_dir, k0_dir = tmp_path / "sync", tmp_path / "k0"
    proc = run_recipe(sync_dir, "--num-steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_recipe(k0_dir, "--num-steps", "3", "--async-rollout", "--max-staleness", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sync, k0 = records(sync_dir), records(k0_dir)
    check_async_records(k0, 3, 0)
    assert all(r["rollout/staleness_max"] == 0 for r in k0)
    # the separate log-prob pass (async) and the update's own (sync) agree bit for bit
    assert [training(r) for r in k0] == [training(r) for r in sync]


@pytest.fixture(scope="module")
def k1_runs(tmp_path_factory):
    """K = 1, in-process engine: 3 steps saved, resumed to 5; and 5 in one go."""
    root = tmp_path_factory.mktemp("k1")
    flags = ("--async-rollout", "--max-staleness", "1")
    proc = run_recipe(root / "run", "--num-steps", "3", "--save", str(root / "ckpt"), *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_recipe(root / "whole", "--num-steps", "5", *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


@pytest.mark.slow
def test_max_staleness_1_in_process_trains_every_response_once_within_one_version(k1_runs):
    rows = records(k1_runs / "whole")
    check_async_records(rows, 5, 1)
    assert rows[0]["rollout/staleness_max"] == 0  # rollout 1: nothing trained before it


@pytest.mark.slow
def test_a_resumed_async_run_takes_the_saved_queue_first_and_loses_no_prompt(k1_runs):
    """Not bit for bit: the in-process engine samples on the worker thread from the process's
    CPU generator, which megatron's RNG tracker swaps in and out around every attention
    forward of the trainer on CPU (measured: two uninterrupted K = 1 runs differ from step 3).
    What is exact: the steps and samples, the saved rollout trained first, and the prompts."""
    import torch

    run_dir, ckpt = k1_runs / "run", k1_runs / "ckpt"
    queued = torch.load(ckpt / "step_3" / "rollout_queue.pt", weights_only=False)
    assert len(queued) == 1 and queued[0]["versions"] == [2]  # rollout 4, by step 2's weights
    saved_reward_mean = sum(queued[0]["batch"].rewards) / len(queued[0]["batch"].rewards)
    # P = 16 prompts a rollout: 3 trained and 1 queued
    assert (
        json.loads((ckpt / "step_3" / "trainer_state.json").read_text())["task"]["position"] == 64
    )
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "5",
        "--load",
        str(ckpt),
        "--save",
        str(ckpt),
        "--async-rollout",
        "--max-staleness",
        "1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed, whole = records(run_dir), records(k1_runs / "whole")
    check_async_records(resumed, 5, 1)
    assert [(r["step"], r["samples"]) for r in resumed] == [
        (r["step"], r["samples"]) for r in whole
    ]
    # the saved rollout, not a new one
    assert resumed[3]["train/reward_mean"] == pytest.approx(saved_reward_mean, abs=1e-12)
    assert resumed[3]["rollout/staleness_max"] == 1  # step 2's weights, trained after step 3
    # 5 trained and 1 queued again: no prompt skipped or drawn twice
    assert (
        json.loads((ckpt / "step_5" / "trainer_state.json").read_text())["task"]["position"] == 96
    )


@pytest.mark.slow
def test_a_checkpoint_with_a_queue_is_refused_without_async_rollout(tmp_path, k1_runs):
    proc = run_recipe(tmp_path / "run", "--num-steps", "5", "--load", str(k1_runs / "ckpt"))
    assert proc.returncode == 2
    assert "--async-rollout to resume it" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_max_staleness_1_with_two_hf_engines_on_ray(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "3",
        "--async-rollout",
        "--rollout-num-engines",
        "2",
        "--rollout-concurrency",
        "32",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    check_async_records(rows, 3, 1)
    assert all(r["perf/weight_sync_s"] > 0 for r in rows)
    assert all(r["rollout/engine_restarts"] == 0 for r in rows)


@pytest.mark.slow
def test_max_staleness_1_on_two_expert_parallel_ranks(tmp_path):
    """Rank 1 takes part in every weight sync while rank 0 holds the engine lock."""
    run_dir = tmp_path / "run"
    flags = ("--async-rollout", "--expert-model-parallel-size", "2")
    proc = run_recipe(run_dir, "--num-steps", "3", *flags, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_async_records(records(run_dir), 3, 1)
