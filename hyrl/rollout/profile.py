"""`hyrl profile-rollout`: decode throughput against concurrency C (step 4 of the batch-size
procedure: raise C until throughput plateaus or memory runs out).

For each C the engine is built afresh, run `warmup` untimed calls (each on the first C prompts),
then `repeats` timed passes over all N prompts, C at a time. Per pass:
    tokens_per_s    = generated tokens / wall seconds of the pass
    responses_per_s = N / wall seconds of the pass
    latency of a request = wall seconds of the chunk of <= C prompts that held it
                           (all N are submitted at once; the queueing before its chunk is not
                           counted)
With --engine sglang a pass is instead ONE call on all N prompts with at most C requests in
flight, a new one sent as each finishes (SGLang batches continuously), and a request's latency is
its own send-to-answer time.
A row reports the median over passes of wall, tokens/s and responses/s; latency median and p90
are over the N requests of the median pass (the pass at sorted-by-wall index (repeats-1)//2).
Peak RSS is the process's high-water mark (getrusage) after that C: it never decreases, a rise
says this C needed more memory than any before it.

Generated tokens are counted, not assumed: the hf engine keeps its real end-of-sequence id, so
a response may stop before max_new_tokens (its stop token counts as a generated token). That is
the workload the training loop runs. Static batching keeps decoding a chunk until its longest
response ends, so at large C finished rows still cost compute; tokens/s is useful throughput.

Plateau: the smallest C whose tokens/s is within PLATEAU_TOLERANCE (5%) of the highest tokens/s
measured. 5% is about the run-to-run spread of CPU timings; a larger C buys less than that.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hyrl.rollout.base import RolloutEngine, SamplingParams

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

PLATEAU_TOLERANCE = 0.05  # "within 5% of the best tokens/s": about the spread of CPU timings
ENGINES = ("hf", "sglang")


class ProfileError(ValueError):
    """A bad input; the message names the flag and what is allowed."""


# --- validation (before any model is built) --------------------------------------------------


def parse_concurrencies(text: str, num_prompts: int) -> list[int]:
    """ "1,2,4" -> [1, 2, 4]: positive integers, strictly increasing, each <= --num-prompts."""
    allowed = (
        f"allowed: comma-separated positive integers, strictly increasing, each <= "
        f"--num-prompts ({num_prompts}), e.g. 1,2,4,8"
    )
    try:
        values = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise ProfileError(f"--concurrency {text!r}: not a list of integers; {allowed}") from None
    if any(v < 1 for v in values):
        raise ProfileError(f"--concurrency {text!r}: every value must be >= 1; {allowed}")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ProfileError(f"--concurrency {text!r}: must be strictly increasing; {allowed}")
    if values[-1] > num_prompts:
        raise ProfileError(
            f"--concurrency {text!r}: {values[-1]} exceeds --num-prompts "
            f"{num_prompts} (a chunk cannot hold more prompts than there are); "
            f"{allowed}"
        )
    return values


def validate_flags(
    *,
    engine: str,
    concurrency: str,
    num_prompts: int,
    max_new_tokens: int,
    repeats: int,
    warmup: int,
    seed: int,
    out: str,
    prompt_tokens: int | None = None,
    max_positions: int | None = None,
    sglang_url: str | None = None,
    model_path: str | None = None,
) -> list[int]:
    """Check every flag; return the concurrencies. Creates --out to prove it is writable."""
    if engine not in ENGINES:
        raise ProfileError(f"--engine {engine!r}: allowed: {', '.join(ENGINES)}")
    if engine == "sglang" and (sglang_url is None) == (model_path is None):
        raise ProfileError(
            "--engine sglang: give exactly one of --sglang-url URL (a running "
            "server or router) and --model-path DIR (hyrl starts a server on this "
            f"machine's GPUs); got {'both' if sglang_url else 'neither'}"
        )
    if engine == "hf" and (sglang_url is not None or model_path is not None):
        flag = "--sglang-url" if sglang_url is not None else "--model-path"
        raise ProfileError(
            f"{flag}: applies to --engine sglang only; the hf engine profiles "
            "the tiny Qwen3-MoE in this process"
        )
    if sglang_url is not None and not sglang_url.startswith(("http://", "https://")):
        raise ProfileError(f"--sglang-url {sglang_url!r}: allowed: http(s)://HOST:PORT")
    if model_path is not None and not os.path.isfile(os.path.join(model_path, "config.json")):
        raise ProfileError(
            f"--model-path {model_path!r}: no config.json there; allowed: a "
            "local Hugging Face model directory"
        )
    if num_prompts < 1:
        raise ProfileError(f"--num-prompts {num_prompts}: must be >= 1")
    if max_new_tokens < 1:
        raise ProfileError(f"--max-new-tokens {max_new_tokens}: must be >= 1")
    if prompt_tokens is not None and max_positions is not None:
        longest = max_positions - prompt_tokens
        if max_new_tokens > longest:
            raise ProfileError(
                f"--max-new-tokens {max_new_tokens}: {prompt_tokens}-token prompts "
                f"plus the response must fit the model's {max_positions} "
                f"positions; allowed: 1..{longest}"
            )
    if repeats < 1:
        raise ProfileError(f"--repeats {repeats}: must be >= 1")
    if warmup < 0:
        raise ProfileError(f"--warmup {warmup}: must be >= 0")
    if seed < 0:
        raise ProfileError(f"--seed {seed}: must be >= 0")
    concurrencies = parse_concurrencies(concurrency, num_prompts)
    check_writable(out)
    return concurrencies


def check_writable(out_dir) -> Path:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".profile-rollout-write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as err:
        raise ProfileError(f"--out {out_dir}: not a writable directory ({err})") from None
    return out


# --- measuring -------------------------------------------------------------------------------


def describe_machine() -> dict:
    import torch

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python_version": platform.python_version(),
    }


def peak_rss_mb() -> float:
    """The process's peak resident set size so far, in MiB (ru_maxrss: KiB on Linux, bytes on
    macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _is_out_of_memory(err: BaseException) -> bool:
    return (
        isinstance(err, MemoryError)
        or type(err).__name__ == "OutOfMemoryError"
        or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower())
    )


