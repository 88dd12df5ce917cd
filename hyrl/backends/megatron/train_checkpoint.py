"""The megatron backend's training checkpoint (`--save`, `--load`): its models and optimizers as
megatron distributed checkpoints and every generator it samples from, written into and read from
the step directory that hyrl.checkpoint.trainer_state lays out and makes atomic.

Weights (model_checkpoint) and optimizer states are keyed in model space, so a load reshards
them to any TP/EP/PP/DP layout and world size (see load_checkpoint for the RNG).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from hyrl.backends.megatron import checkpoint_writer, cpu_compat
from hyrl.backends.megatron.model_checkpoint import (
    TE_TO_LOCAL_KEYS,
    current_layout,
    load_mcore_into,
    rename_sharded_keys,
    save_mcore,
    sharded_state_dict_of,
)
from hyrl.checkpoint import trainer_state
from hyrl.checkpoint.step_files import optimizer_dir_name

if TYPE_CHECKING:
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.parallel import ParallelView


# -- RNG states -----------------------------------------------------------------------------
def rng_state() -> dict:
    """Every generator this rank samples from: torch CPU (the hf engine samples with it) and
    CUDA, Python, numpy, and megatron's model-parallel streams."""
    from megatron.core.tensor_parallel import random as mp_random

    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "megatron": mp_random.get_cuda_rng_tracker().get_states(),
    }


def set_rng_state(state: dict) -> None:
    from megatron.core.tensor_parallel import random as mp_random

    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    mp_random.get_cuda_rng_tracker().set_states(state["megatron"])


# -- optimizer states (collective: every rank calls) -------------------------------------------
# megatron's sharded-state metadata for optimizers. The distributed optimizer saves its states
# "fully_reshardable": gathered per parameter in model space on each DP group's first rank (so
# they reshard to any TP/EP/PP/DP layout; megatron-core 0.16.1 no longer writes the per-rank
# "fully_sharded_model_space", and "dp_reshardable" reshards over DP only). Non-distributed
# optimizers are in model space anyway. The chained parts (dense, experts) stay unprefixed.
OPTIMIZER_SHARDING = {
    "distrib_optim_sharding_type": "fully_reshardable",
    "chained_optim_avoid_prefix": True,
}


def _optimizer_sharded_state_dict(trained, is_loading: bool) -> dict:
    # keyed by the model's sharded keys, under the local spec's names as save_mcore writes them
    model_sharded = rename_sharded_keys(sharded_state_dict_of(trained.chunks), TE_TO_LOCAL_KEYS)
    return trained.optimizer.sharded_state_dict(
        model_sharded, is_loading=is_loading, metadata=OPTIMIZER_SHARDING
    )


def save_optimizer(trained, directory: Path) -> None:
    """A trained model's Adam moments and fp32 main params (megatron's optimizer, distributed or
    not) as a megatron distributed checkpoint (collective)."""
    from megatron.core import dist_checkpointing

    if torch.distributed.get_rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
    torch.distributed.barrier()
    checkpoint_writer.start()  # before megatron starts its own (see there)
    dist_checkpointing.save(
        _optimizer_sharded_state_dict(trained, is_loading=False), str(directory)
    )


def load_optimizer(trained, directory: Path) -> None:
    """save_optimizer's states, resharded to this run's layout (collective; the trained model's
    weights are loaded first: the states are matched to its parameters)."""
    from megatron.core import dist_checkpointing

    cpu_compat.prepare_optimizer_states_for_load(trained.optimizer)
    state = dist_checkpointing.load(
        _optimizer_sharded_state_dict(trained, is_loading=True), str(directory)
    )
    trained.optimizer.load_state_dict(state)


# -- save and load (collective: every rank calls) -----------------------------------------------
def save_checkpoint(
    save_dir: str | os.PathLike,
    rollout_step: int,
    parallel: ParallelView,
    algorithm: AlgorithmView,
    arch,
    models: dict,
    trainables: dict,
    loop_state: dict,
) -> Path:
    """Write save_dir/step_<rollout_step> atomically and point `latest` at it.

    parallel, algorithm: the run's settings the checkpoint records (trainer_state.finish_save);
    models: {"actor": GPTModel, "reference": ..., "critic": ...} (the ones this run has);
    trainables: {"actor": MegatronTrainedModel, "critic": ...} whose per-rank state is saved;
    loop_state: rank 0's JSON-serialisable loop state (other ranks may pass {}); under
    ROLLOUT_QUEUE_KEY the queued rollouts of --async-rollout, torch.saved apart.
    """
    tmp = trainer_state.begin_save(save_dir, rollout_step, loop_state)
    for name, model in models.items():
        save_mcore(model, tmp / name, arch)
    for name, trained in trainables.items():
        save_optimizer(trained, tmp / optimizer_dir_name(name))
    per_rank = {name: t.state_dict() for name, t in trainables.items()}
    per_rank["rng"] = rng_state()
    return trainer_state.finish_save(
        tmp,
        rollout_step,
        parallel,
        algorithm,
        arch,
        list(models),
        list(trainables),
        per_rank,
        loop_state,
    )


def load_checkpoint(step_dir: Path, arch, models: dict, trainables: dict) -> dict | None:
    """Load the models and the optimizers (both resharded to this run's layout), the counters
    and noise-scale averages; return this rank's RNG states to restore (set them with
    set_rng_state once nothing else will draw before the loop), or None (which rank takes
    which saved state: trainer_state.read_rank_state)."""
    for name, model in models.items():
        load_mcore_into(model, step_dir / name, arch)
    for name, trained in trainables.items():
        trained.reload_weights()  # main params from the loaded weights before the states land
        load_optimizer(trained, step_dir / optimizer_dir_name(name))
    running = current_layout(next(iter(models.values())))
    per_rank, rng = trainer_state.read_rank_state(step_dir, running)
    for name, trained in trainables.items():
        trained.load_state_dict(per_rank[name])
    return rng


def load_weights(step_dir: Path, arch, models: dict) -> dict | None:
    """Only the weights of `models` (resharded to this run's layout, as load_checkpoint does),
    for an evaluation: no optimizer states or counters. Rank 0 gets the saved rank 0's RNG
    states (trainer_state.read_rank_0_rng), the other ranks None."""
    for name, model in models.items():
        load_mcore_into(model, step_dir / name, arch)
    if torch.distributed.get_rank() != 0:
        return None
    return trainer_state.read_rank_0_rng(step_dir)
