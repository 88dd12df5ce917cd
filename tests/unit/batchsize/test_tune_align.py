"""`hyrl tune`'s alignment check (hyrl.batchsize.tune.align: the verdicts, run_align_check)
against a stand-in recipe whose curves are known in closed form, so every verdict is checkable
by hand.

The stand-in recipe (a Python script behind bash, as a recipe is) takes the flags `hyrl sweep`
appends; with --dry-run it prints the resolved configuration, otherwise it writes a run
directory: eval/accuracy = samples / (20,000 x k(B)) after every rollout step, k = 1 up to
B = 256 and k = 2 above (the larger batch needs twice the samples at every level), 1 s per
rollout step, stopping at --target when --stop-at-target is given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from hyrl.batchsize.tune.align import (
    SLACK,
    AlignCheckError,
    budget_steps,
    level,
    members,
    run_align_check,
    start_value,
    verdicts,
)
from hyrl.batchsize.tune.plan import TunePlan

FAKE = r"""
import json, math, sys
from pathlib import Path

args = sys.argv[1:]
def flag(name, default=None):
    value = default
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
    return value

P = int(flag("--rollout-batch-size", "16")); G = 8; B = int(flag("--global-batch-size", "128"))
B0 = int(flag("--base-global-batch-size", "128")); lr0 = float(flag("--base-lr", "0.001"))
lr = lr0 * (B / B0) ** (0.5 if flag("--lr-scaling") == "sqrt" else 0.0)
config = {
    "rollout_batch_size": P, "n_samples_per_prompt": G, "global_batch_size": B, "lr": lr,
    "seed": int(flag("--seed", "1234")), "num_steps": int(flag("--num-steps", "1000")),
    "target": flag("--target", "eval/accuracy=0.9"), "eval_interval": 1,
    "noise_scale_beta": 0.99, "rollout_engine": "hf", "rollout_concurrency": 4096,
    "rollout_max_response_len": 2,
}
if "--dry-run" in args:
    print(json.dumps(config)); sys.exit(0)
run = Path(flag("--run-dir")); run.mkdir(parents=True)
(run / "config.json").write_text(json.dumps(config))
metric, value = config["target"].split("=")
value = float(value); k = 1.0 if B <= 256 else 2.0
records = [{"step": 0, "samples": 0, "elapsed_s": 0.0, metric: 0.0}]
reached = None
for step in range(1, config["num_steps"] + 1):
    samples = step * P * G
    acc = samples / (20000 * k)
    records.append({"step": step, "samples": samples, "elapsed_s": float(step), metric: acc})
    if acc >= value and reached is None:
        reached = records[-1]
        if "--stop-at-target" in args:
            break