def _timed_continuous_pass(engine, prompts, params, clock, tick) -> dict:
    """All N prompts in one call; the engine keeps at most C in flight and starts the next as one
    finishes (SGLang's continuous batching); latencies are the engine's per request."""
    start = clock()
    generations = engine.generate(prompts, params)
    wall = clock() - start
    tick()
    if len(generations) != len(prompts):
        raise ValueError(
            f"the engine returned {len(generations)} generations for {len(prompts)} prompts"
        )
    if wall <= 0:
        raise ValueError("a pass took no measurable time; the clock does not advance")
    return {
        "wall_s": wall,
        "tokens": sum(len(g.response_ids) for g in generations),
        "latencies_s": list(engine.last_request_latencies_s),
    }


def _timed_pass(engine, prompts, concurrency, params, clock, tick) -> dict:
    latencies, tokens = [], 0  # one latency per request: the wall time of its chunk
    start = clock()
    for first in range(0, len(prompts), concurrency):
        chunk = prompts[first : first + concurrency]
        t0 = clock()
        generations = engine.generate(chunk, params)
        latencies += [clock() - t0] * len(chunk)
        if len(generations) != len(chunk):
            raise ValueError(
                f"the engine returned {len(generations)} generations for {len(chunk)} prompts"
            )
        tokens += sum(len(g.response_ids) for g in generations)
        tick()
    wall = clock() - start
    if wall <= 0:
        raise ValueError("a pass took no measurable time; the clock does not advance")
    return {"wall_s": wall, "tokens": tokens, "latencies_s": latencies}


