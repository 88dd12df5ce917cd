"""Samples, throughput and time to a validation target, and curve alignment, from run directories.

The quantities (DESIGN.md, "The science it encodes"):

- S, samples to target: cumulative responses (`samples`) at which the validation metric first
  reaches the target, linearly interpolated between the two evaluations around the crossing.
- R, throughput: end-to-end responses per second of the whole loop = final `samples` / final
  `elapsed_s`.
- T, time to target: `elapsed_s` at the same crossing, interpolated the same way. T = S / R when
  the throughput is steady, so relative to a reference T/T_ref is predicted by
  (S/S_ref) / (R/R_ref); both the measured and the predicted ratio are reported.
- Alignment: at evenly spaced levels of the metric, from the first level *clearly* above the
  reference's starting value up to the target, compare the samples the run and the reference
  needed. "Clearly above" means start + 10% of (target - start) (`CLEAR_FRACTION`). Only levels
  both curves reach are compared. The run is aligned when every ratio run/reference lies within
  1 +/- tolerance; with no common level it is not aligned, and the reason says so. The reference
  is aligned with itself by definition.
- Critical batch: the largest responses per optimizer step among aligned runs. Fastest valid:
  the aligned run that reached the target in the least wall-clock time.

A metric is "higher is better" when the target lies at or above the reference's first evaluation
(accuracy, reward) and "lower is better" otherwise (a loss); "reaches a level" follows that
direction.

Only the run directory is read (config.json, metrics.jsonl, optional summary.json, and sweep.json
of a parent sweep directory), so this module imports neither torch nor any training code.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from hyrl.metrics.run_dir import (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, SWEEP_FILE,
                                  RunFileError, is_run_dir, read_config, read_metrics,
                                  read_summary, read_sweep)
from hyrl.metrics.run_dir import number as _num
from hyrl.metrics.target import TargetSyntaxError
from hyrl.metrics.target import parse_target as _parse_target

CLEAR_FRACTION = 0.10  # first alignment level = start + CLEAR_FRACTION * (target - start)
DEFAULT_LEVELS = 10
DEFAULT_TOLERANCE = 0.2
_EPS = 1e-9  # slack on the tolerance band against float round-off


class AnalysisError(ValueError):
    """Bad input to the analysis (a path, a flag value, a metric); the message says what is allowed."""


# --- numbers -------------------------------------------------------------------------------

def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _opt(value) -> float | None:
    """Finite float or None."""
    x = _num(value)
    return x if math.isfinite(x) else None


def _ratio(a, b) -> float | None:
    if a is None or b is None or not _finite(a) or not _finite(b) or b == 0:
        return None
    return a / b


def json_safe(obj):
    """Recursively: non-finite floats -> None, tuples -> lists, paths -> str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


# --- the run directory -----------------------------------------------------------------------

