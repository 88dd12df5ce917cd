"""What a study (`hyrl sweep`, `hyrl tune`) shows while its runs go. Off a terminal (a log file,
a pipe, `make demo > log`) it prints one plain, flushed line as each run starts and one as it
ends, with the run's result, the study's elapsed time and an ETA for the runs left, as
`hyrl train` prints a plain line per step (hyrl.metrics.progress, whose clock this shares). On a
terminal the caller keeps its rich display, which may show the same ETA (`RunsProgress.eta_text`).

    hyrl sweep: [3/25] b256-sqrt-s2 started (B=256, lr 4.24e-04, 128,000 samples)
    hyrl sweep: [3/25] b256-sqrt-s2 done in 52 s: eval/accuracy=0.9 reached at 40,960
        samples, 31.2 s | 2 done, 0 failed, 22 to go | study 0:02:35 elapsed, ETA 0:12:10

The ETA (`study_eta`): the seconds per budgeted sample measured on the runs done so far (their
wall time over their sample budgets; when a budget is unknown, every run counts as one),
times each run's budget left (a running run's minus the time it has run), the runs laid
out on --max-parallel slots in launch order. A run that stops early (at its target) still
counts its whole budget, so the rate is per budgeted sample, as the runs left are estimated.
Before the first run ends it is unknown.

`StudyLog`: the prefix, the clock and the flushed printing; `RunsProgress`: one group of runs
(a sweep's members, tune's probes); `run_result`: a finished run's result from its directory.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from hyrl.metrics.progress import clock
from hyrl.metrics.run_dir import RunFileError, number, read_metrics, read_summary


def duration(seconds: float) -> str:
    """A run's time: '3.2 s' under 10 s, '52 s' under a minute, else H:MM:SS."""
    if seconds < 9.95:
        return f"{max(0.0, seconds):.1f} s"
    return f"{seconds:.0f} s" if seconds < 59.5 else clock(seconds)


def samples_text(samples: float) -> str:
    """A count of samples with thousands separators: 128,000."""
    return f"{int(round(samples)):,}"


def study_eta(
    done: Sequence[tuple[float, float]],
    left: Sequence[tuple[float, float]],
    max_parallel: int = 1,
) -> float | None:
    """Seconds until the runs left end, or None before any run is done.

    done: (sample budget, wall seconds) of each run done; left: (sample budget, seconds it has
    run so far, 0 when pending) of each run not ended, the running ones first, then the
    pending ones in launch order. rate = sum(seconds) / sum(budgets) of `done`; a run left
    needs max(0, rate x budget - seconds run); these are laid out on `max_parallel` slots,
    each to the slot free first (as the sweep launches them), and the ETA is when the last
    slot is free. By hand: two runs of 1,000 samples done in 10 s and 30 s, 0.02 s per
    sample; three of 2,000 left need 40 s each: 120 s one at a time, 80 s two at a time."""
    if not left:
        return 0.0
    budget = sum(b for b, _ in done)
    if not done or budget <= 0:
        return None
    rate = sum(s for _, s in done) / budget
    slots = [0.0] * max(1, min(max_parallel, len(left)))
    for b, ran in left:
        i = slots.index(min(slots))
        slots[i] += max(0.0, rate * b - ran)
    return max(slots)


class StudyLog:
    """The lines of one study: `PROG: TEXT`, printed and flushed at once, only off a terminal
    and when enabled; the study's clock starts when this is made."""

    def __init__(
        self,
        prog: str,
        out: TextIO | None = None,
        tty: bool | None = None,
        enabled: bool = True,
        scope: str = "study",
        now: Callable[[], float] = time.monotonic,
    ):
        """prog: the command ('hyrl sweep'); out: where (None: stdout); tty: whether out is a
        terminal (None: ask it); scope: the name of the elapsed time ('study 0:02:35
        elapsed'); now: the clock (monotonic seconds)."""
        self.prog, self.scope, self.now = prog, scope, now
        self.out = out if out is not None else sys.stdout
        self.tty = bool(self.out.isatty()) if tty is None else tty
        self.plain = enabled and not self.tty
        self.began = now()

    @classmethod
    def for_console(cls, prog: str, console: Any, enabled: bool, scope: str = "study") -> StudyLog:
        """A log writing where a rich Console writes, a terminal when the console is one."""
        return cls(prog, console.file, console.is_terminal, enabled, scope)

    def elapsed(self) -> float:
        return self.now() - self.began

    def elapsed_text(self) -> str:
        """'study 0:02:35 elapsed'."""
        return f"{self.scope} {clock(self.elapsed())} elapsed"

    def line(self, text: str) -> None:
        """`PROG: TEXT`, flushed, off a terminal (nothing on one, nor when disabled)."""
        if self.plain:
            print(f"{self.prog}: {text}", file=self.out, flush=True)


@dataclass
class _Run:
    index: int
    name: str
    budget: float | None
    state: str = "pending"  # pending, running, done, failed
    started: float | None = None
    wall: float | None = None


