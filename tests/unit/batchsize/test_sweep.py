"""hyrl.batchsize.sweep.run and `hyrl sweep`: plan, validate, run, resume a batch-size sweep.

The runs go through a fake recipe (a bash script written here) that mimics what matters of
`hyrl train`: later flags win, `--dry-run` prints the resolved configuration as JSON on stdout,
a run writes config.json, metrics.jsonl and, when it ends, summary.json, and a directory that
already holds metrics.jsonl is refused. The real trainer is never started.
"""

from __future__ import annotations

import io
import json
import math
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console
from testpaths import ROOT

from hyrl.batchsize.analyze import collect_runs
from hyrl.batchsize.sweep.plan import member_flags
from hyrl.batchsize.sweep.run import SweepError, plan_members, run_sweep
from hyrl.cli import main

BASE = {"P0": 16, "G": 8, "B0": 128, "lr": 3e-4}

FAKE_RECIPE = r"""#!/usr/bin/env bash
# Fake recipe: its own flags first, the caller's last (they win), like recipes/tiny/grpo.sh.
set -euo pipefail
echo "+ fake launcher $*" >&2
exec "__PYTHON__" - --rollout-batch-size 16 --n-samples-per-prompt 8 --global-batch-size 128 \
  --micro-batch-size 32 --lr 3e-4 --num-steps 3 --run-dir runs/fake --seed 1234 "$@" <<'PY'
import json, os, sys

flags, dry = {}, False
args = sys.argv[1:]
i = 0
while i < len(args):
    a = args[i]
    if a == "--dry-run":
        dry = True
    elif a in ("--progress", "--no-progress"):
        flags["progress"] = a == "--progress"
    elif a.startswith("--") and i + 1 < len(args):
        flags[a[2:].replace("-", "_")] = args[i + 1]
        i += 1
    else:
        print(f"hyrl train: error: {a}: stray argument", file=sys.stderr)
        sys.exit(2)
    i += 1
known = {"rollout_batch_size", "n_samples_per_prompt", "global_batch_size", "micro_batch_size",
         "lr", "base_lr", "base_global_batch_size", "lr_scaling", "num_steps", "run_dir", "seed",
         "progress", "eval_interval", "target"}
for name in flags:
    if name not in known:
        print(f"hyrl train: error: --{name.replace('_', '-')}: unknown flag", file=sys.stderr)
        sys.exit(2)

none = lambda v: None if v in (None, "none") else v
P, G = int(flags["rollout_batch_size"]), int(flags["n_samples_per_prompt"])
B = int(none(flags.get("global_batch_size")) or P * G)
rule = flags.get("lr_scaling", "none")
base_lr = none(flags.get("base_lr"))
if base_lr is not None:
    B0 = int(none(flags.get("base_global_batch_size")) or B)
    lr = float(base_lr) * (B / B0) ** {"none": 0.0, "sqrt": 0.5, "linear": 1.0}[rule]
else:
    lr = float(none(flags.get("lr")) or 3e-4)
if str(B) == os.environ.get("FAKE_BAD_B"):
    print(f"hyrl train: error: --micro-batch-size=32: does not divide B={B} here; "
          "allowed: a divisor", file=sys.stderr)
    sys.exit(2)
run_dir = flags["run_dir"]
if os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
    print(f"hyrl train: error: --run-dir={run_dir}: already holds a run", file=sys.stderr)
    sys.exit(2)
cfg = {"rollout_batch_size": P, "n_samples_per_prompt": G, "global_batch_size": B,
       "micro_batch_size": int(flags["micro_batch_size"]), "lr": lr,
       "base_lr": base_lr and float(base_lr),
       "lr_scaling": rule, "seed": int(flags["seed"]), "num_steps": int(flags["num_steps"]),
       "run_dir": run_dir, "progress": flags.get("progress", True), "batch_ramp": None,
       "target": None, "optimizer_steps_per_rollout": P * G // B}
if dry:
    print(json.dumps(cfg, indent=2, sort_keys=True))
    sys.exit(0)

calls = os.environ.get("FAKE_CALLS")
if calls:
    with open(calls, "a") as f:
        f.write(os.path.basename(run_dir) + "\n")
os.makedirs(run_dir, exist_ok=True)
with open(os.path.join(run_dir, "config.json"), "w") as f:
    json.dump(cfg, f)
if os.environ.get("FAKE_SLEEP"):
    with open(os.path.join(run_dir, "pid"), "w") as f:
        f.write(str(os.getpid()))
    import time
    time.sleep(float(os.environ["FAKE_SLEEP"]))
if os.environ.get("FAKE_WAIT_FOR"):  # hold the run until the test creates this file
    import time
    while not os.path.exists(os.environ["FAKE_WAIT_FOR"]):
        time.sleep(0.02)
fail = str(B) == os.environ.get("FAKE_FAIL_B")
with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
    for step in (1, 2)[: 1 if fail else 2]:
        step_s = float(os.environ.get(f"FAKE_STEP_S_{B}", "1.0"))
        f.write(json.dumps({"step": step, "samples": step * P * G, "elapsed_s": step_s * step,
                            "eval/accuracy": 0.2 * step}) + "\n")
print(f"training {run_dir}")
if fail:
    print("boom: simulated crash", file=sys.stderr)
    sys.exit(3)
summary = {"steps": 2, "samples": 2 * P * G}
if os.environ.get("FAKE_TARGET"):  # eval/accuracy=V: reached at step 1 (0.2) or 2 (0.4), or not
    value = float(os.environ["FAKE_TARGET"].split("=")[1])
    step = next((s for s in (1, 2) if 0.2 * s >= value), None)
    summary.update(target={"metric": "eval/accuracy", "value": value}, reached=step is not None,
                   samples_to_target=step and step * P * G, time_to_target_s=step and 1.0 * step)
with open(os.path.join(run_dir, "summary.json"), "w") as f:
    json.dump(summary, f)
PY
"""


