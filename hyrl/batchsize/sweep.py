"""`hyrl sweep`: run one recipe at several batch sizes with a re-derived learning rate.

The batch-size question (DESIGN.md, "The science it encodes") is answered by runs of the same
recipe at several batch sizes, each with its learning rate retuned by a scaling rule, later
compared per sample by `hyrl analyze`. This module plans those runs, launches them and keeps a
record of them in `DIR/sweep.json`, the file `hyrl analyze DIR` reads.

1. Probe: `bash RECIPE --dry-run EXTRA... --run-dir DIR/.probe-never-created` prints the
   recipe's resolved configuration as JSON on stdout. From it: P0 (rollout_batch_size),
   G (n_samples_per_prompt), B0 (global_batch_size), LR0 (lr, the resolved rate) and
   k (optimizer_steps_per_rollout). The probe's --run-dir comes after EXTRA so that the path
   the trainer checks is always one that does not exist (a dry run creates nothing).
2. Plan (`plan_members`, pure): for each multiplier m, P = P0 m and B = B0 m (G and k kept),
   lr = scaled_lr(LR0, B, B0, rule). An optional fixed-lr control at multiplier M keeps LR0
   (`--lr-scaling none`): the ablation showing what the rule buys. With --max-samples N every
   member runs ceil(N / (P G)) rollout steps, so all consume (about) the same number of samples.
   Every seed gets every member. Names: b{B}-{rule}-s{seed}, b{B0}-ref-s{seed} for m = 1,
   b{B}-fixed-s{seed} for the control; the reference is the first seed's m = 1 member.
3. Validate: a dry run of every member (its flags after EXTRA, so the sweep's flags win) before
   anything is launched; a member the recipe rejects is named with the recipe's error.
4. Run: up to --max-parallel members at once, `bash RECIPE EXTRA... MEMBER FLAGS`, output to
   DIR/NAME.log, environment inherited. sweep.json is rewritten atomically before the launch
   and whenever a member starts or ends.
5. Resume: a member whose run directory holds summary.json (written at the end of every run) is
   done and skipped. A member directory without it (an interrupted or failed run) is renamed to
   NAME.incomplete-<UTC time> (never deleted) and the member runs again, as do failed members.
   A sweep.json written with other arguments is refused.

Only the standard library, `hyrl.config`, `hyrl.metrics.run_dir` and `hyrl.recipes` (standard
library only) and rich are imported: the trainer is reached through the recipe, as a subprocess.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from hyrl.config import LR_SCALING_EXPONENTS, scaled_lr
from hyrl.metrics.run_dir import SWEEP_FILE, RunFileError, has_summary, read_sweep, write_sweep
from hyrl.recipes import dry_run, error_lines

DEFAULT_MULTS = (1, 2, 4, 8, 16)
DEFAULT_RULE = "sqrt"
RULES = tuple(LR_SCALING_EXPONENTS)  # none, sqrt, linear
PROBE_DIR = ".probe-never-created"
DRY_RUN_DIR = ".dry-run-never-created"
DRY_RUN_TIMEOUT_S = 900  # a dry run on a cluster imports the full stack; generous
MAX_DRY_RUNS_AT_ONCE = 8
# The arguments that define a sweep; a re-run into the same --out must repeat them.
ARGUMENT_KEYS = ("recipe", "extra_args", "batch_mults", "lr_rule", "fixed_lr_control", "seeds",
                 "max_samples")
STATUSES = ("pending", "running", "done", "failed")


class SweepError(ValueError):
    """A sweep that cannot start: names the flag or member, the value and what is allowed."""


# --- arguments ---------------------------------------------------------------------------------

def _positive_int(value, flag: str, what: str = "a positive integer") -> int:
    if isinstance(value, bool):
        raise SweepError(f"{flag} {value!r}: not an integer; allowed: {what}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SweepError(f"{flag} {value!r}: not an integer; allowed: {what}") from None
    if not isinstance(value, int) or value < 1:
        raise SweepError(f"{flag} {value!r}: must be >= 1; allowed: {what}")
    return value


def _int_list(text, flag: str, minimum: int, allowed: str) -> list[int]:
    """'1,2,4' or [1, 2, 4] -> [1, 2, 4]; each an integer >= minimum, no repeats."""
    if isinstance(text, str):
        items = [t.strip() for t in text.split(",")]
    elif isinstance(text, Iterable):
        items = list(text)
    else:
        raise SweepError(f"{flag} {text!r}: expected a comma-separated list; allowed: {allowed}")
    if not items or items == [""]:
        raise SweepError(f"{flag}: empty list; allowed: {allowed}")
    out: list[int] = []
    for item in items:
        try:
            if isinstance(item, bool) or isinstance(item, float):
                raise ValueError
            value = int(item)
        except (TypeError, ValueError):
            raise SweepError(f"{flag} {text!r}: {item!r} is not an integer; "
                             f"allowed: {allowed}") from None
        if value < minimum:
            raise SweepError(f"{flag} {text!r}: {value} is below {minimum}; allowed: {allowed}")
        if value in out:
            raise SweepError(f"{flag} {text!r}: {value} appears twice; allowed: {allowed}")
        out.append(value)
    return out


def parse_mults(text) -> list[int]:
    """--batch-mults: positive integers including 1 (the reference), sorted ascending."""
    allowed = "comma-separated positive integers including 1, e.g. 1,2,4,8,16"
    mults = _int_list(text, "--batch-mults", 1, allowed)
    if 1 not in mults:
        raise SweepError(f"--batch-mults {','.join(map(str, mults))}: must include 1 (the "
                         f"reference recipe's batch); allowed: {allowed}")
    return sorted(mults)


def parse_seeds(text) -> list[int]:
    """--seeds: integers >= 0, no repeats, in the order given (the first seed's m = 1 member is
    the reference)."""
    return _int_list(text, "--seeds", 0, "comma-separated integers >= 0, e.g. 1234,5678")


def _check_rule(rule: str) -> str:
    if rule not in RULES:
        raise SweepError(f"--lr-rule {rule!r}: unknown rule; allowed: {', '.join(RULES)}")
    return rule


def _check_fixed(fixed, mults: Sequence[int], rule: str) -> int | None:
    """--fixed-lr-control M: any integer >= 2 (M = 1 would repeat the reference). Under
    --lr-rule none it would repeat the member at M when M is one of --batch-mults."""
    if fixed is None:
        return None
    allowed = "an integer >= 2 (the batch multiplier run at the reference lr)"
    fixed = _positive_int(fixed, "--fixed-lr-control", allowed)
    if fixed == 1:
        raise SweepError("--fixed-lr-control 1: at m = 1 the fixed lr is the reference member "
                         f"itself; allowed: {allowed}")
    if rule == "none" and fixed in mults:
        raise SweepError(f"--fixed-lr-control {fixed}: under --lr-rule none the member at "
                         f"multiplier {fixed} already runs at the reference lr; allowed: a "
                         "multiplier not in --batch-mults, or another --lr-rule")
    return fixed


# --- the plan ----------------------------------------------------------------------------------

def _base_numbers(base: dict) -> tuple[int, int, int, float]:
    try:
        P0, G, B0, lr = base["P0"], base["G"], base["B0"], base["lr"]
    except KeyError as missing:
        raise SweepError(f"base: missing {missing}; expected P0, G, B0 and lr") from None
    for key, value in (("P0", P0), ("G", G), ("B0", B0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SweepError(f"base {key}={value!r}: expected an integer >= 1")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (math.isfinite(lr)
                                                                          and lr > 0):
        raise SweepError(f"base lr={lr!r}: expected a finite number > 0")
    if (P0 * G) % B0 != 0:
        raise SweepError(f"base: P0 x G = {P0} x {G} is not a multiple of B0 = {B0}")
    return P0, G, B0, float(lr)


def member_name(B: int, kind: str, seed: int) -> str:
    """b{B}-{kind}-s{seed}; kind is the lr rule, 'ref' (m = 1) or 'fixed' (the control)."""
    return f"b{B}-{kind}-s{seed}"


def plan_members(base: dict, mults: Sequence[int] = DEFAULT_MULTS, rule: str = DEFAULT_RULE,
                 fixed_lr_control: int | None = None, seeds: Sequence[int] = (1234,),
                 max_samples: int | None = None) -> list[dict]:
    """The sweep's members, pure. `base`: {"P0", "G", "B0", "lr"} of the reference recipe.

    For each seed (in order) and multiplier m (ascending): P = P0 m prompts and B = B0 m
    responses per optimizer step (G kept, so the optimizer steps per rollout are kept too),
    lr = scaled_lr(lr0, B, B0, rule). Then, with `fixed_lr_control` = M, a member at P0 M, B0 M
    and lr0 (lr_scaling "none"). With `max_samples` = N, num_steps = ceil(N / (P G)) rollout
    steps, else None (the recipe's own). Each member: name, mult, prompts_per_step,
    responses_per_step, responses_per_rollout, lr, lr_scaling, seed, fixed_lr_control,
    is_reference, num_steps, run_dir (relative to the sweep directory), status "pending",
    returncode None, wall_s None. Raises SweepError naming the flag on a bad argument.
    """
    P0, G, B0, lr0 = _base_numbers(base)
    mults = parse_mults(mults)
    rule = _check_rule(rule)
    fixed = _check_fixed(fixed_lr_control, mults, rule)
    seeds = parse_seeds(seeds)
    if max_samples is not None:
        max_samples = _positive_int(max_samples, "--max-samples",
                                    "a positive number of responses")

    def member(m: int, seed: int, fixed_lr: bool) -> dict:
        P, B = P0 * m, B0 * m
        scaling = "none" if fixed_lr else rule
        kind = "fixed" if fixed_lr else ("ref" if m == 1 else rule)
        name = member_name(B, kind, seed)
        return {
            "name": name,
            "mult": m,
            "prompts_per_step": P,
            "responses_per_step": B,
            "responses_per_rollout": P * G,
            "lr": scaled_lr(lr0, B, B0, scaling),
            "lr_scaling": scaling,
            "seed": seed,
            "fixed_lr_control": fixed_lr,
            "is_reference": False,
            "num_steps": None if max_samples is None else math.ceil(max_samples / (P * G)),
            "run_dir": name,
            "status": "pending",
            "returncode": None,
            "wall_s": None,
        }

    members = []
    for seed in seeds:
        members += [member(m, seed, False) for m in mults]
        if fixed is not None:
            members.append(member(fixed, seed, True))
    members[0]["is_reference"] = True  # first seed, m = 1 (mults are sorted and include 1)
    return members


def member_flags(member: dict, base: dict, run_dir) -> list[str]:
    """The flags the sweep appends (after EXTRA) to the recipe for one member."""
    flags = [
        "--rollout-batch-size", str(member["prompts_per_step"]),
        "--global-batch-size", str(member["responses_per_step"]),
        "--lr", "none",
        "--ref-lr", repr(float(base["lr"])),
        "--ref-global-batch-size", str(base["B0"]),
        "--lr-scaling", member["lr_scaling"],
        "--seed", str(member["seed"]),
    ]
    if member.get("num_steps") is not None:
        flags += ["--num-steps", str(member["num_steps"])]
    return flags + ["--run-dir", str(run_dir), "--no-progress"]


# --- talking to the recipe ---------------------------------------------------------------------

def _dry_run(recipe: Path, args: list[str], env: dict) -> tuple[dict | None, str]:
    """(resolved config, "") from `bash RECIPE --dry-run ARGS`, or (None, why it failed)."""
    try:
        done = dry_run(recipe, args, env, DRY_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"the dry run did not finish in {DRY_RUN_TIMEOUT_S} s"
    except OSError as err:
        return None, f"cannot run bash: {err}"
    if done.returncode != 0:
        return None, (f"exit {done.returncode}:\n"
                      + (error_lines(done.stderr, 12) or "(no output on stderr)"))
    if done.config is None:
        text = done.stdout.strip()
        if done.json_error:
            text = f"{text[:200]} ({done.json_error})"
        return None, ("the dry run printed no JSON object on stdout (does the recipe pass "
                      f"--dry-run on to `hyrl train`?): {text[:200]!r}")
    return done.config, ""


def _unused_path(path: Path) -> Path:
    candidate, i = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}-{i}")
        i += 1
    return candidate


def probe(recipe, extra_args: Sequence[str] = (), out_dir=".", env: dict | None = None) -> dict:
    """The recipe's resolved configuration (with EXTRA), from a dry run that creates nothing."""
    recipe = Path(recipe)
    env = dict(os.environ if env is None else env)
    never = _unused_path(Path(out_dir).resolve() / PROBE_DIR)
    config, why = _dry_run(recipe, [*extra_args, "--run-dir", str(never)], env)
    if config is None:
        raise SweepError(f"RECIPE {recipe}: the probe `bash {recipe} --dry-run ...` failed, "
                         f"{why}")
    return config


def base_from_config(config: dict, recipe="RECIPE") -> dict:
    """{P0, G, B0, lr, optimizer_steps_per_rollout, seed, target} from a resolved config."""
    keys = {"P0": "rollout_batch_size", "G": "n_samples_per_prompt", "B0": "global_batch_size",
            "lr": "lr"}
    missing = [v for v in keys.values() if config.get(v) is None]
    if missing:
        raise SweepError(f"RECIPE {recipe}: the dry run's configuration lacks "
                         f"{', '.join(missing)}; is it `hyrl train --dry-run` output?")
    if config.get("batch_ramp"):
        raise SweepError(f"RECIPE {recipe}: it sets --batch-ramp {config['batch_ramp']}; a "
                         "sweep runs fixed batch sizes; allowed: a recipe without a ramp, or "
                         "add `-- --batch-ramp none`")
    base = {k: config[v] for k, v in keys.items()}
    base["lr"] = float(base["lr"])
    base["optimizer_steps_per_rollout"] = config.get(
        "optimizer_steps_per_rollout", base["P0"] * base["G"] // base["B0"])
    base["seed"] = config.get("seed")
    base["target"] = config.get("target")
    _base_numbers(base)
    return base


def _check_resolved(member: dict, config: dict, base: dict) -> str:
    """'' when the member's dry run resolved what the sweep planned, else what differs."""
    expect = {"rollout_batch_size": member["prompts_per_step"],
              "n_samples_per_prompt": base["G"],
              "global_batch_size": member["responses_per_step"],
              "seed": member["seed"]}
    if member.get("num_steps") is not None:
        expect["num_steps"] = member["num_steps"]
    wrong = [f"{k}={config.get(k)!r} (planned {v!r})" for k, v in expect.items()
             if config.get(k) != v]
    lr = config.get("lr")
    if not isinstance(lr, (int, float)) or not math.isclose(lr, member["lr"], rel_tol=1e-9):
        wrong.append(f"lr={lr!r} (planned {member['lr']!r})")
    if wrong:
        return ("the recipe resolved " + ", ".join(wrong) + "; does it append its extra "
                "arguments last, after its own flags?")
    return ""


def validate_members(recipe: Path, members: list[dict], base: dict, extra_args: Sequence[str],
                     out_dir: Path, env: dict) -> None:
    """Dry-run every member (run directories under a path that is never created); raise
    SweepError naming each member the recipe rejects, with the recipe's error."""
    never = _unused_path(out_dir / DRY_RUN_DIR)

    def check(member: dict) -> str:
        flags = member_flags(member, base, never / member["name"])
        config, why = _dry_run(recipe, [*extra_args, *flags], env)
        if config is None:
            return why
        return _check_resolved(member, config, base)

    workers = max(1, min(MAX_DRY_RUNS_AT_ONCE, len(members), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        problems = list(pool.map(check, members))
    bad = [(m, why) for m, why in zip(members, problems) if why]
    if bad:
        text = "\n".join(f"  member {m['name']} (P={m['prompts_per_step']}, "
                         f"B={m['responses_per_step']}, lr={m['lr']:.4g}): "
                         + why.replace("\n", "\n    ") for m, why in bad)
        raise SweepError(f"{len(bad)} of {len(members)} member(s) rejected by RECIPE {recipe} "
                         f"in a dry run; nothing was launched (change --batch-mults, or pass "
                         f"flags after --):\n{text}")


# --- sweep.json --------------------------------------------------------------------------------

def write_sweep_json(out_dir: Path, sweep: dict) -> None:
    """Atomically: write a temporary file next to sweep.json, flush it to disk, rename."""
    write_sweep(out_dir, sweep)


def read_sweep_json(out_dir) -> dict | None:
    path = Path(out_dir) / SWEEP_FILE
    try:
        data = read_sweep(out_dir)
    except (OSError, RunFileError) as err:
        why = err.error if isinstance(err, RunFileError) else err
        raise SweepError(f"--out {out_dir}: {path} is unreadable ({why}); allowed: a new "
                         "directory") from None
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("members"), list):
        raise SweepError(f"--out {out_dir}: {path} holds no sweep (no 'members' list); "
                         "allowed: a new directory")
    return data


def _check_same_sweep(old: dict, new: dict, out_dir: Path) -> None:
    diffs = [f"{k}: {old.get(k)!r} there, {new[k]!r} now" for k in ARGUMENT_KEYS
             if old.get(k) != new[k]]
    if not diffs and old.get("base") != new["base"]:
        diffs = [f"base: the recipe resolved {old.get('base')!r} then, {new['base']!r} now"]
    if diffs:
        raise SweepError(f"--out {out_dir}: holds a sweep with other arguments ("
                         + "; ".join(diffs) + "); allowed: a new directory, or the same "
                         "arguments to resume it")


# --- running -----------------------------------------------------------------------------------

def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _move_aside(out_dir: Path, member: dict) -> list[str]:
    """Rename an unfinished member directory (and its log) to NAME.incomplete-<UTC time>[.log];
    returns the new names. Nothing is deleted. An empty directory is left where it is."""
    name = member["name"]
    run_dir, log = out_dir / member["run_dir"], out_dir / f"{name}.log"
    moved = []
    has_data = run_dir.is_symlink() or run_dir.is_file() or (run_dir.is_dir()
                                                            and any(run_dir.iterdir()))
    if not has_data and not log.exists():
        return moved
    stamp = _utc_stamp()
    i = 0
    while True:
        tag = f"{name}.incomplete-{stamp}" + (f"-{i}" if i else "")
        aside, aside_log = out_dir / tag, out_dir / f"{tag}.log"
        if not aside.exists() and not aside_log.exists():
            break
        i += 1
    if has_data:
        os.rename(run_dir, aside)
        moved.append(aside.name)
    if log.exists():
        os.rename(log, aside_log)
        moved.append(aside_log.name)
    return moved


def _is_done(out_dir: Path, member: dict) -> bool:
    return has_summary(out_dir / member["run_dir"])


class _Display:
    """rich progress: one line per member (name, status, elapsed) and an overall bar."""

    def __init__(self, members: list[dict], console, enabled: bool):
        self.progress = None
        if not enabled:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)

        self.progress = Progress(TextColumn("{task.description:<28}"), BarColumn(bar_width=20),
                                 MofNCompleteColumn(), TextColumn("{task.fields[status]:<22}"),
                                 TimeElapsedColumn(), console=console)
        done = sum(m["status"] == "done" for m in members)
        self.overall = self.progress.add_task("sweep", total=len(members), completed=done,
                                              status=f"{done} done")
        self.tasks = {}
        for m in members:
            status = "done (earlier run)" if m["status"] == "done" else "pending"
            self.tasks[m["name"]] = self.progress.add_task(
                m["name"], total=1, completed=int(m["status"] == "done"), start=False,
                status=status)

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def started(self, name: str) -> None:
        if self.progress is not None:
            self.progress.start_task(self.tasks[name])
            self.progress.update(self.tasks[name], status="running")

    def finished(self, member: dict, members: list[dict]) -> None:
        if self.progress is None:
            return
        task = self.tasks[member["name"]]
        status = member["status"]
        if status == "failed":
            status = f"FAILED (exit {member['returncode']})"
        self.progress.update(task, completed=1, status=status)
        self.progress.stop_task(task)
        ended = [m for m in members if m["status"] in ("done", "failed")]
        failed = sum(m["status"] == "failed" for m in ended)
        self.progress.update(self.overall, completed=len(ended),
                             status=f"{len(ended) - failed} done, {failed} failed")


def _launch(recipe: Path, member: dict, base: dict, extra_args: Sequence[str], out_dir: Path,
            env: dict):
    flags = member_flags(member, base, out_dir / member["run_dir"])
    cmd = ["bash", str(recipe), *extra_args, *flags]
    member["command"] = shlex.join(cmd)
    log = open(out_dir / member["log"], "w", encoding="utf-8")
    log.write(f"# {member['command']}\n")
    log.flush()
    # Own session: a Ctrl-C reaches the sweep, which then stops its members (see run_sweep).
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    return proc, log


def _stop(procs: Iterable[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM the process group of each member we started, SIGKILL after the grace period."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()


@contextmanager
def _signals_interrupt():
    """While members run, SIGTERM and SIGHUP (a batch system ending the job, a closed
    terminal) raise KeyboardInterrupt like Ctrl-C does, so the members, which run in their own
    sessions, are stopped and recorded rather than left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_sweep(recipe, out_dir, batch_mults: Sequence[int] | str = DEFAULT_MULTS,
              lr_rule: str = DEFAULT_RULE, fixed_lr_control: int | None = None,
              seeds: Sequence[int] | str | None = None, max_samples: int | None = None,
              max_parallel: int = 1, extra_args: Sequence[str] = (), env: dict | None = None,
              console=None, show_progress: bool = True, poll_s: float = 0.2) -> dict:
    """Probe, plan, validate and run a sweep into `out_dir`; returns sweep.json's content.

    `seeds` None = the recipe's own seed. `env` None = this process's environment (NPROC, PYTHON,
    CUDA_VISIBLE_DEVICES... reach the recipe unchanged). A member that exits non-zero is marked
    failed and the others go on; the caller decides the exit code (see `failed_members`).
    Raises SweepError (nothing launched) for a bad argument, a failing probe, a member the
    recipe rejects in a dry run, or an --out holding another sweep. On KeyboardInterrupt the
    running members are stopped, recorded as pending again, and the interrupt is re-raised.
    """
    recipe_path = Path(recipe)
    if not recipe_path.is_file():
        raise SweepError(f"RECIPE {recipe}: no such file; allowed: a recipe script such as "
                         "recipes/tiny/grpo.sh")
    recipe_path = recipe_path.resolve()
    out = Path(out_dir).resolve()
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out_dir}: exists and is not a directory; allowed: a new "
                         "directory or a sweep directory")
    max_parallel = _positive_int(max_parallel, "--max-parallel", "an integer >= 1")
    mults = parse_mults(batch_mults)
    rule = _check_rule(lr_rule)
    fixed = _check_fixed(fixed_lr_control, mults, rule)
    if seeds is not None:
        seeds = parse_seeds(seeds)
    if max_samples is not None:
        max_samples = _positive_int(max_samples, "--max-samples",
                                    "a positive number of responses")
    extra_args = [str(a) for a in extra_args]
    old = read_sweep_json(out) if out.is_dir() else None
    if old is None and out.is_dir() and any(out.iterdir()):
        raise SweepError(f"--out {out_dir}: a non-empty directory without {SWEEP_FILE}; "
                         "allowed: a new (or empty) directory, or an earlier sweep's directory")

    env = dict(os.environ if env is None else env)
    base = base_from_config(probe(recipe_path, extra_args, out, env), recipe)
    if seeds is None:
        seeds = [base["seed"] if isinstance(base["seed"], int) else 1234]
    members = plan_members(base, mults, rule, fixed, seeds, max_samples)
    sweep = {
        "recipe": str(recipe_path),
        "extra_args": extra_args,
        "batch_mults": mults,
        "lr_rule": rule,
        "fixed_lr_control": fixed,
        "seeds": list(seeds),
        "max_samples": max_samples,
        "reference": members[0]["name"],
        "target": base["target"],
        "base": {k: base[k] for k in ("P0", "G", "B0", "lr", "optimizer_steps_per_rollout")},
        "members": members,
    }
    if old is not None:
        _check_same_sweep(old, sweep, out)
    validate_members(recipe_path, members, base, extra_args, out, env)

    # Resume: finished members keep their record; the rest are (re)run from a clean directory.
    earlier = {m.get("name"): m for m in (old or {}).get("members", []) if isinstance(m, dict)}
    for m in members:
        m["log"] = f"{m['name']}.log"
        prev = earlier.get(m["name"], {})
        if _is_done(out, m):
            m.update(status="done", returncode=prev.get("returncode", 0),
                     wall_s=prev.get("wall_s"), resumed=True)
            if prev.get("command"):
                m["command"] = prev["command"]
        m["moved_aside"] = list(prev.get("moved_aside", []))
    out.mkdir(parents=True, exist_ok=True)
    for m in members:
        if m["status"] != "done":
            m["moved_aside"] += _move_aside(out, m)
    write_sweep_json(out, sweep)

    if max_parallel > 1 and "MASTER_PORT" in env:
        # Members running side by side must not share a rendezvous port; the launcher picks a
        # free one when MASTER_PORT is unset.
        env.pop("MASTER_PORT")
    if console is None:
        from rich.console import Console

        console = Console()
    queue = [m for m in members if m["status"] != "done"]
    running: dict[str, tuple[dict, subprocess.Popen, object, float]] = {}
    with _Display(members, console, show_progress) as display, _signals_interrupt():
        try:
            while queue or running:
                while queue and len(running) < max_parallel:
                    m = queue.pop(0)
                    proc, log = _launch(recipe_path, m, base, extra_args, out, env)
                    running[m["name"]] = (m, proc, log, time.monotonic())
                    m.update(status="running", returncode=None, wall_s=None)
                    display.started(m["name"])
                    write_sweep_json(out, sweep)
                for name in list(running):
                    m, proc, log, t0 = running[name]
                    rc = proc.poll()
                    if rc is None:
                        continue
                    log.close()
                    del running[name]
                    ok = rc == 0 and _is_done(out, m)
                    m.update(status="done" if ok else "failed", returncode=rc,
                             wall_s=round(time.monotonic() - t0, 3))
                    if rc == 0 and not ok:
                        m["error"] = "exited 0 but wrote no summary.json"
                    display.finished(m, members)
                    write_sweep_json(out, sweep)
                if running:
                    time.sleep(poll_s)
        except BaseException:
            _stop(p for _, p, _, _ in running.values())
            for m, _, log, _ in running.values():
                log.close()
                m.update(status="pending", returncode=None, wall_s=None)
            write_sweep_json(out, sweep)
            raise
    return sweep


def failed_members(sweep: dict) -> list[dict]:
    return [m for m in sweep["members"] if m["status"] == "failed"]


def analyze_command(sweep: dict, out_dir) -> str:
    target = (sweep.get("target") or "eval/accuracy=VALUE")
    return (f"hyrl analyze {shlex.quote(str(out_dir))} --target {shlex.quote(target)} "
            f"--out {shlex.quote(str(Path(out_dir) / 'analysis'))}")


def print_summary(sweep: dict, out_dir, console=None, target: str | None = None) -> None:
    """A table of the members, then the command that analyses the sweep."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"sweep {out_dir} (* = reference; lr rule {sweep['lr_rule']})",
                  box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                  show_edge=False)
    table.add_column("member", no_wrap=True)
    for col in ("P", "B", "lr", "seed", "steps"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("exit", justify="right", no_wrap=True)
    table.add_column("wall s", justify="right", no_wrap=True)
    for m in sweep["members"]:
        status = m["status"] + (", earlier" if m.get("resumed") else "")
        style = {"failed": "red", "done": "green"}.get(m["status"])
        wall = m.get("wall_s")
        table.add_row(
            m["name"] + (" *" if m["name"] == sweep["reference"] else ""),
            str(m["prompts_per_step"]), str(m["responses_per_step"]), f"{m['lr']:.4g}",
            str(m["seed"]), "-" if m.get("num_steps") is None else str(m["num_steps"]),
            status, "-" if m.get("returncode") is None else str(m["returncode"]),
            "-" if wall is None else f"{wall:.1f}", style=style)
    console.print(table)
    failed = failed_members(sweep)
    if failed:
        console.print(f"{len(failed)} member(s) failed: "
                      + ", ".join(f"{m['name']} (exit {m['returncode']}, log "
                                  f"{Path(out_dir) / m['log']})" for m in failed)
                      + "; rerun the same command to retry them (finished members are kept).")
    sweep = dict(sweep, target=target or sweep.get("target"))
    console.print("analyse with:", analyze_command(sweep, out_dir), soft_wrap=True)
