"""The golden runs: what the tiny recipes log, compared with committed records, so that a
refactor proves it changed no number by one command (`make golden`).

    python tools/golden.py check [CASE ...]    run each case, compare; exit 1 on a difference
    python tools/golden.py update CASE ...     rewrite the committed records from this code

Cases (each on 1 CPU rank, OMP_NUM_THREADS=1, the recipe's seed):
    grpo          recipes/tiny/grpo.sh --num-steps 5
    ppo           recipes/tiny/ppo.sh --num-steps 8 (5 critic-only steps, then 3 with the actor)
    resume_async  recipes/tiny/grpo.sh --async-rollout --num-steps 4, resumed from the committed
                  checkpoint of its step 2 (tests/golden/resume_async_ckpt: written at c42290d,
                  holding a queued rollout); compared with that run's own records of steps 3-4
tests/golden/made.json says which commit made each record and how. Timing is not compared:
`elapsed_s` and the `perf/` keys other than byte counts. Every other key must be present on
both sides, integers exact, and floats equal within float32's rounding as another CPU does it:
relative 2e-4 or absolute 1e-6. Measured: the records written on the machine of c42290d,
rerun on an AMD EPYC, differed by at most 3.7e-5 relative (the noise scale, a difference of
two squared norms, at step 7) and 2.4e-7 absolute (log-prob differences and losses that are
float32 noise themselves); the same code on the same machine repeats them bit for bit.
Progress: a plain line per case.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
REL_TOL = 2e-4  # float32 rounding on another CPU, amplified by the noise scale (docstring)
ABS_TOL = 1e-6  # values that are float32 noise themselves (a loss of 1e-7 at on-policy start)


@dataclass(frozen=True)
class Case:
    recipe: str
    flags: tuple[str, ...]
    load: str | None = None  # a committed checkpoint directory the run resumes from (a copy)


CASES = {
    "grpo": Case("recipes/tiny/grpo.sh", ("--num-steps", "5")),
    "ppo": Case("recipes/tiny/ppo.sh", ("--num-steps", "8")),
    "resume_async": Case(
        "recipes/tiny/grpo.sh",
        ("--num-steps", "4", "--async-rollout"),
        load="tests/golden/resume_async_ckpt",
    ),
}


def timing(key: str) -> bool:
    """A key that measures time, not training: it differs between any two runs."""
    return key == "elapsed_s" or (key.startswith("perf/") and not key.endswith("_bytes"))


def compared(record: dict) -> dict:
    return {k: v for k, v in record.items() if not timing(k)}


def _agree(golden, got) -> bool:
    if isinstance(golden, bool) or isinstance(got, bool):
        return golden is got
    if isinstance(golden, int) and isinstance(got, int):
        return golden == got
    if isinstance(golden, (int, float)) and isinstance(got, (int, float)):
        if math.isnan(golden) or math.isnan(got):
            return math.isnan(golden) and math.isnan(got)
        return math.isclose(golden, got, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return golden == got


def differences(golden: list[dict], got: list[dict]) -> list[str]:
    """What differs between two lists of records, a line each (none: they agree)."""
    lines = []
    if len(golden) != len(got):
        lines.append(f"{len(got)} records, the golden has {len(golden)}")
    for i, (want, have) in enumerate(zip(golden, got)):
        want, have = compared(want), compared(have)
        where = f"record {i + 1} (rollout_step {want.get('rollout_step')})"
        for key in sorted(want.keys() - have.keys()):
            lines.append(f"{where}: {key} missing (golden {want[key]!r})")
        for key in sorted(have.keys() - want.keys()):
            lines.append(f"{where}: {key} is new ({have[key]!r})")
        for key in sorted(want.keys() & have.keys()):
            if not _agree(want[key], have[key]):
                lines.append(f"{where}: {key} = {have[key]!r}, golden {want[key]!r}")
    return lines


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_case(name: str, work: Path) -> list[dict]:
    """Run a case in `work`; the records it logged (a resumed case: those after the resume)."""
    case = CASES[name]
    flags = list(case.flags)
    if case.load is not None:
        checkpoint = work / "checkpoint"
        shutil.copytree(ROOT / case.load, checkpoint)  # a resume writes into the step it forks
        flags += ["--load", str(checkpoint)]
    run_dir = work / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(
        NPROC="1",
        OMP_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    done = subprocess.run(
        ["bash", str(ROOT / case.recipe), "--run-dir", str(run_dir), "--no-progress", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = done.stderr[-3000:]
        raise RuntimeError(f"{name}: {case.recipe} exited {done.returncode}:\n{tail}")
    return read_records(run_dir / "metrics.jsonl")


def check(names: list[str]) -> int:
    failed = []
    for name in names:
        golden = read_records(GOLDEN / f"{name}.jsonl")
        with tempfile.TemporaryDirectory(prefix=f"golden-{name}-") as work:
            try:
                got = run_case(name, Path(work))
            except RuntimeError as error:  # the run failed: what it said, and on to the next
                failed.append(name)
                print(error, flush=True)
                continue
        lines = differences(golden, got)
        keys = len(compared(golden[0])) if golden else 0
        if lines:
            failed.append(name)
            print(f"{name}: DIFFERS from tests/golden/{name}.jsonl ({len(lines)} differences)")
            for line in lines[:20]:
                print(f"  {line}")
        else:
            print(f"{name}: {len(got)} records, {keys} keys each, equal to the golden", flush=True)
    if failed:
        print(f"golden: {', '.join(failed)} differ; if the change is meant, say why and run "
              f"`python tools/golden.py update {' '.join(failed)}`")  # fmt: skip
        return 1
    print(f"golden: all {len(names)} cases equal")
    return 0


def update(names: list[str]) -> int:
    made_path = GOLDEN / "made.json"
    made = json.loads(made_path.read_text()) if made_path.exists() else {}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"golden-{name}-") as work:
            got = run_case(name, Path(work))
        (GOLDEN / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in got))
        case = CASES[name]
        made[name] = {
            "commit": commit or "unknown",
            "command": " ".join(["NPROC=1", "bash", case.recipe, *case.flags])
            + (f" --load {case.load}" if case.load else ""),
        }
        print(f"{name}: {len(got)} records written to tests/golden/{name}.jsonl", flush=True)
    made_path.write_text(json.dumps(made, indent=2, sort_keys=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("check", "update"))
    parser.add_argument("cases", nargs="*", metavar="CASE", help=", ".join(CASES))
    args = parser.parse_args(argv)
    unknown = [name for name in args.cases if name not in CASES]
    if unknown:
        parser.error(f"CASE {', '.join(unknown)}: allowed: {', '.join(CASES)}")
    if args.command == "update" and not args.cases:
        parser.error("update needs the CASEs to rewrite (one of: " + ", ".join(CASES) + ")")
    names = args.cases or list(CASES)
    return check(names) if args.command == "check" else update(names)


if __name__ == "__main__":
    sys.exit(main())
