"""--async-rollout's queued rollouts as a checkpoint saves them, and back.

A queued rollout is saved as plain data: dicts, lists, strings, numbers and tensors, which
`torch.load(..., weights_only=True)` reads without any hyrl class, so renaming or moving a class
or a field cannot break the loading of an older checkpoint; the fields are read back by name
here. Queues saved before this pickled RolloutBatch and Prompt objects (a list of state dicts
without "format"): `from_saved` reads those too (`hyrl.checkpoint.trainer_state.
read_rollout_queue` loads them with the unpickler they need).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hyrl.algorithms.dynamic_sampling import DynamicSampling
from hyrl.data.stream import Prompt
from hyrl.rollout.async_queue import QueuedRollout
from hyrl.rollout.base import RolloutBatch

FORMAT = "hyrl-queued-rollout"
VERSION = 1


def to_plain(rollouts: list[QueuedRollout]) -> list[dict[str, Any]]:
    """The rollouts as plain data, oldest first (what a checkpoint saves)."""
    return [
        {
            "format": FORMAT,
            "version": VERSION,
            "batch": _plain_batch(q.batch),
            "routed": q.routed,
            "prompts": [dataclasses.asdict(prompt) for prompt in q.prompts],
            "versions": list(q.versions),
        }
        for q in rollouts
    ]


def from_saved(saved: list[dict[str, Any]]) -> list[QueuedRollout]:
    """The queued rollouts a checkpoint saved: plain data (`to_plain`), or the pickled objects
    of a checkpoint written before it."""
    return [_from_plain(state) if "format" in state else _from_pickled(state) for state in saved]


def _plain_batch(batch: RolloutBatch) -> dict[str, Any]:
    plain = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    if batch.dynamic_sampling is not None:
        plain["dynamic_sampling"] = dataclasses.asdict(batch.dynamic_sampling)
    return plain


def _from_plain(state: dict[str, Any]) -> QueuedRollout:
    if (state["format"], state["version"]) != (FORMAT, VERSION):
        raise ValueError(
            f"a queued rollout of format {state['format']!r} version {state['version']}: this "
            f"hyrl reads {FORMAT!r} version {VERSION} (a checkpoint of a newer hyrl?)"
        )
    batch = dict(state["batch"])
    known = {f.name for f in dataclasses.fields(RolloutBatch)}
    unknown = sorted(set(batch) - known)
    if unknown:
        raise ValueError(f"a queued rollout's batch has fields this hyrl lacks: {unknown}")
    if batch.get("dynamic_sampling") is not None:
        batch["dynamic_sampling"] = DynamicSampling(**batch["dynamic_sampling"])
    return QueuedRollout(
        RolloutBatch(**batch),
        state["routed"],
        [Prompt(**prompt) for prompt in state["prompts"]],
        list(state["versions"]),
    )


def _from_pickled(state: dict[str, Any]) -> QueuedRollout:
    """A queued rollout as checkpoints before plain data saved it: its objects, unpickled."""
    return QueuedRollout(state["batch"], state["routed"], state["prompts"], list(state["versions"]))
