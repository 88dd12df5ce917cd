"""The TrainBackend of megatron-core (hyrl.backends.base): process groups, the actor and the
critic as megatron models, the loop's collectives and the checkpoints of both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from hyrl.backends.megatron import collectives, cpu_compat, initial_weights, train_checkpoint
from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
from hyrl.backends.megatron.critic import CriticSettings, MegatronCritic
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.model import (
    ParallelLayout,
    destroy_distributed,
    init_distributed,
    transformer_engine_importable,
    use_transformer_engine,
)
from hyrl.checkpoint.checks import check_hf_weights
from hyrl.checkpoint.hf_io import HFWeights
from hyrl.config import ConfigError
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

if TYPE_CHECKING:
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.batch import BatchView
    from hyrl.config.concerns.critic import CriticView
    from hyrl.config.concerns.mismatch import MismatchView
    from hyrl.config.concerns.model import ModelView
    from hyrl.config.concerns.optimizer import OptimizerView
    from hyrl.config.concerns.parallel import ParallelView
    from hyrl.config.concerns.rollout import RolloutView


def open_hf_weights(hf_dir: str, arch: Qwen3MoeArch, flag: str) -> HFWeights:
    """A Hugging Face Qwen3-MoE directory's weights, opened for reading one slice at a time,
    checked against the run's architecture from their metadata (ConversionError names flag)."""
    reader = HFWeights(hf_dir)
    check_hf_weights(reader, arch, flag)
    return reader


