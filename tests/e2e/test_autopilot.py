"""--batch-schedule auto end to end on the tiny recipes: under the critical objective B follows
the measured noise scale (at least one change in a few steps with a small range), samples stays
exact, the lr is re-derived at every change, and a resumed run continues with the autopilot's
state; under the goodput objective (the default) the loop hands every step's timers to the
autopilot, which logs the throughput it holds and checkpoints it, and without a profile explores
a neighbouring B within --autopilot-explore-budget (autopilot/explore_* on every record)."""

import json

import pytest
from recipe_runs import PPO_RECIPE, records, run_recipe

# The tiny GRPO recipe: B=128, micro batch 32 on one rank (batch unit 32); warm after one
# measurement and any difference changes B, so a few steps show a change.
RANGE = (
    "--batch-schedule", "auto", "--autopilot-min", "64", "--autopilot-max", "256",
    "--autopilot-warmup", "1", "--autopilot-hysteresis", "1.0",
    "--base-lr", "3e-4", "--lr-scaling", "sqrt",
)  # fmt: skip
AUTO = (*RANGE, "--autopilot-objective", "critical")
STEPS = 4


def comparable(row: dict) -> dict:
    return {
        k: v
        for k, v in row.items()
        if isinstance(v, (int, float)) and not k.startswith("perf/") and k != "elapsed_s"
    }


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("auto") / "run"
    proc = run_recipe(run_dir, "--num-steps", str(STEPS), *AUTO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir, proc


@pytest.mark.slow
def test_b_follows_the_noise_scale_and_samples_and_lr_follow_b(whole_run):
    run_dir, proc = whole_run
    rows = records(run_dir)
    sizes = [r["batch/responses_per_step"] for r in rows]
    assert len(set(sizes)) > 1, sizes  # it changed at least once
    assert rows[-1]["autopilot/changes"] >= 1
    assert "hyrl: autopilot: the actor's B 128 ->" in proc.stdout
    assert all(b in range(64, 257, 32) for b in sizes)
    for row in rows:  # P follows B (G = 8, one step per rollout); lr = 3e-4 x sqrt(B / 128)
        assert row["batch/prompts_per_step"] == row["batch/responses_per_step"] // 8
        assert row["actor/lr"] == pytest.approx(
            3e-4 * (row["batch/responses_per_step"] / 128) ** 0.5
        )
    consumed = 0  # samples: the responses of the optimizer steps that were not skipped
    for row in rows:
        consumed += 0 if row["actor/skipped"] else row["batch/responses_per_step"]
        assert row["samples"] == consumed
    # each change goes to the target logged with it, from the noise scale measured before
    for before, after in zip(rows, rows[1:]):
        if after["batch/responses_per_step"] != before["batch/responses_per_step"]:
            assert after["autopilot/target_b"] == after["batch/responses_per_step"]
            assert after["autopilot/noise_scale_used"] == pytest.approx(before["actor/noise_scale"])
            assert after["autopilot/changes"] == before["autopilot/changes"] + 1


@pytest.mark.slow
def test_a_resumed_run_continues_with_the_autopilots_state(tmp_path, whole_run):
    whole_dir, _ = whole_run
    whole = records(whole_dir)
    changed = next(
        i for i in range(1, STEPS) if whole[i]["batch/responses_per_step"] != 128
    )  # the first step under a changed B: the checkpoint before it must carry the change
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    proc = run_recipe(run_dir, "--num-steps", str(changed), "--save", str(ckpt), *AUTO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((ckpt / f"step_{changed}" / "trainer_state.json").read_text())
    assert state["autopilot"]["actor"]["current"] == whole[changed]["batch/responses_per_step"]
    proc = run_recipe(
        run_dir, "--num-steps", str(STEPS), "--load", str(ckpt), "--save", str(ckpt), *AUTO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = records(run_dir)
    assert [r["rollout_step"] for r in resumed] == list(range(1, STEPS + 1))
    for got, want in zip(resumed[changed:], whole[changed:]):
        got, want = comparable(got), comparable(want)
        assert got.keys() == want.keys()
        assert all(got[k] == pytest.approx(want[k], abs=1e-6) for k in want), got["step"]


@pytest.mark.slow
def test_ppo_critic_batch_follows_its_own_noise_scale_with_its_lr(tmp_path):
    # the critic starts at 64 (its lr reference B0), micro batch 16: [32, 128] in 16s
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir, "--num-steps", "3", "--num-critic-only-steps", "0", *AUTO,
        "--critic-global-batch-size", "64", "--critic-micro-batch-size", "16",
        "--critic-base-lr", "1e-3", "--critic-lr-scaling", "sqrt",
        "--critic-autopilot-min", "32", "--critic-autopilot-max", "128",
        recipe=PPO_RECIPE,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert rows[-1]["autopilot/critic_changes"] >= 1
    critic_steps = 0
    for row in rows:
        critic_b, rollout = row["batch/critic_responses_per_step"], row["batch/responses_per_step"]
        assert critic_b in range(32, 129, 16) and rollout % critic_b == 0
        critic_steps += rollout // critic_b  # one step per critic batch of the rollout
        assert row["critic/optimizer_steps"] == critic_steps
        assert row["critic/lr"] == pytest.approx(1e-3 * (critic_b / 64) ** 0.5)
        assert row["actor/lr"] == pytest.approx(3e-4 * (rollout / 128) ** 0.5)


@pytest.mark.slow
def test_goodput_takes_every_steps_timers_and_checkpoints_the_throughput(tmp_path):
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    proc = run_recipe(
        run_dir, "--num-steps", str(STEPS), "--save", str(ckpt), *RANGE,
        "--autopilot-min-gain", "1.0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    # step 1 warms up and is not timed: from step 3 on every record carries the R the
    # autopilot holds for its B (measured at step 2 or later, or predicted from it)
    assert all(r["autopilot/responses_per_s"] > 0 for r in rows[2:]), rows[2:]
    assert all(r["batch/responses_per_step"] in range(64, 257, 32) for r in rows)
    state = json.loads((ckpt / f"step_{STEPS}" / "trainer_state.json").read_text())
    measured = state["autopilot"]["throughput"]["measured"]
    assert "128" in measured and len(measured["128"][0]) == 4  # (fixed, gen, other, tokens)
    fixed, gen, other, tokens = measured["128"][0]
    assert fixed > 0 and gen > 0 and other > 0 and tokens > 0


@pytest.mark.slow
def test_stop_at_target_ends_the_run_at_the_target(tmp_path):
    run_dir = tmp_path / "run"
    # the reward is >= 0 from the first rollout step on
    proc = run_recipe(
        run_dir, "--num-steps", "4", "--target", "train/reward_mean=0.0", "--stop-at-target"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["rollout_step"] for r in records(run_dir)] == [1]
    assert "--stop-at-target ends the run" in proc.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reached"] is True and summary["samples"] == 128


@pytest.mark.slow
def test_goodput_without_a_profile_explores_a_neighbouring_batch_within_its_budget(tmp_path):
    # budget 0.5: a probe of 3 steps may start after 3 rollout steps (3 <= 0.5 x 6); warm after
    # one measurement, so from step 3 on the autopilot decides or explores every step
    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "7", *RANGE, "--autopilot-explore-budget", "0.5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    sizes = [r["batch/responses_per_step"] for r in rows]
    assert len(set(sizes)) > 1, sizes  # explored or decided: B left 128 at least once
    explored = consumed = 0
    for step, row in enumerate(rows, start=1):
        explored += row["autopilot/explore_active"]
        assert row["autopilot/explore_steps"] == explored
        assert row["autopilot/explore_fraction"] == pytest.approx(explored / step)
        assert explored <= 0.5 * step
        if row["autopilot/explore_active"]:  # a probe's step: a real step at its B
            assert row["autopilot/explore_target_batch"] == row["batch/responses_per_step"]
        assert row["actor/lr"] == pytest.approx(
            3e-4 * (row["batch/responses_per_step"] / 128) ** 0.5
        )
        consumed += 0 if row["actor/skipped"] else row["batch/responses_per_step"]
        assert row["samples"] == consumed
    if explored:
        assert "hyrl: autopilot: exploring B" in proc.stdout
        assert "hyrl: autopilot: explored B" in proc.stdout or rows[-1]["autopilot/explore_active"]
