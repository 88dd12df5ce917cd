"""The files of a training checkpoint's step directory, by name (hyrl.checkpoint.trainer_state
lays it out), and what can be checked of them without its manifest (hyrl.checkpoint.manifest).

trainer_state.json names the step's models, trained models and world size, so the files a load
opens are known: each model's hyrl_checkpoint.json and megatron distributed checkpoint
(metadata.json, torch's .metadata, common.pt), each optimizer's distributed checkpoint, one rank
file per saved rank and, after --async-rollout, the rollout queue. ``damage`` names each that is
missing and, with contents=True (a step without a manifest: no sizes to compare), each that is
not whole by its format: a JSON file that does not parse, a torch file that is not a zip archive
holding a pickle. torch.save writes a zip whose directory sits at its end, so a truncated or
emptied file loses it, and torch.load fails there; checking it reads the tail, unpickles nothing.
Standard library only when imported (retention imports it; torch comes with the first check).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

STATE_FILE = "trainer_state.json"
ROLLOUT_QUEUE_FILE = "rollout_queue.pt"
# a megatron distributed checkpoint: its own index, torch's .metadata (hyrl.checkpoint.manifest
# checks the .distcp files against it) and the unsharded part, torch.saved by its rank 0
DIST_CHECKPOINT_FILES = ("metadata.json", ".metadata", "common.pt")


def optimizer_dir_name(model: str) -> str:
    return f"{model}_optimizer"


def rank_file_name(rank: int, world_size: int) -> str:
    return f"rank_{rank:05d}-of-{world_size:05d}.pt"


def read_state(step_dir: Path) -> tuple[dict | None, str | None]:
    """trainer_state.json as (state, None), or (None, what is wrong with it): missing, empty,
    not JSON, or not a loop state that names the step's files."""
    path = step_dir / STATE_FILE
    if not path.is_file():
        return None, "missing"
    text = path.read_text(errors="replace")
    if not text.strip():
        return None, f"empty ({path.stat().st_size} bytes)"
    try:
        state = json.loads(text)
    except ValueError as err:
        return None, f"not valid JSON ({err})"
    if not isinstance(state, dict):
        return None, f"a JSON {type(state).__name__}, not hyrl's loop state (an object)"
    layout, models, trainables = state.get("layout"), state.get("models"), state.get("trainables")
    world_size = layout.get("world_size") if isinstance(layout, dict) else None
    if not isinstance(world_size, int) or world_size < 1:
        return None, "no layout.world_size (a positive integer): not a whole loop state"
    for key, names in (("models", models), ("trainables", trainables)):
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return None, f"no {key!r} (a list of names): not a whole loop state"
    return state, None


def expected_files(state: dict) -> list[str]:
    """The files a load of this step opens, relative to it, by its loop state."""
    from hyrl.checkpoint.model_dir import METADATA_FILE, MODEL_SUBDIR  # (imports torch)

    names = []
    for model in state["models"]:
        names.append(f"{model}/{METADATA_FILE}")
        names += [f"{model}/{MODEL_SUBDIR}/{name}" for name in DIST_CHECKPOINT_FILES]
    for model in state["trainables"]:
        names += [f"{optimizer_dir_name(model)}/{name}" for name in DIST_CHECKPOINT_FILES]
    world_size = state["layout"]["world_size"]
    names += [rank_file_name(rank, world_size) for rank in range(world_size)]
    if state.get("rollout_queue_size"):
        names.append(ROLLOUT_QUEUE_FILE)
    return names


def damage(step_dir: Path, contents: bool) -> dict[str, str]:
    """{file: what is wrong} of the files expected_files names (and trainer_state.json itself);
    contents: also each one's format (JSON parses, a torch file is a whole zip archive)."""
    state, wrong = read_state(step_dir)
    if state is None:
        return {STATE_FILE: str(wrong)}
    problems = {}
    for name in expected_files(state):
        path = step_dir / name
        if not path.is_file():
            problems[name] = "missing"
        elif contents and (wrong := _format_damage(path)) is not None:
            problems[name] = wrong
    return problems


def _format_damage(path: Path) -> str | None:
    """What is wrong with a file by its format (see the module doc), or None."""
    size = path.stat().st_size
    if size == 0:
        return "empty (0 bytes)"
    if path.suffix == ".json":
        try:
            json.loads(path.read_text(errors="replace"))
        except ValueError as err:
            return f"not valid JSON ({err})"
    elif path.suffix == ".pt":
        try:
            with zipfile.ZipFile(path) as archive:
                pickled = any(n.endswith("/data.pkl") for n in archive.namelist())
        except (zipfile.BadZipFile, OSError) as err:
            return f"{size} bytes, not a whole torch file (no zip directory at its end: {err})"
        if not pickled:
            return f"{size} bytes, a zip archive without torch.save's data.pkl"
    return None