class RunsProgress:
    """A group of runs (a sweep's members, tune's probes) in a `StudyLog`: a line as each run
    starts, ends or is skipped (finished earlier), `[i/n] NAME` with the run's place in the
    group, then the counts, the study's elapsed time and the group's ETA (`study_eta`)."""

    def __init__(
        self,
        log: StudyLog,
        runs: Sequence[tuple[str, float | None]],
        max_parallel: int = 1,
        label: str = "",
        eta_label: str | None = None,
        eta: bool = True,
    ):
        """runs: (name, sample budget or None) in launch order; label: before `[i/n]` ('probe');
        eta_label: before 'ETA' (default label); eta False: no ETA (runs whose length no
        budget gives, such as the alignment check's, which stop at a level)."""
        self.log, self.max_parallel, self.label = log, max_parallel, label
        self.eta_label = label if eta_label is None else eta_label
        self.with_eta = eta
        self.runs = {name: _Run(i, name, budget) for i, (name, budget) in enumerate(runs, 1)}

    def _run(self, name: str) -> _Run:
        """The run called `name`; one the group did not list joins it at the end."""
        if name not in self.runs:
            self.runs[name] = _Run(len(self.runs) + 1, name, None)
        return self.runs[name]

    def _head(self, run: _Run) -> str:
        place = f"[{run.index}/{len(self.runs)}] {run.name}"
        return f"{self.label} {place}" if self.label else place

    def budget(self, name: str) -> float | None:
        """The run's sample budget as this group knows it (None: unknown, or not listed)."""
        run = self.runs.get(name)
        return None if run is None else run.budget

    def started(self, name: str, details: str = "", budget: float | None = None) -> None:
        """The run starts now; details: what it is ('B=256, lr 4.24e-04, 128,000 samples');
        budget: its sample budget when only known now."""
        run = self._run(name)
        if budget is not None:
            run.budget = budget
        run.state, run.started = "running", self.log.now()
        self.log.line(f"{self._head(run)} started" + (f" ({details})" if details else ""))

    def ended(self, name: str, ok: bool, result: str, wall_s: float | None = None) -> None:
        """The run ended (ok: done, else failed) with `result` ('eval/accuracy=0.9 reached at
        ...', or 'failed (exit 1, log: PATH)'); wall_s: its time (None: since `started`)."""
        run = self._run(name)
        if wall_s is None:
            wall_s = self.log.now() - (run.started if run.started is not None else self.log.now())
        run.state, run.wall = ("done" if ok else "failed"), wall_s
        verb = "done" if ok else "ended"
        self.log.line(f"{self._head(run)} {verb} in {duration(wall_s)}: {result} | {self._tail()}")

    def skipped(self, name: str, result: str, wall_s: float | None = None) -> None:
        """The run finished in an earlier invocation and is kept; wall_s: its time then, when
        known (it counts in the ETA's rate)."""
        run = self._run(name)
        run.state, run.wall = "done", wall_s
        self.log.line(f"{self._head(run)} skipped: finished earlier ({result})")

    def _tail(self) -> str:
        states = [r.state for r in self.runs.values()]
        done, failed = states.count("done"), states.count("failed")
        counts = f"{done} done, {failed} failed, {len(states) - done - failed} to go"
        tail = f"{counts} | {self.log.elapsed_text()}"
        return f"{tail}, {self.eta_text()}" if self.with_eta else tail

    def eta(self) -> float | None:
        """`study_eta` of the runs left, from the runs done so far (failed ones left out: a
        crash says nothing of a run's length); None before one is done."""
        runs = list(self.runs.values())
        unit = any(r.budget is None for r in runs)  # a budget unknown: each run counts as one

        def budget(r: _Run) -> float:
            return 1.0 if unit or r.budget is None else float(r.budget)

        done = [(budget(r), r.wall) for r in runs if r.state == "done" and r.wall is not None]
        now = self.log.now()
        running = [
            (budget(r), now - r.started)
            for r in runs
            if r.state == "running" and r.started is not None
        ]
        pending = [(budget(r), 0.0) for r in runs if r.state == "pending"]
        return study_eta(done, running + pending, self.max_parallel)

    def eta_text(self) -> str:
        """'ETA 0:12:10' ('probes ETA ...' with an eta_label), or 'ETA unknown'."""
        eta = self.eta()
        head = f"{self.eta_label} ETA" if self.eta_label else "ETA"
        return f"{head} unknown" if eta is None else f"{head} {clock(eta)}"


def _best(run_dir: Path, metric: str) -> float | None:
    """The largest finite value of `metric` in the run's metrics.jsonl (None: none)."""
    try:
        values = [number(r.get(metric)) for r in read_metrics(run_dir)]
    except OSError:
        return None
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else None


def run_result(run_dir: Path | str) -> str:
    """A finished run's result from its summary.json (and, for a target not reached, the best
    value in metrics.jsonl): 'eval/accuracy=0.9 reached at 40,960 samples, 31.2 s',
    'eval/accuracy=0.9 not reached (best 0.88)', or without a target '2,048 samples in 12.3 s
    (166.5 resp/s)'. Never raises: an unreadable summary is said so."""
    run_dir = Path(run_dir)
    try:
        summary = read_summary(run_dir)
    except (OSError, RunFileError) as err:
        return f"summary.json unreadable ({err})"
    if not isinstance(summary, dict):
        return "no summary.json"
    target = summary.get("target")
    if isinstance(target, dict) and "metric" in target:
        value = number(target.get("value"))
        name = f"{target['metric']}={value:g}"
        at, seconds = number(summary.get("samples_to_target")), summary.get("time_to_target_s")
        if summary.get("reached") and math.isfinite(at):
            text = f"{name} reached at {samples_text(at)} samples"
            t = number(seconds)
            return text + (f", {t:.1f} s" if math.isfinite(t) else "")
        best = _best(run_dir, str(target["metric"]))
        return (
            f"{name} not reached ("
            + ("never evaluated" if best is None else f"best {best:.4g}")
            + ")"
        )
    samples, elapsed = number(summary.get("samples")), number(summary.get("elapsed_s"))
    if not math.isfinite(samples):
        return "finished"
    text = f"{samples_text(samples)} samples"
    if math.isfinite(elapsed) and elapsed > 0:
        text += f" in {elapsed:.1f} s ({samples / elapsed:.1f} resp/s)"
    return text