@pytest.fixture
def recipe(tmp_path) -> Path:
    path = tmp_path / "fake_recipe.sh"
    path.write_text(FAKE_RECIPE.replace("__PYTHON__", sys.executable))
    return path


@pytest.fixture
def calls(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_CALLS", str(path))
    for var in ("FAKE_FAIL_B", "FAKE_BAD_B", "FAKE_SLEEP", "FAKE_WAIT_FOR", "FAKE_TARGET"):
        monkeypatch.delenv(var, raising=False)
    return path


def launched(calls: Path) -> list[str]:
    return calls.read_text().split() if calls.exists() else []


def quiet_sweep(recipe, out, **kwargs) -> dict:
    kwargs.setdefault("console", Console(file=io.StringIO()))
    kwargs.setdefault("poll_s", 0.01)
    return run_sweep(recipe, out, **kwargs)


def read_sweep(out: Path) -> dict:
    return json.loads((out / "sweep.json").read_text())


# --- the plan --------------------------------------------------------------------------------


def test_plan_hand_numbers_sqrt_rule_fixed_control_and_equal_samples():
    members = plan_members(
        BASE, [1, 2, 4], "sqrt", fixed_lr_control=4, seeds=[1234], max_samples=2048
    )
    assert [m["name"] for m in members] == [
        "b128-ref-s1234",
        "b256-sqrt-s1234",
        "b512-sqrt-s1234",
        "b512-fixed-s1234",
    ]
    assert [m["prompts_per_step"] for m in members] == [16, 32, 64, 64]
    assert [m["responses_per_step"] for m in members] == [128, 256, 512, 512]
    assert [m["lr"] for m in members] == pytest.approx([3e-4, 4.243e-4, 6e-4, 3e-4], rel=1e-3)
    assert members[1]["lr"] == pytest.approx(3e-4 * math.sqrt(2))
    assert [m["lr_scaling"] for m in members] == ["sqrt", "sqrt", "sqrt", "none"]
    assert [m["fixed_lr_control"] for m in members] == [False, False, False, True]
    # Same samples for all: ceil(2048 / (P x G)) rollout steps.
    assert [m["num_steps"] for m in members] == [16, 8, 4, 4]
    assert [m["is_reference"] for m in members] == [True, False, False, False]
    assert all(m["status"] == "pending" and m["returncode"] is None for m in members)
    assert all(m["run_dir"] == m["name"] for m in members)


def test_plan_rules_seeds_and_names():
    members = plan_members(BASE, "4,1,2", "linear", seeds="1234,5678")
    assert [m["name"] for m in members] == [
        "b128-ref-s1234",
        "b256-linear-s1234",
        "b512-linear-s1234",
        "b128-ref-s5678",
        "b256-linear-s5678",
        "b512-linear-s5678",
    ]
    assert [m["lr"] for m in members[:3]] == pytest.approx([3e-4, 6e-4, 1.2e-3])
    assert [m["is_reference"] for m in members].count(True) == 1
    assert all(m["num_steps"] is None for m in members)
    fixed = plan_members(BASE, [1, 2], "none")
    assert [m["lr"] for m in fixed] == [3e-4, 3e-4]
    assert [m["name"] for m in fixed] == ["b128-ref-s1234", "b256-none-s1234"]
    # A fixed-lr control need not be one of the multipliers.
    ctl = plan_members(BASE, [1, 2], "sqrt", fixed_lr_control=8)
    assert ctl[-1]["name"] == "b1024-fixed-s1234" and ctl[-1]["lr"] == 3e-4
    # Uneven division rounds up (every member sees at least N samples).
    assert [m["num_steps"] for m in plan_members(BASE, [1, 2], max_samples=300)] == [3, 2]


def test_eval_every_samples_gives_every_member_the_same_sample_spacing():
    """E = 512 responses: B = 128 evaluates every 4 rollout steps, 256 every 2, 512 every 1,
    1024 every max(1, round(0.5)) = 1 (as often as it can); the control at 512 every 1; the
    flag is appended after the recipe's own --eval-interval, so it wins."""
    members = plan_members(BASE, [1, 2, 4, 8], "sqrt", fixed_lr_control=4, eval_every_samples=512)
    assert [m["eval_interval"] for m in members] == [4, 2, 1, 1, 1]
    flags = member_flags(members[0], BASE, "/tmp/x")
    assert flags[flags.index("--eval-interval") + 1] == "4"
    assert all(m["eval_interval"] is None for m in plan_members(BASE, [1, 2]))
    assert "--eval-interval" not in member_flags(plan_members(BASE, [1])[0], BASE, "/tmp/x")


@pytest.mark.parametrize("mults", ["2,4,8", [2, 4], "1,0", "1,-2", "1,x", "1,2,2", "", "1,2.5"])
def test_batch_mults_must_be_positive_integers_including_one(mults):
    with pytest.raises(SweepError, match="--batch-mults"):
        plan_members(BASE, mults, "sqrt")


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"rule": "cubic"}, "--lr-scaling"),
        ({"fixed_lr_control": 1}, "--fixed-lr-control"),
        ({"fixed_lr_control": 0}, "--fixed-lr-control"),
        ({"fixed_lr_control": 2, "rule": "none"}, "--fixed-lr-control"),
        ({"seeds": [1, 1]}, "--seeds"),
        ({"seeds": [-1]}, "--seeds"),
        ({"max_samples": 0}, "--max-samples"),
        ({"eval_every_samples": 0}, "--eval-every-samples"),
    ],
)
def test_plan_rejects_bad_arguments_naming_the_flag(kwargs, flag):
    kwargs = {"mults": [1, 2, 4], **kwargs}
    with pytest.raises(SweepError, match=flag):
        plan_members(BASE, **kwargs)