class MegatronBackend:
    """Starts the process groups (every rank), then builds the actor (and, under gae, the
    critic), each rank reading only its own shards of --hf-checkpoint / --critic-load."""

    def __init__(
        self,
        world_size: int,
        arch: Qwen3MoeArch,
        *,
        model: ModelView,
        parallel: ParallelView,
        batch: BatchView,
        optimizer: OptimizerView,
        algorithm: AlgorithmView,
        mismatch: MismatchView,
        rollout: RolloutView,
        critic: CriticView | None,
        seed: int,
        load: str | None,
    ):
        """The actor from the model, parallel, batch, optimizer, algorithm, mismatch and
        rollout settings, and under gae the critic from `critic` (None under grpo: no critic).
        seed: --seed, the fresh model's; load: --load, which `describe` names as the source
        of the actor's weights."""
        self.world_size, self.arch = world_size, arch
        self.model, self.parallel, self.algorithm = model, parallel, algorithm
        self.seed, self.load_dir = seed, load
        layout = ParallelLayout.of(parallel, model)
        init_distributed(layout, seed=seed, timeout_minutes=parallel.distributed_timeout_minutes)
        from megatron.core import parallel_state

        self.rank = torch.distributed.get_rank()
        self.dp_rank = parallel_state.get_data_parallel_rank()
        self.dp_size = parallel_state.get_data_parallel_world_size()
        self._dp_group = parallel_state.get_data_parallel_group()
        self.dp_rank_of = [self.dp_rank]
        if world_size > 1 and mismatch.engine_returns_routing:  # rank 0 sends each its rows' ids
            self.dp_rank_of = self.all_gather_object(self.dp_rank)

        # A fresh model from this seed: on CPU the same at every layout (megatron's TP=1 PP=1
        # EP=1 CPU init, replayed where a rank builds only part of the model: initial_weights);
        # on CUDA megatron initialises each TP/expert shard from its own RNG stream, so there
        # it depends on the layout (the startup line says so: describe).
        torch.manual_seed(seed)
        actor_optim = OptimizerSettings.for_actor(optimizer, batch, parallel)
        self.actor = MegatronActor(
            arch, layout, ActorSettings.of(actor_optim, algorithm, mismatch, model, rollout)
        )
        if model.hf_checkpoint:  # before the critic and the reference copy the actor's weights
            # each rank reads only its own slices, one tensor at a time, in its own dtype
            with open_hf_weights(model.hf_checkpoint, arch, "--hf-checkpoint") as reader:
                self.actor.load_hf(reader)
        self.critic: MegatronCritic | None = None
        if critic is not None:  # gae
            critic_optim = OptimizerSettings.for_critic(critic, optimizer, batch, parallel)
            settings = CriticSettings.of(critic_optim, critic, model)
            self.critic = self._build_critic(layout, settings, critic.load)

    def _build_critic(
        self, layout: ParallelLayout, settings: CriticSettings, critic_load: str | None
    ) -> MegatronCritic:
        critic = MegatronCritic(self.arch, layout, settings)
        if critic_load:
            with open_hf_weights(critic_load, self.arch, "--critic-load") as reader:
                critic.load_trunk_from_hf(reader)
        else:  # the actor's initial weights, shard by shard (the same layout), a fresh value head
            critic.load_trunk_from(self.actor.chunks)
        return critic

    def describe(self) -> str:
        model, parallel = self.model, self.parallel
        spec = "transformer_engine" if use_transformer_engine(model.transformer_impl) else "local"
        dispatcher = model.moe_token_dispatcher_type
        if dispatcher == "auto":
            dispatcher = cpu_compat.default_token_dispatcher()
        return (
            f"{self.world_size} rank(s) on {cpu_compat.device().type} "
            f"({cpu_compat.distributed_backend()}): TP={parallel.tensor_model_parallel_size} "
            f"EP={parallel.expert_model_parallel_size} DP={self.dp_size} "
            f"SP={'on' if parallel.sequence_parallel else 'off'}; layer spec {spec}, "
            f"MoE dispatcher {dispatcher}; this rank's process may run on {_cpus_seen()} CPU(s); "
            + self.initial_model()
        )

    def initial_model(self) -> str:
        return initial_weights.describe(self.actor.chunks[0].config, self._loaded_from(), self.seed)

    def _loaded_from(self) -> str | None:
        """The flag the actor's initial weights come from (None: a fresh model)."""
        if self.load_dir:
            return f"--load {self.load_dir}"
        if self.model.hf_checkpoint:
            return f"--hf-checkpoint {self.model.hf_checkpoint}"
        return None

    def device(self) -> torch.device:
        return cpu_compat.device()

    # -- collectives --------------------------------------------------------------------------
    def gather_rows(self, outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """On the DP group's device (NCCL: the GPU), back in host memory."""
        if self.dp_size == 1:
            return outputs
        return collectives.all_gather_rows(outputs, self._dp_group)

    def wait_for_rank_0(self) -> None:
        if self.world_size > 1:
            collectives.wait_for_rank_0()

    def broadcast_from_rank_0(self, payload):
        """Over the gloo wait group, where no NCCL timeout fires while rank 0 generates."""
        if self.world_size == 1:
            return payload
        box = [payload]
        torch.distributed.broadcast_object_list(box, src=0, group=collectives.wait_group())
        return box[0]

    def any_rank(self, flag: bool) -> bool:
        """Over the gloo wait group: the other ranks may wait here while rank 0 evaluates."""
        value = torch.tensor([1.0 if flag else 0.0])
        if self.world_size > 1:
            torch.distributed.all_reduce(value, group=collectives.wait_group())
        return bool(value.item() > 0)

    def all_gather_object(self, value) -> list:
        gathered = [None] * self.world_size
        torch.distributed.all_gather_object(gathered, value)
        return gathered

    def gather_to_rank_0(self, value) -> list | None:
        gathered = [None] * self.world_size if self.rank == 0 else None
        torch.distributed.gather_object(value, gathered, dst=0)
        return gathered

    def send_rows(self, rows_of_rank: dict[int, dict[int, torch.Tensor]]) -> None:
        collectives.send_rows(rows_of_rank)

    def recv_rows(self, source: int = 0) -> dict[int, torch.Tensor]:
        return collectives.recv_rows(source)

    def free_cached_memory(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- checkpoints ----------------------------------------------------------------------------
    def _models(self) -> dict:
        # each model as this rank's chunks (one, or one per virtual pipeline stage)
        models = {"actor": self.actor.chunks}
        if self.actor.ref_chunks is not None:
            models["reference"] = self.actor.ref_chunks
        if self.critic is not None:
            models["critic"] = self.critic.chunks
        return models

    def trainables(self) -> dict:
        return {"actor": self.actor, **({"critic": self.critic} if self.critic is not None else {})}

    def load_checkpoint(self, step_dir: Path):
        return train_checkpoint.load_checkpoint(
            step_dir, self.arch, self._models(), self.trainables()
        )

    def load_weights(self, step_dir: Path):
        rng = train_checkpoint.load_weights(step_dir, self.arch, {"actor": self.actor.chunks})
        self.actor.reload_weights()  # the optimizer's main params agree with the weights
        return rng

    def save_checkpoint(self, save_dir: str, rollout_step: int, loop_state: dict) -> Path:
        return train_checkpoint.save_checkpoint(
            save_dir,
            rollout_step,
            self.parallel,
            self.algorithm,
            self.arch,
            self._models(),
            self.trainables(),
            loop_state,
        )

    def set_rng_state(self, rng_state) -> None:
        train_checkpoint.set_rng_state(rng_state)


def check_machine(model: ModelView) -> None:
    """Model flags this machine cannot run under megatron-core (no CUDA, no Transformer
    Engine), refused before any process group."""
    if cpu_compat.on_cpu() and model.moe_token_dispatcher_type == "alltoall":
        raise ConfigError(
            "--moe-token-dispatcher-type",
            "alltoall",
            "needs CUDA (megatron's alltoall dispatcher builds CUDA streams)",
            "allgather or auto on a machine without CUDA",
        )
    if model.transformer_impl == "transformer_engine" and not transformer_engine_importable():
        raise ConfigError(
            "--transformer-impl",
            "transformer_engine",
            "transformer_engine does not import on this machine",
            "local or auto",
        )
    if model.moe_permute_fusion and not use_transformer_engine(model.transformer_impl):
        raise ConfigError(
            "--moe-permute-fusion",
            True,
            "megatron's fused permutation is a Transformer Engine kernel (TE >= 2.1), which "
            f"does not import on this machine (--transformer-impl {model.transformer_impl})",
            "--no-moe-permute-fusion here, or a machine with the GPU stack (requirements.txt)",
        )


def shutdown() -> None:
    """Tear down the process groups MegatronBackend started (also after it failed half-way)."""
    destroy_distributed()


def _cpus_seen() -> int:
    """The CPUs this process may run on: its affinity mask (a Slurm step bound to the cores
    it asked for sees those), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
