"""The interface every weight-sync mode implements, and the path three transports share.

    mode = weight_sync_for(rollout, layout, backend, run_dir)   # hyrl.weight_sync: by the flag
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

from collections.abc import Callable, Iterable
from pathlib import Path

from hyrl.backends.base import TrainBackend, TrainedActor
from hyrl.models.weight_buckets import LiveBytes
from hyrl.rollout.base import RolloutEngine


class WeightSyncMode:
    """The trainer's side of one transport on one rank (hyrl.weight_sync.MODES: by the
    --update-weight-transport value, or load_state_dict for the hf engines)."""

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


class WeightSyncFailed(RuntimeError):
    """Rank 0's engines did not take the weights; raised on every rank with rank 0's words."""


class _Drainable:
    """The bucket stream as rank 0's engine reads it. After the engine fails, ``drain`` takes
    the rest, so rank 0 still joins every gather the other ranks are in: none of them hangs
    waiting for it. The engine cannot close the stream under it: this is not a generator."""

    def __init__(self, buckets: Iterable):
        self._buckets = iter(buckets)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._buckets)

    def drain(self) -> None:
        for _ in self._buckets:
            pass


class ThroughRank0(WeightSyncMode):
    """The trainer's side of ``distributed`` and ``load_state_dict`` (and of ``tensor`` without
    --colocate: TensorMode). Buckets of --update-weight-buffer-size through rank 0: every rank
    drives the gathers, one parameter at a time; rank 0 keeps each bucket until its engine has
    taken it (``engine.update_weights_stream``), the others keep none.
    perf/weight_sync_peak_bytes: the most bytes rank 0's stream held at once (the buckets being
    filled or sent and the gather buffers of the parameter in flight; see
    weight_buckets.LiveBytes).

    A failure on rank 0 reaches every rank: rank 0 prepares its engines (``resume_engines``)
    and says whether they are ready before any gather starts, and when its engine fails inside
    the stream it still takes part in the rest of the gathers, then says so. Every rank then
    raises WeightSyncFailed with rank 0's message; no rank waits in a collective for a rank 0
    that left."""

    def sync(
        self,
        actor: TrainedActor,
        engine: RolloutEngine | None,
        resume_engines: Callable[[], None],
    ) -> dict:
        rank = self.backend.rank
        failure: BaseException | None = None
        if rank == 0:
            try:
                resume_engines()
            except Exception as err:  # noqa: BLE001 - raised below, on every rank
                failure = err
        self._agree(failure, "preparing the engines for the weight sync")
        live = LiveBytes()
        buckets = _Drainable(actor.hf_weight_buckets(self.buffer_bytes, keep=rank == 0, live=live))
        if rank != 0:
            buckets.drain()  # nothing is kept here: this only takes part in the gathers
        else:
            assert engine is not None, "rank 0 owns the engines"
            try:
                engine.update_weights_stream(buckets)
            except Exception as err:  # noqa: BLE001 - raised below, on every rank
                failure = err
                buckets.drain()
        self._agree(failure, "the weight sync")
        if rank != 0:
            return {}
        assert engine is not None, "rank 0 owns the engines"
        return {"perf/weight_sync_peak_bytes": live.peak, **engine.sync_metrics()}

    def _agree(self, failure: BaseException | None, during: str) -> None:
        """Every rank learns rank 0's failure (one small broadcast) and raises it."""
        words = None if failure is None else f"{type(failure).__name__}: {failure}"
        words = self.backend.broadcast_from_rank_0(words)
        if words is not None:
            raise WeightSyncFailed(f"rank 0 failed in {during}: {words}") from failure
