"""Training checkpoints to resume a run: `--save DIR` writes, `--load DIR` resumes.

    DIR/
      run.json                    the run the directory belongs to ({"run_id", "run_dir"}),
                                  written at its first save (hyrl.checkpoint.ownership)
      latest                      the name of the newest complete step directory, e.g. "step_6"
      step_6/                     after rollout step 6
        manifest.json             every file of the step and its size (hyrl.checkpoint.manifest),
                                  checked before a load
        trainer_state.json        rank 0's loop state: rollout step, samples, elapsed_s, task
                                  position, target tracker, run totals, the batch-size
                                  autopilot's state (--batch-schedule auto); and the layout,
                                  architecture and algorithm it was saved under, the run's id
                                  and directory, and its resolved config (`config`)
        actor/                    the actor: a model checkpoint directory (model_dir)
        reference/                the frozen KL reference (only when KL is on)
        critic/                   the PPO value model (only under --advantage-estimator gae)
        actor_optimizer/          the actor's optimizer (Adam moments, fp32 main params; megatron's
                                  distributed optimizer or not) as a distributed checkpoint
        critic_optimizer/         the critic's (PPO)
        rank_00000-of-00002.pt    one per rank: step/skip counters, noise-scale averages, RNG states
        rollout_queue.pt          --async-rollout: the rollouts generated ahead as plain data
                                  (their batches with each token's policy version, routing,
                                  prompts, the versions of the generation calls), taken first
                                  on resume
      .tmp-step_9/                a save in progress, or one a crash interrupted (never read;
                                  the next save removes it)

A save writes everything into .tmp-step_N, fsyncs it, renames it to step_N and then points
`latest` at it (temp file + rename), so `latest` only ever names a complete directory: this
module owns that protocol (begin_save, finish_save; the files' names: step_files), the backend
writes its models, optimizer states and per-rank state in between (the megatron backend:
hyrl.backends.megatron.train_checkpoint). Weights and optimizer states are keyed in model
space, so `--load` reshards them to any TP/EP/PP/DP layout and world size (see
read_rank_state for the counters and the RNG).

What resumes exactly (tests/e2e/test_resume.py): weights, AdamW moments and step counters (hence
the lr schedule), skipped-step counters, noise-scale averages, the task's position, cumulative
samples, the target tracker and run totals, and every RNG of the training processes, among
them the generator the in-process hf engine samples with. A batch ramp is a function of the
rollout step, so it resumes too; the autopilot's B (actor and critic), its last measurement,
warm-up count and changes are loop state (tests/e2e/test_autopilot.py). Not exactly: engines
on Ray (--rollout-num-engines > 1) and SGLang servers sample with their own generators, which
are not saved, so such a run resumes statistically, not bit for bit; reward workers hold no
state. elapsed_s continues from the checkpoint; start-up and the seconds spent saving are off
its clock (as evaluation is).
Under --async-rollout rank 0 waits for its queued rollouts and saves them (rollout_queue.pt,
with the rest in .tmp-step_N; a partial rollout is finished first, its tokens keeping the
versions that sampled them); the task's position is past their prompts, so a resume takes
them before it draws new ones: no response is lost or trained on twice.
Records logged after the checkpoint (a crash after logging step N, before its save finished)
are logged again by the resumed run: a reader keeps the last record of a rollout step.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from hyrl.checkpoint.manifest import check_loadable, write_manifest
from hyrl.checkpoint.retention import clear_pruned
from hyrl.checkpoint.step_files import ROLLOUT_QUEUE_FILE, STATE_FILE, rank_file_name
from hyrl.config import ConfigError

if TYPE_CHECKING:
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.parallel import ParallelView
    from hyrl.models.qwen3_moe.config import Qwen3MoeArch

LATEST_FILE = "latest"
TMP_PREFIX = ".tmp-"
FORMAT = "hyrl.trainer_state"
FORMAT_VERSION = 2  # 2: optimizer states in distributed checkpoints (reshardable)
# The layout a checkpoint records; a resume under another one reshards (see load_checkpoint).
LAYOUT_FLAGS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
)
# What decides the kind of optimizer state saved: a resume must keep them (checked).
OPTIMIZER_KIND_FLAGS = ("use_distributed_optimizer", "bf16")
# --async-rollout: loop_state[ROLLOUT_QUEUE_KEY] (rank 0's queued rollouts) goes to
# ROLLOUT_QUEUE_FILE
ROLLOUT_QUEUE_KEY = "rollout_queue"


def step_dir_name(rollout_step: int) -> str:
    return f"step_{rollout_step}"


# -- resolving and checking a checkpoint (before any process group) ------------------------------
def resolve_load_dir(path: str | os.PathLike) -> Path:
    """--load DIR: DIR's `latest` step directory, or DIR itself when it is a step directory."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError("--load", str(path), "no such directory", "a --save directory")
    if (path / STATE_FILE).is_file():
        return path
    latest = path / LATEST_FILE
    if latest.is_file():
        name = latest.read_text().strip()
        if (path / name / STATE_FILE).is_file():
            return path / name
        raise ConfigError(
            "--load",
            str(path),
            f"'latest' names {name!r}, which is not a complete checkpoint (no {name}/{STATE_FILE})",
            "a --save directory whose latest checkpoint is complete",
        )
    raise ConfigError(
        "--load",
        str(path),
        f"neither a checkpoint ({STATE_FILE}) nor a --save "
        f"directory (no '{LATEST_FILE}' file; an interrupted first save leaves "
        "only a .tmp- directory)",
        "a --save directory or one of its step_N",
    )