# --- running ---------------------------------------------------------------------------------


def test_run_sweep_writes_sweep_json_and_runs_every_member(recipe, calls, tmp_path):
    out = tmp_path / "sweep"
    result = quiet_sweep(
        recipe,
        out,
        batch_mults=[1, 2, 4],
        lr_rule="sqrt",
        fixed_lr_control=4,
        max_samples=2048,
        max_parallel=2,
        extra_args=["--eval-interval", "1"],
    )
    data = read_sweep(out)
    assert data == json.loads(json.dumps(result))
    assert data["recipe"] == str(recipe.resolve())
    assert data["extra_args"] == ["--eval-interval", "1"]
    assert data["lr_rule"] == "sqrt" and data["seeds"] == [1234]  # the recipe's own seed
    assert data["reference"] == "b128-ref-s1234"
    assert data["base"]["P0"] == 16 and data["base"]["G"] == 8 and data["base"]["B0"] == 128
    assert data["base"]["lr"] == pytest.approx(3e-4)
    names = [m["name"] for m in data["members"]]
    assert names == ["b128-ref-s1234", "b256-sqrt-s1234", "b512-sqrt-s1234", "b512-fixed-s1234"]
    for m in data["members"]:
        assert m["status"] == "done" and m["returncode"] == 0 and m["wall_s"] >= 0
        cfg = json.loads((out / m["run_dir"] / "config.json").read_text())
        assert cfg["lr"] == pytest.approx(m["lr"])
        assert cfg["global_batch_size"] == m["responses_per_step"]
        assert cfg["rollout_batch_size"] == m["prompts_per_step"]
        assert cfg["num_steps"] == m["num_steps"] and cfg["progress"] is False
        assert (out / m["log"]).is_file()
    assert sorted(launched(calls)) == sorted(names)
    # The probe and the dry runs created nothing.
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(names)
    # `hyrl analyze DIR` reads the sweep, reference included.
    runs, reference, _ = collect_runs([out])
    assert reference == "b128-ref-s1234" and len(runs) == 4


