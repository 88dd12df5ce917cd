"""How `hyrl profile-rollout` measures decode throughput against concurrency C (step 4 of the
batch-size procedure: raise C until throughput plateaus or memory runs out).

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
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable

from hyrl.rollout.base import RolloutEngine, SamplingParams

PLATEAU_TOLERANCE = 0.05  # "within 5% of the best tokens/s": about the spread of CPU timings


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
