"""`hyrl tune`: the two-pass profiling procedure that predicts the fastest batch size without a
full sweep (the model is `hyrl.batchsize.tune.model`; its docstring gives every formula).

Steps, each one a directory under --out (re-running the same command skips a finished step):

0. Check (`check_tune`, `hyrl.batchsize.tune.plan`): every argument, the recipe's resolved
   configuration (a dry run), and a dry run of every probe member (and, with --verify, of every
   verify member at its budget) before anything starts.
1. Pass 1 (`DIR/pass1`): one run of the recipe at its reference batch for --budget-samples
   responses (a one-member `hyrl sweep`): the noise scale over training and the stage costs.
   Every run tune starts is `hyrl.batchsize.tune.members`.
2. Pass 2: the decode profile (`DIR/profile`, `hyrl profile-rollout` at the concurrencies the
   candidates need) and the update probes (`DIR/probes`: every candidate and x1 for
   --probe-steps rollout steps, evaluation off, in --probe-rounds rounds; only their step
   timers are read, each against its round's x1).
3. The model and the report: `DIR/report.json`, `DIR/report.md`, `DIR/noise_scale.png`,
   `DIR/prediction.png` (`hyrl.batchsize.tune.prediction`, `hyrl.batchsize.tune.report`).
4. The alignment check (`DIR/align`, `hyrl.batchsize.tune.align`): the reference to a level
   between its start and the target, then the recommendation and its larger neighbour from the
   same start; a candidate whose curve departs is rejected with every larger one.
5. --verify K: the recommendation, the reference and the K candidates nearest to the
   recommendation run as a `hyrl sweep` with equal sample budgets (`DIR/verify`), analysed by
   `hyrl analyze`; the report gains a "predicted vs measured" table
   (`hyrl.batchsize.tune.verify`).

Progress: on a terminal a header per step and a spinner per run; off one (a log file, a pipe)
also a flushed line as each step and each run starts and ends, with what it measured (the run's
result from its summary.json, the profile's responses/s), the tune's elapsed time and, for the
runs with a sample budget (pass 1, the probes, verify), an ETA of their step from the seconds
per sample of its runs done so far (hyrl.batchsize.sweep.progress). The alignment check's runs
stop at a level, so they get no ETA.

Reads and writes run directories and config.json only, through `hyrl sweep` (which launches
the recipe as a subprocess) and `hyrl.batchsize.runs`; the profile is `python -m hyrl
profile-rollout`, also a subprocess. No torch here.
"""

from __future__ import annotations

import time

from hyrl.batchsize.sweep.progress import StudyLog, duration
from hyrl.batchsize.sweep.run import member_budget
from hyrl.batchsize.tune import align
from hyrl.batchsize.tune.align import run_align_check
from hyrl.batchsize.tune.members import (
    member_dirs,
    reporting,
    run_probes,
    run_profile,
    run_sweep_step,
    step_runs,
)
from hyrl.batchsize.tune.plan import TunePlan, align_plan
from hyrl.batchsize.tune.prediction import predict_report
from hyrl.batchsize.tune.verify import run_verify


def run_tune(plan: TunePlan, console=None, show_progress: bool = True) -> dict:
    """Steps 1 to 5 (after `check_tune`); returns report.json's content, also written (the
    prediction once before the alignment check, so a failed check keeps it). Progress as
    the module says (`show_progress` False: none but the steps' headers)."""
    from rich.console import Console

    console = console or Console()
    log = StudyLog.for_console("hyrl tune", console, show_progress, scope="tune")
    with reporting(log):
        return _run_steps(plan, console, show_progress, log)


def _step_done(log: StudyLog, step: str, began: float) -> float:
    """The line that ends a step; its seconds."""
    seconds = time.monotonic() - began
    log.line(f"{step} done in {duration(seconds)} | {log.elapsed_text()}")
    return seconds


def _run_steps(plan: TunePlan, console, show_progress: bool, log: StudyLog) -> dict:
    from hyrl.batchsize.tune.report import write_report

    plan.out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    console.print(f"[bold]pass 1[/]: {plan.budget_samples} responses at the reference batch")
    pass1_dir = run_sweep_step(
        plan, "pass1", [1], plan.budget_samples, plan.extra_args, console, show_progress
    )
    timings["pass1_s"] = _step_done(log, "pass 1", t0)
    t = time.monotonic()
    profile = run_profile(plan, console)
    timings["profile_s"] = time.monotonic() - t
    t = time.monotonic()
    console.print(f"[bold]pass 2[/]: update probes, {plan.probe_steps} steps per candidate")
    probes = run_probes(plan, console)
    timings["probes_s"] = _step_done(log, "pass 2 (probes)", t)
    pass1 = member_dirs(pass1_dir)[1]
    report = predict_report(plan, pass1, profile, probes)
    # the prediction on disk before the runs that check it: a check that fails keeps it
    report["timings_s"] = dict(timings)
    write_report(report, plan.out)
    rec = report["recommendation"]
    log.line(
        f"prediction: x{rec['mult']} (B = {rec['responses_per_step']}), time to the target "
        f"{rec['time_ratio']:.3g} x the reference's | {log.elapsed_text()}"
    )
    if plan.align_check:
        t = time.monotonic()
        console.print(
            f"[bold]align check[/]: x{report['recommendation']['mult']} and its larger "
            "neighbour against the reference"
        )
        planned = align_plan(plan, [1, *align.members(plan.mults, int(rec["mult"]))])
        # the reference runs to a level, the others to a budget set by it: no ETA
        runs = [(m["name"], member_budget(m, None)) for m in planned]
        with step_runs("align check", runs, eta=False):
            check = run_align_check(plan, report, pass1, console)
        rejected = check["rejected_from"]
        if rejected is not None and rejected <= report["recommendation"]["mult"]:
            # predicted, then measured: the recommendation itself was rejected
            predicted = report["recommendation"]
            report = predict_report(plan, pass1, profile, probes, check["rejected_from"])
            report["predicted_recommendation"] = predicted
        report["align_check"] = check
        timings["align_check_s"] = _step_done(
            log, f"align check (rejected from x{rejected})" if rejected else "align check", t
        )
    if plan.verify:
        t = time.monotonic()
        console.print(f"[bold]verify[/]: {plan.verify_samples} responses per member")
        report["verify"] = run_verify(plan, report, console, show_progress)
        timings["verify_s"] = _step_done(log, "verify", t)
    timings["total_s"] = time.monotonic() - t0
    report["timings_s"] = timings
    report["files"] = [str(p.name) for p in write_report(report, plan.out)]
    return report
