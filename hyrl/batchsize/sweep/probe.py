"""Asking the recipe: the probe that gives the reference numbers, and the dry run of every
member before anything is launched (steps 1 and 3 of `hyrl.batchsize.sweep.run`)."""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hyrl.batchsize.sweep.plan import SweepError, base_numbers, member_flags
from hyrl.config.recipe_dry_run import dry_run, error_lines

PROBE_DIR = ".probe-never-created"
DRY_RUN_DIR = ".dry-run-never-created"
DRY_RUN_TIMEOUT_S = 900  # a dry run on a cluster imports the full stack; generous
MAX_DRY_RUNS_AT_ONCE = 8


def _dry_run(recipe: Path, args: list[str], env: dict) -> tuple[dict | None, str]:
    """(resolved config, "") from `bash RECIPE --dry-run ARGS`, or (None, why it failed)."""
    try:
        done = dry_run(recipe, args, env, DRY_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"the dry run did not finish in {DRY_RUN_TIMEOUT_S} s"
    except OSError as err:
        return None, f"cannot run bash: {err}"
    if done.returncode != 0:
        return None, (
            f"exit {done.returncode}:\n" + (error_lines(done.stderr, 12) or "(no output on stderr)")
        )
    if done.config is None:
        text = done.stdout.strip()
        if done.json_error:
            text = f"{text[:200]} ({done.json_error})"
        return None, (
            "the dry run printed no JSON object on stdout (does the recipe pass "
            f"--dry-run on to `hyrl train`?): {text[:200]!r}"
        )
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
        raise SweepError(f"RECIPE {recipe}: the probe `bash {recipe} --dry-run ...` failed, {why}")
    return config


def base_from_config(config: dict, recipe="RECIPE") -> dict:
    """{P0, G, B0, lr, optimizer_steps_per_rollout, seed, target, wandb} from a resolved
    config (wandb: the recipe's --wandb-group and --wandb-tags under --log-wandb, else None)."""
    keys = {
        "P0": "rollout_batch_size",
        "G": "n_samples_per_prompt",
        "B0": "global_batch_size",
        "lr": "lr",
    }
    missing = [v for v in keys.values() if config.get(v) is None]
    if missing:
        raise SweepError(
            f"RECIPE {recipe}: the dry run's configuration lacks "
            f"{', '.join(missing)}; is it `hyrl train --dry-run` output?"
        )
    if config.get("batch_ramp"):
        raise SweepError(
            f"RECIPE {recipe}: it sets --batch-ramp {config['batch_ramp']}; a "
            "sweep runs fixed batch sizes; allowed: a recipe without a ramp, or "
            "add `-- --batch-ramp none`"
        )
    if config.get("batch_schedule") == "auto":
        raise SweepError(
            f"RECIPE {recipe}: it sets --batch-schedule auto (B follows the noise scale); a "
            "sweep runs fixed batch sizes; allowed: a recipe with a fixed batch, or add "
            "`-- --batch-schedule fixed`"
        )
    base = {k: config[v] for k, v in keys.items()}
    base["lr"] = float(base["lr"])
    base["optimizer_steps_per_rollout"] = config.get(
        "optimizer_steps_per_rollout", base["P0"] * base["G"] // base["B0"]
    )
    base["seed"] = config.get("seed")
    base["target"] = config.get("target")
    # the wandb mirror, when the recipe has it on: each member grouped and tagged
    base["wandb"] = (
        {"group": config.get("wandb_group"), "tags": config.get("wandb_tags")}
        if config.get("log_wandb")
        else None
    )
    base_numbers(base)
    return base


def _check_resolved(member: dict, config: dict, base: dict) -> str:
    """'' when the member's dry run resolved what the sweep planned, else what differs."""
    expect = {
        "rollout_batch_size": member["prompts_per_step"],
        "n_samples_per_prompt": base["G"],
        "global_batch_size": member["responses_per_step"],
        "seed": member["seed"],
    }
    if member.get("num_steps") is not None:
        expect["num_steps"] = member["num_steps"]
    wrong = [
        f"{k}={config.get(k)!r} (planned {v!r})" for k, v in expect.items() if config.get(k) != v
    ]
    lr = config.get("lr")
    if not isinstance(lr, (int, float)) or not math.isclose(lr, member["lr"], rel_tol=1e-9):
        wrong.append(f"lr={lr!r} (planned {member['lr']!r})")
    if wrong:
        return (
            "the recipe resolved " + ", ".join(wrong) + "; does it append its extra "
            "arguments last, after its own flags?"
        )
    return ""


def validate_members(
    recipe: Path,
    members: list[dict],
    base: dict,
    extra_args: Sequence[str],
    out_dir: Path,
    env: dict,
) -> list[dict]:
    """Dry-run every member (run directories under a path that is never created); return each
    member's resolved configuration, in the members' order (what `hyrl sweep --dry-run`
    prints). Raise SweepError naming each member the recipe rejects, with the recipe's error."""
    never = _unused_path(out_dir / DRY_RUN_DIR)

    def check(member: dict) -> tuple[dict | None, str]:
        flags = member_flags(member, base, never / member["name"])
        config, why = _dry_run(recipe, [*extra_args, *flags], env)
        if config is None:
            return None, why
        return config, _check_resolved(member, config, base)

    workers = max(1, min(MAX_DRY_RUNS_AT_ONCE, len(members), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        answers = list(pool.map(check, members))
    bad = [(m, why) for m, (_, why) in zip(members, answers) if why]
    if bad:
        text = "\n".join(
            f"  member {m['name']} (P={m['prompts_per_step']}, "
            f"B={m['responses_per_step']}, lr={m['lr']:.4g}): " + why.replace("\n", "\n    ")
            for m, why in bad
        )
        raise SweepError(
            f"{len(bad)} of {len(members)} member(s) rejected by RECIPE {recipe} "
            f"in a dry run; nothing was launched (change --batch-mults, or pass "
            f"flags after --):\n{text}"
        )
    return [config for config, _ in answers if config is not None]  # a None was raised above
