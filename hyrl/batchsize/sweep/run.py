"""`hyrl sweep`: run one recipe at several batch sizes with a re-derived learning rate.

The batch-size question (docs/batch-size.md, "The science it encodes") is answered by runs of
the same recipe at several batch sizes, each with its learning rate retuned by a scaling rule, later
compared per sample by `hyrl analyze`. This module plans those runs, launches them and keeps a
record of them in `DIR/sweep.json`, the file `hyrl analyze DIR` reads.

1. Probe: `bash RECIPE --dry-run EXTRA... --run-dir DIR/.probe-never-created` prints the
   recipe's resolved configuration as JSON on stdout. From it: P0 (rollout_batch_size),
   G (n_samples_per_prompt), B0 (global_batch_size), LR0 (lr, the resolved rate) and
   k (optimizer_steps_per_rollout). The probe's --run-dir comes after EXTRA so that the path
   the trainer checks is always one that does not exist (a dry run creates nothing).
2. Plan (`plan_members`, pure): for each multiplier m, P = P0 m and B = B0 m (G and k kept),
   lr = scaled_lr(LR0, B, B0, rule). An optional fixed-lr control at multiplier M keeps LR0
   (`--lr-scaling none`): the ablation showing what the rule buys. With --max-samples N every
   member runs ceil(N / (P G)) rollout steps, so all consume (about) the same number of samples.
   Every seed gets every member. Names: b{B}-{rule}-s{seed}, b{B0}-ref-s{seed} for m = 1,
   b{B}-fixed-s{seed} for the control; the reference is the first seed's m = 1 member.
3. Validate: a dry run of every member (its flags after EXTRA, so the sweep's flags win) before
   anything is launched; a member the recipe rejects is named with the recipe's error.
   Steps 1 to 3 are `check_sweep`, which writes nothing: `hyrl sweep --dry-run` stops there
   and prints each member's resolved values and appended flags (`dry_run_lines`).
4. Run: up to --max-parallel members at once, `bash RECIPE EXTRA... MEMBER FLAGS`, output to
   DIR/NAME.log, environment inherited. sweep.json is rewritten atomically before the launch
   and whenever a member starts or ends. On a terminal a rich display shows the members; off
   one (a log file, a pipe) a flushed line as each member starts and ends, with its result
   and the sweep's ETA (`hyrl.batchsize.sweep.progress`).
5. Resume: a member whose run directory holds summary.json (written at the end of every run) is
   done and skipped. A member directory without it (an interrupted or failed run) is renamed to
   NAME.incomplete-<UTC time> (never deleted) and the member runs again, as do failed members.
   A sweep.json written with other arguments is refused.
6. Throughput probes (--throughput-rounds N > 0, `hyrl.batchsize.sweep.throughput`): after the
   members, every member of the first seed alone for about --throughput-samples responses,
   evaluation off, round after round, recorded under "throughput" in sweep.json; `hyrl
   analyze` takes the R ratios from them. Resumed as members are.

One concern per module: `plan` (arguments, members), `probe` (the recipe's dry
runs), `record` (sweep.json and the member directories), `progress` (the lines off a
terminal), `throughput` (the probes' plan), `summary` (what the command prints), this one
(checking, running the members and the probes). Only the standard
library, `hyrl.config`, `hyrl.metrics.run_dir` and `hyrl.metrics.progress` (standard library
only) and rich are imported: the trainer is reached through the recipe, as a subprocess.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from hyrl.batchsize.sweep.plan import (
    DEFAULT_MULTS,
    DEFAULT_RULE,
    RULES,
    SweepError,
    check_eval_every,
    check_fixed,
    check_rule,
    member_flags,
    member_name,
    parse_mults,
    parse_seeds,
    plan_members,
    positive_int,
)
from hyrl.batchsize.sweep.probe import base_from_config, probe, validate_members
from hyrl.batchsize.sweep.progress import RunsProgress, StudyLog, run_result, samples_text
from hyrl.batchsize.sweep.record import (
    check_same_sweep,
    is_done,
    move_aside,
    read_sweep_json,
    write_sweep_json,
)
from hyrl.batchsize.sweep.throughput import (
    DEFAULT_SAMPLES,
    PROBE_DIR,
    check_probe_args,
    merge_record,
    probe_extra_args,
    probe_plan,
)
from hyrl.metrics.run_dir import SWEEP_FILE

__all__ = [
    "DEFAULT_MULTS",
    "DEFAULT_RULE",
    "RULES",
    "CheckedSweep",
    "SweepError",
    "base_from_config",
    "check_sweep",
    "member_flags",
    "member_name",
    "parse_mults",
    "parse_seeds",
    "plan_members",
    "probe",
    "read_sweep_json",
    "run_sweep",
    "validate_members",
    "write_sweep_json",
]


class _Display:
    """rich progress: one line per member (name, status, elapsed) and an overall bar."""

    def __init__(self, members: list[dict], console, enabled: bool):
        self.progress = None
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]:<22}"),
            TimeElapsedColumn(),
            console=console,
        )
        done = sum(m["status"] == "done" for m in members)
        self.overall = self.progress.add_task(
            "sweep", total=len(members), completed=done, status=f"{done} done"
        )
        self.tasks = {}
        for m in members:
            status = "done (earlier run)" if m["status"] == "done" else "pending"
            self.tasks[m["name"]] = self.progress.add_task(
                m["name"], total=1, completed=int(m["status"] == "done"), start=False, status=status
            )

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def started(self, name: str) -> None:
        if self.progress is not None:
            self.progress.start_task(self.tasks[name])
            self.progress.update(self.tasks[name], status="running")

    def finished(self, member: dict, members: list[dict], eta: str = "") -> None:
        """A member ended; eta: the sweep's ETA text, shown beside the counts."""
        if self.progress is None:
            return
        task = self.tasks[member["name"]]
        status = member["status"]
        if status == "failed":
            status = f"FAILED (exit {member['returncode']})"
        self.progress.update(task, completed=1, status=status)
        self.progress.stop_task(task)
        ended = [m for m in members if m["status"] in ("done", "failed")]
        failed = sum(m["status"] == "failed" for m in ended)
        self.progress.update(
            self.overall,
            completed=len(ended),
            status=f"{len(ended) - failed} done, {failed} failed" + (f", {eta}" if eta else ""),
        )


