"""The preemption lead time launch/sbatch.template gives a run, against the one the plan
estimates it needs (hyrl.plan.step_time: one rollout step and one save, with a margin).

Slurm warns a job LEAD seconds before its time limit (`--signal=B:USR1@LEAD`); the run then
finishes its rollout step, saves and exits, and the template requeues it. A lead shorter than
a step plus a save lets Slurm kill the job before the checkpoint is written.

Where the template's lead comes from, as the job can see it: Slurm's input variable
SBATCH_SIGNAL when set (sbatch takes it over the script's #SBATCH lines, and the job inherits
it), else the template's own `#SBATCH --signal=` line. A `--signal` on sbatch's command line
is not visible inside the job (Slurm 22.05 shows it in no variable and no `scontrol show job`
field), so the template documents SBATCH_SIGNAL as the way to change it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

from hyrl.plan.step_time import format_seconds as _seconds

TEMPLATE = Path(__file__).resolve().parents[2] / "launch" / "sbatch.template"
# Slurm's default warning time when --signal names no @sig_time (sbatch(1))
SLURM_DEFAULT_SIG_TIME_S = 60
_SIGNAL_LINE = re.compile(r"^#SBATCH\s+--signal[=\s]+(\S+)", re.MULTILINE)


def signal_lead_s(spec: str) -> int:
    """The lead time of a Slurm --signal value `[{R|B}:]<sig_num>[@sig_time]` (seconds)."""
    _, at, sig_time = spec.partition("@")
    if not at:
        return SLURM_DEFAULT_SIG_TIME_S
    if not sig_time.isdigit():
        raise ValueError(f"--signal={spec}: the time after @ is not a whole number of seconds")
    return int(sig_time)


def template_lead(env: Mapping[str, str], template: Path = TEMPLATE) -> dict:
    """{"seconds": the lead (None: no warning asked), "source": where it was read}."""
    if env.get("SBATCH_SIGNAL"):
        spec, source = env["SBATCH_SIGNAL"], f"SBATCH_SIGNAL={env['SBATCH_SIGNAL']}"
    elif not template.is_file():
        return {"seconds": None, "source": f"{template} not found"}
    else:
        found = _SIGNAL_LINE.findall(template.read_text())
        if not found:
            return {"seconds": None, "source": f"{template.name} asks no --signal"}
        spec = found[-1]  # sbatch takes the last of repeated options
        source = f"#SBATCH --signal={spec}"
    try:
        return {"seconds": signal_lead_s(spec), "source": source}
    except ValueError as err:
        return {"seconds": None, "source": str(err)}


def slurm_time_s(text: str) -> int | None:
    """Seconds of a Slurm time (squeue's %l: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S);
    None for UNLIMITED, NOT_SET, INVALID or an empty string."""
    text = text.strip()
    days, dash, rest = text.partition("-")
    if not dash:
        days, rest = "0", text
    parts = rest.split(":")
    if not (days.isdigit() and 1 <= len(parts) <= 3 and all(p.isdigit() for p in parts)):
        return None
    numbers = [int(p) for p in parts]
    if dash:  # D-H, D-H:M, D-H:M:S
        h, m, s = (numbers + [0, 0])[:3]
    elif len(numbers) == 1:  # minutes
        h, m, s = 0, numbers[0], 0
    elif len(numbers) == 2:  # M:S
        h, m, s = 0, *numbers
    else:
        h, m, s = numbers
    return ((int(days) * 24 + h) * 60 + m) * 60 + s


def lead_problems(step_time: dict, lead: dict, time_limit_s: int | None = None) -> list[str]:
    """Why this lead cannot carry the run to a checkpoint, each naming the setting, its value
    and what is needed ([] when it can, or when the step time is not modelled)."""
    needed = step_time.get("lead_s")
    seconds, source = lead["seconds"], lead["source"]
    problems = []
    if seconds is None:
        problems.append(
            f"{source}: Slurm would end the job at its time limit without a warning, so no "
            f"checkpoint; allowed: SBATCH_SIGNAL=B:USR1@N or #SBATCH --signal=B:USR1@N with "
            f"N >= {needed or 'one rollout step + one save'} s"
        )
    elif needed is not None and seconds < needed:
        problems.append(
            f"{source}: a preemption lead time of {seconds} s is shorter than the {needed:,} s "
            f"one rollout step and one save need (an estimate: {_need_text(step_time)}; "
            f"`hyrl plan RECIPE` prints its basis), so Slurm may kill the job before the "
            f"checkpoint; allowed: SBATCH_SIGNAL=B:USR1@{needed} or longer, or the "
            f"cluster's measured throughputs in PLAN_ASSUMPTIONS (hyrl plan --help)"
        )
    if seconds is not None and time_limit_s is not None and seconds >= time_limit_s:
        problems.append(
            f"{source}: a preemption lead time of {seconds} s is not shorter than the job's "
            f"time limit of {time_limit_s} s (--time), so Slurm would warn it at once; allowed: "
            f"a --time longer than {seconds} s"
        )
    return problems


def _need_text(step_time: dict) -> str:
    return (
        f"(step {_seconds(step_time['step_s'])} + save {_seconds(step_time['save_s'])}) x "
        f"{1 + step_time['margin']:g} margin"
    )


def format_preemption(step_time: dict | None, lead: dict | None) -> list[str]:
    """The plan table's lead-time line: what the run needs beside what the template gives."""
    if not step_time or "lead_s" not in step_time:
        return []
    needed = step_time["lead_s"]
    line = (
        f"  preemption lead: needs >= {math.ceil(needed):,} s = {_need_text(step_time)} (an "
        "estimate)"
    )
    if lead is not None:
        given = lead["seconds"]
        if given is None:
            verdict = f"launch/sbatch.template: {lead['source']}: no warning"
        else:
            ok = "enough" if given >= needed else "too short: the template refuses this run"
            verdict = f"launch/sbatch.template gives {given:,} s ({lead['source']}): {ok}"
        line += f"; {verdict}"
    return [line]
