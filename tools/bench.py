#!/usr/bin/env python
"""`make bench`: hyrl against TRL, against a plain-PyTorch floor, and its own overhead, one table.

    .venv/bin/python tools/bench.py [--seeds 3] [--threads 1] [--out DIR]
        [--parts vs_trl,floor,overhead] [--floor-steps 300] [--floor-repeats 3]
        [--overhead-steps 200] [--overhead-repeats 3] [--json]

1. Creates .venv-bench (the TRL environment) when it is missing or trl does not import there:
   python3 -m venv, then pip installs the pins of the packages bench_vs_trl needs as
   requirements-cpu.txt spells them (torch's +cpu line included) and trl as pyproject.toml's
   `bench` extra spells it: one source for every pin.
2. Runs tools/bench_vs_trl.py (--seeds seeds, time to a reward target, hyrl vs TRL),
   tools/bench_floor.py (step time, hyrl vs the same work in plain PyTorch) and
   tools/bench_overhead.py's runs (hyrl's step split by stage), importing each tool.
3. Prints one markdown table (metric, value, the command that measured it) and writes it to
   DIR/report.md (default runs/bench-<time>/), with DIR/report.json and each tool's own output.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
if str(TOOLS) not in sys.path:  # the sibling tools this one runs
    sys.path.insert(0, str(TOOLS))

BENCH_VENV = REPO / ".venv-bench"
# What the TRL worker of bench_vs_trl imports (its docstring's pip line); pins: requirements-cpu.txt
BENCH_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "rich", "psutil")
PARTS = ("vs_trl", "floor", "overhead")


# -- pure parts: the pins, the table -----------------------------------------------------------


def requirement_name(line: str) -> str:
    """The normalised project name of a requirement line ('ray[default]==2.6' -> 'ray')."""
    name = re.split(r"[\s=<>!~\[;@]", line.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def bench_requirements(requirements_text: str, pyproject_text: str) -> list[str]:
    """The pip arguments that build .venv-bench: requirements-cpu.txt's lines for BENCH_PACKAGES
    (and its pip options, e.g. an --extra-index-url), then pyproject's `bench` extra."""
    options, pins = [], {}
    for raw in requirements_text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            options += line.split()
        elif requirement_name(line) in BENCH_PACKAGES:
            pins[requirement_name(line)] = line
    missing = [p for p in BENCH_PACKAGES if p not in pins]
    if missing:
        raise ValueError(
            f"requirements-cpu.txt pins no {', '.join(missing)}; tools/bench.py needs a pin "
            f"for each of: {', '.join(BENCH_PACKAGES)}"
        )
    extras = tomllib.loads(pyproject_text).get("project", {}).get("optional-dependencies", {})
    if not extras.get("bench"):
        raise ValueError(
            "pyproject.toml has no [project.optional-dependencies] bench list; allowed: a list "
            'of pins such as bench = ["trl==1.16.0"]'
        )
    return [*options, *(pins[p] for p in BENCH_PACKAGES), *extras["bench"]]


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f} ms"


def _s(seconds: float | None) -> str:
    return "not reached" if seconds is None else f"{seconds:.1f} s"


def _shares(shares: dict[str, float]) -> str:
    return ", ".join(
        f"{stage} {100 * share:.0f}%"
        for stage, share in sorted(shares.items(), key=lambda kv: -kv[1])
    )


def _load_range(runs: list[dict]) -> str:
    loads = [r["load_average_1min"] for r in runs if "load_average_1min" in r]
    return f"; load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""


def _spread(s: dict) -> str:
    if s["median"] is None:
        return "no seed reached the target"
    text = (
        f"{_times(s['median'])} (min {_times(s['min'])}, max {_times(s['max'])}, "
        f"{s['count']} seeds)"
    )
    if s["max"] == math.inf:  # bench_vs_trl.target_ratios: a seed only TRL reached
        text += "; inf: hyrl did not reach the target in --max-steps"
    return text


def _times(ratio: float) -> str:
    return "inf" if ratio == math.inf else f"{ratio:.2f}x"


