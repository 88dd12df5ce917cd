"""What `hyrl profile-rollout` shows and writes from a measured profile (`measure.profile_engine`):
the outcome in words, profile.json, profile.md and profile.png, the table printed at the end and
the progress bar fed while measuring.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hyrl.profile.measure import PLATEAU_TOLERANCE

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def plateau_mark(result: dict) -> str:
    return "plateau" if result["plateau_reached"] else "best, still rising"


def reading(result: dict) -> str:
    """The outcome in words."""
    rows = result["rows"]
    if not rows:
        return f"Nothing was measured ({(result.get('stopped') or {}).get('reason', 'no rows')})."
    tol = result["parameters"].get("plateau_tolerance", PLATEAU_TOLERANCE)
    plateau = result["plateau_concurrency"]
    best = max(rows, key=lambda r: r["tokens_per_s"])
    text = (
        f"Throughput plateaus at concurrency {plateau}: the smallest concurrency whose "
        f"tokens/s is within {tol:.0%} of the best measured ({best['tokens_per_s']:.1f} "
        f"tokens/s at c={best['c']})."
    )
    if not result["plateau_reached"]:
        text = (
            f"No plateau yet: tokens/s was still rising by more than {tol:.0%} at the largest "
            f"concurrency measured (c={plateau}, {best['tokens_per_s']:.1f} tokens/s); "
            f"try larger concurrencies (with --num-prompts at least as large)."
        )
    ratio = result["tokens_per_s_ratio_max_over_c1"]
    if ratio is not None:
        text += f" The best tokens/s is {ratio:.2f}x the tokens/s at c=1."
    else:
        text += " c=1 was not measured, so there is no ratio to c=1."
    if result.get("stopped"):
        s = result["stopped"]
        text += f" Measuring stopped at c={s['concurrency']}: {s['reason']}."
    return text


def render_markdown(result: dict, plot_name: str | None = "profile.png") -> str:
    m, p = result["machine"], result["parameters"]
    lines = [
        "# Rollout profile: throughput against decode concurrency",
        "",
        f"Machine: {m['processor']}, {m['cpu_count']} CPUs ({m['cpus_usable']} usable), "
        f"torch {m['torch_version']} with {m['torch_threads']} threads, {m['platform']}.",
        "",
        f"Engine {p.get('engine', '?')} ({p.get('model', '?')}), {p['num_prompts']} prompts, "
        f"max {p['max_new_tokens']} new tokens, temperature {p['temperature']:g}, "
        f"{p['repeats']} timed repeats after {p['warmup']} warmup call(s); seed "
        f"{p.get('seed', '-')}.",
        "",
        "| c | median wall s | tokens/s | responses/s | latency median s | latency p90 s "
        "| peak RSS MB | mean tokens/response | |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---|",
    ]
    for r in result["rows"]:
        mark = plateau_mark(result) if r["c"] == result["plateau_concurrency"] else ""
        lines.append(
            f"| {r['c']} | {r['median_wall_s']:.3f} | {r['tokens_per_s']:.1f} | "
            f"{r['responses_per_s']:.2f} | {r['latency_median_s']:.4f} | "
            f"{r['latency_p90_s']:.4f} | {r['peak_rss_mb']:.0f} | "
            f"{r['mean_response_tokens']:.2f} | {mark} |"
        )
    lines += [
        "",
        reading(result),
        "",
        "Notes: tokens/s counts the tokens actually generated (responses may stop at the "
        "end-of-sequence token before the maximum); medians are over the timed repeats; "
        "a request's latency is the wall time of the chunk of <= c prompts that held it "
        "(median and p90 over the requests of the median repeat); peak RSS is the "
        "process's high-water mark after each c.",
    ]
    if plot_name:
        lines += ["", f"![tokens/s and responses/s against concurrency]({plot_name})"]
    return "\n".join(lines) + "\n"


def plot(result: dict, path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    cs = [r["c"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(cs, [r["tokens_per_s"] for r in rows], marker="o", color="tab:blue", label="tokens/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(cs)
    ax.set_xticklabels([str(c) for c in cs])
    ax.set_xlabel("concurrency c (sequences decoded at once)")
    ax.set_ylabel("tokens/s", color="tab:blue")
    right = ax.twinx()
    right.plot(
        cs,
        [r["responses_per_s"] for r in rows],
        marker="s",
        markerfacecolor="none",
        linestyle="--",
        color="tab:orange",
        label="responses/s",
    )
    right.set_ylabel("responses/s", color="tab:orange")
    plateau = result["plateau_concurrency"]
    if plateau is not None:
        ax.axvline(
            plateau,
            color="crimson",
            linestyle="--",
            linewidth=1.2,
            label=f"{plateau_mark(result)} c={plateau}",
        )
    handles = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    ax.set_title("rollout throughput against concurrency")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(result: dict, out_dir) -> list[Path]:
    """Write profile.json, profile.md and profile.png into out_dir; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "profile.json"
    json_path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    written = [json_path]
    png_path = plot(result, out / "profile.png") if result["rows"] else None
    md_path = out / "profile.md"
    md_path.write_text(
        render_markdown(result, png_path.name if png_path else None), encoding="utf-8"
    )
    written.append(md_path)
    if png_path:
        written.append(png_path)
    return written


def print_table(result: dict, written: Sequence[Path] = (), console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=120)
    table = Table(title="rollout throughput against concurrency")
    for col in (
        "c",
        "wall s",
        "tokens/s",
        "responses/s",
        "lat. median s",
        "lat. p90 s",
        "peak RSS MB",
        "",
    ):
        table.add_column(col, justify="left" if col == "" else "right", no_wrap=True)
    for r in result["rows"]:
        plateau = r["c"] == result["plateau_concurrency"]
        table.add_row(
            str(r["c"]),
            f"{r['median_wall_s']:.3f}",
            f"{r['tokens_per_s']:.1f}",
            f"{r['responses_per_s']:.2f}",
            f"{r['latency_median_s']:.4f}",
            f"{r['latency_p90_s']:.4f}",
            f"{r['peak_rss_mb']:.0f}",
            plateau_mark(result) if plateau else "",
            style="bold" if plateau else None,
        )
    console.print(table)
    console.print(reading(result), soft_wrap=True)
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)


class ProgressBar:
    """A rich progress bar on stderr fed by profile_engine's on_progress."""

    def __init__(self, enabled: bool = True):
        self.progress: Progress | None = None
        self.task: TaskID | None = None  # added by __enter__
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
            self.task = self.progress.add_task("building engine", total=None)
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def __call__(self, concurrency: int, calls_done: int, calls_total: int) -> None:
        if self.progress is not None:
            assert self.task is not None, "the bar is fed inside its with-block"
            self.progress.update(
                self.task,
                description=f"concurrency {concurrency}",
                completed=calls_done,
                total=calls_total,
            )