def check_resumable(
    load: str,
    arch: Qwen3MoeArch,
    parallel: ParallelView,
    algorithm: AlgorithmView,
    async_rollout: bool,
) -> tuple[Path, dict]:
    """The step directory --load (`load`) names and its loop state; ConfigError when a run of
    this architecture, precision and optimizer kind (`parallel`), algorithm (and its KL
    reference) and --async-rollout cannot resume from it (damaged, written by another format,
    architecture or algorithm). Another layout or world size is fine: everything reshards."""
    step_dir = resolve_load_dir(load)
    where = str(step_dir)
    try:
        written = json.loads((step_dir / STATE_FILE).read_text())
    except ValueError:
        written = None  # check_loadable names what is wrong with it
    if isinstance(written, dict) and (
        written.get("format") != FORMAT or written.get("format_version") != FORMAT_VERSION
    ):
        raise ConfigError(
            "--load",
            where,
            f"{STATE_FILE} has format {written.get('format')!r} "
            f"version {written.get('format_version')!r}",
            f"{FORMAT!r} version {FORMAT_VERSION}",
        )
    # trainer_state.json whole, every file it names there (and whole by its manifest's sizes or,
    # without one, by its format), the distributed indexes whole: else the older step to load
    check_loadable(step_dir)
    state = read_loop_state(step_dir)
    ours = arch.as_dict()
    arch_differs = [
        f"--{k.replace('_', '-')}: {state['arch'].get(k)!r} in the checkpoint, {v!r} in the flags"
        for k, v in ours.items()
        if state["arch"].get(k) != v
    ]
    if arch_differs:
        raise ConfigError(
            "--load",
            where,
            "the checkpoint's architecture differs from the "
            "flags (" + "; ".join(arch_differs) + ")",
            "a checkpoint of the same architecture",
        )
    for flag, saved in state["optimizer"].items():  # the optimizer states' format follows them
        if saved != getattr(parallel, flag):
            raise ConfigError(
                "--load",
                where,
                f"saved with --{flag.replace('_', '-')}={saved}, "
                f"this run has {getattr(parallel, flag)} (the optimizer states differ "
                "in kind)",
                f"the same --{flag.replace('_', '-')} as the checkpoint",
            )
    if state["advantage_estimator"] != algorithm.advantage_estimator:
        raise ConfigError(
            "--load",
            where,
            f"saved by a {state['advantage_estimator']} run, this "
            f"one is {algorithm.advantage_estimator} (--advantage-estimator)",
            "a checkpoint of the same algorithm",
        )
    queued = state.get("rollout_queue_size", 0)
    if queued and not async_rollout:
        raise ConfigError(
            "--load",
            where,
            f"saved by an --async-rollout run with {queued} rollouts generated ahead "
            f"({ROLLOUT_QUEUE_FILE}), which this run would skip (no --async-rollout)",
            "--async-rollout to resume it",
        )
    expected_models = _models_of(algorithm)
    if state["models"] != expected_models:
        raise ConfigError(
            "--load",
            where,
            f"holds the models {state['models']}, this run needs "
            f"{expected_models} (KL on or off: --kl-loss-coef/--kl-coef)",
            "a checkpoint of a run with the same models",
        )
    return step_dir, state


