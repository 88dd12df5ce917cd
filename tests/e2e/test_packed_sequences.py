"""--qkv-format thd end to end: a run with each micro-batch's sequences packed into one gives
the records of the padded run (bshd) on the same seed, to float32 rounding, on every layout
whose agreement it needs: EP's allgather dispatch across DP ranks (equal packed totals), TP
with sequence parallelism (a multiple of TP tokens), PP (one packed shape per pass), routing
replay (the engine's ids packed as the tokens are), and PPO's critic."""

import json

import pytest
from recipe_runs import PP2_VIRTUAL_STAGES, PPO_RECIPE, RECIPE, records, run_recipe

# wall-clock and speed fields differ between any two runs
CLOCKS = ("time", "elapsed_s")

CASES = {
    "replay-tis": (RECIPE, 1, ["--use-rollout-routing-replay", "--use-tis"]),
    "ep2-dynamic": (
        RECIPE,
        2,
        [
            "--expert-model-parallel-size",
            "2",
            "--use-dynamic-batch-size",
            "--max-tokens-per-gpu",
            "64",
        ],
    ),
    "tp2-sp": (RECIPE, 2, ["--tensor-model-parallel-size", "2", "--sequence-parallel"]),
    "pp2": (RECIPE, 2, ["--pipeline-model-parallel-size", "2"]),
    "pp2-virtual-stages": (RECIPE, 2, [*PP2_VIRTUAL_STAGES]),
    "ppo": (PPO_RECIPE, 1, ["--kl-loss-coef", "0.01", "--num-critic-only-steps", "1"]),
}


def _close_records(packed_dir, padded_dir) -> None:
    packed, padded = records(packed_dir), records(padded_dir)
    assert len(packed) == len(padded) > 0
    for a, b in zip(packed, padded, strict=True):
        keys = sorted(
            k for k in a.keys() & b.keys() if not k.startswith("perf/") and k not in CLOCKS
        )
        assert keys
        for key in keys:
            if isinstance(a[key], float) and isinstance(b[key], float):
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)
            else:
                assert a[key] == b[key], (a["step"], key)


@pytest.mark.parametrize("case", list(CASES))
def test_packed_sequences_give_the_records_of_padded_rows(tmp_path, case):
    recipe, nproc, flags = CASES[case]
    flags = ["--num-steps", "4", *flags]
    packed, padded = tmp_path / "thd", tmp_path / "bshd"
    proc = run_recipe(packed, *flags, "--qkv-format", "thd", nproc=nproc, recipe=recipe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_recipe(padded, *flags, nproc=nproc, recipe=recipe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((packed / "config.json").read_text())["qkv_format"] == "thd"
    assert json.loads((padded / "config.json").read_text())["qkv_format"] == "bshd"
    _close_records(packed, padded)
