"""Verdicts over seeds: a sweep with --seeds runs every member once per seed, one seed after the
other (`hyrl.batchsize.sweep.plan`), so each member's runs are spread over the sweep's time and
a member sits next to its own seed's reference. The analysis pairs them and gives the spread.

- A run's seed is its config.json `seed`; its group is its name without the sweep's `-s{seed}`
  suffix (`b256-sqrt-s2` -> `b256-sqrt`); a run outside a sweep is a group of its own.
- Pairing (`seed_references`): every run is compared with the run of the reference's group
  that has its seed: S, R and T ratios and the alignment. A change of the machine's load
  between seeds then falls on both sides of each ratio.
- Over seeds (`seed_groups`), per group: the median and the range (min to max) over seeds of
  the paired S, R and T ratios, a seed that never reached the target counting as an infinite S
  and T (so a median is finite only when most seeds reached it), a seed whose run reached it
  but whose reference did not having no ratio (`time_ratio_seeds` counts those that have);
  the median time to target; aligned and reached when most of its seeds are. The fastest
  valid group has the least median T among the aligned groups that reached the target; the
  fastest reached group the least median T whether aligned or not. A group whose T ratio
  range overlaps the fastest valid group's is "within the seed spread" of it: the verdict
  between them rests on noise.
  These medians and ranges stay in report.json and the report's per-seed table; the report's
  verdicts over seeds come from the seed-mean curves of `hyrl.batchsize.over_seeds`.

Pure: reads `Run`s and the analysis rows only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from hyrl.batchsize.runs import Run


def run_seed(run: Run) -> int | None:
    seed = run.config.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def group_name(run: Run) -> str:
    """The run's name without a trailing `-s{seed}` of its own seed."""
    seed = run_seed(run)
    if seed is not None and run.name.endswith(f"-s{seed}"):
        return run.name[: -len(f"-s{seed}")]
    return run.name


def seed_references(runs: Sequence[Run], ref_name: str) -> dict[str, str]:
    """{run name: the name of the run it is compared with}: the reference group's run of the
    same seed where there is one (the reference itself otherwise)."""
    ref = next(r for r in runs if r.name == ref_name)
    ref_group = group_name(ref)
    by_seed = {
        run_seed(r): r.name for r in runs if group_name(r) == ref_group and run_seed(r) is not None
    }
    return {r.name: by_seed.get(run_seed(r), ref_name) for r in runs}


def _median_and_range(values: Sequence[float]) -> tuple[float | None, list[float | None]]:
    """(median, [min, max]); inf (never reached) shows as None."""
    if not values:
        return None, [None, None]

    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return finite(statistics.median(values)), [finite(min(values)), finite(max(values))]


def _overlap(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """Do two [low, high] ranges overlap (None high: unbounded)?"""
    a_hi = math.inf if a[1] is None else a[1]
    b_hi = math.inf if b[1] is None else b[1]
    return a[0] is not None and b[0] is not None and a[0] <= b_hi and b[0] <= a_hi


def seed_groups(rows: Sequence[dict], ref_group: str) -> dict:
    """{"groups": [...], "fastest_valid_group", "fastest_reached_group", "within_spread"}
    over seeds (module docstring); empty when no group has more than one run."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    if all(len(members) == 1 for members in groups.values()):
        return {}
    out = []
    for name, members in groups.items():
        n = len(members)

        def values(key: str, members: list[dict] = members) -> list[float]:
            """Each seed's value of `key`; inf where the seed never reached the target."""
            return [
                math.inf if not r["reached"] else r[key]
                for r in members
                if not r["reached"] or r[key] is not None
            ]

        s_med, s_range = _median_and_range(values("samples_ratio"))
        t_values = values("time_ratio")
        t_med, t_range = _median_and_range(t_values)
        rates = [r["throughput_ratio"] for r in members if r["throughput_ratio"] is not None]
        r_med, r_range = _median_and_range(rates)
        time_med, _ = _median_and_range(values("time_to_target_s"))
        n_reached = sum(bool(r["reached"]) for r in members)
        n_aligned = sum(bool(r["aligned"]) for r in members)
        out.append(
            {
                "group": name,
                "is_reference": name == ref_group,
                "responses_per_step": members[0]["responses_per_step"],
                "lr": members[0]["lr"],
                "seeds": [r["seed"] for r in members],
                "runs": [r["name"] for r in members],
                "n_reached": n_reached,
                "n_aligned": n_aligned,
                "reached": 2 * n_reached > n,
                "aligned": 2 * n_aligned > n,
                "time_to_target_s_median": time_med,
                "samples_ratio_median": s_med,
                "samples_ratio_range": s_range,
                "throughput_ratio_median": r_med,
                "throughput_ratio_range": r_range,
                "time_ratio_median": t_med,
                "time_ratio_range": t_range,
                # seeds with a T ratio: the run reached the target and so did its seed's
                # reference, or the run never did (counted as never)
                "time_ratio_seeds": len(t_values),
            }
        )
    out.sort(key=lambda g: (g["responses_per_step"] is None, g["responses_per_step"] or 0))

    def fastest(candidates: list[dict]) -> dict | None:
        timed = [g for g in candidates if g["time_to_target_s_median"] is not None]
        return min(timed, key=lambda g: g["time_to_target_s_median"], default=None)

    valid = fastest([g for g in out if g["aligned"] and g["reached"]])
    reached = fastest([g for g in out if g["reached"]])
    within = (
        [
            g["group"]
            for g in out
            if g is not valid
            and g["time_ratio_median"] is not None
            and _overlap(g["time_ratio_range"], valid["time_ratio_range"])
        ]
        if valid is not None
        else []
    )
    return {
        "groups": out,
        "fastest_valid_group": valid["group"] if valid else None,
        "fastest_reached_group": reached["group"] if reached else None,
        "within_spread": within,
    }
