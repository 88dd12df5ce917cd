"""Resuming a run: a --run-dir that already holds a run takes only --load, with the flags its
config.json records, but for those a resumed run may change (RESUME_MAY_CHANGE); the keys of
config.json that record the run rather than its flags (RUN_RECORD_KEYS); and what differs
between a saved config and this run's (`resume_differences`, which the checkpoint's own check
uses too)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from hyrl.config.errors import _fail, flag_name
from hyrl.config.fields import RunConfig, _fields
from hyrl.config.names import canonical_config
from hyrl.config.resolve import resolve

# What a resumed run (--load into a --run-dir holding a run) may change: the flags declared so
# (`resume_may_change`, beside each flag in its concern: its length, where it checkpoints and
# resumes from, how it reports, how it reaches Ray, how long collectives may wait, the trainer's
# parallel layout and how memory and rows are laid out), and the values config.json derives
# from them (the world and data-parallel sizes; the old log-probs' pass).
RESUME_MAY_CHANGE = tuple(f.name for f in _fields() if f.metadata.get("resume_may_change")) + (
    "old_log_probs_from_update",
    "world_size",
    "data_parallel_size",
)


def check_resume(c: RunConfig, world_size: int) -> None:
    """A --run-dir that holds a run is resumed, with --load, and only with the flags its
    config.json records (but for RESUME_MAY_CHANGE): runs are never overwritten."""
    if not os.path.isfile(os.path.join(c.run_dir, "metrics.jsonl")):
        return
    if c.load is None:
        _fail(
            "run_dir",
            c.run_dir,
            "already holds a run; choose a new directory, or resume it with --load CHECKPOINT_DIR",
            "a directory without metrics.jsonl (runs are never overwritten)",
        )
    _check_resumed_config(c, world_size)


# Keys of config.json that record the run rather than its flags (who it is, what it forked,
# what its initial weights came from).
RUN_RECORD_KEYS = ("run_id", "forked_from", "initial_model")


def _check_resumed_config(c: RunConfig, world_size: int) -> None:
    """--load into a run directory: its config.json must match the flags but for
    RESUME_MAY_CHANGE, so the appended records continue the same experiment."""
    import json

    path = os.path.join(c.run_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as err:
        _fail(
            "run_dir",
            c.run_dir,
            f"holds a run whose config.json cannot be read ({err})",
            "a run directory written by hyrl train",
        )
    differs = resume_differences(saved, c, world_size, "in config.json")
    if differs:
        _fail(
            "run_dir",
            c.run_dir,
            "holds a run with another configuration, which --load would "
            "append to (" + "; ".join(differs[:6]) + ")",
            resume_allowed(),
        )


def resume_allowed() -> str:
    """What a resume may change, for messages."""
    names = {f.name for f in _fields()}
    return (
        "the run's own flags (only "
        + ", ".join(flag_name(k) for k in RESUME_MAY_CHANGE if k in names)
        + " and WORLD_SIZE may change), or a new --run-dir"
    )


def resume_differences(saved: dict, c: RunConfig, world_size: int, where: str) -> list[str]:
    """What differs between a saved resolved config (config.json, or the one a checkpoint
    records) and this run's, but for RESUME_MAY_CHANGE and RUN_RECORD_KEYS: one line each,
    e.g. "--lr: 0.0003 in config.json, 0.001 now" (where: "in config.json"). A record written
    before a flag was renamed is read under the new names (`hyrl.config.names.RENAMED`)."""
    import json

    saved = canonical_config(saved)
    now = json.loads(json.dumps(c.to_dict(world_size)))  # tuples -> lists, as config.json has
    names = {f.name for f in _fields()}
    # a key config.json lacks was written by a hyrl before that flag existed: the run ran as
    # the flag's default does, which is what such a key is compared with
    missing: dict[str, Any] = {f.name: f.default for f in _fields() if f.name not in saved}
    written = set(saved)
    if missing:
        as_before = resolve(dataclasses.replace(c, **missing)).to_dict(world_size)
        saved = {**json.loads(json.dumps(as_before)), **saved}
    return [
        f"{flag_name(k) if k in names else k}: {saved.get(k)!r} "
        f"{where if k in written else f'(its default: not {where})'}, "
        f"{now.get(k)!r} now"
        for k in sorted(set(saved) | set(now))
        if k not in RESUME_MAY_CHANGE and k not in RUN_RECORD_KEYS and saved.get(k) != now.get(k)
    ]