def table_rows(results: dict, commands: dict) -> list[tuple[str, str, str]]:
    """(metric, value, command) rows from the parts' results: results[part] is the part's report,
    or {"error": text} when it failed; a part that did not run is absent."""
    rows: list[tuple[str, str, str]] = []
    for part in PARTS:
        if part not in results:
            continue
        result, command = results[part], commands[part]
        if "error" in result:
            rows.append((f"{part}: failed", result["error"].splitlines()[0], command))
            continue
        if part == "vs_trl":
            r, target = result["ratios_hyrl_over_trl"], result["target"]
            seeds = len(result["seeds"])
            reached = sum(t is not None for t in result["hyrl_time_to_target_s"])
            reached_trl = sum(t is not None for t in result["trl_time_to_target_s"])
            rows += [
                (
                    f"time to {target['metric']} >= {target['value']} "
                    f"({target['window_steps']}-step mean), hyrl / TRL",
                    _spread(r["time_to_target"]),
                    command,
                ),
                (
                    "time to target, hyrl (per seed)",
                    ", ".join(_s(t) for t in result["hyrl_time_to_target_s"])
                    + f" ({reached}/{seeds} reached)",
                    command,
                ),
                (
                    "time to target, TRL (per seed)",
                    ", ".join(_s(t) for t in result["trl_time_to_target_s"])
                    + f" ({reached_trl}/{seeds} reached)",
                    command,
                ),
                ("steps to target, hyrl / TRL", _spread(r["steps_to_target"]), command),
                ("responses per second, hyrl / TRL", _spread(r["throughput"]), command),
                ("peak RSS, hyrl / TRL", _spread(r["peak_rss"]), command),
            ]
        elif part == "floor":
            rows += [
                ("step time, hyrl tiny recipe (median)", _ms(result["hyrl_step_s"]), command),
                ("step time, plain-PyTorch floor (median)", _ms(result["floor_step_s"]), command),
                (
                    "step time, hyrl / floor",
                    _x(result["ratio_hyrl_over_floor"])
                    + " (per repeat: "
                    + ", ".join(_x(v) for v in result["ratio_per_repeat"])
                    + ")"
                    + _load_range(result["runs"]),
                    command,
                ),
                (
                    "CPU time per step (process tree), hyrl / floor",
                    f"{_x(result.get('cpu_ratio_hyrl_over_floor'))} "
                    f"({_ms(result.get('hyrl_cpu_s'))} / {_ms(result.get('floor_cpu_s'))})",
                    command,
                ),
                (
                    "reward, first -> last 10% of steps: hyrl | floor",
                    f"{result['hyrl_reward_first_10pct']:.2f} -> "
                    f"{result['hyrl_reward_last_10pct']:.2f} | "
                    f"{result['floor_reward_first_10pct']:.2f} -> "
                    f"{result['floor_reward_last_10pct']:.2f}",
                    command,
                ),
            ]
        elif part == "overhead":
            shares = result["median_share"]
            rows += [
                (
                    "hyrl step time outside every timed stage (perf/overhead_s)",
                    f"{100 * shares.get('overhead', 0.0):.1f}% of the step",
                    command,
                ),
                ("hyrl step by stage (median shares)", _shares(shares), command),
            ]
    return rows


def render_table(rows: list[tuple[str, str, str]], header: list[str]) -> str:
    lines = [*header, "", "| metric | value | command |", "|---|---|---|"]
    for metric, value, command in rows:
        cells = (c.replace("|", "\\|") for c in (metric, value, f"`{command}`"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tools/bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="bench_vs_trl's seeds")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads of every trainer")
    parser.add_argument(
        "--out", type=Path, help="output folder (default runs/bench-<time>/); report.md there"
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated subset of {','.join(PARTS)}",
    )
    parser.add_argument("--floor-steps", type=int, default=300, help="bench_floor --num-steps")
    parser.add_argument("--floor-repeats", type=int, default=3, help="bench_floor --repeats")
    parser.add_argument(
        "--overhead-steps", type=int, default=200, help="bench_overhead --num-steps"
    )
    parser.add_argument("--overhead-repeats", type=int, default=3, help="bench_overhead --repeats")
    parser.add_argument("--json", action="store_true", help="print report.json, not the table")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        parser.error(
            f"--parts {args.parts}: allowed: a comma-separated subset of {','.join(PARTS)}"
        )
    args.parts = parts
    for flag in ("seeds", "threads", "floor_repeats", "overhead_repeats"):
        if getattr(args, flag) < 1:
            parser.error(
                f"--{flag.replace('_', '-')} {getattr(args, flag)}: allowed: an integer >= 1"
            )
    return args


# -- the environment, the parts ------------------------------------------------------------------


def ensure_bench_venv(console) -> None:
    """Create or complete .venv-bench unless trl already imports there."""
    import bench_vs_trl

    if bench_vs_trl.check_bench_env() is None:
        return
    pins = bench_requirements(
        (REPO / "requirements-cpu.txt").read_text(encoding="utf-8"),
        (REPO / "pyproject.toml").read_text(encoding="utf-8"),
    )
    python = BENCH_VENV / "bin" / "python"
    with console.status(f"creating {BENCH_VENV.name}: pip install {' '.join(pins)} (minutes)"):
        if not python.exists():
            subprocess.run(["python3", "-m", "venv", str(BENCH_VENV)], check=True)
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *pins], capture_output=True, text=True
        )
    if proc.returncode != 0:
        raise SystemExit(f"bench: pip install into {BENCH_VENV} failed:\n{proc.stderr[-3000:]}")
    problem = bench_vs_trl.check_bench_env()
    if problem:
        raise SystemExit(f"bench: {BENCH_VENV} was built but {problem}")
    console.print(f"{BENCH_VENV.name} ready")


