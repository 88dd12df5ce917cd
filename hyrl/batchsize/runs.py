"""Runs, read for the analysis: a run directory becomes a `Run` (a record per optimizer step,
batch sizes and learning rate derived), and PATHs (run directories, sweep directories,
directories of runs) expand into runs. The files themselves are read through
`hyrl.metrics.run_dir`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hyrl.metrics.run_dir import (
    CONFIG_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    SWEEP_FILE,
    RunFileError,
    is_run_dir,
    read_config,
    read_metrics,
    read_summary,
    read_sweep,
)
from hyrl.metrics.run_dir import number as _num


class AnalysisError(ValueError):
    """Bad input to the analysis (a path, a flag value, a metric); the message says what is
    allowed."""


def finite_or_none(value) -> float | None:
    """Finite float or None."""
    x = _num(value)
    return x if math.isfinite(x) else None


@dataclass
class Run:
    """One run directory, read. `records` are metrics.jsonl, one per optimizer step (a
    re-logged one once: `hyrl.metrics.run_dir.read_metrics`), in step order."""

    name: str
    path: Path
    config: dict
    records: list[dict]
    prompts_per_step: float | None
    responses_per_step: float | None
    lr: float | None
    summary: dict | None = None
    responses_per_step_source: str = ""
    notes: list[str] = field(default_factory=list)


def _read_json(read, path, what: str):
    """`read(path)`, with a file that is not JSON named as an AnalysisError saying `what`."""
    try:
        return read(path)
    except RunFileError as err:
        raise AnalysisError(f"{err.path}: not valid JSON ({err.error}); {what}") from None


def _median_samples_step(records: list[dict]) -> float | None:
    samples = [_num(r.get("samples")) for r in records]
    samples = [s for s in samples if math.isfinite(s)]
    diffs = [b - a for a, b in zip(samples, samples[1:]) if b - a > 0]
    return float(statistics.median(diffs)) if diffs else None


def load_run(path, name: str | None = None) -> Run:
    """Read a run directory: config.json (optional for foreign directories), metrics.jsonl,
    optional summary.json. Derives prompts per step (rollout_batch_size, else
    global_batch_size / n_samples_per_prompt), responses per optimizer step (global_batch_size,
    else rollout_batch_size * n_samples_per_prompt, else the median difference of consecutive
    `samples`; when B varied during the run, --batch-schedule auto or --batch-ramp, its mean
    over the optimizer steps: the last record's samples / step) and the learning rate (`lr`,
    else the largest logged `actor/lr`)."""
    path = Path(path)
    if not is_run_dir(path):
        raise AnalysisError(f"{path} is not a run directory: missing {path / METRICS_FILE}")
    notes: list[str] = []
    config: dict = {}
    if (path / CONFIG_FILE).is_file():
        loaded = _read_json(read_config, path, "config.json must hold one JSON object")
        if isinstance(loaded, dict):
            config = loaded
        else:
            notes.append(f"{path / CONFIG_FILE}: not a JSON object; ignored")
    else:
        notes.append(f"{path}: no config.json; batch sizes derived from metrics.jsonl")
    summary = None
    try:
        loaded = read_summary(path)
        summary = loaded if isinstance(loaded, dict) else None
    except RunFileError:
        notes.append(f"{path / SUMMARY_FILE}: not valid JSON; ignored")
    records = read_metrics(path, notes)

    P = finite_or_none(config.get("rollout_batch_size"))
    G = finite_or_none(config.get("n_samples_per_prompt"))
    B = finite_or_none(config.get("global_batch_size"))
    if P is None and B is not None and G:
        P = B / G
    responses: float | None
    varies = config.get("batch_schedule") == "auto" or bool(config.get("batch_ramp"))
    steps_and_samples = [
        (_num(r.get("step")), _num(r.get("samples")))
        for r in records
        if math.isfinite(_num(r.get("step"))) and math.isfinite(_num(r.get("samples")))
    ]
    if varies and steps_and_samples and steps_and_samples[-1][0] > 0:
        # config.json holds only the starting B: the run's own mean over its optimizer steps
        steps, samples = steps_and_samples[-1]
        responses, source = samples / steps, "samples / optimizer steps (B varied during the run)"
        notes.append(
            f"{path}: B varied during the run (--batch-schedule auto or --batch-ramp); "
            f"its B is the mean over optimizer steps, {samples / steps:.0f}"
        )
    elif B is not None:
        responses, source = B, "global_batch_size"
    elif P is not None and G is not None:
        responses, source = P * G, "rollout_batch_size * n_samples_per_prompt"
    else:
        responses, source = _median_samples_step(records), "median step of samples"
        if responses is None:
            source = "unknown"
    lr = finite_or_none(config.get("lr"))
    if lr is None:
        logged = [_num(r.get("actor/lr")) for r in records]
        logged = [x for x in logged if math.isfinite(x)]
        lr = max(logged) if logged else None
    return Run(
        name=name or path.resolve().name,
        path=path,
        config=config,
        records=records,
        prompts_per_step=P,
        responses_per_step=responses,
        lr=lr,
        summary=summary,
        responses_per_step_source=source,
        notes=notes,
    )


def _sweep_members(sweep_dir: Path, notes: list[str]) -> tuple[list[Path], Path | None]:
    data = _read_json(
        read_sweep, sweep_dir, "sweep.json must hold an object with 'reference' and 'members'"
    )
    if not isinstance(data, dict) or not isinstance(data.get("members"), list):
        raise AnalysisError(
            f"{sweep_dir / 'sweep.json'}: expected an object with a 'members' list of {{name, ...}}"
        )
    dirs, missing, by_name = [], [], {}
    for member in data["members"]:
        name = member.get("name") if isinstance(member, dict) else member
        if not isinstance(name, str) or not name:
            raise AnalysisError(f"{sweep_dir / 'sweep.json'}: member {member!r} has no 'name'")
        rel = name
        if isinstance(member, dict):
            rel = member.get("run_dir") or member.get("path") or name
        d = Path(rel) if Path(rel).is_absolute() else sweep_dir / rel
        if not is_run_dir(d) and is_run_dir(sweep_dir / name):
            d = sweep_dir / name
        if is_run_dir(d):
            dirs.append(d)
            by_name[name] = d
        else:
            missing.append(name)
    if missing:
        notes.append(f"{sweep_dir}: member(s) without metrics.jsonl skipped: {', '.join(missing)}")
    if not dirs:
        raise AnalysisError(
            f"{sweep_dir / 'sweep.json'} lists members but none has a run "
            "directory with metrics.jsonl (missing: "
            f"{', '.join(missing) or 'all'})"
        )
    reference = None
    ref_name = data.get("reference")
    if isinstance(ref_name, str) and ref_name:
        reference = by_name.get(ref_name) or next((d for d in dirs if d.name == ref_name), None)
        if reference is None:
            raise AnalysisError(
                f"{sweep_dir / 'sweep.json'} names reference {ref_name!r}, but no "
                f"member run directory has that name; members with runs: "
                f"{', '.join(by_name)}"
            )
    return dirs, reference


def collect_runs(paths: Iterable) -> tuple[list[Run], str | None, list[str]]:
    """Expand paths into runs. A path is a run directory (holds metrics.jsonl), a sweep directory
    (holds sweep.json, whose `members` name its run directories), or a directory whose
    subdirectories are run directories; a `Run` passes through. Returns (runs, the reference
    named by the first sweep.json or None, notes about the sweeps; each run keeps its own).
    Run names are directory base names; names that collide get their parent directory as
    prefix."""
    notes: list[str] = []
    found: list[Run | Path] = []
    sweep_ref: Path | None = None
    for p in paths:
        if isinstance(p, Run):
            found.append(p)
            continue
        p = Path(p)
        if p.is_file() and p.name in (METRICS_FILE, SWEEP_FILE, CONFIG_FILE):
            p = p.parent
        if not p.exists():
            raise AnalysisError(
                f"PATH {p}: does not exist; give a run directory (with "
                "metrics.jsonl) or a sweep directory (with sweep.json or run "
                "subdirectories)"
            )
        if not p.is_dir():
            raise AnalysisError(
                f"PATH {p}: is a file; give a run directory (with metrics.jsonl) "
                "or a sweep directory (with sweep.json or run subdirectories)"
            )
        if is_run_dir(p):
            found.append(p)
        elif (p / SWEEP_FILE).is_file():
            dirs, ref = _sweep_members(p, notes)
            found.extend(dirs)
            if ref is not None:
                if sweep_ref is None:
                    sweep_ref = ref
                elif ref.resolve() != sweep_ref.resolve():
                    notes.append(
                        f"{p / 'sweep.json'} names reference {ref.name}; "
                        f"keeping {sweep_ref.name} from the first sweep"
                    )
        else:
            subdirs = sorted(d for d in p.iterdir() if d.is_dir() and is_run_dir(d))
            if not subdirs:
                raise AnalysisError(
                    f"PATH {p}: neither a run directory (missing {p / 'metrics.jsonl'}) nor a "
                    f"sweep directory (missing {p / 'sweep.json'}, and no subdirectory holds "
                    "metrics.jsonl)"
                )
            found.extend(subdirs)

    # One entry per directory; disambiguate clashing base names with the parent's name.
    unique: list[Run | Path] = []
    seen: set[Path] = set()
    for item in found:
        key = (item.path if isinstance(item, Run) else item).resolve()
        if key not in seen:
            seen.add(key)
            unique.append(item)
    base = [(item.name if isinstance(item, Run) else item.resolve().name) for item in unique]
    runs: list[Run] = []
    reference: str | None = None
    for item, name in zip(unique, base):
        if isinstance(item, Run):
            run = item
        else:
            if base.count(name) > 1:
                name = f"{item.resolve().parent.name}/{name}"
            run = load_run(item, name=name)
            if sweep_ref is not None and item.resolve() == sweep_ref.resolve():
                reference = run.name
        runs.append(run)
    return runs, reference, notes
