"""A member's R ratio (throughput against the reference member's) for the seed-aware verdicts
(`hyrl.batchsize.over_seeds`, step 7): from a sweep's throughput probes where it has them, else
from the runs themselves.

From the runs: per seed, the run's throughput over the same seed's reference run's (the analysis
rows' `throughput_ratio` against `paired_with`; "unpaired" where the sweep has no reference run
of that seed); the member's R ratio is the median over seeds, bootstrapped with the seeds'
resamples. With >= LOAD_MIN_SEEDS seeds, a seed whose ratio lies outside Tukey's fences
[Q1 - 1.5 IQR, Q3 + 1.5 IQR] of the member's is "load-affected?" and left out of the R ratio.

From the probes (`hyrl sweep --throughput-rounds`; `hyrl.batchsize.sweep.throughput` says how
they run): a probe's throughput is the responses decoded per second of its steps after the first (a
warm-up): (samples_generated at its last step - at its first step) / (elapsed_s at its last
step - at its first step), `samples` where a run does not log samples_generated. With evaluation
off, that is the training loop's own rate. In round r, member m's ratio is
rate(m, r) / rate(reference, r); the member's R ratio is the median over rounds, its
interval from resampling the rounds (with replacement), independently of the seeds. The runs'
own evaluations do not enter: a sweep with --eval-every-samples spends the same evaluation time
per sample on every member.

Reads sweep.json and the probes' metrics.jsonl only; no torch.
The in-run ratios are the better only when the probes are missing: they are measured while
other members share the machine, at other times than their reference.
"""

from __future__ import annotations

import json
import math
import statistics
import warnings
from pathlib import Path

import numpy as np

from hyrl.batchsize.runs import Run, finite_or_none
from hyrl.batchsize.seed_verdicts import estimate
from hyrl.metrics.run_dir import METRICS_FILE, SWEEP_FILE, RunFileError, read_sweep

__all__ = ["probe_rate", "probes_of", "sweep_probes", "throughput_ratio"]

LOAD_MIN_SEEDS = 4  # seeds with an R ratio needed before one is called load-affected
LOAD_FENCE_IQR = 1.5  # Tukey's fences: Q1 - 1.5 IQR, Q3 + 1.5 IQR


def probe_rate(run_dir: Path) -> float | None:
    """Responses per second of the probe's steps after the first; None when it has fewer than
    two training steps or no time between them."""
    path = Path(run_dir) / METRICS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    points = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a killed probe
        step = finite_or_none(rec.get("step")) if isinstance(rec, dict) else None
        if step is None or step < 1:
            continue
        done = finite_or_none(rec.get("samples_generated", rec.get("samples")))
        elapsed = finite_or_none(rec.get("elapsed_s"))
        if done is not None and elapsed is not None:
            points.append((step, done, elapsed))
    if len(points) < 2:
        return None
    points.sort()
    (_, d0, e0), (_, d1, e1) = points[0], points[-1]
    return (d1 - d0) / (e1 - e0) if e1 > e0 and d1 > d0 else None


def _record(sweep_dir: Path, notes: list[str]) -> dict | None:
    try:
        sweep = read_sweep(sweep_dir)
    except (OSError, RunFileError):
        return None  # collect_runs has already said what is wrong with it
    record = sweep.get("throughput") if isinstance(sweep, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("probes"), list):
        return None
    ref_group = next(
        (
            p.get("member")
            for p in record["probes"]
            if isinstance(p, dict) and p.get("is_reference")
        ),
        None,
    )
    if ref_group is None:
        notes.append(f"{sweep_dir / SWEEP_FILE}: its throughput probes name no reference probe")
        return None
    return {"ref_group": ref_group, **record}