def _json_stdout(main, argv: list[str]) -> dict:
    """Run a tool's main(argv) that prints one JSON object on stdout; that object."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        status = main(argv)
    if status:
        raise RuntimeError(f"exited with status {status}")
    return json.loads(buffer.getvalue())


def run_overhead(steps: int, repeats: int, out: Path, progress) -> dict:
    """bench_overhead's runs, with a progress bar; its result's shape (median_share, runs)."""
    import bench_overhead

    task = progress.add_task("overhead runs", total=repeats)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for index in range(repeats):
        runs.append(bench_overhead.run_once(steps, out / f"run{index}"))
        progress.update(task, advance=1)
    stages = sorted({stage for run in runs for stage in run})
    return {
        "num_steps": steps,
        "repeats": repeats,
        "median_share": {s: statistics.median(r[s] for r in runs if s in r) for s in stages},
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import bench_floor
    import bench_vs_trl
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    out = args.out or REPO / "runs" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    if "vs_trl" in args.parts:
        ensure_bench_venv(console)
    argvs = {
        "vs_trl": ["--seeds", str(args.seeds), "--threads", str(args.threads)],
        "floor": [
            "--num-steps",
            str(args.floor_steps),
            "--repeats",
            str(args.floor_repeats),
            "--threads",
            str(args.threads),
        ],
        "overhead": [
            "--num-steps",
            str(args.overhead_steps),
            "--repeats",
            str(args.overhead_repeats),
        ],
    }
    commands = {
        "vs_trl": f"python tools/bench_vs_trl.py {' '.join(argvs['vs_trl'])} --out {out}/vs_trl",
        "floor": f"python tools/bench_floor.py {' '.join(argvs['floor'])}",
        "overhead": f"OMP_NUM_THREADS={args.threads} python tools/bench_overhead.py "
        + " ".join(argvs["overhead"]),
    }
    results: dict[str, dict] = {}
    began = time.perf_counter()
    for part in args.parts:
        console.rule(f"bench: {part}")
        try:
            if part == "vs_trl":
                _json_stdout(
                    bench_vs_trl.main, [*argvs[part], "--out", str(out / "vs_trl"), "--json"]
                )
                results[part] = json.loads((out / "vs_trl" / "bench.json").read_text())
            elif part == "floor":
                results[part] = _json_stdout(
                    bench_floor.main, [*argvs[part], "--json", "--out", str(out / "floor.md")]
                )
            else:
                with Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=console,
                ) as progress:
                    results[part] = run_overhead(
                        args.overhead_steps, args.overhead_repeats, out / "overhead", progress
                    )
        except (Exception, SystemExit) as error:  # noqa: BLE001 - one failed part keeps the others' rows
            results[part] = {"error": f"{type(error).__name__}: {error}"}
            console.print(f"[red]bench: {part} failed[/red]: {error}")
    header = [
        f"# hyrl benchmarks, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Machine: {bench_vs_trl.cpu_model()}, {os.cpu_count()} cores; {args.threads} OpenMP "
        f"thread(s) per training process; {time.perf_counter() - began:.0f} s in all. Each "
        f"tool's own report is next to this one in {out}.",
    ]
    markdown = render_table(table_rows(results, commands), header)
    report = {"results": results, "commands": commands, "out": str(out)}
    (out / "report.md").write_text(markdown, encoding="utf-8")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report) if args.json else markdown, end="\n" if args.json else "")
    console.print(f"report: {out / 'report.md'}")
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
