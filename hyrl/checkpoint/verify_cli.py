"""`hyrl checkpoint verify DIR [--checksums]`: check a training checkpoint on demand.

DIR is a --save directory (every step in it is checked, newest first) or one step directory.
Each step: its manifest (every file at its saved size), the distributed checkpoints' indexes
against their data files, the files its trainer_state.json names (without a manifest, each by
its format, and a note that its sizes were not recorded), every file read through
(hyrl.checkpoint.manifest.verify), and with --checksums the SHA-256 of every file (recorded at
the first run, compared at the next).
Prints one line per step, then its problems; exits 0 when every step checked is whole, 1 when
one is damaged, 2 on bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hyrl.checkpoint.manifest import step_dirs, verify
from hyrl.checkpoint.step_files import STATE_FILE


def _steps(directory: Path) -> list[Path]:
    """One step directory, or every step of a --save directory, newest first."""
    if (directory / STATE_FILE).is_file():
        return [directory]
    return [path for _, path in reversed(step_dirs(directory))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hyrl checkpoint", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("verify", help="check a --save directory or one of its steps")
    check.add_argument("dir", help="a --save directory, or one step_N in it")
    check.add_argument(
        "--checksums", action="store_true", help="SHA-256 of every file: recorded, then compared"
    )
    args = parser.parse_args(argv)
    directory = Path(args.dir)
    steps = _steps(directory) if directory.is_dir() else []
    if not steps:
        print(
            f"hyrl checkpoint verify: {directory}: no checkpoint (no {STATE_FILE}, no step_N); "
            "allowed: a --save directory or one of its step_N",
            file=sys.stderr,
        )
        return 2
    damaged = 0
    for step in steps:
        problems, notes = verify(step, checksums=args.checksums)
        print(f"{step}: {'damaged' if problems else 'whole'}", flush=True)
        for line in problems:
            print(f"  {line}")
        for line in notes:
            print(f"  ({line})")
        damaged += bool(problems)
    return 1 if damaged else 0