def _layout_of(parallel: ParallelView) -> dict:
    return {name: getattr(parallel, name) for name in LAYOUT_FLAGS}


def _models_of(algorithm: AlgorithmView) -> list[str]:
    models = ["actor"]
    if algorithm.kl_loss_coef > 0 or algorithm.kl_coef > 0:
        models.append("reference")
    if algorithm.advantage_estimator == "gae":
        models.append("critic")
    return models


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(folder))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- save and load (collective: every rank calls) -----------------------------------------------
def begin_save(save_dir: str | os.PathLike, rollout_step: int, loop_state: dict) -> Path:
    """The directory every rank writes rollout_step's checkpoint into, before finish_save
    (collective): rank 0 makes save_dir (claimed for loop_state's run), removes the saves a
    crash interrupted and makes .tmp-step_<rollout_step>."""
    save_dir = Path(save_dir)
    tmp = save_dir / (TMP_PREFIX + step_dir_name(rollout_step))
    if torch.distributed.get_rank() == 0:
        save_dir.mkdir(parents=True, exist_ok=True)
        if loop_state.get("run_id"):  # the directory belongs to this run from now on
            from hyrl.checkpoint.ownership import claim

            claim(save_dir, loop_state["run_id"], loop_state["run_dir"])
        for stale in save_dir.glob(TMP_PREFIX + "step_*"):  # saves a crash interrupted
            shutil.rmtree(stale)
        clear_pruned(save_dir)  # deletions a crash interrupted (hyrl.checkpoint.retention)
        tmp.mkdir()
    torch.distributed.barrier()
    return tmp


