"""The runs `hyrl tune` starts, one at a time (they are timed), each a subprocess: a step run as
a `hyrl sweep` (pass 1, verify), one member as the sweep runs it (the update probes, the
alignment check's members), and the decode profile (`hyrl profile-rollout`). A step or member
that finished is kept, so the same command resumes where it stopped."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from hyrl.batchsize.analyze import json_safe
from hyrl.batchsize.sweep.plan import member_flags
from hyrl.batchsize.sweep.record import is_done, move_aside
from hyrl.batchsize.sweep.run import SweepError, failed_members, run_sweep
from hyrl.batchsize.tune.model import concurrency
from hyrl.batchsize.tune.plan import TuneError, TunePlan, probe_members
from hyrl.metrics.run_dir import read_sweep

PROFILE_REPEATS = 3
PROFILE_TIMEOUT_S = 1800


def _python(env: dict) -> str:
    return env.get("PYTHON") or sys.executable


def run_sweep_step(plan: TunePlan, step: str, mults, max_samples, extra, console, progress) -> Path:
    """One step run as a `hyrl sweep` in DIR/STEP (pass 1, verify): its directory; a failed
    member stops tune, naming its exit code and log."""
    out = plan.out / step
    try:
        sweep = run_sweep(
            plan.recipe,
            out,
            mults,
            plan.rule,
            max_samples=max_samples,
            extra_args=extra,
            env=plan.env,
            console=console,
            show_progress=progress,
        )
    except SweepError as err:
        raise TuneError(f"{step}: {err}") from None
    failed = failed_members(sweep)
    if failed:
        raise TuneError(
            f"{step}: member(s) failed: "
            + ", ".join(
                f"{m['name']} (exit {m['returncode']}, log {out / m['log']})" for m in failed
            )
            + "; rerun the same command to retry (finished steps are kept)"
        )
    return out


def member_dirs(sweep_dir: Path) -> dict[int, Path]:
    """Each multiplier's run directory in a finished sweep."""
    sweep = read_sweep(sweep_dir)
    return {m["mult"]: sweep_dir / m["run_dir"] for m in sweep["members"]}


def run_probes(plan: TunePlan, console) -> dict[int, list[Path]]:
    """The update probes one after the other (never side by side: they are timed), each as
    `hyrl sweep` runs a member (its flags from `member_flags`); a probe whose run directory
    holds summary.json is done and kept, an unfinished one is moved aside and rerun."""
    out = plan.out / "probes"
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "recipe": str(plan.recipe),
        "args": plan.probe_args,
        "base": plan.base,
        "rounds": plan.probe_rounds,
    }
    members = probe_members(plan)
    record["members"] = [m["name"] for m in members]
    earlier = out / "probes.json"
    if earlier.is_file() and json.loads(earlier.read_text()) != json_safe(record):
        raise TuneError(
            f"--out {plan.out}: its probes were run with other arguments ({earlier}); "
            "allowed: the same command as before, or a new --out"
        )
    earlier.write_text(json.dumps(json_safe(record), indent=2) + "\n", encoding="utf-8")
    dirs: dict[int, list[Path]] = {}
    for m in members:
        dirs.setdefault(m["mult"], []).append(
            run_member(
                plan, console, out, m, plan.probe_args, f"pass 2: update probe {m['name']} "
                f"({plan.probe_steps} steps, round {m['round']} of {plan.probe_rounds})",
                "pass 2: probe",
            )
        )  # fmt: skip
    return dirs


def run_member(
    plan: TunePlan, console, out: Path, member: dict, args: list[str], status: str, what: str
) -> Path:
    """One member, as `hyrl sweep` runs it (its flags from `member_flags`, after `args`), never
    side by side with another (they are timed); a member whose run directory holds
    summary.json is done and kept, an unfinished one is moved aside and rerun. Its run
    directory."""
    run_dir = out / member["run_dir"]
    if is_done(out, member):
        return run_dir
    move_aside(out, member)
    cmd = ["bash", str(plan.recipe), *args, *member_flags(member, plan.base, run_dir)]
    log = out / f"{member['name']}.log"
    with open(log, "w", encoding="utf-8") as f:
        f.write("# " + shlex.join(cmd) + "\n")
        f.flush()
        with console.status(status):
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=plan.env,
            ).returncode  # fmt: skip
    if rc != 0 or not is_done(out, member):
        raise TuneError(
            f"{what} {member['name']} exited {rc}; see {log} (rerun the same command to retry; "
            "finished steps are kept)"
        )
    return run_dir


def profile_concurrencies(plan: TunePlan) -> list[int]:
    N0 = plan.base["P0"] * plan.base["G"]
    cap = int(plan.config["rollout_concurrency"])
    return sorted({concurrency(m * N0, cap) for m in plan.mults})


def run_profile(plan: TunePlan, console) -> dict | None:
    """`hyrl profile-rollout` at the candidates' concurrencies (num-prompts = the largest C);
    None when every candidate decodes at the same C, where the rates cancel (tune.model)."""
    out = plan.out / "profile"
    done = out / "profile.json"
    cs = profile_concurrencies(plan)
    if len(cs) == 1:
        return None
    if done.is_file():
        profile = json.loads(done.read_text())
        if profile.get("parameters", {}).get("concurrencies") == cs:
            return profile
    c = plan.config
    cmd = [
        _python(plan.env),
        "-m",
        "hyrl",
        "profile-rollout",
        "--engine",
        c["rollout_engine"],
        "--concurrency",
        ",".join(map(str, cs)),
        "--num-prompts",
        str(cs[-1]),
        "--max-new-tokens",
        str(c["rollout_max_response_len"]),
        "--repeats",
        str(PROFILE_REPEATS),
        "--seed",
        str(c.get("seed") or 0),
        "--out",
        str(out),
    ]
    if c["rollout_engine"] == "sglang":
        cmd += ["--model-path", str(c["hf_checkpoint"])]
        cmd += ["--num-gpus-per-engine", str(c.get("rollout_num_gpus_per_engine") or 1)]
    log = plan.out / "profile.log"
    with open(log, "w", encoding="utf-8") as f:
        f.write("# " + " ".join(cmd) + "\n")
        f.flush()
        with console.status(f"pass 2: decode profile at C = {','.join(map(str, cs))}"):
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=plan.env, timeout=PROFILE_TIMEOUT_S,
            ).returncode  # fmt: skip
    if rc != 0 or not done.is_file():
        raise TuneError(f"pass 2: `hyrl profile-rollout` exited {rc}; see {log}")
    return json.loads(done.read_text())
