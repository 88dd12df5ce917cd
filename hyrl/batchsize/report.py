"""The analysis as files: report.json, report.md (table + plain reading) and PNG plots.

Plots: the metric against cumulative samples (the invariance picture), against wall-clock and
against optimizer steps, each with the target as a horizontal line, and the share of each loop
stage per run. Runs are labelled by name and B (responses per optimizer step); the reference is
drawn thicker, runs that are not aligned dashed. With several seeds per member, the "Over
seeds" section and the seed-mean plots come from `hyrl.batchsize.report_seeds`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hyrl.batchsize.curves import metric_curve
from hyrl.batchsize.formatting import batch as _batch
from hyrl.batchsize.formatting import count as _count
from hyrl.batchsize.formatting import format_duration
from hyrl.batchsize.formatting import g as _g
from hyrl.batchsize.formatting import times as _x
from hyrl.batchsize.report_seeds import (
    SINGLE_SEED,
    finish_metric_figure,
    over_seeds_section,
    plot_seed_means,
)
from hyrl.batchsize.runs import Run


def run_label(row: dict) -> str:
    return f"{row['name']} (B={_batch(row['responses_per_step'])})"


# --- markdown --------------------------------------------------------------------------------


def reading(result: dict) -> str:
    """One paragraph in plain words, generated from the numbers."""
    metric, value = result["target"]["metric"], result["target"]["value"]
    rows = result["runs"]
    ref = next(r for r in rows if r["name"] == result["reference"])
    parts = []
    if ref["reached"]:
        parts.append(
            f"The reference {ref['name']} (B={_batch(ref['responses_per_step'])}) reaches "
            f"{metric}={value:g} after {_count(ref['samples_to_target'])} samples in "
            f"{format_duration(ref['time_to_target_s'])}."
        )
    else:
        parts.append(
            f"The reference {ref['name']} never reaches {metric}={value:g}, so no "
            "samples, throughput or time ratios at the target can be formed."
        )
    others = sorted(
        (r for r in rows if r is not ref),
        key=lambda r: (r["responses_per_step"] is None, r["responses_per_step"] or 0),
    )
    for r in others:
        who = f"B={_batch(r['responses_per_step'])} ({r['name']})"
        if r.get("paired_with") == r["name"]:  # another seed's reference: its own measure
            done = (
                f"reaches the target after {_count(r['samples_to_target'])} samples in "
                f"{format_duration(r['time_to_target_s'])}"
                if r["reached"]
                else f"never reaches the target (best {_g(r['best_value'], 4)})"
            )
            parts.append(
                f"{who} is the reference of seed {r.get('seed')}, which the runs of that seed "
                f"are compared with: it {done}."
            )
            continue
        if not r["reached"]:
            best = "-" if r["best_value"] is None else f"{r['best_value']:.4g}"
            parts.append(
                f"{who} never reaches the target (best {best} after "
                f"{_count(r['final_samples'])} samples)."
            )
            continue
        if r["samples_ratio"] is not None and r["throughput_ratio"] is not None:
            sentence = (
                f"{who} reaches the target with {r['samples_ratio']:.2f}x the samples at "
                f"{r['throughput_ratio']:.2f}x the throughput: "
                f"{r['predicted_time_ratio']:.2f}x the time"
            )
            if r["time_ratio"] is not None:
                sentence += f" (measured {r['time_ratio']:.2f}x)"
        else:
            sentence = (
                f"{who} reaches the target after {_count(r['samples_to_target'])} samples "
                f"in {format_duration(r['time_to_target_s'])}"
            )
        sentence += (
            "; its curve stays aligned with the reference."
            if r["aligned"]
            else f"; its curve departs from the reference ({r['alignment_reason']})."
        )
        parts.append(sentence)
    crit = result.get("critical_batch_responses")
    if crit is not None:
        parts.append(
            f"Curves against samples stay aligned up to B={_batch(crit)} responses per "
            f"optimizer step (tolerance {result['tolerance']:g})."
        )
    fastest = result.get("fastest_valid")
    if fastest is None:
        parts.append("No aligned run reached the target, so there is no valid fastest batch size.")
    else:
        row = next(r for r in rows if r["name"] == fastest)
        tr = row["time_ratio"]
        if row is not ref and row.get("paired_with") == row["name"]:
            parts.append(
                f"The fastest valid run is {fastest}, the reference of seed {row.get('seed')} "
                f"({format_duration(row['time_to_target_s'])}; the reference "
                f"{format_duration(ref['time_to_target_s'])}): runs of different seeds differ "
                "by the seed as much as by the batch, see the verdicts over seeds."
            )
        elif row is ref or tr is None:
            parts.append(
                f"The fastest valid run is {fastest} itself "
                f"({format_duration(row['time_to_target_s'])})."
            )
        else:
            change = (
                f"{(1 - tr) * 100:.0f}% less time" if tr < 1 else f"{(tr - 1) * 100:.0f}% more time"
            )
            pair = next((r for r in rows if r["name"] == row.get("paired_with")), ref)
            against = (
                "the reference" if pair is ref else f"{pair['name']}, the reference of its seed"
            )
            parts.append(
                f"The fastest valid run is {fastest} "
                f"(B={_batch(row['responses_per_step'])}): "
                f"{format_duration(row['time_to_target_s'])} against "
                f"{format_duration(pair['time_to_target_s'])} for {against}, {change}."
            )
    seeded = result.get("over_seeds")
    if seeded:
        parts.append(f"Over seeds, the verdict to act on: {seeded['fastest_sentence']}.")
    return " ".join(parts)


def render_markdown(result: dict, plots: list[str]) -> str:
    metric, value = result["target"]["metric"], result["target"]["value"]
    lines = [f"# Batch-size analysis: {metric} = {value:g}", ""]
    seeded = result.get("over_seeds")
    single = [
        f"critical batch: **{_batch(result['critical_batch_responses'])}** responses per "
        f"optimizer step ({result.get('critical_batch_run') or 'none'})",
        f"fastest valid run: **{result['fastest_valid'] or 'none'}**",
        f"fastest run to reach the target, aligned or not: {_fastest_reached(result)}",
    ]
    lines += [
        f"- reference: **{result['reference']}**",
        f"- tolerance: 1 +/- {result['tolerance']:g} on samples ratios, levels from "
        f"{result['levels'][0]:.4g} (start {result['start_value']:.4g} + "
        f"{result['clear_fraction'] * 100:.0f}% of the way) to the target, "
        f"{len(result['levels'])} levels",
    ]
    if seeded:
        # with several seeds the verdicts are the seed-aware ones; single runs are one draw each
        lines += [
            f"- **over seeds** ({seeded['n_seeds']} seeds, confidence "
            f"{seeded['confidence']:.0%}): {seeded['fastest_sentence']}",
            *(f"  - {v}" for v in seeded["verdicts"] if v != seeded["fastest_sentence"]),
            "- single runs (each against its seed's reference; one draw each, no confidence, "
            "not a verdict): " + "; ".join(x.replace("**", "") for x in single),
        ]
    else:
        lines += [f"- {x}" for x in single] + [f"- over seeds: {SINGLE_SEED}"]
    lines += [
        f"- never reached the target: {', '.join(result['unreached']) or 'none'}",
        "",
    ]
    if seeded:
        lines += [*over_seeds_section(seeded), "", "## Single runs", ""]
    lines += [
        "| run | P | B | lr | S (samples) | R (resp/s) | T | staleness | S ratio | R ratio | "
        "T ratio | T ratio predicted | aligned |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["runs"]:
        name = f"**{r['name']}** (ref)" if r["is_reference"] else r["name"]
        if not r["reached"]:
            name += " (never reached)"
        lines.append(
            f"| {name} | {_batch(r['prompts_per_step'])} | {_batch(r['responses_per_step'])} | "
            f"{_g(r['lr'])} | {_count(r['samples_to_target'])} | "
            f"{_g(r['throughput_responses_per_s'])} | {format_duration(r['time_to_target_s'])} | "
            f"{_g(r.get('staleness_median'))} | {_x(r['samples_ratio'])} | "
            f"{_x(r['throughput_ratio'])} | {_x(r['time_ratio'])} | "
            f"{_x(r['predicted_time_ratio'])} | {'yes' if r['aligned'] else 'no'} |"
        )
    if result.get("groups"):
        lines += ["", *per_seed_table(result)]
    lines += ["", "## Reading", "", reading(result), "", "## Alignment", ""]
    for r in result["runs"]:
        lines.append(
            f"- {r['name']}: {'aligned' if r['aligned'] else 'not aligned'}: "
            f"{r['alignment_reason']}"
        )
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def _fastest_reached(result: dict) -> str:
    name = result.get("fastest_reached")
    if name is None:
        return "none"
    return f"{name} ({'aligned' if result.get('fastest_reached_aligned') else 'not aligned'})"


def _spread(median, bounds) -> str:
    """1.23x (1.10-1.40x); a bound None is 'never' (a seed that did not reach the target)."""
    if median is None and bounds[0] is None:
        return "never"
    low = "never" if bounds[0] is None else f"{bounds[0]:.2f}"
    high = "never" if bounds[1] is None else f"{bounds[1]:.2f}"
    middle = "never" if median is None else f"{median:.2f}x"
    return f"{middle} ({low} to {high})"


def _of_seeds(k: int, n: int) -> str:
    """' (k of n seeds)' when some seeds have no ratio (their reference never reached)."""
    return "" if k == n else f" ({k} of {n} seeds)"


def per_seed_table(result: dict) -> list[str]:
    """The '### Per seed' table: each member's median and range over seeds of the single-run
    ratios to the same seed's reference (`hyrl.batchsize.seeds`). The verdicts over seeds are
    the "Over seeds" section's (`report_seeds`), not drawn from these medians."""
    lines = [
        "### Per seed: single-run ratios to the same seed's reference",
        "",
        "Ratios are to the reference run of the same seed; median over seeds, with the range "
        "(min to max) in brackets. A seed that never reached the target counts as never; a "
        "seed whose run reached it but whose reference did not has no ratio. The verdicts are "
        "the seed-mean statistics' above.",
        "",
        "| member | B | lr | seeds | reached | aligned | S ratio | R ratio | T ratio | median T |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for g in result["groups"]:
        n = len(g["seeds"])
        name = f"**{g['group']}** (ref)" if g["is_reference"] else g["group"]
        lines.append(
            f"| {name} | {_batch(g['responses_per_step'])} | {_g(g['lr'])} | "
            f"{','.join(str(x) for x in g['seeds'])} | {g['n_reached']}/{n} | "
            f"{g['n_aligned']}/{n} | "
            f"{_spread(g['samples_ratio_median'], g['samples_ratio_range'])} | "
            f"{_spread(g['throughput_ratio_median'], g['throughput_ratio_range'])} | "
            f"{_spread(g['time_ratio_median'], g['time_ratio_range'])}"
            f"{_of_seeds(g.get('time_ratio_seeds', n), n)} | "
            f"{format_duration(g['time_to_target_s_median'])} |"
        )
    return lines


# --- plots -----------------------------------------------------------------------------------


def _plots(result: dict, runs: list[Run], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric, value = result["target"]["metric"], result["target"]["value"]
    rows = {r["name"]: r for r in result["runs"]}
    by_name = {run.name: run for run in runs if run.name in rows}
    order = sorted(
        by_name,
        key=lambda n: (
            rows[n]["responses_per_step"] is None,
            rows[n]["responses_per_step"] or 0,
            n,
        ),
    )
    curves = {n: metric_curve(by_name[n], metric) for n in order}
    max_t = max((t for c in curves.values() for t in c[1] if math.isfinite(t)), default=0.0)
    t_scale, t_unit = (
        (3600.0, "h") if max_t >= 3 * 3600 else (60.0, "min") if max_t >= 120 else (1.0, "s")
    )
    written = []
    axes_spec = [
        ("samples", 0, "cumulative samples (responses)", 1.0),
        ("time", 1, f"wall-clock ({t_unit})", t_scale),
        ("steps", 2, "optimizer steps", 1.0),
    ]
    cmap = plt.get_cmap("viridis")
    colors = {n: cmap(i / max(1, len(order) - 1) * 0.9) for i, n in enumerate(order)}
    for tag, idx, xlabel, scale in axes_spec:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for n in order:
            xs, vs = curves[n][idx], curves[n][3]
            pts = [(x / scale, v) for x, v in zip(xs, vs) if math.isfinite(x)]
            if not pts:
                continue
            row = rows[n]
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker=".",
                color=colors[n],
                linewidth=2.6 if row["is_reference"] else 1.4,
                linestyle="-" if row["aligned"] else "--",
                label=run_label(row)
                + (" ref" if row["is_reference"] else "")
                + ("" if row["aligned"] else " not aligned"),
            )
        written.append(
            finish_metric_figure(
                fig,
                ax,
                value,
                xlabel,
                metric,
                f"{metric} vs {xlabel.split(' (')[0]}",
                out / f"{metric.replace('/', '_')}_vs_{tag}.png",
            )
        )

    shares = {n: rows[n]["stage_shares"] for n in order if rows[n]["stage_shares"]}
    if shares:
        stages = sorted({s for sh in shares.values() for s in sh if s != "other"})
        if any("other" in sh for sh in shares.values()):
            stages.append("other")
        names = list(shares)
        fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(names) + 2), 4.5))
        bottom = [0.0] * len(names)
        scmap = plt.get_cmap("tab10")
        for i, stage in enumerate(stages):
            heights = [shares[n].get(stage, 0.0) for n in names]
            ax.bar(
                range(len(names)),
                heights,
                bottom=bottom,
                label=stage,
                color="lightgrey" if stage == "other" else scmap(i % 10),
            )
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([run_label(rows[n]) for n in names], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("share of step time")
        ax.set_title("stage-time shares per run")
        ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
        fig.tight_layout()
        path = out / "stage_shares.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written + plot_seed_means(result, out)


def write_report(result: dict, runs: list[Run], out_dir) -> list[Path]:
    """Write report.json, report.md and the PNG plots into out_dir; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(result, list(runs), out)
    json_path = out / "report.json"
    json_path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    md_path = out / "report.md"
    md_path.write_text(render_markdown(result, [str(p) for p in plots]), encoding="utf-8")
    return [json_path, md_path, *plots]


def print_summary(result: dict, written: list[Path], file=None) -> None:
    """A short rich table and the files written."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file, width=120)
    metric, value = result["target"]["metric"], result["target"]["value"]
    table = Table(title=f"{metric} = {value:g} (reference {result['reference']})")
    for col in ("run", "B", "S", "R resp/s", "T", "S ratio", "R ratio", "T ratio", "aligned"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for r in result["runs"]:
        table.add_row(
            r["name"] + ("" if r["reached"] else " (never reached)"),
            _batch(r["responses_per_step"]),
            _count(r["samples_to_target"]),
            _g(r["throughput_responses_per_s"]),
            format_duration(r["time_to_target_s"]),
            _x(r["samples_ratio"]),
            _x(r["throughput_ratio"]),
            _x(r["time_ratio"]),
            "yes" if r["aligned"] else "no",
        )
    console.print(table)
    seeded = result.get("over_seeds")
    console.print(
        ("single runs (one draw each, not a verdict): " if seeded else "")
        + f"critical batch: {_batch(result['critical_batch_responses'])}   "
        f"fastest valid: {result['fastest_valid'] or 'none'}   "
        f"fastest reached: {_fastest_reached(result)}"
    )
    if seeded:
        for line in seeded["verdicts"]:
            console.print(f"over seeds: {line}", highlight=False)
    else:
        console.print(f"over seeds: {SINGLE_SEED}", highlight=False)
    for p in written:
        console.print(f"wrote {p}", highlight=False, soft_wrap=True)