@dataclass
class Run:
    """One run directory, read. `records` are metrics.jsonl merged by step and sorted by step."""

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
    `samples`) and the learning rate (`lr`, else the largest logged `actor/lr`)."""
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

    P = _opt(config.get("rollout_batch_size"))
    G = _opt(config.get("n_samples_per_prompt"))
    B = _opt(config.get("global_batch_size"))
    if P is None and B is not None and G:
        P = B / G
    if B is not None:
        responses, source = B, "global_batch_size"
    elif P is not None and G is not None:
        responses, source = P * G, "rollout_batch_size * n_samples_per_prompt"
    else:
        responses, source = _median_samples_step(records), "median step of samples"
        if responses is None:
            source = "unknown"
    lr = _opt(config.get("lr"))
    if lr is None:
        logged = [_num(r.get("actor/lr")) for r in records]
        logged = [x for x in logged if math.isfinite(x)]
        lr = max(logged) if logged else None
    return Run(name=name or path.resolve().name, path=path, config=config, records=records,
               prompts_per_step=P, responses_per_step=responses, lr=lr, summary=summary,
               responses_per_step_source=source, notes=notes)


def _sweep_members(sweep_dir: Path, notes: list[str]) -> tuple[list[Path], Path | None]:
    data = _read_json(read_sweep, sweep_dir, "sweep.json must hold an object with "
                      "'reference' and 'members'")
    if not isinstance(data, dict) or not isinstance(data.get("members"), list):
        raise AnalysisError(f"{sweep_dir / 'sweep.json'}: expected an object with a 'members' "
                            "list of {name, ...}")
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
        raise AnalysisError(f"{sweep_dir / 'sweep.json'} lists members but none has a run "
                            f"directory with metrics.jsonl (missing: {', '.join(missing) or 'all'})")
    reference = None
    ref_name = data.get("reference")
    if isinstance(ref_name, str) and ref_name:
        reference = by_name.get(ref_name) or next((d for d in dirs if d.name == ref_name), None)
        if reference is None:
            raise AnalysisError(f"{sweep_dir / 'sweep.json'} names reference {ref_name!r}, but no "
                                f"member run directory has that name; members with runs: "
                                f"{', '.join(by_name)}")
    return dirs, reference


def collect_runs(paths: Iterable) -> tuple[list[Run], str | None, list[str]]:
    """Expand paths into runs. A path is a run directory (holds metrics.jsonl), a sweep directory
    (holds sweep.json, whose `members` name its run directories), or a directory whose
    subdirectories are run directories; a `Run` passes through. Returns (runs, the reference
    named by the first sweep.json or None, notes about the sweeps; each run keeps its own). Run names are directory base names; names
    that collide get their parent directory as prefix."""
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
            raise AnalysisError(f"PATH {p}: does not exist; give a run directory (with "
                                "metrics.jsonl) or a sweep directory (with sweep.json or run "
                                "subdirectories)")
        if not p.is_dir():
            raise AnalysisError(f"PATH {p}: is a file; give a run directory (with metrics.jsonl) "
                                "or a sweep directory (with sweep.json or run subdirectories)")
        if is_run_dir(p):
            found.append(p)
        elif (p / SWEEP_FILE).is_file():
            dirs, ref = _sweep_members(p, notes)
            found.extend(dirs)
            if ref is not None:
                if sweep_ref is None:
                    sweep_ref = ref
                elif ref.resolve() != sweep_ref.resolve():
                    notes.append(f"{p / 'sweep.json'} names reference {ref.name}; "
                                 f"keeping {sweep_ref.name} from the first sweep")
        else:
            subdirs = sorted(d for d in p.iterdir() if d.is_dir() and is_run_dir(d))
            if not subdirs:
                raise AnalysisError(
                    f"PATH {p}: neither a run directory (missing {p / 'metrics.jsonl'}) nor a "
                    f"sweep directory (missing {p / 'sweep.json'}, and no subdirectory holds "
                    "metrics.jsonl)")
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


# --- curves ----------------------------------------------------------------------------------

def metric_curve(run: Run, metric: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """(samples, elapsed_s, steps, values) at the records holding a finite `metric`. A record
    that lacks `samples` / `elapsed_s` takes the last value logged before it (NaN if none)."""
    samples, elapsed, steps, values = [], [], [], []
    last_samples, last_elapsed = math.nan, math.nan
    for rec in run.records:
        s, e = _num(rec.get("samples")), _num(rec.get("elapsed_s"))
        last_samples = s if math.isfinite(s) else last_samples
        last_elapsed = e if math.isfinite(e) else last_elapsed
        if metric not in rec:
            continue
        v = _num(rec[metric])
        if not math.isfinite(v) or not math.isfinite(last_samples):
            continue
        samples.append(last_samples)
        elapsed.append(last_elapsed)
        steps.append(_num(rec.get("step")))
        values.append(v)
    return samples, elapsed, steps, values


def samples_to_reach(samples: Sequence[float], values: Sequence[float], level: float,
                     higher_is_better: bool = True) -> float | None:
    """x (cumulative samples; or elapsed seconds, or steps) at which `values` first reaches
    `level` (>= level, or <= level when lower is better), linearly interpolated between the two
    evaluations around the crossing. The first evaluation reaching it gives its own x. None if
    the curve never reaches the level (or x is unknown there)."""
    prev_x = prev_v = None
    for x, v in zip(samples, values):
        x, v = float(x), float(v)
        if not math.isfinite(v):
            continue
        hit = v >= level if higher_is_better else v <= level
        if hit:
            if prev_v is None or v == prev_v:
                out = x
            else:
                out = prev_x + (level - prev_v) / (v - prev_v) * (x - prev_x)
            return out if math.isfinite(out) else None
        prev_x, prev_v = x, v
    return None


def alignment_levels(target: float, start_value: float, n_levels: int = DEFAULT_LEVELS) -> list[float]:
    """n evenly spaced levels from start + CLEAR_FRACTION * (target - start) to the target."""
    first = start_value + CLEAR_FRACTION * (target - start_value)
    if n_levels <= 1:
        return [float(target)]
    step = (target - first) / (n_levels - 1)
    return [first + i * step for i in range(n_levels - 1)] + [float(target)]


def _xy(curve) -> tuple[Sequence[float], Sequence[float]]:
    """(x, values) from a metric_curve 4-tuple or an (x, values) pair."""
    if len(curve) == 4:
        return curve[0], curve[3]
    if len(curve) == 2:
        return curve[0], curve[1]
    raise TypeError("a curve is (samples, values) or metric_curve's (samples, elapsed, steps, values)")


def alignment_detail(run_curve, ref_curve, target: float, start_value: float, tolerance: float,
                     n_levels: int = DEFAULT_LEVELS, higher_is_better: bool | None = None
                     ) -> tuple[bool, list[tuple[float, float]], str]:
    """alignment() plus the reason, in words."""
    if higher_is_better is None:
        higher_is_better = target >= start_value
    if target == start_value:
        return False, [], "the target equals the reference's starting value; no level to compare"
    run_x, run_v = _xy(run_curve)
    ref_x, ref_v = _xy(ref_curve)
    ratios: list[tuple[float, float]] = []
    run_hits = ref_hits = 0
    for level in alignment_levels(target, start_value, n_levels):
        s_run = samples_to_reach(run_x, run_v, level, higher_is_better)
        s_ref = samples_to_reach(ref_x, ref_v, level, higher_is_better)
        run_hits += s_run is not None
        ref_hits += s_ref is not None
        if s_run is None or s_ref is None or s_ref <= 0:
            continue
        ratios.append((level, s_run / s_ref))
    if not ratios:
        if not run_v:
            why = "the run has no evaluations of the metric"
        elif run_hits == 0:
            why = "the run reaches none of the levels"
        elif ref_hits == 0:
            why = "the reference reaches none of the levels"
        else:
            why = "the run and the reference reach no level in common after their start"
        return False, [], f"no common level: {why}"
    lo, hi = 1 - tolerance, 1 + tolerance
    outside = [(lv, r) for lv, r in ratios if not lo - _EPS <= r <= hi + _EPS]
    span = f"{min(r for _, r in ratios):.3g}-{max(r for _, r in ratios):.3g}"
    if outside:
        lv, r = max(outside, key=lambda t: abs(t[1] - 1))
        return False, ratios, (f"samples ratio {r:.3g} at level {lv:.4g} lies outside "
                               f"1 +/- {tolerance:g} ({len(outside)} of {len(ratios)} levels; "
                               f"ratios {span})")
    return True, ratios, (f"all {len(ratios)} common levels within 1 +/- {tolerance:g} "
                          f"(ratios {span})")


def alignment(run_curve, ref_curve, target: float, start_value: float, tolerance: float,
              n_levels: int = DEFAULT_LEVELS, higher_is_better: bool | None = None
              ) -> tuple[bool, list[tuple[float, float]]]:
    """(aligned, [(level, run samples / reference samples), ...]) over the levels both curves
    reach, from start + 10% of (target - start) up to the target (n evenly spaced). Curves are
    metric_curve() tuples or (samples, values) pairs. Aligned iff every ratio lies within
    1 +/- tolerance; no common level -> not aligned."""
    aligned, ratios, _ = alignment_detail(run_curve, ref_curve, target, start_value, tolerance,
                                          n_levels, higher_is_better)
    return aligned, ratios


# --- per-run quantities ----------------------------------------------------------------------

def _final(run: Run) -> tuple[float | None, float | None, float | None]:
    """(samples, elapsed_s, step) of the last record holding both samples and elapsed_s."""
    for rec in reversed(run.records):
        s, e = _num(rec.get("samples")), _num(rec.get("elapsed_s"))
        if math.isfinite(s) and math.isfinite(e):
            return s, e, _opt(rec.get("step"))
    return None, None, None


def throughput(run: Run) -> float | None:
    """End-to-end responses per second: final samples / final elapsed_s."""
    s, e, _ = _final(run)
    return s / e if s is not None and e else None


def stage_shares(run: Run) -> dict[str, float]:
    """Share of each stage: sum of perf/<stage>_s over records / the sum of perf/step_s (or the
    final elapsed_s when no step times are logged). `other` is what the stages leave over
    (idle, unaccounted). perf/setup_s (start-up) and rates (*_per_s) are not stages."""
    totals: dict[str, float] = {}
    step_total = 0.0
    for rec in run.records:
        for key, value in rec.items():
            if not (key.startswith("perf/") and key.endswith("_s")) or key.endswith("_per_s"):
                continue
            x = _num(value)
            if not math.isfinite(x):
                continue
            stage = key[len("perf/"):-len("_s")]
            if stage == "step":
                step_total += x
            elif stage != "setup":
                totals[stage] = totals.get(stage, 0.0) + x
    denom = step_total if step_total > 0 else (_final(run)[1] or 0.0)
    if denom <= 0 or not totals:
        return {}
    shares = {k: v / denom for k, v in totals.items()}
    other = 1.0 - sum(shares.values())
    if other > 1e-6:
        shares["other"] = other
    return shares


def parse_target(text: str) -> tuple[str, float]:
    """'eval/accuracy=0.77' -> ('eval/accuracy', 0.77): `hyrl.metrics.target.parse_target`'s
    rules with any metric name (foreign run directories log their own)."""
    try:
        return _parse_target(text, prefixes=None)
    except TargetSyntaxError as err:
        raise AnalysisError(f"--target {text!r}: {err.problem}; expected METRIC=VALUE with a "
                            "finite number, e.g. --target eval/accuracy=0.77") from None


def _metric_names(runs: list[Run]) -> list[str]:
    names = sorted({k for r in runs for rec in r.records for k in rec})
    evals = [k for k in names if k.startswith("eval/")]
    return evals or names


def analyze(paths, target: tuple[str, float], reference: str | None = None,
            tolerance: float = DEFAULT_TOLERANCE, n_levels: int = DEFAULT_LEVELS) -> dict:
    """Analyse runs against `target` = (metric, value). `paths`: run directories, sweep
    directories or `Run`s. The reference defaults to sweep.json's, else the run with the fewest
    responses per optimizer step. Returns a JSON-safe dict (see the module docstring)."""
    metric, value = target
    value = _num(value)
    if not isinstance(metric, str) or not metric or not math.isfinite(value):
        raise AnalysisError(f"--target {target!r}: expected METRIC=VALUE with a finite number")
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise AnalysisError(f"--tolerance {tolerance!r}: must be a number > 0 (relative, "
                            "e.g. 0.2 for 1 +/- 20%)")
    if not isinstance(n_levels, int) or n_levels < 1:
        raise AnalysisError(f"n_levels {n_levels!r}: must be an integer >= 1")
    runs, sweep_reference, notes = collect_runs(paths)
    if not runs:
        raise AnalysisError("PATH: no run directories given")
    notes += [n for r in runs for n in r.notes]
    names = [r.name for r in runs]
    curves = {r.name: metric_curve(r, metric) for r in runs}
    if not any(c[3] for c in curves.values()):
        raise AnalysisError(f"--target {metric}={value:g}: no run has finite values of "
                            f"{metric!r}; metrics present: {', '.join(_metric_names(runs)) or 'none'}")

    if reference is not None:
        if reference not in names:
            raise AnalysisError(f"--reference {reference!r}: no run by that name; "
                                f"allowed: {', '.join(names)}")
        ref_name = reference
    elif sweep_reference is not None:
        ref_name = sweep_reference
    else:
        with_b = [r for r in runs if r.responses_per_step is not None]
        ref_name = min(with_b, key=lambda r: r.responses_per_step).name if with_b else runs[0].name
    ref_curve = curves[ref_name]
    if not ref_curve[3]:
        raise AnalysisError(f"--reference {ref_name!r}: the reference has no finite values of "
                            f"{metric!r}; choose another, allowed: "
                            f"{', '.join(n for n in names if curves[n][3])}")
    start_value = ref_curve[3][0]
    higher = value >= start_value
    if value == start_value:
        notes.append(f"the reference's first evaluation already equals the target {value:g}")
    levels = alignment_levels(value, start_value, n_levels)

    rows = []
    for run in runs:
        samples, elapsed, steps, values = curves[run.name]
        S = samples_to_reach(samples, values, value, higher)
        T = samples_to_reach(elapsed, values, value, higher) if S is not None else None
        K = samples_to_reach(steps, values, value, higher) if S is not None else None
        final_samples, final_elapsed, final_step = _final(run)
        best = (max(values) if higher else min(values)) if values else None
        if run.name == ref_name:
            aligned = True
            ratios = [(lv, 1.0) for lv in levels
                      if (samples_to_reach(samples, values, lv, higher) or 0) > 0]
            reason = "the reference (aligned with itself by definition)"
        else:
            aligned, ratios, reason = alignment_detail(curves[run.name], ref_curve, value,
                                                       start_value, tolerance, n_levels, higher)
        rows.append({
            "name": run.name,
            "path": str(run.path),
            "is_reference": run.name == ref_name,
            "prompts_per_step": run.prompts_per_step,
            "n_samples_per_prompt": _opt(run.config.get("n_samples_per_prompt")),
            "responses_per_step": run.responses_per_step,
            "responses_per_step_source": run.responses_per_step_source,
            "lr": run.lr,
            "reached": S is not None,
            "samples_to_target": S,
            "time_to_target_s": T,
            "steps_to_target": K,
            "throughput_responses_per_s": throughput(run),
            "final_samples": final_samples,
            "final_elapsed_s": final_elapsed,
            "final_step": final_step,
            "n_evals": len(values),
            "first_value": values[0] if values else None,
            "best_value": best,
            "aligned": aligned,
            "alignment_reason": reason,
            "alignment_ratios": [{"level": lv, "ratio": r} for lv, r in ratios],
            "stage_shares": stage_shares(run),
        })
    rows.sort(key=lambda r: (r["responses_per_step"] is None, r["responses_per_step"] or 0))
    ref_row = next(r for r in rows if r["is_reference"])
    for row in rows:
        row["samples_ratio"] = _ratio(row["samples_to_target"], ref_row["samples_to_target"])
        row["throughput_ratio"] = _ratio(row["throughput_responses_per_s"],
                                         ref_row["throughput_responses_per_s"])
        row["time_ratio"] = _ratio(row["time_to_target_s"], ref_row["time_to_target_s"])
        row["predicted_time_ratio"] = _ratio(row["samples_ratio"], row["throughput_ratio"])

    aligned_rows = [r for r in rows if r["aligned"] and r["responses_per_step"] is not None]
    critical = max(aligned_rows, key=lambda r: r["responses_per_step"], default=None)
    valid = [r for r in rows if r["aligned"] and r["reached"] and r["time_to_target_s"] is not None]
    fastest = min(valid, key=lambda r: r["time_to_target_s"], default=None)
    unreached = [r["name"] for r in rows if not r["reached"]]
    for r in rows:
        if r["aligned"] and not r["reached"] and not r["is_reference"]:
            notes.append(f"{r['name']} is aligned on the levels it reached but never reached "
                         f"the target (best {r['best_value']})")
    return json_safe({
        "reference": ref_name,
        "target": {"metric": metric, "value": value},
        "tolerance": tolerance,
        "higher_is_better": higher,
        "start_value": start_value,
        "clear_fraction": CLEAR_FRACTION,
        "levels": levels,
        "fastest_valid": fastest["name"] if fastest else None,
        "fastest_valid_time_ratio": fastest["time_ratio"] if fastest else None,
        "critical_batch_responses": critical["responses_per_step"] if critical else None,
        "critical_batch_run": critical["name"] if critical else None,
        "unreached": unreached,
        "runs": rows,
        "notes": notes,
    })