def _launch(
    recipe: Path, member: dict, base: dict, extra_args: Sequence[str], out_dir: Path, env: dict
):
    flags = member_flags(member, base, out_dir / member["run_dir"])
    cmd = ["bash", str(recipe), *extra_args, *flags]
    member["command"] = shlex.join(cmd)
    log = open(out_dir / member["log"], "w", encoding="utf-8")
    log.write(f"# {member['command']}\n")
    log.flush()
    # Own session: a Ctrl-C reaches the sweep, which then stops its members (see run_sweep).
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    return proc, log


def _stop(procs: Iterable[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM the process group of each member we started, SIGKILL after the grace period."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()


@contextmanager
def _signals_interrupt():
    """While members run, SIGTERM and SIGHUP (a batch system ending the job, a closed
    terminal) raise KeyboardInterrupt like Ctrl-C does, so the members, which run in their own
    sessions, are stopped and recorded rather than left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class CheckedSweep:
    """A sweep probed, planned and dry-run member by member (steps 1 to 3); nothing written.

    `sweep` is the content sweep.json will hold, every member pending; `earlier` the sweep.json
    already in `out` (a re-run), else None; `resolved` each member's configuration from its
    dry run, in the order of sweep["members"]."""

    recipe: Path
    out: Path
    env: dict
    base: dict
    sweep: dict
    earlier: dict | None
    resolved: list[dict]
    max_parallel: int
    probes: list[dict] = field(default_factory=list)  # --throughput-rounds' probes, to run
    probe_extra: list[str] = field(default_factory=list)  # the recipe's extra flags for them


def check_sweep(
    recipe,
    out_dir,
    batch_mults: Sequence[int] | str = DEFAULT_MULTS,
    lr_rule: str = DEFAULT_RULE,
    fixed_lr_control: int | None = None,
    seeds: Sequence[int] | str | None = None,
    max_samples: int | None = None,
    max_parallel: int = 1,
    extra_args: Sequence[str] = (),
    env: dict | None = None,
    eval_every_samples: int | None = None,
    throughput_rounds: int = 0,
    throughput_samples: int = DEFAULT_SAMPLES,
) -> CheckedSweep:
    """Everything a sweep does before it writes: the arguments checked, the recipe probed, the
    members planned and each one dry-run through the recipe. Reads `out_dir` (an earlier
    sweep.json must hold the same arguments) and creates nothing; `hyrl sweep --dry-run` stops
    here. Raises SweepError for a bad argument, a failing probe, a member the recipe rejects in
    a dry run, or an --out holding another sweep (arguments as in `run_sweep`)."""
    recipe_path = Path(recipe)
    if not recipe_path.is_file():
        raise SweepError(
            f"RECIPE {recipe}: no such file; allowed: a recipe script such as recipes/tiny/grpo.sh"
        )
    recipe_path = recipe_path.resolve()
    out = Path(out_dir).resolve()
    if out.exists() and not out.is_dir():
        raise SweepError(
            f"--out {out_dir}: exists and is not a directory; allowed: a new "
            "directory or a sweep directory"
        )
    max_parallel = positive_int(max_parallel, "--max-parallel", "an integer >= 1")
    mults = parse_mults(batch_mults)
    rule = check_rule(lr_rule)
    fixed = check_fixed(fixed_lr_control, mults, rule)
    if seeds is not None:
        seeds = parse_seeds(seeds)
    if max_samples is not None:
        max_samples = positive_int(max_samples, "--max-samples", "a positive number of responses")
    if eval_every_samples is not None:
        eval_every_samples = check_eval_every(eval_every_samples)
    rounds, probe_samples = check_probe_args(throughput_rounds, throughput_samples)
    extra_args = [str(a) for a in extra_args]
    old = read_sweep_json(out) if out.is_dir() else None
    if old is None and out.is_dir() and any(out.iterdir()):
        raise SweepError(
            f"--out {out_dir}: a non-empty directory without {SWEEP_FILE}; "
            "allowed: a new (or empty) directory, or an earlier sweep's directory"
        )

    env = dict(os.environ if env is None else env)
    config = probe(recipe_path, extra_args, out, env)
    base = base_from_config(config, recipe)
    if seeds is None:
        seeds = [base["seed"] if isinstance(base["seed"], int) else 1234]
    members = plan_members(base, mults, rule, fixed, seeds, max_samples, eval_every_samples)
    sweep = {
        "recipe": str(recipe_path),
        "extra_args": extra_args,
        "batch_mults": mults,
        "lr_rule": rule,
        "fixed_lr_control": fixed,
        "seeds": list(seeds),
        "max_samples": max_samples,
        "eval_every_samples": eval_every_samples,
        "reference": members[0]["name"],
        "target": base["target"],
        "base": {k: base[k] for k in ("P0", "G", "B0", "lr", "optimizer_steps_per_rollout")},
        "members": members,
    }
    if old is not None:
        check_same_sweep(old, sweep, out)
    probes = probe_plan(members, rounds, probe_samples)
    throughput = merge_record((old or {}).get("throughput"), rounds, probe_samples, probes)
    if throughput is not None:
        sweep["throughput"] = throughput
    resolved = validate_members(recipe_path, members, base, extra_args, out, env)
    probe_extra = probe_extra_args(extra_args, config)
    if probes:  # one round's dry runs: the others differ only by their run directories
        validate_members(
            recipe_path, [p for p in probes if p["round"] == 1], base, probe_extra, out, env
        )
    return CheckedSweep(
        recipe_path, out, env, base, sweep, old, resolved, max_parallel, probes, probe_extra
    )


def run_sweep(
    recipe,
    out_dir,
    batch_mults: Sequence[int] | str = DEFAULT_MULTS,
    lr_rule: str = DEFAULT_RULE,
    fixed_lr_control: int | None = None,
    seeds: Sequence[int] | str | None = None,
    max_samples: int | None = None,
    max_parallel: int = 1,
    extra_args: Sequence[str] = (),
    env: dict | None = None,
    console=None,
    show_progress: bool = True,
    poll_s: float = 0.2,
    study_log: StudyLog | None = None,
    label: str = "",
    eval_every_samples: int | None = None,
    throughput_rounds: int = 0,
    throughput_samples: int = DEFAULT_SAMPLES,
) -> dict:
    """Probe, plan, validate and run a sweep into `out_dir`, then its throughput probes
    (`throughput_rounds` > 0; `hyrl.batchsize.sweep.throughput`); returns sweep.json's content.

    Progress (unless `show_progress` is False): on a terminal `console` (None: a new one)
    shows a rich display; off one a flushed line as each member starts and ends, to
    `study_log` (None: a "hyrl sweep" log on the console's file; `hyrl tune` passes its own,
    with `label`, the step, before each member's place). `seeds` None = the recipe's own seed.
    `env` None = this process's environment (NPROC, PYTHON, CUDA_VISIBLE_DEVICES... reach the
    recipe unchanged). A member that exits non-zero is marked failed and the others go on;
    the caller decides the exit code (see `failed_members`).
    Raises SweepError (nothing launched) for a bad argument, a failing probe, a member the
    recipe rejects in a dry run, or an --out holding another sweep. On KeyboardInterrupt the
    running members are stopped, recorded as pending again, and the interrupt is re-raised.
    """
    if console is None:
        from rich.console import Console

        console = Console()
    if study_log is None:  # its clock starts here: the checks count in the study's time
        study_log = StudyLog.for_console("hyrl sweep", console, show_progress)
    checked = check_sweep(
        recipe,
        out_dir,
        batch_mults,
        lr_rule,
        fixed_lr_control,
        seeds,
        max_samples,
        max_parallel,
        extra_args,
        env,
        eval_every_samples,
        throughput_rounds,
        throughput_samples,
    )
    out, env, base, sweep = checked.out, checked.env, checked.base, checked.sweep
    members = sweep["members"]

    # Resume: finished members keep their record; the rest are (re)run from a clean directory.
    earlier = {
        m.get("name"): m for m in (checked.earlier or {}).get("members", []) if isinstance(m, dict)
    }
    for m in members:
        m["log"] = f"{m['name']}.log"
        prev = earlier.get(m["name"], {})
        if is_done(out, m):
            m.update(
                status="done",
                returncode=prev.get("returncode", 0),
                wall_s=prev.get("wall_s"),
                resumed=True,
            )
            if prev.get("command"):
                m["command"] = prev["command"]
        m["moved_aside"] = list(prev.get("moved_aside", []))
    out.mkdir(parents=True, exist_ok=True)
    for m in members:
        if m["status"] != "done":
            m["moved_aside"] += move_aside(out, m)
    write_sweep_json(out, sweep)

    if checked.max_parallel > 1 and "MASTER_PORT" in env:
        # Members running side by side must not share a rendezvous port; the launcher picks a
        # free one when MASTER_PORT is unset.
        env.pop("MASTER_PORT")
    budgets = {m["name"]: member_budget(m, cfg) for m, cfg in zip(members, checked.resolved)}
    lines = RunsProgress(
        study_log,
        [(m["name"], budgets.get(m["name"])) for m in members],
        checked.max_parallel,
        label,
    )
    study_log.line(
        (f"{label}: " if label else "")
        + f"{len(members)} member(s) planned and dry-run ({study_log.elapsed_text()}); "
        f"{sum(m['status'] != 'done' for m in members)} to run, at most "
        f"{checked.max_parallel} at a time, into {out}"
    )
    for m in members:
        if m["status"] == "done":
            lines.skipped(m["name"], run_result(out / m["run_dir"]), m.get("wall_s"))
    queue = [m for m in members if m["status"] != "done"]
    running: dict[str, tuple[dict, subprocess.Popen, TextIO, float]] = {}
    live = show_progress and bool(console.is_terminal)  # off a terminal: the lines instead
    with _Display(members, console, live) as display, _signals_interrupt():
        try:
            while queue or running:
                while queue and len(running) < checked.max_parallel:
                    m = queue.pop(0)
                    proc, log = _launch(checked.recipe, m, base, sweep["extra_args"], out, env)
                    running[m["name"]] = (m, proc, log, time.monotonic())
                    m.update(status="running", returncode=None, wall_s=None)
                    display.started(m["name"])
                    lines.started(m["name"], member_details(m, budgets.get(m["name"])))
                    write_sweep_json(out, sweep)
                for name in list(running):
                    m, proc, log, t0 = running[name]
                    rc = proc.poll()
                    if rc is None:
                        continue
                    log.close()
                    del running[name]
                    ok = rc == 0 and is_done(out, m)
                    m.update(
                        status="done" if ok else "failed",
                        returncode=rc,
                        wall_s=round(time.monotonic() - t0, 3),
                    )
                    if rc == 0 and not ok:
                        m["error"] = (
                            "exited 0 but did not finish (no summary.json, or its "
                            '"ended" says preempted)'
                        )
                    lines.ended(m["name"], ok, member_result(out, m), m["wall_s"])
                    display.finished(m, members, lines.eta_text())
                    write_sweep_json(out, sweep)
                if running:
                    time.sleep(poll_s)
        except BaseException:
            _stop(p for _, p, _, _ in running.values())
            for m, _, log, _ in running.values():
                log.close()
                m.update(status="pending", returncode=None, wall_s=None)
            write_sweep_json(out, sweep)
            raise
    if checked.probes:
        _run_probes(checked, study_log, label)
    return sweep


def _run_probes(checked: CheckedSweep, study_log: StudyLog, label: str) -> None:
    """The throughput probes one after the other (they are timed: never side by side), each
    launched as a member is; a probe whose run directory holds a finished summary.json is kept,
    an unfinished one is moved aside (under DIR/throughput) and rerun."""
    out, sweep, probes = checked.out, checked.sweep, checked.probes
    (out / PROBE_DIR).mkdir(exist_ok=True)
    budgets = {p["name"]: p["num_steps"] * p["responses_per_rollout"] for p in probes}
    lines = RunsProgress(
        study_log, list(budgets.items()), 1, f"{label}: throughput probes" if label else "probes"
    )
    for p in probes:
        if is_done(out, p):
            p["status"] = "done"
            lines.skipped(p["name"], run_result(out / p["run_dir"]), p.get("wall_s"))
        else:
            move_aside(out / PROBE_DIR, {**p, "run_dir": p["name"]})
    write_sweep_json(out, sweep)
    with _signals_interrupt():
        for p in (p for p in probes if p["status"] != "done"):
            proc, log = _launch(
                checked.recipe, p, checked.base, checked.probe_extra, out, checked.env
            )
            t0 = time.monotonic()
            p.update(status="running", returncode=None, wall_s=None)
            lines.started(p["name"], member_details(p, budgets[p["name"]]))
            write_sweep_json(out, sweep)
            try:
                rc = proc.wait()
            except BaseException:
                _stop([proc])
                log.close()
                p["status"] = "pending"
                write_sweep_json(out, sweep)
                raise
            log.close()
            ok = rc == 0 and is_done(out, p)
            p.update(status="done" if ok else "failed", returncode=rc)
            p["wall_s"] = round(time.monotonic() - t0, 3)
            lines.ended(p["name"], ok, member_result(out, p), p["wall_s"])
            write_sweep_json(out, sweep)


def member_budget(member: dict, config: dict | None) -> int | None:
    """A member's samples: its rollout steps (the sweep's, else the recipe's resolved
    --num-steps) x the responses of its rollout step; None when neither is known."""
    steps = member.get("num_steps")
    if steps is None and config is not None:
        steps = config.get("num_steps")
    if not isinstance(steps, int) or isinstance(steps, bool):
        return None
    return steps * int(member["responses_per_rollout"])


def member_details(member: dict, budget: float | None) -> str:
    """What a started member is: 'B=256, lr 4.24e-04, 128,000 samples'."""
    text = f"B={member['responses_per_step']}, lr {member['lr']:.2e}"
    if member.get("fixed_lr_control"):
        text += " (fixed-lr control)"
    return text + ("" if budget is None else f", {samples_text(budget)} samples")


def member_result(out_dir: Path, member: dict) -> str:
    """An ended member's result: `run_result` of its run directory when it finished, else
    'failed (exit 1, log: PATH)'."""
    if member["status"] == "done":
        return run_result(out_dir / member["run_dir"])
    why = f"exit {member['returncode']}"
    if member.get("error"):
        why += ", but it did not finish"
    return f"failed ({why}, log: {out_dir / member['log']})"
