"""`hyrl tune recipes/tiny/grpo.sh` end to end with tiny budgets: pass 1, one probe, the model
and the report, through the real recipe and launcher."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_runs import RECIPE, ROOT


@pytest.mark.slow
def test_tune_of_the_tiny_recipe_writes_a_consistent_report(tmp_path):
    out = tmp_path / "tune"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(OMP_NUM_THREADS="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    # 4 rollout steps of pass 1 (512 responses), one round of probes at B = 128 and 256 of 2
    # steps; the recipe
    # has no --target, so no alignment check (tests/unit/batchsize/test_tune_align.py runs it)
    cmd = [sys.executable, "-m", "hyrl", "tune", str(RECIPE), "--out", str(out),
           "--batch-mults", "1,2", "--budget-samples", "512", "--probe-steps", "2",
           "--probe-rounds", "1", "--no-progress", "--align-check", "off"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    for name in ("report.json", "report.md", "noise_scale.png", "prediction.png"):
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert [c["mult"] for c in report["candidates"]] == [1, 2]
    ref, big = report["candidates"]
    assert ref["time_ratio"] == 1.0 and ref["responses_per_step"] == 128
    assert big["responses_per_step"] == 256 and big["concurrency"] == 128
    assert big["time_ratio"] == pytest.approx(big["samples_ratio"] / big["throughput_ratio"])
    b_noise = report["noise"]["value"]  # samples E(B) = E_min (1 + B / B_noise)
    expected = 2.0 if b_noise <= 0 else (1 + 256 / b_noise) / (1 + 128 / b_noise)
    assert big["samples_ratio"] == pytest.approx(expected) and big["samples_ratio"] >= 1
    rec = report["recommendation"]
    best = min(report["candidates"], key=lambda c: (c["time_ratio"], c["responses_per_step"]))
    assert rec["mult"] == best["mult"]
    assert rec["lr"] == pytest.approx(3e-4 * (rec["responses_per_step"] / 128) ** 0.5)
    # pass 1 ran its budget at the reference batch; the probe its two steps at B = 256
    pass1 = [json.loads(x) for x in next((out / "pass1").glob("b128-*/metrics.jsonl")).open()]
    assert pass1[-1]["samples"] == 512
    probe = [
        json.loads(x) for x in (out / "probes" / "b256-sqrt-s1234-r1" / "metrics.jsonl").open()
    ]
    assert [r["samples"] for r in probe] == [256, 512]
    md = (out / "report.md").read_text()
    assert f"**B = {rec['responses_per_step']}**" in md
    assert f"report: {out / 'report.md'}" in proc.stdout
    # the same command again finds every step done and only rewrites the report
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((out / "report.json").read_text())["recommendation"] == rec


@pytest.mark.slow
def test_tune_of_the_tiny_ppo_recipe_gives_the_critic_its_batch(tmp_path):
    """PPO: pass 1 past the recipe's 5 critic-only steps, a probe whose every step trains the
    actor (the warm-up switched off), and a critic batch from the critic's noise scale."""
    from recipe_runs import PPO_RECIPE

    out = tmp_path / "tune"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(OMP_NUM_THREADS="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    # 10 rollout steps of pass 1 (1,280 responses: 5 critic-only, 5 with the actor too)
    cmd = [sys.executable, "-m", "hyrl", "tune", str(PPO_RECIPE), "--out", str(out),
           "--batch-mults", "1,2", "--budget-samples", "1280", "--probe-steps", "2",
           "--probe-rounds", "1", "--no-progress", "--align-check", "off"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    report = json.loads((out / "report.json").read_text())
    rec = report["recommendation"]
    assert report["critic_noise"] is not None and rec["critic_noise_scale"] > 0
    assert rec["critic_batch"] >= 1 and rec["responses_per_step"] % rec["critic_batch"] == 0
    probe = [
        json.loads(x) for x in (out / "probes" / "b256-sqrt-s1234-r1" / "metrics.jsonl").open()
    ]
    assert [r["actor/optimizer_steps"] for r in probe] == [1, 2]  # no critic-only step
