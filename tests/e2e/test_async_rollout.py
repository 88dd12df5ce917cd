"""--async-rollout end to end on the tiny recipe: K = 0 is the synchronous run, record for
record; K = 1 trains every response once within one policy version of the weights that
sampled it, with the in-process hf engine and with two hf engines on Ray; a checkpoint keeps
the rollouts generated ahead, so a resumed run trains them first and loses no prompt. With
--inflight-weight-updates a weight sync lands inside the rollout generated ahead: its responses span
two versions, staleness (from each response's oldest token) stays within K, and a checkpoint
keeps the per-token versions of the partial rollout it holds."""

import json
from types import SimpleNamespace

import pytest
from recipe_runs import records, run_recipe
from subprocess_hooks import hook_env

CLOCKS = ("elapsed_s",)
QUEUE_KEYS = (
    "rollout/staleness_mean",
    "rollout/staleness_max",
    "rollout/stale_dropped",
    "rollout/stale_regenerated",
    "rollout/partial_frac",
    "rollout/partial_tokens_frac",
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
        assert row["rollout/partial_tokens_frac"] == 0.0  # no --inflight-weight-updates
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
    # the worker's own generation and scoring times, for hyrl tune's overlapped steps
    assert all(r["perf/worker_rollout_s"] > 0 and "perf/worker_reward_s" in r for r in rows)
    assert rows[0]["rollout/staleness_max"] == 0  # rollout 1: nothing trained before it


@pytest.mark.slow
def test_a_resumed_async_run_takes_the_saved_queue_first_and_loses_no_prompt(k1_runs):
    """Not bit for bit: the in-process engine samples on the worker thread from the process's
    CPU generator, which megatron's RNG tracker swaps in and out around every attention
    forward of the trainer on CPU (measured: two uninterrupted K = 1 runs differ from step 3).
    What is exact: the steps and samples, the saved rollout trained first, and the prompts."""
    import torch

    run_dir, ckpt = k1_runs / "run", k1_runs / "ckpt"
    # plain data: it loads without unpickling a class (hyrl.rollout.queue_state)
    queued = torch.load(ckpt / "step_3" / "rollout_queue.pt", weights_only=True)
    assert len(queued) == 1 and queued[0]["versions"] == [2]  # rollout 4, by step 2's weights
    rewards = queued[0]["batch"]["rewards"]
    saved_reward_mean = sum(rewards) / len(rewards)
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


# --inflight-weight-updates: one-token segments of responses up to 8 tokens, a 0.1 s pause after
# each engine call (a test hook: tests/helpers/subprocess_hooks.py), so the rollout generated
# ahead outlasts a training step and the step's weight sync lands between its segments; its first
# segment starts at once, on the weights it found.
PARTIAL_FLAGS = (
    "--async-rollout",
    "--max-staleness",
    "1",
    "--inflight-weight-updates",
    "--inflight-segment-tokens",
    "1",
    "--rollout-max-response-len",
    "8",
)
SLOW_SEGMENTS = hook_env(HYRL_TEST_GENERATION_DELAY_S="0.1")


@pytest.fixture(scope="module")
def partial_run(tmp_path_factory):
    """3 steps of partial rollouts, saved with the rollout generated ahead."""
    root = tmp_path_factory.mktemp("partial")
    proc = run_recipe(
        root / "run",
        "--num-steps",
        "3",
        "--save",
        str(root / "ckpt"),
        *PARTIAL_FLAGS,
        extra_env=SLOW_SEGMENTS,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def check_partial_records(rows: list[dict], steps: int) -> None:
    assert [r["rollout_step"] for r in rows] == list(range(1, steps + 1))
    assert [r["samples"] for r in rows] == [128 * s for s in range(1, steps + 1)]
    assert [r["samples_generated"] for r in rows] == [r["samples"] for r in rows]  # none dropped
    for row in rows:
        assert 0 <= row["rollout/staleness_mean"] <= row["rollout/staleness_max"] <= 1
        assert row["rollout/stale_dropped"] == 0
        partial, partial_tokens = row["rollout/partial_frac"], row["rollout/partial_tokens_frac"]
        assert 0 <= partial <= 1 and 0 <= partial_tokens <= 1
        # a response's tokens all of one version, or some of a newer: both or neither
        assert (partial > 0) == (partial_tokens > 0)


@pytest.mark.slow
def test_partial_rollouts_span_a_weight_sync_and_stay_within_max_staleness(partial_run):
    rows = records(partial_run / "run")
    check_partial_records(rows, 3)
    # rollout 1 is generated while the trainer waits; rollouts 2 and 3 while a step trains
    assert rows[0]["rollout/partial_frac"] == 0.0 and rows[0]["rollout/staleness_max"] == 0
    assert max(r["rollout/partial_frac"] for r in rows[1:]) > 0


@pytest.mark.slow
def test_a_resume_trains_the_saved_partial_rollout_first_and_loses_no_prompt(partial_run):
    import torch

    from hyrl.rollout.partial import version_metrics

    run_dir, ckpt = partial_run / "run", partial_run / "ckpt"
    [queued] = torch.load(ckpt / "step_3" / "rollout_queue.pt", weights_only=True)
    saved = SimpleNamespace(**queued["batch"])
    # rollout 4: started on step 2's weights (version 2), continued after step 3's sync
    assert min(min(v) for v in saved.response_versions) == 2
    assert max(max(v) for v in saved.response_versions) == 3
    assert version_metrics(saved.response_versions)["rollout/partial_frac"] > 0
    assert [len(v) for v in saved.response_versions] == [len(r) for r in saved.responses]
    state = json.loads((ckpt / "step_3" / "trainer_state.json").read_text())
    assert state["task"]["position"] == 64  # P = 16 prompts a rollout: 3 trained and 1 queued
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "5",
        "--load",
        str(ckpt),
        "--save",
        str(ckpt),
        *PARTIAL_FLAGS,
        extra_env=SLOW_SEGMENTS,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = records(run_dir)
    check_partial_records(resumed, 5)
    # the saved rollout, per-token versions and all, is step 4's
    assert resumed[3]["train/reward_mean"] == pytest.approx(
        sum(saved.rewards) / len(saved.rewards), abs=1e-12
    )
    assert resumed[3]["rollout/partial_frac"] == pytest.approx(
        version_metrics(saved.response_versions)["rollout/partial_frac"]
    )
    assert resumed[3]["rollout/staleness_max"] == 1
    # 5 trained and 1 queued again: no prompt skipped or drawn twice
    state = json.loads((ckpt / "step_5" / "trainer_state.json").read_text())
    assert state["task"]["position"] == 96


@pytest.mark.slow
def test_partial_rollout_without_async_rollout_is_refused_before_anything_starts(tmp_path):
    proc = run_recipe(tmp_path / "run", "--num-steps", "1", "--inflight-weight-updates")
    assert proc.returncode == 2
    assert "--inflight-weight-updates=True" in proc.stderr and "--async-rollout" in proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