def sweep_probes(runs: list[Run], notes: list[str]) -> dict | None:
    """{"source", "rounds", "samples", "reference", "members": {group: {"ratios": [per round],
    "rates": [per round], "rounds"}}} from the sweep directory that holds `runs` (their parent)
    when its sweep.json holds throughput probes; None when none does. With runs from more than
    one directory, None and a note when one of them has probes: rates measured apart do not
    pair."""
    parents = sorted({r.path.resolve().parent for r in runs})
    found = []
    for p in parents:
        if (p / SWEEP_FILE).is_file():
            record = _record(p, notes)
            if record is not None:
                found.append((p, record))
    if not found:
        return None
    sweep_dir, record = found[0]
    if len(parents) > 1:
        notes.append(
            f"runs from outside {sweep_dir} ("
            + ", ".join(str(p) for p in parents if p != sweep_dir)
            + "): R ratios from the runs themselves, not from its throughput probes"
        )
        return None
    rates: dict[int, dict[str, float]] = {}
    failed = []
    for p in record["probes"]:
        if not isinstance(p, dict) or not isinstance(p.get("run_dir"), str):
            continue
        rate = probe_rate(sweep_dir / p["run_dir"]) if p.get("status") == "done" else None
        if rate is None:
            failed.append(str(p.get("name")))
            continue
        rates.setdefault(int(p["round"]), {})[str(p["member"])] = rate
    if failed:
        notes.append(
            f"{sweep_dir}: throughput probe(s) without a rate (not run, failed or too short): "
            + ", ".join(failed)
        )
    ref = record["ref_group"]
    members: dict[str, dict[str, list]] = {}
    for r in sorted(rates):
        if ref not in rates[r]:
            continue
        for group, rate in rates[r].items():
            entry = members.setdefault(group, {"ratios": [], "rates": [], "rounds": []})
            entry["ratios"].append(rate / rates[r][ref])
            entry["rates"].append(rate)
            entry["rounds"].append(r)
    if not members:
        return None
    return {
        "source": str(sweep_dir),
        "rounds": record.get("rounds"),
        "samples": record.get("samples"),
        "reference": ref,
        "members": members,
    }


def probes_of(probes: dict | None, member: str) -> dict | None:
    """The member's entry in `sweep_probes`' result, with the probes' facts; None without."""
    if probes is None or member not in probes["members"]:
        return None
    return {k: v for k, v in probes.items() if k != "members"} | probes["members"][member]


def _median_rounds(ratios: list[float], n_boot: int, rng) -> tuple[float, np.ndarray]:
    """(median over rounds, the medians of `n_boot` resamples of the rounds)."""
    values = np.array([v for v in ratios if math.isfinite(v)], dtype=float)
    if values.size == 0:
        return math.nan, np.full(n_boot, math.nan)
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    return float(statistics.median(values.tolist())), np.median(values[idx], axis=1)


def _seed_ratios(rows: list[dict], row_of: dict[str, dict], ref_group: str):
    """Per seed {"seed", "run", "ratio", "paired", "load_affected"} and the ratios kept for the
    verdict (NaN: none, or load-affected)."""
    seeds = []
    for row in rows:
        partner = row_of.get(row["paired_with"], {})
        paired = (
            row["seed"] is not None
            and partner.get("seed") == row["seed"]
            and partner.get("group") == ref_group
        )
        seeds.append(
            {
                "seed": row["seed"],
                "run": row["name"],
                "ratio": row["throughput_ratio"],
                "paired": bool(paired),
                "load_affected": False,
            }
        )
    ratios = np.array([math.nan if s["ratio"] is None else float(s["ratio"]) for s in seeds])
    finite = ratios[np.isfinite(ratios)]
    if finite.size >= LOAD_MIN_SEEDS:
        q1, q3 = np.percentile(finite, [25, 75])
        low, high = q1 - LOAD_FENCE_IQR * (q3 - q1), q3 + LOAD_FENCE_IQR * (q3 - q1)
        for i, s in enumerate(seeds):
            if math.isfinite(ratios[i]) and not low <= ratios[i] <= high:
                s["load_affected"] = True
                ratios[i] = math.nan
    return seeds, ratios


def throughput_ratio(
    rows: list[dict],
    row_of: dict[str, dict],
    ref_group: str,
    indices: np.ndarray,
    probe: dict | None,
    rng: np.random.Generator,
    confidence: float,
) -> tuple[dict, np.ndarray]:
    """(the member's R ratio as the report writes it, its bootstrap): from `probe`
    (`probes_of`) when given, else from its runs `rows` (the seeds' resamples `indices`)."""
    seeds, kept = _seed_ratios(rows, row_of, ref_group)
    n_boot = indices.shape[0]
    if probe is not None:
        point, boot = _median_rounds(probe["ratios"], n_boot, rng)
        extra = {
            "source": "throughput probes",
            "rounds": probe["ratios"],
            "probe_samples": probe.get("samples"),
            "seeds": seeds,  # the runs' own ratios, for comparison; not in the verdict
            "load_affected": [],
        }
    else:
        finite = kept[np.isfinite(kept)].tolist()
        point = float(statistics.median(finite)) if finite else math.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN
            boot = np.nanmedian(kept[indices], axis=1)
        extra = {
            "source": "runs",
            "seeds": seeds,
            "load_affected": [s for s in seeds if s["load_affected"]],
        }
    extra["unpaired_seeds"] = [s["seed"] for s in seeds if not s["paired"]]
    return {**estimate(point, boot, confidence), **extra}, boot
