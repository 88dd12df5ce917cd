"""Exactly on-policy (one actor optimizer step per rollout), the old log-probs come from the
update's own first forward pass instead of a separate no-grad pass over the same weights: every
record is the same as with the separate pass (--recompute-old-log-probs), bit for bit."""

import json
import statistics

import pytest
from recipe_runs import PP2_VIRTUAL_STAGES, PPO_RECIPE, RECIPE, records, run_recipe

# wall-clock fields differ between any two runs; everything else must not
CLOCKS = ("time", "elapsed_s")


def _same_records(fused_dir, separate_dir) -> None:
    fused, separate = records(fused_dir), records(separate_dir)
    assert len(fused) == len(separate) > 0
    for a, b in zip(fused, separate, strict=True):
        keys = {k for k in a.keys() | b.keys() if not k.startswith("perf/") and k not in CLOCKS}
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}, a["step"]


def _from_update(run_dir) -> bool:
    return json.loads((run_dir / "config.json").read_text())["old_log_probs_from_update"]


def _logprob_s(run_dir) -> float:
    return statistics.median(r["perf/logprob_s"] for r in records(run_dir)[2:])


CASES = {
    # TIS and MIS weights computed inside the update; routing replayed and compared there
    "tis-mis-replay": (RECIPE, 1, ["--use-tis", "--use-mis", "--use-rollout-routing-replay"]),
    # EP spans DP: agreed micro-batch counts with loss-free padding rows, token-packed
    "ep2-dynamic": (
        RECIPE,
        2,
        [
            "--expert-model-parallel-size",
            "2",
            "--use-dynamic-batch-size",
            "--max-tokens-per-gpu",
            "64",
            "--measure-routing-mismatch",
        ],
    ),
    # the last stage runs the loss: its old log-probs reach the first
    "pp2": (RECIPE, 2, ["--pipeline-model-parallel-size", "2", "--use-tis"]),
    # the same through the interleaved schedule: 4 layers, two 1-layer chunks per rank
    "pp2-virtual-stages": (RECIPE, 2, [*PP2_VIRTUAL_STAGES, "--use-tis"]),
    # critic-only warm-up rollouts keep the separate pass; the KL reference pass stays
    "ppo-warmup-kl": (
        PPO_RECIPE,
        1,
        ["--num-critic-only-steps", "2", "--kl-loss-coef", "0.01", "--entropy-coef", "0.01"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_old_log_probs_from_the_update_give_the_same_records_as_the_separate_pass(tmp_path, case):
    recipe, nproc, flags = CASES[case]
    flags = ["--num-steps", "5", *flags]
    fused, separate = tmp_path / "fused", tmp_path / "separate"
    proc = run_recipe(fused, *flags, nproc=nproc, recipe=recipe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_recipe(separate, *flags, "--recompute-old-log-probs", nproc=nproc, recipe=recipe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _from_update(fused) and not _from_update(separate)
    _same_records(fused, separate)
    if case == "tis-mis-replay":  # no reference: the log-prob stage has nothing left to run
        assert _logprob_s(fused) < 0.2 * _logprob_s(separate)
        assert all("mismatch/tis_clipped_frac" in r for r in records(fused))


def test_two_optimizer_steps_per_rollout_keep_the_separate_pass(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "2", "--num-steps-per-rollout", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _from_update(run_dir)
    assert all("mismatch/kl" in r for r in records(run_dir)[::2])  # each rollout's first record
