"""`hyrl tune`'s report: report.json, report.md and the plots (matplotlib, Agg), from the dict
`hyrl.batchsize.tune.prediction.predict_report` returns, and the lines printed at the end."""

from __future__ import annotations

import json
from pathlib import Path

from hyrl.batchsize.analyze import json_safe
from hyrl.batchsize.formatting import format_duration

STAGE_LABELS = {
    "rollout": "generation",
    "reward": "reward",
    "logprob": "log-probs",
    "value": "values",
    "actor_train": "actor update",
    "critic_train": "critic update",
    "weight_sync": "weight sync",
    "offload": "offload",
    "overhead": "other",
}


def _x(v) -> str:
    return "-" if v is None else f"{v:.3g}x"


def noise_text(v) -> str:
    """A noise scale from report.json; None is an unbounded one (inf before json_safe: the
    mean |G|^2 of the bootstrap's resamples was not positive)."""
    return "unbounded" if v is None else f"{v:.4g}"


def holds_text(rec: dict, noise: dict) -> str:
    """Where over B_noise the recommendation stays the fastest, and whether it flips inside
    the measured spread (report.json: None is an unbounded end)."""
    start, end = rec["holds_from_noise"], rec["holds_to_noise"]
    text = (
        f"x{rec['mult']} stays the fastest for B_noise from {start:.4g} to {noise_text(end)} "
        f"(the measured {noise['spread']}: {noise_text(noise['low'])} to "
        f"{noise_text(noise['high'])})"
    )
    below = noise["low"] is not None and noise["low"] < start
    above = end is not None and (noise["high"] is None or noise["high"] > end)
    if below or above:
        flips = [f"below {start:.4g}" if below else "", f"above {end:.4g}" if above else ""]
        text += (
            ": the recommendation flips inside the spread ("
            + " and ".join(f for f in flips if f)
            + "), so it is uncertain."
        )
    else:
        text += ": it holds over the whole spread."
    if noise["high"] is None:
        text += (
            " Pass 1 could not bound B_noise from above (its gradient signal |G|^2 was not "
            "clearly above zero); a longer pass 1 (--budget-samples) may."
        )
    return text


def spread_text(report: dict) -> str:
    """Whether the verdict lies inside the spread of the measured throughput (probe rounds)."""
    rec = report["recommendation"]
    rounds = report.get("probe_rounds", 1)
    rivals = rec.get("within_throughput_spread") or []
    if rounds < 2:
        return (
            "R was probed once per candidate (--probe-rounds 1): no spread of the measured "
            "throughput to judge the verdict against."
        )
    if rivals:
        return (
            f"Inside the throughput's spread: over the {rounds} probe rounds the T ratio range of "
            + ", ".join(f"x{m}" for m in rivals)
            + f" overlaps x{rec['mult']}'s, so the choice between them rests on noise in R."
        )
    return (
        f"Over the {rounds} probe rounds no other candidate's T ratio range overlaps "
        f"x{rec['mult']}'s: the verdict holds against the spread of the measured throughput."
    )


