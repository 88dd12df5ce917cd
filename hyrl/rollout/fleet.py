"""Rollout engines as Ray actors: a fleet that generates, syncs weights and survives dead engines.

    fleet = RolloutFleet(lambda i: HFRolloutEngine(TINY, concurrency=8, pad_id=0, eos_id=1),
                         num_engines=2, concurrency_per_engine=8)
    fleet.update_weights(hf_state_dict)          # every engine loads the actor's newest weights
    generations = fleet.generate(prompts, SamplingParams(max_new_tokens=64))
    fleet.close()

A `RolloutFleet` is itself a `RolloutEngine` (hyrl.rollout.base). Semantics:

* Engines (the actor and the driver's record of it: hyrl.rollout.fleet_engine): engine i is a
  Ray actor (a separate process) that builds its engine with ``make_engine(i)`` (the index lets
  engines seed their own sampling streams) and runs one call at a time. The fleet creates ONE
  placement group with ``num_engines`` bundles
  ``{"CPU": num_cpus_per_engine, "GPU": num_gpus_per_engine}`` (zero entries left out) and
  puts engine i, and every replacement of engine i, into bundle i. Ray sets
  ``CUDA_VISIBLE_DEVICES`` in the actor to its bundle's GPUs, so the engine sees them as
  ``cuda:0..`` and reads their physical ids with ``ray.get_gpu_ids()`` (a server-launching engine
  passes those on); the fleet reports them in ``engine_gpu_ids``. The constructor waits up to
  ``startup_timeout_s`` for the placement group (failing with the resources asked for and
  ``ray.available_resources()``) and for every engine to start.
* Dispatch: n prompts are cut into ``min(n, max(num_engines, ceil(n / concurrency_per_engine)))``
  contiguous chunks whose sizes differ by at most one, so no chunk exceeds the concurrency, every
  engine gets work when n < num_engines x concurrency, and a large rollout has several chunks per
  engine (n / (num_engines x concurrency) of them), which lets fast engines take more. Each engine
  has at most ONE request (one chunk, so at most ``concurrency_per_engine`` prompts) in flight; a
  free engine takes the lowest-numbered chunk not yet served. Results are placed by prompt index:
  the output has one Generation per prompt, in input order, each prompt exactly once.
* Deaths: an engine has died when a call on it raises ``RayActorError`` (which covers
  ``ActorDiedError`` and ``ActorUnavailableError``: the process crashed, was killed, ran out of
  memory, or its ``make_engine(i)`` raised while starting), or raises ``EngineDied``: the actor
  lives but the server under it is gone (an SGLang server exits when its scheduler hits a CUDA
  error, an OOM or an NCCL failure and SIGQUITs it; ``EngineActor`` asks the engine's
  ``dead()`` after any failed call: the server process has exited, or /health does not
  answer). The fleet then kills what is left of the
  actor and starts a replacement in the same bundle, which loads the newest weights (the last
  ``update_weights``; the factory's own weights if there was none) before it serves. The chunk
  that was in flight on the dead engine goes back to the front of the queue and is served by
  whichever engine is free first; the result of a chunk is kept only from the call that returned
  it, so no prompt is lost or duplicated. A replacement starts in the background: the rollout
  does not wait for it unless no other engine is left, and it joins as soon as it is up.
* Restart bound: engine i may be replaced ``max_restarts`` times over the fleet's life. Its next
  death raises ``RolloutFleetError`` naming the engine, its restarts and the last error, and the
  engine is retired: later calls run on the other engines, and raise once none is left. An engine
  that does not start within ``startup_timeout_s`` raises as well. Nothing waits forever on a dead
  engine. A live engine stuck inside ``generate`` is timed out by its own request deadline
  (SGLang's: --sglang-request-timeout-s); an engine whose server exited, hung past that
  deadline or fails its health check raises EngineDied (hyrl.rollout.fleet_engine), which
  counts as a death here. The fleet itself sets no deadline on a call.
* Errors: an engine that raises an ordinary exception in ``generate`` or ``update_weights`` (a
  bug, a bad input, a state dict with wrong keys) is NOT restarted: ``RolloutFleetError`` names the
  engine (``engine_index``) and chains the engine's exception (``__cause__`` is an instance of its
  type). Requests still in flight on other engines are abandoned: their results are discarded
  when they arrive, and those engines serve again after that.
* Accounting (``stats()``): restarts per engine, prompts resubmitted after a death, chunks served
  per engine, and the peak number of prompts in flight per engine (never above the concurrency).
* Weights (``update_weights_stream``, ``update_weights``, ``load_weights_from_disk``,
  ``mark_synced``, ``stage_weights``) and what a replacement loads before it serves:
  hyrl.rollout.fleet_weights.
* ``kill_engine(i)`` kills engine i's process (``ray.kill``) and waits until Ray reports it
  dead (``ray.kill`` only asks: a call sent at once could still be served by the old process),
  and nothing else: the fleet finds out at its next call on that engine, as it would after a
  crash (fault drills and tests).
* ``on_chunk_done(engine_index, chunk_index)``, if set, is called in the driver after each chunk's
  results are stored, before the next chunk is handed out; tests use it to kill an engine at a
  known point of a rollout.
* Ray: if Ray is not initialised, the fleet starts it (``ray.init(address=ray_address)`` when an
  address is given, else a local instance with enough CPUs for the engines; no dashboard, no log
  forwarding) and shuts it down in ``close()``; a Ray that was already running is left running.

Ray pickles ``make_engine`` with cloudpickle: a ``functools.partial`` of an importable function
such as ``hyrl.rollout.build.make_hf_engine`` needs nothing; one defined in a module the actors
cannot import (a test module) must be registered with
``ray.cloudpickle.register_pickle_by_value(module)``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch

from hyrl.rollout.base import (
    GENERATION_PROGRESS,
    BucketEngine,
    DiskCheckpoint,
    Generation,
    SamplingParams,
)
from hyrl.rollout.fleet_engine import (
    EngineSlot,
    RolloutFleetError,
    StreamedSync,
    describe_error,
    died,
    task_cause,
)
from hyrl.rollout.fleet_weights import stream_to_engines

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.util.placement_group import PlacementGroup


def chunk_bounds(num_prompts: int, num_engines: int, concurrency: int) -> list[tuple[int, int]]:
    """The dispatch rule: contiguous [start, stop) chunks, sizes differing by at most one."""
    if num_prompts == 0:
        return []
    num_chunks = min(num_prompts, max(num_engines, math.ceil(num_prompts / concurrency)))
    base, extra = divmod(num_prompts, num_chunks)
    bounds, start = [], 0
    for k in range(num_chunks):  # the first `extra` chunks one prompt longer
        stop = start + base + (k < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


class RolloutFleet:
    """`num_engines` rollout engines as Ray actors behind the RolloutEngine protocol; see the
    module doc."""

    def __init__(
        self,
        make_engine: Callable[[int], BucketEngine],
        num_engines: int,
        concurrency_per_engine: int,
        *,
        num_gpus_per_engine: float = 0,
        num_cpus_per_engine: float = 1,
        max_restarts: int = 3,
        ray_address: str | None = None,
        startup_timeout_s: float = 300,
        placement_strategy: str = "PACK",
        on_chunk_done: Callable[[int, int], None] | None = None,
    ):
        if num_engines < 1:
            raise ValueError(f"num_engines must be >= 1, got {num_engines}")
        if concurrency_per_engine < 1:
            raise ValueError(f"concurrency_per_engine must be >= 1, got {concurrency_per_engine}")
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        if num_cpus_per_engine < 0 or num_gpus_per_engine < 0:
            raise ValueError("num_cpus_per_engine and num_gpus_per_engine must be >= 0")
        self.bundle = {
            k: float(v)
            for k, v in (("CPU", num_cpus_per_engine), ("GPU", num_gpus_per_engine))
            if v > 0
        }
        if not self.bundle:
            raise ValueError(
                "each engine must reserve some CPU or GPU (a placement-group bundle "
                "cannot be empty)"
            )
        self.num_engines = num_engines
        self.concurrency_per_engine = concurrency_per_engine
        self.max_restarts = max_restarts
        self.startup_timeout_s = float(startup_timeout_s)
        self.on_chunk_done = on_chunk_done
        self.resubmitted_prompts = 0  # prompts sent again after their engine died, fleet's life
        self._closed = False
        self._owns_ray = False
        self._slots: list[EngineSlot] = []
        self._placement_group: PlacementGroup | None = None
        # the last update_weights' object; replacements load it
        self._weights_ref: ObjectRef[Any] | StreamedSync | DiskCheckpoint | None = None

        import ray

        if not ray.is_initialized():
            if ray_address is not None:
                ray.init(address=ray_address, log_to_driver=False)
            else:
                ray.init(
                    num_cpus=max(1, math.ceil(num_engines * num_cpus_per_engine)),
                    include_dashboard=False,
                    log_to_driver=False,
                )
            self._owns_ray = True
        try:
            self._create_placement_group(placement_strategy)
            self._factory_ref = ray.put(make_engine)
            self._slots = [
                EngineSlot(i, self._actor_options(i), self._factory_ref, self.startup_timeout_s)
                for i in range(num_engines)
            ]
            for slot in self._slots:
                slot.start()
                self._prepare(slot)
            self._run(deque(), [], [], None, until_all_idle=True)
        except BaseException:
            self.close()
            raise

    # -- public API -------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self._check_open()
        bounds = chunk_bounds(len(prompts), self.num_engines, self.concurrency_per_engine)
        results: list[Generation | None] = [None] * len(prompts)
        self._run(deque(range(len(bounds))), bounds, results, (prompts, params))
        missing = [i for i, g in enumerate(results) if g is None]
        if missing:  # the accounting guarantee; unreachable unless the loop above has a bug
            raise RolloutFleetError(f"prompts {missing[:5]} got no generation")
        return cast(list[Generation], results)  # no None left: checked just above

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor]) -> None:
        """One ray.put; returns once every engine (replacements included) has loaded it."""
        import ray

        self._check_open()
        self._weights_ref = ray.put(hf_state_dict)
        self._run(deque(), [], [], None, until_all_idle=True)

    def update_weights_stream(self, buckets) -> None:
        """Stream buckets to every engine, one ray.put per bucket (hyrl.rollout.fleet_weights)."""

        self._check_open()
        self._run(deque(), [], [], None, until_all_idle=True)  # replacements up, nothing running
        targets = [s for s in self._slots if s.idle and not s.retired]
        synced = StreamedSync()  # replacements from here on wait for the next sync
        self._weights_ref = synced
        for slot in targets:
            slot.weights_ref = synced
        dead, failures = stream_to_engines(targets, buckets)
        for slot in targets:
            if slot.index in dead:
                self._replace(slot, dead[slot.index])
        if failures:
            raise failures[0]
        self._run(deque(), [], [], None, until_all_idle=True)

    def settle(self) -> None:
        """Return once no call runs and every replacement is up (one that dies starting is
        replaced again, within max_restarts): the engine set a weight sync will reach."""
        self._check_open()
        self._run(deque(), [], [], None, until_all_idle=True)

    def load_weights_from_disk(self, checkpoint: DiskCheckpoint) -> None:
        """Every engine loads a checkpoint on a file system they share (no object-store copy);
        replacements load the same one. Returns once all have."""
        self._check_open()
        self._weights_ref = checkpoint
        self._run(deque(), [], [], None, until_all_idle=True)

    def mark_synced(self) -> None:
        """The started engines took a sync outside the fleet (over NCCL, by CUDA IPC): they
        hold the newest weights; an engine started later waits for the next sync (module doc).
        Nothing is staged."""
        self._check_open()
        self._weights_ref = StreamedSync()
        for slot in self._slots:
            if slot.actor is not None and slot.started and not slot.retired:
                slot.weights_ref = self._weights_ref

    def stage_weights(self, hf_state_dict: dict[str, torch.Tensor]) -> None:
        """Record a whole state dict the caller synced outside the fleet, for replacements
        only (one ``ray.put``): the running engines already have it; an engine started later,
        or still starting now, loads it before it serves."""
        import ray

        self._check_open()
        self._weights_ref = ray.put(hf_state_dict)
        for slot in self._slots:
            if slot.actor is not None and slot.started and not slot.retired:
                slot.weights_ref = self._weights_ref

    def call_all(self, method: str, *args) -> list[Any]:
        """Call `method(*args)` on every live engine (e.g. release_memory before training) and
        return the results in engine order; an engine that raises or died raises
        RolloutFleetError naming it (a death here is not repaired: the next generate does)."""
        import ray

        self._check_open()
        live = [s for s in self._slots if s.actor is not None and not s.retired]
        refs = [s.actor.call.remote(method, *args) for s in live]
        results = []
        for slot, ref in zip(live, refs):
            try:
                results.append(ray.get(ref))
            except Exception as exc:  # re-raised naming the engine
                raise RolloutFleetError(
                    f"engine {slot.index} failed in {method}: {describe_error(exc)}", slot.index
                ) from exc
        return results

    def release_memory(self) -> None:
        """Every live engine frees its GPU memory (RolloutEngine); see ``call_all``."""
        self.call_all("release_memory")

    def resume_memory(self) -> None:
        """Every live engine retakes the memory release_memory freed; see ``call_all``."""
        self.call_all("resume_memory")

    def kill_engine(self, engine_index: int, timeout_s: float = 60.0) -> None:
        """Kill engine `engine_index`'s process, as a crash would, and return once Ray reports
        it dead; the fleet notices on its next call."""
        import ray

        self._check_open()
        actor = self._slots[engine_index].actor
        if actor is None:
            return
        ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # ray.kill is asynchronous
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=max(0.1, deadline - time.monotonic()))
            except ray.exceptions.RayActorError:
                return
            except ray.exceptions.GetTimeoutError:
                break
            time.sleep(0.05)
        raise RolloutFleetError(
            f"engine {engine_index} still answered {timeout_s:.0f} s after ray.kill", engine_index
        )

    def stats(self) -> dict[str, Any]:
        return {
            "restarts": [s.restarts for s in self._slots],
            "resubmitted_prompts": self.resubmitted_prompts,
            "chunks_served": [s.chunks_served for s in self._slots],
            "peak_in_flight": [s.peak_in_flight for s in self._slots],
            "retired": [s.retired for s in self._slots],
        }

    def sync_metrics(self) -> dict[str, float]:
        """Deaths and resubmissions so far, summed over the engines."""
        return {
            "rollout/engine_restarts": sum(s.restarts for s in self._slots),
            "rollout/resubmitted_prompts": self.resubmitted_prompts,
        }

    @property
    def engine_gpu_ids(self) -> list[list]:
        """Per engine, the GPU ids Ray gave its actor (ray.get_gpu_ids() inside it)."""
        return [list(s.gpu_ids) for s in self._slots]

    @property
    def engine_devices(self) -> list[list[tuple[str, int]]]:
        """Per engine, its GPUs as (host name, physical GPU id), in the order Ray gave them."""
        return [[(s.host, int(g)) for g in s.gpu_ids] for s in self._slots]

    def close(self) -> None:
        """Kill the engines, remove the placement group, shut Ray down if this fleet started it."""
        if self._closed:
            return
        self._closed = True
        import ray

        if ray.is_initialized():
            for slot in self._slots:
                slot.kill()
            if self._placement_group is not None:
                try:
                    ray.util.remove_placement_group(self._placement_group)
                except Exception:  # noqa: BLE001 - already removed
                    pass
            if self._owns_ray:
                ray.shutdown()
        self._slots, self._placement_group, self._weights_ref = [], None, None

    def __enter__(self) -> RolloutFleet:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- actors -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("RolloutFleet used after close()")

    def _create_placement_group(self, strategy: str) -> None:
        import ray
        from ray.util.placement_group import placement_group

        bundles = [dict(self.bundle) for _ in range(self.num_engines)]
        group = placement_group(bundles, strategy=strategy)
        self._placement_group = group
        try:
            ray.get(group.ready(), timeout=self.startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RolloutFleetError(
                f"the placement group for {self.num_engines} engines x {self.bundle} "
                f"({strategy}) was not ready within {self.startup_timeout_s:g} s; "
                f"available: {ray.available_resources()}"
            ) from None

    def _actor_options(self, index: int) -> dict:
        """Ray options of engine `index`'s actors: its placement-group bundle's resources."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        assert self._placement_group is not None, "__init__ creates it before any actor"
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=self._placement_group, placement_group_bundle_index=index
        )
        return {
            "num_cpus": self.bundle.get("CPU", 0),
            "num_gpus": self.bundle.get("GPU", 0),
            "scheduling_strategy": strategy,
        }

    def _prepare(self, slot: EngineSlot) -> None:
        """The first call of a slot's new actor: build its engine, load the newest weights."""
        streamed = isinstance(self._weights_ref, StreamedSync)  # nothing to load: the next sync
        slot.call = slot.actor.prepare.remote(None if streamed else self._weights_ref)
        slot.call_kind, slot.chunk = "start", None
        slot.weights_ref = None if streamed else self._weights_ref
        slot.started = False

    def _replace(self, slot: EngineSlot, exc: BaseException) -> None:
        """A death: a new actor in the same bundle, or RolloutFleetError past max_restarts."""
        slot.last_error = describe_error(task_cause(exc))
        if slot.restarts >= self.max_restarts:
            slot.kill()
            slot.retired = True
            raise RolloutFleetError(
                f"engine {slot.index} died after {slot.restarts} restart(s) (max_restarts="
                f"{self.max_restarts}) and is retired; last error: {slot.last_error}",
                engine_index=slot.index,
            ) from exc
        slot.replace()
        self._prepare(slot)

    # -- the event loop -----------------------------------------------------------------------
    def _run(
        self,
        queue: deque[int],
        bounds: list[tuple[int, int]],
        results: list[Generation | None],
        request: tuple[list[list[int]], SamplingParams] | None,
        until_all_idle: bool = False,
    ) -> None:
        """Serve the chunks in `queue` (and bring every engine up to the newest weights) until
        all chunks are done, and with `until_all_idle` until every engine is started and idle."""
        import ray

        in_flight = 0  # chunks of this call being served
        try:
            while True:
                live = [s for s in self._slots if not s.retired]
                if not live:
                    raise RolloutFleetError(
                        "no engine left: "
                        + "; ".join(
                            f"engine {s.index}: {s.restarts} restart(s), last error {s.last_error}"
                            for s in self._slots
                        )
                    )
                if queue:
                    self._check_someone_serves(live)
                for slot in live:
                    if not slot.idle:
                        continue
                    if slot.weights_ref is not self._weights_ref and isinstance(
                        self._weights_ref, StreamedSync
                    ):
                        continue  # a replacement: it waits for the next sync
                    if slot.weights_ref is not self._weights_ref:  # missed an update_weights
                        slot.call = slot.actor.update_weights.remote(self._weights_ref)
                        slot.call_kind, slot.weights_ref = "load", self._weights_ref
                    elif queue:
                        chunk = queue.popleft()
                        start, stop = bounds[chunk]
                        assert request is not None, "only generate queues chunks, with its request"
                        prompts, params = request
                        slot.call = slot.actor.generate.remote(prompts[start:stop], params)
                        slot.call_kind, slot.chunk = "generate", chunk
                        slot.peak_in_flight = max(slot.peak_in_flight, stop - start)
                        in_flight += 1
                if (
                    not queue
                    and in_flight == 0
                    and not (until_all_idle and any(s.call is not None for s in live))
                ):
                    return

                waiting = {s.call: s for s in live if s.call is not None}
                starting = [s for s in live if s.call_kind == "start"]
                timeout = None
                if starting:
                    timeout = max(0.0, min(s.start_deadline for s in starting) - time.monotonic())
                ready, _ = ray.wait(list(waiting), num_returns=1, timeout=timeout)
                if ready:  # take everything else that has finished too
                    ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
                for ref in sorted(ready, key=lambda r: waiting[r].index):
                    slot = waiting[ref]
                    if slot.call_kind == "generate":
                        in_flight -= 1
                    self._collect(slot, ref, bounds, results, queue)

                now = time.monotonic()
                for slot in starting:
                    if (
                        slot.call_kind == "start"
                        and slot.call not in ready
                        and now >= slot.start_deadline
                    ):
                        raise RolloutFleetError(
                            f"engine {slot.index} did not start within "
                            f"{self.startup_timeout_s:g} s "
                            f"(restarts so far: {slot.restarts}); available: "
                            f"{ray.available_resources()}",
                            engine_index=slot.index,
                        )
        except BaseException:
            for slot in self._slots:  # their results, if any come, belong to no rollout
                if slot.call_kind == "generate":
                    slot.call_kind, slot.chunk = "abandoned", None
            raise

    def _check_someone_serves(self, live: list[EngineSlot]) -> None:
        """Raise when prompts wait and no live engine holds (or is loading) the newest weights:
        every one is a replacement waiting for the next sync (module doc)."""
        if any(s.weights_ref is self._weights_ref for s in live):
            return
        waiting = ", ".join(f"engine {s.index} ({s.restarts} restart(s))" for s in live)
        raise RolloutFleetError(
            f"no engine holds the newest weights: {waiting} restarted after the last weight "
            "sync and wait for the next one (a sync is not staged for replacements: "
            "hyrl.rollout.fleet); the prompts of this rollout cannot be served on the newest "
            "weights. Start more engines, or use --update-weight-transport disk (replacements load "
            "the newest sync's directory)"
        )

    def _collect(
        self,
        slot: EngineSlot,
        ref,
        bounds: list[tuple[int, int]],
        results: list[Generation | None],
        queue: deque[int],
    ) -> None:
        """Take one finished call's outcome: store it, replace a dead engine, or raise."""
        import ray

        kind, chunk = slot.call_kind, slot.chunk
        slot.call, slot.call_kind, slot.chunk = None, "", None
        try:
            value = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            if died(exc):  # its process, or its server (EngineDied), is gone: replace it
                if kind == "generate":
                    assert chunk is not None, "a generate call serves a chunk"
                    start, stop = bounds[chunk]
                    queue.appendleft(chunk)  # served next, by whichever engine is free first
                    self.resubmitted_prompts += stop - start
                self._replace(slot, exc)
                return
            if kind == "abandoned":  # an earlier, failed rollout's request; the engine is alive
                return
            if kind == "generate":
                assert chunk is not None, "a generate call serves a chunk"
                start, stop = bounds[chunk]
                what = f"generate (chunk {chunk}, prompts {start}..{stop - 1})"
            else:  # "load", or "start" (which loads the newest weights)
                what = "update_weights"
            raise RolloutFleetError(
                f"engine {slot.index} raised in {what}, not restarted: "
                f"{describe_error(task_cause(exc))}",
                engine_index=slot.index,
            ) from exc
        if kind == "start":
            slot.started, slot.gpu_ids, slot.host = True, value["gpu_ids"], value["host"]
        elif kind == "generate":
            assert chunk is not None, "a generate call serves a chunk"
            start, stop = bounds[chunk]
            if len(value) != stop - start:
                raise RolloutFleetError(
                    f"engine {slot.index} returned {len(value)} generations "
                    f"for {stop - start} prompts",
                    engine_index=slot.index,
                )
            results[start:stop] = value
            GENERATION_PROGRESS.add(stop - start)
            slot.chunks_served += 1
            if self.on_chunk_done is not None:
                self.on_chunk_done(slot.index, chunk)