def finish_save(
    tmp: Path,
    rollout_step: int,
    parallel: ParallelView,
    algorithm: AlgorithmView,
    arch: Qwen3MoeArch,
    models: list[str],
    trainables: list[str],
    per_rank: dict,
    loop_state: dict,
) -> Path:
    """Complete the save begin_save started, once the backend wrote its models and optimizer
    states into tmp (collective); the step directory.

    parallel, algorithm: the run's settings, whose layout, optimizer kind and estimator the
    checkpoint records; per_rank: this rank's state ({trainable: its state_dict, "rng": its
    generators}), saved as its rank file with the rank, world size and layout; loop_state: rank
    0's JSON-serialisable loop state (other ranks may pass {}); under ROLLOUT_QUEUE_KEY the
    queued rollouts of --async-rollout, torch.saved apart. Rank 0 writes trainer_state.json
    and the manifest, fsyncs, renames tmp to step_<rollout_step> and points `latest` at it.
    """
    dist = torch.distributed
    rank, world_size = dist.get_rank(), dist.get_world_size()
    save_dir = tmp.parent
    final = save_dir / step_dir_name(rollout_step)
    per_rank = dict(per_rank)
    per_rank.update(rank=rank, world_size=world_size, layout=_layout_of(parallel))
    torch.save(per_rank, tmp / rank_file_name(rank, world_size))
    if rank == 0:
        loop_state = dict(loop_state)
        queued = loop_state.pop(ROLLOUT_QUEUE_KEY, None)
        if queued is not None:
            torch.save(queued, tmp / ROLLOUT_QUEUE_FILE)
            loop_state["rollout_queue_size"] = len(queued)
        state = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "layout": {**_layout_of(parallel), "world_size": world_size},
            "arch": arch.as_dict(),
            "advantage_estimator": algorithm.advantage_estimator,
            "models": models,
            "trainables": trainables,
            "optimizer": {flag: getattr(parallel, flag) for flag in OPTIMIZER_KIND_FLAGS},
            "rollout_step": rollout_step,
            **loop_state,
        }
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    dist.barrier()
    if rank == 0:
        write_manifest(tmp)  # every rank's files are in: their sizes, checked before a load
        _fsync_tree(tmp)
        if final.exists():  # a checkpoint of this step from an earlier attempt: replaced
            shutil.rmtree(final)
        tmp.rename(final)
        pointer = save_dir / (TMP_PREFIX + LATEST_FILE)
        with open(pointer, "w") as f:
            f.write(final.name + "\n")
            f.flush()
            os.fsync(f.fileno())
        pointer.replace(save_dir / LATEST_FILE)
        _fsync_dir(save_dir)
    dist.barrier()
    return final


def read_rank_state(step_dir: Path, running_layout: dict) -> tuple[dict, dict | None]:
    """The saved per-rank state this rank resumes from ({trainable: its state_dict, ...}), and
    the RNG states it restores (None: it keeps its fresh seeding).

    Under the layout and world size it was saved with, every rank takes its own file and RNG
    states, and the run resumes exactly. Under another, the counters come from rank 0's file
    (every rank holds the same ones), rank 0 (which samples the rollouts with the in-process
    engine) takes its RNG states and the other ranks keep their fresh seeding: rollouts
    continue as they would have, training differs only by the reduction order of the new
    layout. running_layout: the backend's layout now, by LAYOUT_FLAGS."""
    rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    saved = read_loop_state(step_dir)["layout"]
    # (a checkpoint from before virtual pipeline stages records none: saved.get)
    same_layout = saved["world_size"] == world_size and all(
        saved.get(k) == running_layout[k] for k in LAYOUT_FLAGS
    )
    own = step_dir / rank_file_name(rank, saved["world_size"])
    per_rank = torch.load(
        own if same_layout else step_dir / rank_file_name(0, saved["world_size"]),
        weights_only=False,
    )  # our own file: numpy and Python RNG states
    return per_rank, per_rank["rng"] if same_layout or rank == 0 else None


def read_rank_0_rng(step_dir: Path) -> dict:
    """The saved rank 0's RNG states (the in-process engine sampled the run's rollouts and
    evaluations with them), whatever this run's layout."""
    saved_world = read_loop_state(step_dir)["layout"]["world_size"]
    rank_0 = torch.load(step_dir / rank_file_name(0, saved_world), weights_only=False)
    return rank_0["rng"]  # our own file: numpy and Python RNG states


def read_loop_state(step_dir: Path) -> dict:
    return json.loads((step_dir / STATE_FILE).read_text())


def read_rollout_queue(step_dir: Path) -> list[dict]:
    """--async-rollout's queued rollouts saved with the checkpoint ([] when it has none): plain
    data (`hyrl.rollout.queue_state`), read without unpickling any class; a queue saved before
    plain data pickled RolloutBatch and Prompt objects, and only those are unpickled."""
    path = step_dir / ROLLOUT_QUEUE_FILE
    if not path.is_file():
        return []
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError:  # pickled objects: our own file, written before plain data
        return torch.load(path, weights_only=False)
