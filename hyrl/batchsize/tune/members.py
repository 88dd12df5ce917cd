"""The runs `hyrl tune` starts, one at a time (they are timed), each a subprocess: a step run as
a `hyrl sweep` (pass 1, verify), one member as the sweep runs it (the update probes, the
alignment check's members), and the decode profile (`hyrl profile-rollout`). A step or member
that finished is kept, so the same command resumes where it stopped.

Progress: `run_tune` sets the tune's log (`reporting`) and, for a step of single members, their
list (`step_runs`); every run here reports to them (off a terminal a flushed line as it starts
and ends, hyrl.batchsize.sweep.progress), so a caller such as the alignment check passes
nothing more. Without them (a caller outside `run_tune`) nothing is printed."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from hyrl.batchsize.analyze import json_safe
from hyrl.batchsize.sweep.plan import member_flags
from hyrl.batchsize.sweep.progress import RunsProgress, StudyLog, duration, run_result
from hyrl.batchsize.sweep.record import is_done, move_aside
from hyrl.batchsize.sweep.run import SweepError, member_budget, member_details, run_sweep
from hyrl.batchsize.sweep.summary import failed_members
from hyrl.batchsize.tune.model import concurrency
from hyrl.batchsize.tune.plan import TuneError, TunePlan, probe_members
from hyrl.metrics.run_dir import number, read_sweep

PROFILE_REPEATS = 3
PROFILE_TIMEOUT_S = 1800
STEP_LABELS = {"pass1": "pass 1"}  # a step's name in the lines (default: its directory's)

_LOG: ContextVar[StudyLog | None] = ContextVar("tune_log", default=None)
_RUNS: ContextVar[RunsProgress | None] = ContextVar("tune_step_runs", default=None)


@contextmanager
def reporting(log: StudyLog) -> Iterator[StudyLog]:
    """Within: every run of this module reports to `log` (the tune's)."""
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


@contextmanager
def step_runs(
    label: str, runs: Sequence[tuple[str, float | None]], eta: bool = True, eta_label: str = ""
) -> Iterator[RunsProgress | None]:
    """Within: the single members `run_member` runs are these (name, sample budget), shown
    as `LABEL [i/n] NAME`, with an ETA of the step unless `eta` is False (None outside
    `reporting`: nothing to report to)."""
    log = _LOG.get()
    if log is None:
        yield None
        return
    token = _RUNS.set(RunsProgress(log, runs, 1, label, eta_label or label, eta))
    try:
        yield _RUNS.get()
    finally:
        _RUNS.reset(token)


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
            study_log=_LOG.get(),
            label=STEP_LABELS.get(step, step),
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
    budgets = [(m["name"], plan.probe_steps * m["responses_per_rollout"]) for m in members]
    with step_runs("probe", budgets, eta_label="probes"):
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
    runs = _member_runs(what)
    if is_done(out, member):
        if runs is not None:
            runs.skipped(member["name"], run_result(run_dir))
        return run_dir
    move_aside(out, member)
    cmd = ["bash", str(plan.recipe), *args, *member_flags(member, plan.base, run_dir)]
    log = out / f"{member['name']}.log"
    budget: float | None = member_budget(member, None)  # its own --num-steps, else the step's
    if runs is not None:
        budget = budget if budget is not None else runs.budget(member["name"])
        runs.started(member["name"], member_details(member, budget), budget)
    with open(log, "w", encoding="utf-8") as f:
        f.write("# " + shlex.join(cmd) + "\n")
        f.flush()
        with console.status(status):
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=plan.env,
            ).returncode  # fmt: skip
    ok = rc == 0 and is_done(out, member)
    if runs is not None:
        failed = f"failed (exit {rc}" + ("" if rc else ", but it did not finish")
        runs.ended(member["name"], ok, run_result(run_dir) if ok else f"{failed}, log: {log})")
    if not ok:
        raise TuneError(
            f"{what} {member['name']} exited {rc}; see {log} (rerun the same command to retry; "
            "finished steps are kept)"
        )
    return run_dir


def _member_runs(what: str) -> RunsProgress | None:
    """Where `run_member` reports: the step's runs (`step_runs`), else, inside `reporting`,
    a group of its own named by `what` ('align check:'), else nowhere."""
    runs = _RUNS.get()
    if runs is not None:
        return runs
    log = _LOG.get()
    return None if log is None else RunsProgress(log, [], 1, what.rstrip(":"), eta=False)


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
    say = _LOG.get() or StudyLog("hyrl tune", enabled=False)
    if len(cs) == 1:
        say.line(f"profile skipped: every candidate decodes at C = {cs[0]}")
        return None
    if done.is_file():
        profile = json.loads(done.read_text())
        if profile.get("parameters", {}).get("concurrencies") == cs:
            say.line(f"profile skipped: finished earlier ({profile_result(profile)})")
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
    say.line(f"profile started (hyrl profile-rollout at C = {','.join(map(str, cs))}, log: {log})")
    began = say.now()
    with open(log, "w", encoding="utf-8") as f:
        f.write("# " + " ".join(cmd) + "\n")
        f.flush()
        with console.status(f"pass 2: decode profile at C = {','.join(map(str, cs))}"):
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=plan.env, timeout=PROFILE_TIMEOUT_S,
            ).returncode  # fmt: skip
    if rc != 0 or not done.is_file():
        say.line(f"profile ended in {duration(say.now() - began)}: failed (exit {rc}, log: {log})")
        raise TuneError(f"pass 2: `hyrl profile-rollout` exited {rc}; see {log}")
    profile = json.loads(done.read_text())
    say.line(
        f"profile done in {duration(say.now() - began)}: {profile_result(profile)} | "
        + say.elapsed_text()
    )
    return profile


def profile_result(profile: dict) -> str:
    """What a decode profile measured: '100.0 responses/s at C = 128, 160.0 responses/s at
    C = 256'."""
    rows = [r for r in profile.get("rows", []) if isinstance(r, dict) and "c" in r]
    parts = [f"{number(r.get('responses_per_s')):.1f} responses/s at C = {r['c']}" for r in rows]
    return ", ".join(parts) or "no rows"
