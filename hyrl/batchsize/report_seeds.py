"""The report's "Over seeds" section and its plots, from the analysis' "over_seeds" statistics
(`hyrl.batchsize.over_seeds`): one table row per member, the verdict lines, and the seed-mean
curves with their min-max band against samples and against wall-clock. matplotlib is imported
by the plotting function only, as in `hyrl.batchsize.report`.
"""

from __future__ import annotations

import math
from pathlib import Path

from hyrl.batchsize.formatting import batch as _batch
from hyrl.batchsize.formatting import count as _count

SINGLE_SEED = "one seed per member: no spread and no confidence; run with --seeds for verdicts"


def _pct(p) -> str:
    return "-" if p is None else f"{p * 100:.0f}%"


def _bound(est: dict, side: str, fmt) -> str:
    """One end of an interval: 'never' when unbounded by censoring, '-' when undefined."""
    value = est[side]
    if value is not None:
        return fmt(value)
    return "never" if est["share_never"] > 0 else "-"


def estimate_text(est: dict, fmt, never: str = "never") -> str:
    """'value (low-high)' of an over_seeds estimate; `never` for a censored point."""
    if est["value"] is None:
        point = never if est["never"] else "-"
    else:
        point = fmt(est["value"])
    if est["low"] is None and est["high"] is None:
        return point
    return f"{point} ({_bound(est, 'low', fmt)}-{_bound(est, 'high', fmt)})"


def _ratio(x: float) -> str:
    return f"{x:.2f}x"


def _curve_ratio(est: dict) -> str:
    prefix = {"lower": "> ", "upper": "< "}.get(est.get("bound") or "", "")
    text = estimate_text(est, _ratio, never="never")
    return prefix + text


def _r_ratio(member: dict) -> str:
    r = member["throughput_ratio"]
    text = estimate_text(r, _ratio)
    if r.get("source") == "throughput probes":
        return text + f"; probes, {len(r['rounds'])} rounds"
    for s in r["load_affected"]:
        text += f"; seed {s['seed']} load-affected? (R ratio {s['ratio']:.2f})"
    if r["unpaired_seeds"] and not member["is_reference"]:
        text += "; unpaired"
    return text


def over_seeds_section(seeded: dict) -> list[str]:
    """The '## Over seeds' section: the table and the verdict lines."""
    confidence = seeded["confidence"]
    level = f"{confidence * 100:.0f}%"
    lines = [
        f"## Over seeds ({seeded['n_seeds']} seeds, {seeded['n_boot']} bootstraps, "
        f"confidence {level})",
        "",
        "Each member's seed-mean curve is the mean over its seeds of their curves against "
        "samples; S-bar is where it first reaches the target (never within N: not by the N "
        "samples where the mean stops). Ratios are to the reference member's S-bar: at the "
        "target, and the curve ratio, a weighted geometric mean of the ratios at the levels "
        "(weight (level - start) / (target - start)). R ratio: from the sweep's throughput "
        "probes where it has them (the median over rounds of the member's rate over the same "
        "round's reference rate; interval: bootstraps of the rounds), else the median over "
        "seeds of the throughput against the same seed's reference run; T ratio = S ratio / "
        "R ratio. "
        f"Intervals: the central {level} of {seeded['n_boot']} bootstraps of the seeds. "
        "Validity: rejected when the curve ratio exceeds 1 + tau in at least "
        f"{level} of them (p_more), valid when it does not in at least {level}.",
        "",
        f"| member | B | lr | seeds reached | S-bar ({level} interval) | S ratio at target | "
        "curve ratio | R ratio | T ratio | validity (p_more) | p_fastest |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for m in seeded["members"]:
        name = f"**{m['member']}** (ref)" if m["is_reference"] else m["member"]
        never = f"never within {_count(m['curve_end_samples'])}"
        lr = "-" if m["lr"] is None else f"{m['lr']:.3g}"
        lines.append(
            f"| {name} | {_batch(m['responses_per_step'])} | {lr} | "
            f"{m['n_reached']} of {m['n_seeds']} | "
            f"{estimate_text(m['samples_to_target'], _count, never=never)} | "
            f"{estimate_text(m['samples_ratio'], _ratio)} | {_curve_ratio(m['curve_ratio'])} | "
            f"{_r_ratio(m)} | {estimate_text(m['time_ratio'], _ratio)} | "
            f"{m['validity']} ({_pct(m['p_more'])}) | {_pct(m['p_fastest'])} |"
        )
    lines += ["", *(f"- {line}" for line in seeded["verdicts"])]
    lines += [f"- note: {note}" for note in seeded.get("notes", [])]
    return lines


def plot_seed_means(result: dict, out: Path) -> list[Path]:
    """`{metric}_mean_vs_samples.png` and `{metric}_mean_vs_time.png`: each member's seed-mean
    curve with its min-max band over seeds; [] without over_seeds."""
    seeded = result.get("over_seeds")
    if not seeded:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric, value = result["target"]["metric"], result["target"]["value"]
    members = seeded["members"]
    max_t = max(
        (x for m in members if m["curve_vs_time"] for x in m["curve_vs_time"]["x"]), default=0.0
    )
    t_scale, t_unit = (
        (3600.0, "h") if max_t >= 3 * 3600 else (60.0, "min") if max_t >= 120 else (1.0, "s")
    )
    cmap = plt.get_cmap("viridis")
    colors = {m["member"]: cmap(i / max(1, len(members) - 1) * 0.9) for i, m in enumerate(members)}
    written = []
    for tag, key, xlabel, scale in (
        ("samples", "curve_vs_samples", "cumulative samples (responses)", 1.0),
        ("time", "curve_vs_time", f"wall-clock ({t_unit})", t_scale),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for m in members:
            curve = m[key]
            if not curve:
                continue
            xs = [x / scale for x in curve["x"]]
            color = colors[m["member"]]
            rejected = m["validity"].startswith("rejected")
            label = f"{m['member']} (B={_batch(m['responses_per_step'])}, {m['n_seeds']} seeds)"
            ax.plot(
                xs,
                curve["mean"],
                color=color,
                linewidth=2.6 if m["is_reference"] else 1.4,
                linestyle="--" if rejected else "-",
                label=label
                + (" ref" if m["is_reference"] else "")
                + (" rejected" if rejected else ""),
            )
            if len(xs) > 1 and all(math.isfinite(v) for v in curve["min"] + curve["max"]):
                ax.fill_between(xs, curve["min"], curve["max"], color=color, alpha=0.15)
        written.append(
            finish_metric_figure(
                fig,
                ax,
                value,
                xlabel,
                f"{metric}, mean over seeds",
                f"{metric} seed mean (band: min-max over seeds) vs {xlabel.split(' (')[0]}",
                out / f"{metric.replace('/', '_')}_mean_vs_{tag}.png",
            )
        )
    return written


def finish_metric_figure(fig, ax, target: float, xlabel: str, ylabel: str, title: str, path):
    """A metric-against-x figure of the reports, finished the same way: the target as a dotted
    line, labels, grid, legend; saved to `path` (PNG, 110 dpi) and closed. Returns `path`."""
    import matplotlib.pyplot as plt

    ax.axhline(target, color="crimson", linestyle=":", linewidth=1.2, label=f"target {target:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