(run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
summary = {"reached": reached is not None,
           "samples_to_target": reached["samples"] if reached else None}
(run / "summary.json").write_text(json.dumps(summary))
"""


@pytest.fixture
def fake_recipe(tmp_path: Path) -> Path:
    script = tmp_path / "fake_recipe.py"
    script.write_text(FAKE)
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "{script}" "$@"\n')
    return recipe


def _plan(tmp_path: Path, recipe: Path) -> TunePlan:
    return TunePlan(
        recipe=recipe,
        out=tmp_path / "out",
        mults=[1, 2, 4, 8],
        rule="sqrt",
        budget_samples=1024,
        probe_steps=3,
        verify=0,
        verify_samples=None,
        extra_args=[],
        env={"PATH": "/usr/bin:/bin"},
        config={"target": "eval/accuracy=0.9", "eval_interval": 1, "rollout_concurrency": 4096},
        base={"P0": 16, "G": 8, "B0": 128, "lr": 1e-3, "seed": 1234},
        align_check=True,
        align_fraction=0.5,
    )


def _pass1(tmp_path: Path) -> Path:
    run = tmp_path / "pass1"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps({"rollout_batch_size": 16, "n_samples_per_prompt": 8, "global_batch_size": 128})
    )
    recs = [{"step": 0, "samples": 0, "elapsed_s": 0.0, "eval/accuracy": 0.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def test_the_check_keeps_the_aligned_recommendation_and_rejects_the_departing_neighbour(
    tmp_path, fake_recipe
):
    plan = _plan(tmp_path, fake_recipe)
    report = {"recommendation": {"mult": 2}}
    check = run_align_check(plan, report, _pass1(tmp_path), Console(file=open("/dev/null", "w")))
    # level = 0 + 0.5 x (0.9 - 0) = 0.45; the reference (N = 128 a step) reaches it at
    # 0.45 x 20,000 = 9,000 samples: step ceil(9000 / 128) = 71, 9,088 samples
    assert check["level"] == pytest.approx(0.45)
    assert check["reference_samples_to_level"] == 71 * 128
    rows = {r["mult"]: r for r in check["rows"]}
    assert set(rows) == {2, 4}  # the recommendation and its larger neighbour
    # x2 (N = 256, k = 1): the same accuracy per sample: kept
    assert rows[2]["verdict"] == "kept" and rows[2]["aligned"]
    # x4 (B = 512, k = 2): at most 1.5 x 9,088 = 13,632 responses, ceil(13632 / 512) = 27
    # steps (13,824), where its accuracy is 13,824 / 40,000 = 0.35 < 0.45: never reached
    assert rows[4]["verdict"] == "rejected" and not rows[4]["reached"]
    assert "did not reach the level within 1.5x" in rows[4]["reason"]
    assert check["rejected_from"] == 4
    x4 = json.loads((tmp_path / "out" / "align" / "b512-sqrt-s1234" / "config.json").read_text())
    assert x4["num_steps"] == 27 and x4["target"] == "eval/accuracy=0.45"


def test_a_rejected_recommendation_says_why(tmp_path, fake_recipe):
    plan = _plan(tmp_path, fake_recipe)
    check = run_align_check(
        plan, {"recommendation": {"mult": 4}}, _pass1(tmp_path),
        Console(file=open("/dev/null", "w")),
    )  # fmt: skip
    rows = {r["mult"]: r for r in check["rows"]}
    assert set(rows) == {4, 8} and check["rejected_from"] == 4
    assert all(r["verdict"] == "rejected" for r in rows.values())


def test_the_pure_parts_by_hand():
    assert members([1, 2, 4, 8, 16], 1) == [2]  # x1: only its larger neighbour
    assert members([1, 2, 4, 8, 16], 4) == [4, 8]
    assert members([1, 2, 4], 4) == [4]  # the largest: no neighbour above
    assert level(0.1, 0.9, 0.5) == pytest.approx(0.5)
    with pytest.raises(AlignCheckError, match="not above"):
        level(0.9, 0.5, 0.5)
    assert budget_steps(9088, 512) == 27 and SLACK == 1.5
    assert start_value([{"step": 0}, {"eval/accuracy": 0.25}], "eval/accuracy") == 0.25
    with pytest.raises(AlignCheckError, match="logged no eval/accuracy"):
        start_value([{"step": 0}], "eval/accuracy")
    analysis = {
        "runs": [
            {"name": "ref", "reached": True, "aligned": True, "samples_ratio": 1.0,
             "time_ratio": 1.0, "best_value": 0.5, "alignment_reason": ""},
            {"name": "x2", "reached": True, "aligned": False, "samples_ratio": 1.4,
             "time_ratio": 1.1, "best_value": 0.5, "alignment_reason": "ratio 1.40 at 0.3"},
            {"name": "x4", "reached": True, "aligned": True, "samples_ratio": 1.1,
             "time_ratio": 0.9, "best_value": 0.5, "alignment_reason": ""},
        ]
    }  # fmt: skip
    rows, first = verdicts(analysis, {"ref": 1, "x2": 2, "x4": 4})
    # x2 departs: it and everything larger is rejected, x4 included though it was aligned
    assert first == 2 and [r["verdict"] for r in rows] == ["rejected", "kept"]
    assert "departs" in rows[0]["reason"] and "ratio 1.40 at 0.3" in rows[0]["reason"]
