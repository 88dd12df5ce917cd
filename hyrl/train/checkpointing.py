"""The loop's side of a training checkpoint (the files are hyrl.checkpoint.trainer_state's, the
models and optimizer states the backend's):
- resume (--load): the step directory checked, the backend's weights, optimizer states and
  counters loaded, the autopilot's state restored (`resume`), the RNG states set once setup
  is done (`restore_rng`); the run's identity in config.json (`run_identity`: kept, new, or a
  fork of the checkpoint's run); the rollouts --async-rollout's queue held (`queued_rollouts`);
- save (--save): when (`due`), the loop state rank 0 adds to the step (`loop_state`:
  samples, the clock, the target tracker, the task's position, whose run under which flags,
  the autopilot, the rollouts queued under --async-rollout), and the save itself with
  --offload-train's weights brought back for it, then the older checkpoints pruned
  (`save`, `Retention`: --keep-last-checkpoints, --keep-checkpoint-every); a save that runs
  out of disk stops the run naming the path and the bytes, the earlier steps intact
  (hyrl.checkpoint.no_space).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyrl.config import RUN_RECORD_KEYS
from hyrl.train.stopping import TrainingStopped

if TYPE_CHECKING:
    from hyrl.backends.base import TrainBackend, TrainedModel
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.parallel import ParallelView
    from hyrl.config.concerns.rollout import RolloutView
    from hyrl.config.concerns.run import CheckpointView, RunView
    from hyrl.metrics.run_log import RunLog
    from hyrl.models.qwen3_moe.config import Qwen3MoeArch
    from hyrl.rollout.manager import RolloutManager
    from hyrl.train.autopilot import RunAutopilot
    from hyrl.train.sync_and_offload import SyncAndOffload


@dataclass(frozen=True)
class Resumed:
    """What --load gave the run: the step directory, its loop state (read by the loop's
    RunLog and the task) and the RNG states to set once setup is done (None where the backend
    restores none: this rank's saved states belong to another layout)."""

    step_dir: Path
    state: dict
    rng_state: Any | None


def resume(
    load: str | None,
    arch: Qwen3MoeArch,
    parallel: ParallelView,
    algorithm: AlgorithmView,
    rollout: RolloutView,
    backend: TrainBackend,
    autopilot: RunAutopilot | None,
) -> Resumed | None:
    """--load: the step checked against this run's architecture, precision and optimizer kind,
    algorithm and --async-rollout (hyrl.checkpoint.trainer_state.check_resumable), then
    weights, optimizer states and counters into the backend, the autopilot's B and counters
    (collective: every rank); None without --load."""
    from hyrl.checkpoint.trainer_state import check_resumable

    if not load:
        return None
    step_dir, state = check_resumable(load, arch, parallel, algorithm, rollout.async_rollout)
    rng_state = backend.load_checkpoint(step_dir)
    if autopilot is not None and "autopilot" in state:
        autopilot.load_state_dict(state["autopilot"])
        autopilot.resumed()
    if backend.rank == 0:
        print(
            f"hyrl: resuming from {step_dir} (after rollout step {state['rollout_step']})",
            flush=True,
        )
        from hyrl.checkpoint.manifest import unrecorded

        if (note := unrecorded(step_dir)) is not None:  # checked, but not by its sizes
            print(f"hyrl: note: {note}", flush=True)
    return Resumed(step_dir, state, rng_state)


def restore_rng(backend: TrainBackend, resumed: Resumed | None) -> None:
    """The RNG states --load saved, set on this rank (none without a resume, or where the
    backend restores none); last in setup: nothing draws from the generators before the loop."""
    if resumed is not None and resumed.rng_state is not None:
        backend.set_rng_state(resumed.rng_state)


def queued_rollouts(resumed: Resumed | None) -> list[dict]:
    """The rollouts --async-rollout's queue held at the checkpoint resumed from (state dicts,
    oldest first; none without a resume or a queue)."""
    if resumed is None:
        return []
    from hyrl.checkpoint.trainer_state import read_rollout_queue

    return read_rollout_queue(resumed.step_dir)


def run_identity(run_dir: str, resumed: Resumed | None) -> dict:
    """config.json's run_id (and forked_from): kept from the run directory's own run when
    it resumes into it, new otherwise; a resume into a new run directory is a fork of the
    checkpoint's run (hyrl.checkpoint.ownership), which is marked in the checkpoint so its
    run never prunes it (hyrl.checkpoint.retention). Rank 0."""
    from hyrl.checkpoint.ownership import new_run_id, run_record

    previous = run_record(run_dir)
    if previous is not None and previous.get("run_id"):
        return {k: previous[k] for k in RUN_RECORD_KEYS if k in previous}
    identity: dict = {"run_id": new_run_id()}
    if previous is None and resumed is not None:
        parent = resumed.state.get("run_id")
        identity["forked_from"] = {"run_id": parent, "checkpoint": str(resumed.step_dir)}
        print(
            f"hyrl: a fork: run {identity['run_id']} in the new run directory "
            f"{run_dir} starts from {resumed.step_dir} "
            f"(run {parent or 'without an id'})",
            flush=True,
        )
        from hyrl.checkpoint.retention import mark_fork

        # the parent's run must not prune the step this run started from
        why = mark_fork(resumed.step_dir, identity["run_id"], run_dir)
        if why:
            print(f"hyrl: warning: {why}", flush=True)
    return identity


def due(checkpoint: CheckpointView, run: RunView, rollout_step: int, stops: bool) -> bool:
    """Whether the run writes a checkpoint after this rollout step: with --save, every
    --save-interval steps, after the last of --num-steps, and when the run stops early
    (stops: a preemption, --stop-at-target); never without --save."""
    if not checkpoint.save:
        return False
    return (
        stops
        or rollout_step == run.num_steps
        or bool(checkpoint.save_interval and rollout_step % checkpoint.save_interval == 0)
    )


def loop_state(
    config: dict,
    run_id: str,
    run_log: RunLog,
    rollout_manager: RolloutManager,
    autopilot: RunAutopilot | None,
) -> dict:
    """Rank 0's part of the checkpoint after this rollout step: its elapsed_s up to now,
    before the checkpoint's own seconds; the task's position; whose run (run_id, the run
    directory of config) under which flags (config: the resolved config's `to_dict`); the
    autopilot's state; the rollouts --async-rollout's queue holds, drained (done) into it."""
    state = {
        **run_log.state_dict(),
        "task": rollout_manager.task.state_dict(),
        # whose checkpoint this is, under which flags (hyrl.checkpoint.ownership)
        "run_id": run_id,
        "run_dir": str(Path(config["run_dir"])),
        "config": config,
    }
    if autopilot is not None:
        state["autopilot"] = autopilot.state_dict()
    if rollout_manager.queue is not None:  # the rollouts generated ahead, done, with it
        from hyrl.checkpoint.trainer_state import ROLLOUT_QUEUE_KEY
        from hyrl.rollout import queue_state

        state[ROLLOUT_QUEUE_KEY] = queue_state.to_plain(rollout_manager.queue.drain())
    return state


@dataclass(frozen=True)
class Retention:
    """Where checkpoints go and which stay (--save, --keep-last-checkpoints,
    --keep-checkpoint-every; the step --load came from, never pruned)."""

    save_dir: str
    keep_last: int
    keep_every: int | None
    load_dir: Path | None

    @classmethod
    def of(cls, checkpoint: CheckpointView, resumed: Resumed | None) -> Retention:
        """`resumed`: the step the run loaded at its start (--load's `latest` then; it moves
        with every save since)."""
        assert checkpoint.save is not None, "a save is due only with --save"
        load = resumed.step_dir if resumed is not None else None
        return cls(
            checkpoint.save,
            checkpoint.keep_last_checkpoints,
            checkpoint.keep_checkpoint_every,
            load,
        )


def save(
    backend: TrainBackend,
    sync_and_offload: SyncAndOffload,
    trainables: list[TrainedModel],
    keep: Retention,
    rollout_step: int,
    state: dict,
    sync: Callable[[], None],
) -> Path:
    """The checkpoint of this rollout step in --save (collective; state: rank 0's
    `loop_state`, {} elsewhere), then rank 0 prunes the older ones `keep` does not keep
    (hyrl.checkpoint.retention). Under --offload-train the trainer's memory comes back first
    (the checkpoint reads weights and optimizer states) and `sync` gives the engines the
    unchanged weights back after."""
    reclaimed = sync_and_offload.trainer_offloaded
    if reclaimed:
        sync_and_offload.reclaim(trainables)
    try:
        path = backend.save_checkpoint(keep.save_dir, rollout_step, state)
    except BaseException as exc:  # torch's CheckpointException is a BaseException
        from hyrl.checkpoint.no_space import no_space_error, no_space_message, remove_unfinished

        full = no_space_error(exc)
        if full is None:
            raise
        if backend.rank == 0:
            remove_unfinished(keep.save_dir, rollout_step)
        raise TrainingStopped(no_space_message(keep.save_dir, rollout_step, full)) from exc
    if backend.rank == 0:
        print(f"hyrl: checkpoint {path} written", flush=True)
        from hyrl.checkpoint.retention import prune

        pruned, notes = prune(keep.save_dir, path, keep.keep_last, keep.keep_every, keep.load_dir)
        if pruned:
            print(
                f"hyrl: pruned {', '.join(p.name for p in pruned)} (--keep-last-checkpoints "
                f"{keep.keep_last})",
                flush=True,
            )
        for note in notes:
            print(f"hyrl: warning: {note}", flush=True)
    if reclaimed:
        sync()
    return path