def profile_engine(
    make_engine: Callable[[int], RolloutEngine],
    prompts: list[list[int]],
    concurrencies: list[int],
    params: SamplingParams,
    repeats: int = 3,
    warmup: int = 1,
    *,
    on_progress: Callable[[int, int, int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    continuous: bool = False,
) -> dict:
    """Measure throughput and latency of make_engine(c) for every c; see the module docstring.

    on_progress(c, calls_done, calls_total) is called after every generate call (warmup calls
    and chunks of the timed passes, all concurrencies together). If a concurrency runs out of
    memory, measuring stops there and result["stopped"] says where and why.
    continuous: each pass is one generate call on all N prompts and the engine caps what is in
    flight at C (it must report last_request_latencies_s); otherwise chunks of C, one at a time.
    """
    if not prompts:
        raise ValueError("no prompts")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    n = len(prompts)
    calls_total = sum(
        warmup + repeats * (1 if continuous else math.ceil(n / c)) for c in concurrencies
    )
    calls_done = 0
    rows, stopped = [], None
    for c in concurrencies:

        def tick(c=c):
            nonlocal calls_done
            calls_done += 1
            if on_progress is not None:
                on_progress(c, calls_done, calls_total)

        engine = None
        try:
            engine = make_engine(c)
            for _ in range(warmup):
                engine.generate(prompts[:c], params)
                tick()
            passes = [
                _timed_continuous_pass(engine, prompts, params, clock, tick)
                if continuous
                else _timed_pass(engine, prompts, c, params, clock, tick)
                for _ in range(repeats)
            ]
        except Exception as err:  # only out-of-memory is swallowed
            if not _is_out_of_memory(err):
                raise
            stopped = {"concurrency": c, "reason": f"out of memory: {type(err).__name__}: {err}"}
            break
        finally:
            del engine
            gc.collect()  # free this engine before the next one is built
        median_pass = sorted(passes, key=lambda p: p["wall_s"])[(repeats - 1) // 2]
        rows.append(
            {
                "c": c,
                "median_wall_s": statistics.median(p["wall_s"] for p in passes),
                "tokens_per_s": statistics.median(p["tokens"] / p["wall_s"] for p in passes),
                "responses_per_s": statistics.median(n / p["wall_s"] for p in passes),
                "latency_median_s": statistics.median(median_pass["latencies_s"]),
                "latency_p90_s": percentile(median_pass["latencies_s"], 90),
                "peak_rss_mb": peak_rss_mb(),
                "mean_response_tokens": statistics.mean(p["tokens"] for p in passes) / n,
                "wall_s_per_repeat": [p["wall_s"] for p in passes],
            }
        )
    result = {
        "machine": describe_machine(),
        "parameters": {
            "num_prompts": n,
            "concurrencies": list(concurrencies),
            "batching": "continuous" if continuous else "static chunks of C",
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "repeats": repeats,
            "warmup": warmup,
            "plateau_tolerance": PLATEAU_TOLERANCE,
        },
        "rows": rows,
        "stopped": stopped,
    }
    result.update(summarize(rows))
    return result


def find_plateau(rows: list[dict], tolerance: float = PLATEAU_TOLERANCE) -> int:
    """The smallest c whose tokens_per_s >= (1 - tolerance) x the highest tokens_per_s."""
    if not rows:
        raise ValueError("no rows to find a plateau in")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    best = max(r["tokens_per_s"] for r in rows)
    return min(r["c"] for r in rows if r["tokens_per_s"] >= (1 - tolerance) * best)


def summarize(rows: list[dict]) -> dict:
    """Plateau, best concurrency and the best/c=1 tokens/s ratio (None where not measurable)."""
    if not rows:
        return {
            "plateau_concurrency": None,
            "plateau_reached": False,
            "best_concurrency": None,
            "tokens_per_s_ratio_max_over_c1": None,
        }
    plateau = find_plateau(rows)
    best = max(rows, key=lambda r: r["tokens_per_s"])
    at_c1 = next((r for r in rows if r["c"] == 1), None)
    return {
        "plateau_concurrency": plateau,
        # Only a larger C measured within 5% shows the curve has flattened.
        "plateau_reached": plateau < max(r["c"] for r in rows),
        "best_concurrency": best["c"],
        "tokens_per_s_ratio_max_over_c1": (
            best["tokens_per_s"] / at_c1["tokens_per_s"] if at_c1 else None
        ),
    }


# --- outputs ---------------------------------------------------------------------------------


def _f(x, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


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
