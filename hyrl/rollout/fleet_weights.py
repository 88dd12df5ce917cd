"""How the engines of a RolloutFleet (hyrl.rollout.fleet) get the actor's weights, and what an
engine started later (a replacement) loads before it serves.

* ``update_weights_stream(buckets)`` (what the trainer sends; ``stream_to_engines``): one
  ``ray.put`` per bucket, which every engine loads (``begin_weight_update`` /
  ``load_weight_bucket`` / ``end_weight_update`` on its engine) before the next bucket is
  taken; the call returns when all have ended. The driver holds one bucket at a time, and
  nothing is kept once every engine has it.
* Replacements after a streamed sync (``update_weights_stream``, or a sync outside the fleet
  that ``mark_synced`` records: NCCL, CUDA IPC): nothing is staged for them at any sync (a copy
  of every bucket to host and the object store at every sync would cost more than the sync).
  A replacement starts from its factory's weights and takes no prompt until the next sync
  reaches it (every sync goes to every started engine, replacements included); the rollout in
  progress goes on on the engines that hold the newest weights. When none is left (every live
  engine is a replacement waiting for the next sync), ``generate`` raises ``RolloutFleetError``
  naming them: serving older weights silently would make the rollout off-policy. A checkpoint
  on disk (``load_weights_from_disk``) and a whole state dict (``update_weights``) are objects
  the fleet already has, and replacements load them before they serve.
* ``load_weights_from_disk(checkpoint)``: every engine loads a checkpoint the trainer wrote to a
  shared file system (``DiskCheckpoint``), and so does every later replacement: nothing goes
  through the object store.
* ``update_weights(hf_state_dict)``: one ``ray.put`` of a whole state dict the caller holds;
  every engine loads it and the call returns when all have (a dead engine is replaced, and the
  replacement loads the same weights).
* ``mark_synced()``: the running engines took a sync outside the fleet (over NCCL, by CUDA
  IPC); later replacements wait for the next sync (above). ``stage_weights(hf_state_dict)``:
  the running engines took a whole state dict outside the fleet; later replacements load it.

The fleet records the weights its engines should hold in one reference (``_weights_ref``): a
state dict's or a checkpoint's object, which an engine that does not hold it loads before it
serves, or a ``StreamedSync`` marker (hyrl.rollout.fleet_engine), which no engine can load:
an engine that missed it waits for the next sync.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hyrl.models.weight_buckets import NamedTensors
from hyrl.rollout.fleet_engine import (
    EngineSlot,
    RolloutFleetError,
    describe_error,
    died,
    task_cause,
)


def put_bucket(bucket) -> Any:
    """One bucket into the object store, from host memory: a CUDA tensor pickled as it is would
    be rebuilt on the same device index inside an actor that may not have it."""
    import ray

    return ray.put([(name, tensor.detach().to("cpu")) for name, tensor in bucket])


def stream_to_engines(
    targets: list[EngineSlot], buckets: Iterable[NamedTensors]
) -> tuple[dict[int, BaseException], list[RolloutFleetError]]:
    """Every target engine loads every bucket (``begin_weight_update``, ``load_weight_bucket``
    per bucket, ``end_weight_update`` always, also after a failure) before the next bucket is
    put. Returns the engines that died (index -> error: the caller replaces them) and the
    errors of engines that raised (the stream stops at the first bucket after one)."""
    import ray

    dead: dict[int, BaseException] = {}
    failure: list[RolloutFleetError] = []

    def on_all(call, *args) -> None:
        live = [s for s in targets if s.index not in dead]
        refs = [getattr(s.actor, call).remote(*args) for s in live]
        for slot, ref in zip(live, refs):
            try:
                ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                if died(exc):  # the actor, or its server (EngineDied): replaced by the caller
                    dead[slot.index] = exc
                    continue
                failure.append(
                    RolloutFleetError(
                        f"engine {slot.index} raised in {call}, not restarted: "
                        f"{describe_error(task_cause(exc))}",
                        engine_index=slot.index,
                    )
                )
                failure[-1].__cause__ = exc

    streamed = False
    try:
        on_all("begin_weight_update")
        for bucket in buckets:
            if failure:
                break
            ref = put_bucket(bucket)
            del bucket
            on_all("load_weight_bucket", ref)
            del ref
        streamed = not failure
    finally:
        on_all("end_weight_update", streamed)
    return dead, failure
