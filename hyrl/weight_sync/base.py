"""The interface every weight-sync mode implements, and the path three of them share.

    mode = weight_sync_for(cfg, world_size, backend, run_dir)   # hyrl.weight_sync: by the flag
    metrics = mode.sync(actor, engine, resume_engines)          # every rank, after each step

A mode runs on every training rank: ``sync`` is collective (every rank drives the TP/EP gathers
of each parameter: ``TrainedActor.hf_weight_buckets``), and only rank 0, which owns the
engines, talks to them. ``engine`` is rank 0's (None on the others), reached only through the
RolloutEngine protocols of hyrl.rollout.base; ``resume_engines``: rank 0 calls it right before
the engines take the weights (colocated engines retake their memory only then). ``sync``
returns rank 0's perf/weight_sync_* metrics with the engine's own account
(``engine.sync_metrics()``), {} on the other ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from hyrl.backends.base import TrainBackend, TrainedActor
from hyrl.models.weight_buckets import LiveBytes
from hyrl.rollout.base import RolloutEngine


class WeightSyncMode:
    """One weight-sync mode on one rank; ``name`` is its key in hyrl.weight_sync.MODES (the
    --update-weight-transport value, or load_state_dict for the hf engines)."""

    name: ClassVar[str] = ""

    def __init__(
        self,
        backend: TrainBackend,
        buffer_bytes: int,
        *,
        colocate: bool = False,
        run_dir: Path | None = None,
    ):
        self.backend, self.buffer_bytes = backend, buffer_bytes
        self.colocate, self.run_dir = colocate, run_dir

    def sync(
        self,
        actor: TrainedActor,
        engine: RolloutEngine | None,
        resume_engines: Callable[[], None],
    ) -> dict:
        """The actor's newest weights to the engines (collective); rank 0's metrics."""
        raise NotImplementedError


class ThroughRank0(WeightSyncMode):
    """Buckets of --update-weight-buffer-size through rank 0: every rank drives the gathers,
    one parameter at a time; rank 0 keeps each bucket until its engine has taken it
    (``engine.update_weights_stream``), the others keep none. perf/weight_sync_peak_bytes: the
    most bytes rank 0's stream held at once (the buckets being filled or sent and the gather
    buffers of the parameter in flight; see weight_buckets.LiveBytes)."""

    def sync(
        self,
        actor: TrainedActor,
        engine: RolloutEngine | None,
        resume_engines: Callable[[], None],
    ) -> dict:
        rank = self.backend.rank
        live = LiveBytes()
        buckets = actor.hf_weight_buckets(self.buffer_bytes, keep=rank == 0, live=live)
        if rank != 0:
            for _ in buckets:  # nothing is kept here: this only takes part in the gathers
                pass
            return {}
        assert engine is not None, "rank 0 owns the engines"
        resume_engines()
        engine.update_weights_stream(buckets)
        return {"perf/weight_sync_peak_bytes": live.peak, **engine.sync_metrics()}