def test_resume_skips_done_members_and_moves_incomplete_ones_aside(recipe, calls, tmp_path):
    out = tmp_path / "sweep"
    args = dict(batch_mults="1,2", lr_rule="sqrt", seeds="7,8")
    quiet_sweep(recipe, out, **args)
    assert len(launched(calls)) == 4
    calls.unlink()

    again = quiet_sweep(recipe, out, **args)
    assert launched(calls) == []
    assert all(m["status"] == "done" and m.get("resumed") for m in again["members"])

    # An interrupted member: metrics.jsonl but no summary.json (the trainer would refuse it).
    victim = out / "b256-sqrt-s8"
    (victim / "summary.json").unlink()
    (victim / "note.txt").write_text("keep me")
    third = quiet_sweep(recipe, out, **args)
    assert launched(calls) == ["b256-sqrt-s8"]
    aside = sorted(out.glob("b256-sqrt-s8.incomplete-*"))
    aside_dirs = [p for p in aside if p.is_dir()]
    assert len(aside_dirs) == 1
    assert (aside_dirs[0] / "note.txt").read_text() == "keep me"
    assert (aside_dirs[0] / "metrics.jsonl").is_file()
    assert (victim / "summary.json").is_file() and not (victim / "note.txt").exists()
    member = next(m for m in third["members"] if m["name"] == "b256-sqrt-s8")
    assert member["status"] == "done" and aside_dirs[0].name in member["moved_aside"]
    assert read_sweep(out)["members"] == third["members"]
    calls.unlink()

    # A preempted member wrote summary.json too, saying so: not done, run again.
    summary = json.loads((victim / "summary.json").read_text())
    (victim / "summary.json").write_text(json.dumps({**summary, "ended": "preempted"}))
    quiet_sweep(recipe, out, **args)
    assert launched(calls) == ["b256-sqrt-s8"]


def test_other_arguments_into_the_same_out_are_refused(recipe, calls, tmp_path):
    out = tmp_path / "sweep"
    quiet_sweep(recipe, out, batch_mults=[1, 2])
    for kwargs in (
        {"batch_mults": [1, 2, 4]},
        {"batch_mults": [1, 2], "lr_rule": "linear"},
        {"batch_mults": [1, 2], "seeds": [99]},
        {"batch_mults": [1, 2], "extra_args": ["--eval-interval", "2"]},
    ):
        with pytest.raises(SweepError, match="--out"):
            quiet_sweep(recipe, out, **kwargs)
    # A directory that is not a sweep is refused too; an empty one is fine.
    other = tmp_path / "other"
    other.mkdir()
    (other / "stuff.txt").write_text("x")
    with pytest.raises(SweepError, match="--out"):
        quiet_sweep(recipe, other, batch_mults=[1])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert quiet_sweep(recipe, empty, batch_mults=[1])["members"][0]["status"] == "done"


