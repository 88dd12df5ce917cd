"""One engine position of a RolloutFleet (hyrl.rollout.fleet): the actor that runs in the
engine's own process, the driver's record of it, and the error that names it.

* ``EngineActor`` is the body of engine i's Ray actor: it builds its engine with
  ``make_engine(i)`` in its own process and runs one call at a time (generate, the weight
  calls of hyrl.rollout.fleet_weights, or any method by name: ``call``).
* ``EngineSlot`` is engine i's position in the driver: its placement-group bundle, the actor
  there now (replaced when it dies: hyrl.ray_actors.ActorSlot), the call in flight on it, the
  weights it holds, and its account (restarts, chunks served, peak prompts in flight).
* ``RolloutFleetError`` is every fleet failure; ``engine_index`` names the engine responsible,
  and an engine's own exception is quoted cut to ``MAX_MESSAGE_CHARS`` (``describe_error``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from hyrl.ray_actors import ActorSlot, describe
from hyrl.rollout.base import (
    BucketEngine,
    DiskCheckpoint,
    DiskLoader,
    EngineDied,
    Generation,
    SamplingParams,
)

if TYPE_CHECKING:
    from ray import ObjectRef

MAX_MESSAGE_CHARS = 300  # an engine's exception text is cut to this in fleet errors


class RolloutFleetError(RuntimeError):
    """A fleet failure; `engine_index` names the engine responsible, when one is."""

    def __init__(self, message: str, engine_index: int | None = None):
        super().__init__(message)
        self.engine_index = engine_index


class StreamedSync:
    """The marker of a sync the fleet keeps nothing of (streamed, or outside the fleet): the
    engines that took it hold the newest weights; a later replacement waits for the next
    (hyrl.rollout.fleet_weights)."""


def describe_error(exc: BaseException) -> str:
    """An engine's exception as fleet errors quote it."""
    return describe(exc, MAX_MESSAGE_CHARS)


def died(exc: BaseException) -> bool:
    """Whether a call's error means its engine is gone: its actor's process died
    (RayActorError), or the engine raised EngineDied (its server died under it)."""
    import ray

    if isinstance(exc, ray.exceptions.RayActorError):
        return True
    return isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, EngineDied)


def task_cause(exc: BaseException) -> BaseException:
    """The engine's own exception inside a RayTaskError; any other error as it is."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


class EngineActor:
    """The body of one engine actor: builds its engine in its own process, one call at a time.
    A call that fails on an engine whose backing server is gone (the engine's ``dead(error)``,
    e.g. ``SGLangEngine.dead``: the server exited, hung past the request deadline, or no longer
    answers its health check) raises EngineDied instead, which the fleet treats as the
    engine's death."""

    def __init__(self, make_engine: Callable[[int], BucketEngine], engine_index: int):
        self._engine = make_engine(engine_index)
        self._index = engine_index

    def _guarded(self, method: Callable, *args) -> Any:
        try:
            return method(*args)
        except Exception as err:
            dead = getattr(self._engine, "dead", None)
            why = dead(err) if callable(dead) else None
            if why:
                raise EngineDied(f"engine {self._index}: {why}") from err
            raise

    def prepare(self, weights) -> dict[str, Any]:
        """Load the newest weights, if any, and say where this engine runs."""
        import ray

        if weights is not None:
            self.update_weights(weights)
        return {
            "pid": os.getpid(),
            "node_ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "gpu_ids": list(ray.get_gpu_ids()),
        }

    def update_weights(self, weights) -> None:
        """A state dict, or a checkpoint on disk."""
        if isinstance(weights, DiskCheckpoint):
            # a checkpoint goes only to engines built for weight_sync='disk' (SGLang's)
            self._guarded(cast(DiskLoader, self._engine).load_weights_from_disk, weights)
        else:
            self._guarded(self._engine.update_weights, weights)

    def begin_weight_update(self) -> None:
        self._guarded(self._engine.begin_weight_update)

    def load_weight_bucket(self, bucket) -> None:
        self._guarded(self._engine.load_weight_bucket, bucket)

    def end_weight_update(self, succeeded: bool) -> None:
        self._guarded(self._engine.end_weight_update, succeeded)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return self._guarded(self._engine.generate, prompts, params)

    def call(self, method: str, *args) -> Any:
        return self._guarded(getattr(self._engine, method), *args)


class EngineSlot(ActorSlot):
    """One engine position (one placement-group bundle); its actor is replaced when it dies."""

    actor: Any  # a Ray actor handle of EngineActor (Ray's handles carry no method types)

    def __init__(self, index: int, options: dict, factory_ref, startup_timeout_s: float):
        super().__init__(index, EngineActor, options, (factory_ref, index), startup_timeout_s)
        # the one outstanding ObjectRef on this actor, or None when idle
        self.call: ObjectRef[Any] | None = None
        self.call_kind = ""  # "start" | "load" | "generate" | "abandoned"
        self.chunk: int | None = None  # chunk index while call_kind == "generate"
        self.started = False  # the current actor has built its engine and loaded its weights
        # the weights the current actor has (or is loading)
        self.weights_ref: ObjectRef[Any] | StreamedSync | DiskCheckpoint | None = None
        self.retired = False  # died more than max_restarts times; never used again
        self.last_error = ""
        self.chunks_served = 0
        self.peak_in_flight = 0  # prompts
        self.gpu_ids: list = []
        self.host = ""  # the host name the current actor runs on

    @property
    def idle(self) -> bool:
        return self.actor is not None and self.started and self.call is None

    def kill(self) -> None:
        super().kill()
        self.call, self.call_kind, self.chunk, self.started = None, "", None, False