def align_lines(report: dict) -> list[str]:
    """The '## Alignment check' section: predicted, then measured."""
    check = report.get("align_check")
    if not check:
        return []
    tol = check["tolerance"]
    lines = [
        "",
        "## Alignment check (predicted, then measured)",
        "",
        f"The reference ran until {check['metric']} reached {check['level']:.4g} "
        f"({check['fraction']:g} of the way from its start {check['start']:.4g} to the "
        f"target), after {check['reference_samples_to_level']:,.0f} responses; each candidate "
        "below ran from the same start and seed, stopped at that level, and was compared with "
        "it against samples, one-sided: rejected when it did not reach the level, when it needs "
        f"more than 1 + {tol:g} times the reference's samples over the levels (the geometric "
        "mean of the per-level ratios weighted by w = (level - start) / (check's level - start), "
        f"so the takeoff counts little), or more than 1 + {2 * tol:g} at the level alone. "
        "Needing fewer samples is never rejected: it costs no time.",
        "",
        "| candidate | verdict | S ratio, weighted | S ratio to the level | T ratio to the level "
        "| why |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in check["rows"]:
        lines.append(
            f"| x{r['mult']} ({r['name']}) | {r['verdict']} | "
            f"{_x(r.get('weighted_samples_ratio'))} | {_x(r['samples_ratio'])} | "
            f"{_x(r['time_ratio'])} | {r['verdict']}: {r['reason']} |"
        )
    predicted = report.get("predicted_recommendation")
    if predicted is not None:
        lines += [
            "",
            f"Predicted x{predicted['mult']} ({predicted['time_ratio']:.3g}x), then measured: "
            f"x{check['rejected_from']} and every larger candidate rejected, so the "
            f"recommendation is x{report['recommendation']['mult']}.",
        ]
    else:
        lines += ["", "The recommendation was kept."]
    return lines


def _range(low, high) -> str:
    return "-" if low is None or high is None else f"{low:.3g}-{high:.3g}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:+.0f}%"


def render_markdown(report: dict, plots: list[str]) -> str:
    rec, noise, base = report["recommendation"], report["noise"], report["base"]
    costs = report["reference_costs"]
    lines = [
        f"# hyrl tune: {Path(report['recipe']).name}",
        "",
        f"- reference: P0 = {base['P0']} prompts x G = {base['G']}, B0 = {base['B0']} responses "
        f"per optimizer step, lr0 = {base['lr']:.4g}; lr rule `{report['lr_scaling']}`",
        f"- pass 1: {report['budget_samples']:,} responses at B0 ({report['pass1_run']})",
        f"- actor noise scale B_noise = **{noise_text(noise['value'])}** (from "
        f"{noise['n_values']} steps, samples {noise['window_samples'][0]:,.0f} to "
        f"{noise['window_samples'][1]:,.0f}; {noise['spread']} {noise_text(noise['low'])} to "
        f"{noise_text(noise['high'])})",
    ]
    if report.get("critic_noise"):
        cn = report["critic_noise"]
        lines.append(
            f"- critic noise scale = {noise_text(cn['value'])} ({cn['spread']} "
            f"{noise_text(cn['low'])} to {noise_text(cn['high'])})"
        )
    lines += [
        "",
        "## Recommendation",
        "",
        f"**B = {rec['responses_per_step']}** responses per optimizer step (P = "
        f"{rec['prompts_per_step']} prompts, x{rec['mult']}), **lr = {rec['lr']:.4g}**, "
        f"concurrency **C = {rec['concurrency']}**: predicted time to target "
        f"{rec['time_ratio']:.3g}x the reference's.",
        f"Over the noise scale's {noise['spread']} the best candidate is x{rec['mult_low']} "
        f"(at B_noise = {noise_text(noise['low'])}, {rec['time_ratio_low']:.3g}x) to "
        f"x{rec['mult_high']} (at {noise_text(noise['high'])}, {rec['time_ratio_high']:.3g}x).",
        holds_text(rec, noise),
        spread_text(report),
    ]
    if rec.get("critic_batch") is not None:
        lines.append(
            f"Critic: batch **{rec['critic_batch']}** (the divisor of the rollout's responses "
            f"nearest to its noise scale {rec['critic_noise_scale']:.4g}), lr "
            f"{rec['critic_lr']:.4g}."
        )
    lines += align_lines(report)
    lines += [
        "",
        "## Candidates (predicted, relative to B0)",
        "",
        "R ratio: from each stage's cost ratio to x1, the median over the probe rounds, and in "
        "brackets the range of the rounds' own R ratios; T ratio: from it, with its range over "
        "the rounds (R's spread) and over the noise scale's spread.",
        "",
        "| x | B | C | lr | step s | R (resp/s) | S ratio | R ratio (rounds) | T ratio | "
        "T (R's spread) | T (B_noise's spread) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in report["candidates"]:
        lo, hi = sorted([c["time_ratio_low"], c["time_ratio_high"]])
        r_lo, r_hi = c.get("throughput_ratio_range") or [None, None]
        t_lo, t_hi = c.get("time_ratio_range") or [None, None]
        mark = " **<-**" if c["mult"] == rec["mult"] else ""
        lines.append(
            f"| {c['mult']}{mark} | {c['responses_per_step']} | {c['concurrency']} | "
            f"{c['lr']:.4g} | {c['step_s']:.3g} | {c['responses_per_s']:.4g} | "
            f"{_x(c['samples_ratio'])} | {_x(c['throughput_ratio'])} ({_range(r_lo, r_hi)}) | "
            f"{_x(c['time_ratio'])} | {_range(t_lo, t_hi)}x | {lo:.3g}-{hi:.3g}x |"
        )
    lines += [
        "",
        "## Measured stage costs at B0 (pass 1, median seconds per rollout step)",
        "",
        "| stage | s per step | scales with the batch as |",
        "|---|---:|---|",
    ]
    for name, s in costs["seconds"].items():
        how = "N / r(C)" if name == "rollout" else "N x the probes' seconds per token"
        lines.append(f"| {STAGE_LABELS.get(name, name)} | {s:.4g} | {how} |")
    rates = report["decode_responses_per_s"]
    if rates is None:
        c = report["candidates"][0]["concurrency"]
        decode = (
            f"Decode profile: not needed, every candidate decodes at C = {c} (min(N, "
            "--rollout-concurrency)), so generation time grows with N alone."
        )
    else:
        decode = "Decode profile (responses/s by concurrency): " + ", ".join(
            f"C={c}: {r:.4g}" for c, r in rates.items()
        )
    if report.get("overlapped"):
        decode += (
            " --async-rollout: generation and scoring (the worker's own times) overlap the "
            "trainer's stages, so a step takes max(generation + reward, the rest - weight sync) "
            "+ weight sync."
        )
    lines += [
        "",
        decode,
        "",
        "Seconds per response token of the actor update (x1: pass 1; others: the probes): "
        + ", ".join(
            f"x{m}: {v.get('actor_train', float('nan')):.3g}"
            for m, v in report["s_per_token"].items()
        ),
    ]
    verify = report.get("verify")
    if verify:
        lines += [
            "",
            f"## Predicted vs measured (--verify: a sweep of {verify['verify_samples']:,} "
            f"responses per member, target {verify['target']})",
            "",
            "| member | B | S ratio pred / meas | R ratio pred / meas | T ratio pred | "
            "T ratio meas | error |",
            "|---|---:|---|---|---:|---:|---:|",
        ]
        for r in verify["rows"]:
            lines.append(
                f"| {r['name']} | {r['responses_per_step']} | "
                f"{_x(r['predicted_samples_ratio'])} / {_x(r['measured_samples_ratio'])} | "
                f"{_x(r['predicted_throughput_ratio'])} / {_x(r['measured_throughput_ratio'])} | "
                f"{_x(r['predicted_time_ratio'])} | "
                f"{_x(r['measured_time_ratio']) if r['reached'] else 'never reached'} | "
                f"{_pct(r['time_ratio_error'])} |"
            )
    timings = report.get("timings_s")
    if timings:
        lines += [
            "",
            "Wall time: " + ", ".join(f"{k[:-2]} {format_duration(v)}" for k, v in timings.items()),
        ]
    lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots]
    lines += [
        "",
        "How it is computed: `hyrl/batchsize/tune/model.py` (docstring) and docs/batch-size.md "
        '"hyrl tune".',
    ]
    return "\n".join(lines) + "\n"


def plot(report: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    noise = report["noise"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    series = noise["series"]
    ax.plot([s for s, _ in series], [v for _, v in series], marker=".", label="actor/noise_scale")
    if report.get("critic_noise"):
        cs = report["critic_noise"]["series"]
        ax.plot([s for s, _ in cs], [v for _, v in cs], marker=".", label="critic/noise_scale")
    ax.axvspan(*noise["window_samples"], color="tab:orange", alpha=0.15, label="estimate window")
    ax.axhline(noise["value"], color="tab:orange", label=f"B_noise {noise_text(noise['value'])}")
    # an unbounded end (None in report.json) is drawn to the edge of the series
    values = [v for _, v in series] or [noise["value"]]
    low = noise["low"] if noise["low"] is not None else min(values)
    high = noise["high"] if noise["high"] is not None else max(values)
    ax.axhspan(low, high, color="tab:orange", alpha=0.25, label=noise["spread"])
    if all(v > 0 for _, v in series) and low > 0:
        ax.set_yscale("log")  # a few steps with a tiny |G|^2 spike by orders of magnitude
    ax.set_xlabel("samples (responses)")
    ax.set_ylabel("B_simple (responses)")
    ax.set_title("pass 1: gradient noise scale")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "noise_scale.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    cands = report["candidates"]
    B = [c["responses_per_step"] for c in cands]
    rec = report["recommendation"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key, title in zip(
        axes,
        ("samples_ratio", "throughput_ratio", "time_ratio"),
        ("S(B)/S(B0)", "R(B)/R(B0)", "T(B)/T(B0)"),
    ):
        ax.plot(B, [c[key] for c in cands], marker="o")
        if key != "throughput_ratio":
            lo = [min(c[f"{key}_low"], c[f"{key}_high"]) for c in cands]
            hi = [max(c[f"{key}_low"], c[f"{key}_high"]) for c in cands]
            ax.fill_between(B, lo, hi, alpha=0.25, label="noise scale's spread")
            ax.legend(fontsize=7)
        ax.axvline(rec["responses_per_step"], color="tab:red", ls="--", lw=1)
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("B (responses per optimizer step)")
        ax.set_title(title)
    verify = report.get("verify")
    if verify:
        pts = [(r["responses_per_step"], r["measured_time_ratio"]) for r in verify["rows"]]
        pts = [p for p in pts if p[1] is not None]
        if pts:
            axes[2].plot(*zip(*pts), "kx", label="measured (--verify)")
            axes[2].legend(fontsize=7)
    fig.suptitle(f"predicted; recommendation B = {rec['responses_per_step']} (dashed)")
    fig.tight_layout()
    path = out / "prediction.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


def write_report(report: dict, out_dir) -> list[Path]:
    """report.json, report.md, noise_scale.png, prediction.png in out_dir; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = plot(report, out)
    md = out / "report.md"
    md.write_text(render_markdown(report, [p.name for p in plots]), encoding="utf-8")
    js = out / "report.json"
    files = [js, md, *plots]
    content = json_safe(dict(report, files=[p.name for p in files]))
    js.write_text(json.dumps(content, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return files


def summary_lines(report: dict) -> list[str]:
    """What `hyrl tune` prints when it is done: the noise scale, the recommendation, the
    alignment check's verdicts and the critic's batch."""
    rec = report["recommendation"]
    n = report["noise"]
    lines = [
        f"B_noise (actor) = {noise_text(n['value'])} ({n['spread']} {noise_text(n['low'])} to "
        f"{noise_text(n['high'])})",
        f"recommended: B = {rec['responses_per_step']} responses per step "
        f"(P = {rec['prompts_per_step']}), lr = {rec['lr']:.4g}, C = {rec['concurrency']}; "
        f"predicted T ratio {rec['time_ratio']:.3g}x; over the noise scale's spread the best B "
        f"is x{rec['mult_low']} to x{rec['mult_high']}",
    ]
    check = report.get("align_check")
    if check:
        verdicts_text = ", ".join(f"x{r['mult']} {r['verdict']}" for r in check["rows"])
        lines.append(
            f"align check to {check['metric']} = {check['level']:.4g}: {verdicts_text or 'none'}"
            + (
                f" (predicted x{report['predicted_recommendation']['mult']}, then measured)"
                if report.get("predicted_recommendation")
                else ""
            )
        )
    if rec.get("critic_batch") is not None:
        lines.append(
            f"critic: batch {rec['critic_batch']}, lr {rec['critic_lr']:.4g} "
            f"(B_noise,critic = {rec['critic_noise_scale']:.4g})"
        )
    return lines