def test_a_failed_member_is_recorded_the_rest_run_and_the_cli_exits_1(
    recipe, calls, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "sweep"
    monkeypatch.setenv("FAKE_FAIL_B", "256")
    argv = ["sweep", str(recipe), "--out", str(out), "--batch-mults", "1,2,4", "--no-progress"]
    assert main(argv) == 1
    text = capsys.readouterr().out
    assert "failed" in text and "hyrl analyze" in text and str(out) in text
    members = {m["name"]: m for m in read_sweep(out)["members"]}
    bad = members["b256-sqrt-s1234"]
    assert bad["status"] == "failed" and bad["returncode"] == 3
    assert "boom" in (out / bad["log"]).read_text()
    assert members["b128-ref-s1234"]["status"] == "done"
    assert members["b512-sqrt-s1234"]["status"] == "done"

    # Fixed: the rerun moves the partial run aside and retries only the failed member.
    monkeypatch.delenv("FAKE_FAIL_B")
    calls.unlink()
    assert main(argv) == 0
    assert launched(calls) == ["b256-sqrt-s1234"]
    assert any(p.is_dir() for p in out.glob("b256-sqrt-s1234.incomplete-*"))
    assert all(m["status"] == "done" for m in read_sweep(out)["members"])


def test_a_member_the_recipe_rejects_stops_the_sweep_before_any_launch(
    recipe, calls, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "sweep"
    monkeypatch.setenv("FAKE_BAD_B", "512")
    with pytest.raises(SweepError, match=r"b512-sqrt-s1234(.|\n)*--micro-batch-size"):
        quiet_sweep(recipe, out, batch_mults=[1, 2, 4])
    assert main(["sweep", str(recipe), "--out", str(out), "--batch-mults", "1,4"]) == 2
    assert "b512-sqrt-s1234" in capsys.readouterr().err
    assert launched(calls) == [] and not out.exists()


def test_a_failing_probe_shows_the_recipe_error_and_exits_2(recipe, calls, tmp_path, capsys):
    out = tmp_path / "sweep"
    rc = main(["sweep", str(recipe), "--out", str(out), "--", "--bogus-flag", "1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "probe" in err and "--bogus-flag: unknown flag" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, name",
    [
        (["--batch-mults", "2,4"], "--batch-mults"),
        (["--batch-mults", "1,two"], "--batch-mults"),
        (["--max-parallel", "0"], "--max-parallel"),
        (["--lr-scaling", "cubic"], "--lr-scaling"),
        (["--lr-rule", "cubic"], "--lr-scaling"),  # the earlier name is still taken
        (["--fixed-lr-control", "1"], "--fixed-lr-control"),
        (["--seeds", "1,1"], "--seeds"),
        (["--max-samples", "-5"], "--max-samples"),
        (["--eval-every-samples", "x"], "--eval-every-samples"),
        ([], "--out"),
    ],
)
def test_cli_argument_errors_exit_2_naming_the_flag(recipe, calls, tmp_path, capsys, flags, name):
    out = [] if name == "--out" else ["--out", str(tmp_path / "sweep")]
    assert main(["sweep", str(recipe), *out, *flags]) == 2
    assert name in capsys.readouterr().err
    assert launched(calls) == []


def test_cli_missing_recipe_exits_2(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.sh"), "--out", str(tmp_path / "s")]) == 2
    assert "RECIPE" in capsys.readouterr().err


# --- hyrl sweep --dry-run ---------------------------------------------------------------------


def dry_run_members(stdout: str) -> dict[str, tuple[dict, list[str]]]:
    """`NAME: KEY=VALUE ...; appends: FLAGS` lines -> {NAME: (values, flags)}."""
    members = {}
    for line in stdout.strip().splitlines():
        name, rest = line.split(": ", 1)
        values, flags = rest.split("; appends: ")
        members[name] = (dict(kv.split("=", 1) for kv in values.split()), flags.split())
    return members


def test_dry_run_prints_every_member_and_writes_nothing(recipe, calls, tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = [
        "sweep",
        str(recipe),
        "--out",
        str(out),
        "--batch-mults",
        "1,2,4",
        "--fixed-lr-control",
        "4",
        "--max-samples",
        "2048",
        "--dry-run",
    ]
    assert main(argv) == 0
    members = dry_run_members(capsys.readouterr().out)
    assert list(members) == [
        "b128-ref-s1234",
        "b256-sqrt-s1234",
        "b512-sqrt-s1234",
        "b512-fixed-s1234",
    ]
    # By hand: P = 16 m, B = 128 m, lr = 3e-4 sqrt(m) (the control keeps 3e-4),
    # ceil(2048 / (P x 8)) rollout steps.
    for name, m, lr in [
        ("b128-ref-s1234", 1, 3e-4),
        ("b256-sqrt-s1234", 2, 3e-4 * 2**0.5),
        ("b512-sqrt-s1234", 4, 6e-4),
        ("b512-fixed-s1234", 4, 3e-4),
    ]:
        values, flags = members[name]
        assert int(values["rollout_batch_size"]) == 16 * m
        assert int(values["global_batch_size"]) == 128 * m
        assert float(values["lr"]) == pytest.approx(lr)
        assert int(values["num_steps"]) == 16 // m
        assert values["seed"] == "1234"
        # The flags a real run appends, its run directory included.
        assert flags[flags.index("--global-batch-size") + 1] == str(128 * m)
        assert flags[flags.index("--run-dir") + 1] == str(out.resolve() / name)
    assert members["b512-fixed-s1234"][0]["lr_scaling"] == "none"
    assert launched(calls) == [] and not out.exists()


def test_dry_run_of_a_refused_member_exits_2_naming_the_flag(
    recipe, calls, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "sweep"
    monkeypatch.setenv("FAKE_BAD_B", "512")
    argv = ["sweep", str(recipe), "--out", str(out), "--batch-mults", "1,2,4", "--dry-run"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "member b512-sqrt-s1234" in captured.err
    assert "--micro-batch-size=32: does not divide B=512" in captured.err
    assert launched(calls) == [] and not out.exists()


def test_dry_run_into_an_earlier_sweep_checks_its_arguments_and_changes_nothing(
    recipe, calls, tmp_path, capsys
):
    out = tmp_path / "sweep"
    quiet_sweep(recipe, out, batch_mults=[1, 2])
    calls.unlink()
    (out / "b256-sqrt-s1234" / "summary.json").unlink()  # as if interrupted: a re-run reruns it
    before = {str(p): p.stat().st_mtime_ns for p in out.rglob("*")}
    argv = ["sweep", str(recipe), "--out", str(out), "--dry-run"]
    assert main([*argv, "--batch-mults", "1,2,4"]) == 2  # as a real re-run: other arguments
    assert "--out" in capsys.readouterr().err
    assert main([*argv, "--batch-mults", "1,2"]) == 0
    captured = capsys.readouterr()
    assert list(dry_run_members(captured.out)) == ["b128-ref-s1234", "b256-sqrt-s1234"]
    assert captured.err.rstrip().endswith("skipped by a real one: b128-ref-s1234")
    assert launched(calls) == []
    assert {str(p): p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_sigterm_stops_the_members_and_the_rerun_resumes(recipe, calls, tmp_path):
    out = tmp_path / "sweep"
    argv = [
        sys.executable,
        "-m",
        "hyrl",
        "sweep",
        str(recipe),
        "--out",
        str(out),
        "--batch-mults",
        "1,2,4",
        "--max-parallel",
        "2",
        "--no-progress",
    ]
    root = ROOT
    proc = subprocess.Popen(
        argv,
        cwd=root,
        env={**os.environ, "FAKE_SLEEP": "60"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = [out / "b128-ref-s1234" / "pid", out / "b256-sqrt-s1234" / "pid"]
    try:
        deadline = time.monotonic() + 20
        while not all(p.is_file() and p.read_text() for p in pids):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in err
    for p in pids:  # the members were stopped, not left running
        with pytest.raises(ProcessLookupError):
            os.kill(int(p.read_text()), 0)
    assert [m["status"] for m in read_sweep(out)["members"]] == ["pending"] * 3

    result = quiet_sweep(recipe, out, batch_mults=[1, 2, 4], max_parallel=2)
    assert all(m["status"] == "done" for m in result["members"])
    assert len([p for p in out.glob("*.incomplete-*") if p.is_dir()]) == 2


def test_off_a_terminal_each_member_prints_a_flushed_line_as_it_starts_and_ends(
    recipe, calls, tmp_path
):
    out, gate = tmp_path / "sweep", tmp_path / "go"
    argv = [sys.executable, "-m", "hyrl", "sweep", str(recipe), "--out", str(out),
            "--batch-mults", "1,2,4", "--max-samples", "1024"]  # fmt: skip
    # every member waits for the gate file; its target is reached at its second step
    env = {**os.environ, "FAKE_WAIT_FOR": str(gate), "FAKE_TARGET": "eval/accuracy=0.3"}
    env.pop("PYTHONUNBUFFERED", None)  # stdout block-buffered, as in `make demo > log`
    err = tmp_path / "stderr.txt"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()])
    reader.start()
    try:
        # stdout is a pipe: the first member's line comes while it runs, not when the sweep ends
        first = [lines.get(timeout=60), lines.get(timeout=60)]
        assert proc.poll() is None
        assert "3 member(s) planned and dry-run" in first[0]
        assert first[1] == (
            "hyrl sweep: [1/3] b128-ref-s1234 started (B=128, lr 3.00e-04, 1,024 samples)\n"
        )
        gate.touch()
        proc.wait(timeout=60)
    finally:
        gate.touch()  # members run in their own sessions: let them end
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join()
    assert proc.returncode == 0, err.read_text()
    text = "".join(first) + "".join(lines.get() for _ in range(lines.qsize()))
    events = re.findall(
        r"^hyrl sweep: \[(\d)/3\] (\S+) (started .*|done in [^:]+: .*)$", text, re.M
    )
    names = ["b128-ref-s1234", "b256-sqrt-s1234", "b512-sqrt-s1234"]
    assert [(i, n) for i, n, _ in events] == [
        (str(k), n) for k, n in enumerate(names, 1) for _ in "se"
    ]
    assert [e.split(" ", 1)[0] for _, _, e in events] == ["started", "done"] * 3  # in order
    ends = [e for _, _, e in events if e.startswith("done")]
    # reached at step 2: 2 x P x G = 256, 512, 1,024 samples; the ETA from the members done
    for end, samples, left in zip(ends, ("256", "512", "1,024"), (2, 1, 0)):
        assert f": eval/accuracy=0.3 reached at {samples} samples, 2.0 s | " in end
        assert f"| {3 - left} done, 0 failed, {left} to go | study " in end
        assert re.search(r"elapsed, ETA \d+:\d\d:\d\d$", end), end
    assert "sweep " in text and "analyse with:" in text  # the summary table follows


def test_a_resumed_sweep_names_the_members_finished_earlier(recipe, calls, tmp_path):
    out, text = tmp_path / "sweep", io.StringIO()
    quiet_sweep(recipe, out, batch_mults=[1, 2], console=Console(file=text))
    assert text.getvalue().count(" started (") == 2 and text.getvalue().count(" done in ") == 2
    again = io.StringIO()
    quiet_sweep(recipe, out, batch_mults=[1, 2], console=Console(file=again))
    assert again.getvalue().splitlines()[1:] == [
        "hyrl sweep: [1/2] b128-ref-s1234 skipped: finished earlier (256 samples)",
        "hyrl sweep: [2/2] b256-sqrt-s1234 skipped: finished earlier (512 samples)",
    ]
    # --no-progress: no lines
    calls.unlink()
    (out / "b256-sqrt-s1234" / "summary.json").unlink()
    quiet = io.StringIO()
    quiet_sweep(recipe, out, batch_mults=[1, 2], console=Console(file=quiet), show_progress=False)
    assert launched(calls) == ["b256-sqrt-s1234"] and quiet.getvalue() == ""


def test_sweep_imports_no_trainer_code():
    # hyrl.config.rollout_layout is the config's pure rollout arithmetic (no engine, no torch).
    code = (
        "import sys, hyrl.batchsize.sweep.run, hyrl.cli; "
        "bad = [m for m in sys.modules if m == 'torch' or (m.startswith(('hyrl.train.cli', "
        "'hyrl.backends', 'hyrl.rollout')) and m not in ('hyrl.rollout', "
        "'hyrl.config.rollout_layout'))]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ})


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"batch_ramp": "128:1024:100"}, "--batch-ramp 128:1024:100"),
        ({"batch_schedule": "auto"}, "--batch-schedule auto"),
    ],
)
def test_a_recipe_whose_batch_changes_during_the_run_is_refused(changes, says):
    from hyrl.batchsize.sweep.probe import base_from_config

    config = {
        "rollout_batch_size": 16,
        "n_samples_per_prompt": 8,
        "global_batch_size": 128,
        "micro_batch_size": 32,
        "lr": 3e-4,
        "lr_scaling": "sqrt",
    }
    assert base_from_config(config)["B0"] == 128  # a fixed batch is a sweep's base
    with pytest.raises(SweepError, match="a sweep runs fixed batch sizes") as info:
        base_from_config({**config, **changes}, recipe="r.sh")
    assert says in str(info.value)


def test_under_log_wandb_members_are_grouped_by_sweep_and_tagged_with_b_lr_rule_and_seed():
    from hyrl.batchsize.sweep.plan import member_flags
    from hyrl.batchsize.sweep.probe import base_from_config

    config = {
        "rollout_batch_size": 16,
        "n_samples_per_prompt": 8,
        "global_batch_size": 128,
        "lr": 3e-4,
        "seed": 1,
        "log_wandb": True,
        "wandb_group": None,
        "wandb_tags": "tiny",
    }
    base = base_from_config(config)
    member = plan_members(base, [1, 4], "sqrt", seeds=[1])[1]  # B = 512, lr = 6e-4
    flags = member_flags(member, base, Path("/runs/sweep-a") / member["name"])
    group = flags[flags.index("--wandb-group") + 1]
    tags = flags[flags.index("--wandb-tags") + 1]
    assert group == "sweep-a" and tags == "tiny,B=512,lr=0.0006,rule=sqrt,seed=1"
    base = base_from_config({**config, "wandb_group": "mine"})
    flags = member_flags(member, base, Path("/runs/sweep-a") / member["name"])
    assert flags[flags.index("--wandb-group") + 1] == "mine"  # the recipe's own group wins
    base = base_from_config({**config, "log_wandb": False})
    assert not any(f.startswith("--wandb") for f in member_flags(member, base, Path("/r/x")))


# --- throughput probes (--throughput-rounds) --------------------------------------------------


def test_throughput_probes_run_alone_round_after_round_and_analyze_takes_r_from_them(
    recipe, calls, tmp_path, monkeypatch
):
    out = tmp_path / "sweep"
    args = dict(batch_mults=[1, 2], seeds="1,2", throughput_rounds=2, throughput_samples=300)
    data = quiet_sweep(recipe, out, max_parallel=2, **args)
    probes = data["throughput"]["probes"]
    names = ["b128-ref-r1", "b256-sqrt-r1", "b256-sqrt-r2", "b128-ref-r2"]
    # after the members, one at a time, the reference first in odd rounds and last in even ones
    assert launched(calls)[-4:] == names and [p["name"] for p in probes] == names
    assert data["throughput"]["rounds"] == 2 and data["throughput"]["samples"] == 300
    for p in probes:
        assert p["status"] == "done" and (out / p["log"]).is_file()
        cfg = json.loads((out / p["run_dir"] / "config.json").read_text())
        # a warm-up step, then 300 responses: 1 + ceil(300 / 128) = 4 steps at x1, 3 (the
        # least) at x2; the first seed's members
        assert cfg["num_steps"] == {"b128-ref": 4, "b256-sqrt": 3}[p["member"]]
        assert cfg["seed"] == 1
        assert "--eval-interval 0" in p["command"] and "--target none" in p["command"]
    assert read_sweep(out) == json.loads(json.dumps(data))
    # the same command again runs nothing; no probes asked keeps the record; other steps refused
    n = len(launched(calls))
    quiet_sweep(recipe, out, **args)
    kept = quiet_sweep(recipe, out, **{**args, "throughput_rounds": 0})
    assert len(launched(calls)) == n and kept["throughput"]["probes"][0]["status"] == "done"
    with pytest.raises(SweepError, match="--throughput-samples 400: this sweep's probes ran 300"):
        quiet_sweep(recipe, out, **{**args, "throughput_samples": 400})

    # `hyrl analyze DIR`, as the study scripts call it (it reads the runs before the analysis)
    assert (
        main(["analyze", str(out), "--target", "eval/accuracy=0.3", "--out", str(tmp_path / "a")])
        == 0
    )
    result = json.loads((tmp_path / "a" / "report.json").read_text())
    r = {m["member"]: m["throughput_ratio"] for m in result["over_seeds"]["members"]}
    # the fake's probes decode P x G responses per second: B = 256 twice the reference's rate
    assert r["b256-sqrt"]["source"] == "throughput probes"
    assert r["b256-sqrt"]["rounds"] == [2.0, 2.0] and r["b256-sqrt"]["value"] == 2.0


def test_throughput_probe_arguments_are_checked_before_anything_runs(recipe, calls, tmp_path):
    for kwargs, says in (
        ({"throughput_rounds": -1}, "--throughput-rounds"),
        ({"throughput_rounds": "two"}, "--throughput-rounds"),
        ({"throughput_rounds": 1, "throughput_samples": 0}, "--throughput-samples"),
    ):
        with pytest.raises(SweepError, match=says):
            quiet_sweep(recipe, tmp_path / "sweep", batch_mults=[1, 2], **kwargs)
    assert launched(calls) == [] and not (tmp_path / "sweep").exists()


def test_r_ratios_come_from_the_probes_not_from_runs_slowed_by_load(
    recipe, calls, tmp_path, monkeypatch
):
    """The runs of B = 256 ran at a quarter of their speed (another job on the machine); the
    probes, alone, measure the recipe's own rates: R from the probes, T from them."""
    from hyrl.batchsize.analyze import analyze

    out = tmp_path / "sweep"
    monkeypatch.setenv("FAKE_STEP_S_256", "4.0")
    quiet_sweep(recipe, out, batch_mults=[1, 2], seeds="1,2,3,4")
    before = analyze([out], ("eval/accuracy", 0.3))["over_seeds"]
    b256 = {m["member"]: m for m in before["members"]}["b256-sqrt"]
    assert b256["throughput_ratio"]["source"] == "runs"
    assert b256["throughput_ratio"]["value"] == pytest.approx(0.5)
    monkeypatch.setenv("FAKE_STEP_S_256", "1.0")  # the probes run on a quiet machine
    quiet_sweep(recipe, out, batch_mults=[1, 2], seeds="1,2,3,4", throughput_rounds=3)
    after = analyze([out], ("eval/accuracy", 0.3))["over_seeds"]
    b256 = {m["member"]: m for m in after["members"]}["b256-sqrt"]
    assert b256["throughput_ratio"]["source"] == "throughput probes"
    assert b256["throughput_ratio"]["value"] == pytest.approx(2.0)
    assert b256["time_ratio"]["value"] == pytest.approx(b256["samples_ratio"]["value"] / 2.0)
    assert [s["ratio"] for s in b256["throughput_ratio"]["seeds"]] == pytest.approx([0.5] * 4)
