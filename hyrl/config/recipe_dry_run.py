"""Asking a recipe script for its resolved configuration: `bash RECIPE --dry-run ARGS`.

A recipe passes --dry-run on to `hyrl train`, which prints the resolved configuration as one
JSON object on stdout and starts nothing. `hyrl plan` and `hyrl sweep` both read a recipe this
way; each words its own errors from the `DryRun` this returns. Standard library only.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class DryRun:
    """What one dry run answered. `config` is the JSON object it printed (None when it failed
    or printed none); `json_error` why the JSON on stdout did not parse ("" otherwise)."""

    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    config: dict | None
    json_error: str = ""


def dry_run(recipe: str | Path, args: Sequence[str], env: dict, timeout_s: float) -> DryRun:
    """Run `bash RECIPE --dry-run ARGS` (stdin closed, output captured) and parse the first JSON
    object on its stdout. Raises subprocess.TimeoutExpired past `timeout_s` and OSError when
    bash cannot start."""
    cmd = ["bash", str(recipe), "--dry-run", *args]
    done = subprocess.run(
        cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
    )
    config, json_error = None, ""
    if done.returncode == 0:
        text = done.stdout.strip()
        start = text.find("{")
        try:
            config, _ = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
        except json.JSONDecodeError as err:
            json_error = str(err)
        if not isinstance(config, dict):
            config = None
    return DryRun(cmd, done.returncode, done.stdout, done.stderr, config, json_error)


def error_lines(stderr: str, n: int) -> str:
    """The recipe's error lines (its last 3), else its last n lines, the launcher's echo of the
    command line ('+ ...') left out; "" when stderr holds nothing else."""
    lines = [ln for ln in (stderr or "").splitlines() if ln.strip() and not ln.startswith("+ ")]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return "\n".join(errors[-3:] if errors else lines[-n:])
