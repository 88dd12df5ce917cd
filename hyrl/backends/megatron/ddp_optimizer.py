"""megatron-core's data-parallel and optimizer machinery around a model's chunks, and the
settings it takes from the run's settings views: `wrap_for_training` gives the
DistributedDataParallel chunks and the optimizer (one Adam over all of them, a chain of a dense
and an expert part under EP) the actor and the critic step with
(hyrl.backends.megatron.trained_model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from megatron.core.models.gpt import GPTModel

    from hyrl.config.concerns.batch import BatchView
    from hyrl.config.concerns.critic import CriticView
    from hyrl.config.concerns.optimizer import OptimizerView
    from hyrl.config.concerns.parallel import ParallelView


@dataclass(frozen=True)
class OptimizerSettings:
    """How one model (the actor, or the critic) is cut into micro-batches and stepped."""

    micro_batch_size: int
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_grad: float = 1.0  # global L2 norm; 0 disables clipping
    noise_scale_beta: float | None = 0.99  # None: do not measure the gradient noise scale
    max_tokens_per_micro_batch: int | None = None  # --use-dynamic-batch-size: pack by tokens
    pad_to_multiple_of: int = 1  # sequence parallel splits the sequence over TP ranks
    packed_sequences: bool = False  # --qkv-format thd: each micro-batch's rows as one sequence
    bf16: bool = False  # bf16 weights and activations, fp32 main params in the optimizer
    use_distributed_optimizer: bool = False  # main params and Adam states sharded over DP
    grad_reduce_in_fp32: bool = True  # --accumulate-allreduce-grads-in-fp32
    overlap_grad_reduce: bool = False
    ddp_bucket_size: int | None = None  # elements per gradient-reduction bucket; None: megatron's

    @classmethod
    def for_actor(
        cls, optimizer: OptimizerView, batch: BatchView, parallel: ParallelView
    ) -> OptimizerSettings:
        """The actor's: its micro-batch size, weight decay and clipping (--micro-batch-size,
        --weight-decay, --clip-grad), with the settings both models share (`_shared`)."""
        return cls(
            micro_batch_size=batch.micro_batch_size,
            weight_decay=optimizer.weight_decay,
            clip_grad=optimizer.clip_grad,
            **_shared(optimizer, batch, parallel),
        )

    @classmethod
    def for_critic(
        cls, critic: CriticView, optimizer: OptimizerView, batch: BatchView, parallel: ParallelView
    ) -> OptimizerSettings:
        """The critic's: its micro-batch size, weight decay and clipping (--critic-*, or the
        actor's values they took), with the settings both models share (`_shared`)."""
        return cls(
            micro_batch_size=critic.micro_batch_size,
            weight_decay=critic.weight_decay,
            clip_grad=critic.clip_grad,
            **_shared(optimizer, batch, parallel),
        )

    @property
    def params_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.bf16 else torch.float32


def _shared(optimizer: OptimizerView, batch: BatchView, parallel: ParallelView) -> dict:
    """The settings the actor's and the critic's optimizers share: Adam's betas and epsilon,
    the noise-scale measurement, the micro-batches' packing and padding, the precision and the
    data-parallel machinery."""
    return dict(
        adam_beta1=optimizer.adam_beta1,
        adam_beta2=optimizer.adam_beta2,
        adam_eps=optimizer.adam_eps,
        noise_scale_beta=batch.noise_scale_beta,
        max_tokens_per_micro_batch=(
            batch.max_tokens_per_gpu if batch.use_dynamic_batch_size else None
        ),
        pad_to_multiple_of=parallel.tensor_model_parallel_size,
        packed_sequences=batch.qkv_format == "thd",
        bf16=parallel.bf16,
        use_distributed_optimizer=parallel.use_distributed_optimizer,
        grad_reduce_in_fp32=parallel.accumulate_allreduce_grads_in_fp32,
        overlap_grad_reduce=parallel.overlap_grad_reduce,
        ddp_bucket_size=parallel.ddp_bucket_size,
    )


def wrap_for_training(chunks: list[GPTModel], optim: OptimizerSettings):
    """megatron-core's training machinery around a model's chunks (one, or one per virtual
    pipeline stage): Float16Module under bf16, a DistributedDataParallel per chunk (gradient
    buffers, reduction over DP and expert-DP, the distributed optimizer's reduce-scatter) and
    one get_megatron_optimizer over all of them (Adam, fp32 main params under bf16,
    weight-decay groups, clipping). Returns (DDP chunks, optimizer)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    config = chunks[0].config  # one TransformerConfig for every chunk (build_model_chunks)
    ddp_chunks = []
    for index, model in enumerate(chunks):
        module = Float16Module(config, model) if optim.bf16 else model  # bf16 params in `model`
        ddp_chunks.append(
            DistributedDataParallel(
                config,
                DistributedDataParallelConfig(
                    grad_reduce_in_fp32=optim.grad_reduce_in_fp32,
                    overlap_grad_reduce=optim.overlap_grad_reduce,
                    use_distributed_optimizer=optim.use_distributed_optimizer,
                    bucket_size=optim.ddp_bucket_size,
                    # the loss is a sum over the global batch's tokens already divided by their
                    # count (calculate_per_token_loss in the model config): DP reductions sum,
                    # never average
                    average_in_collective=False,
                ),
                module,
                # as Megatron-LM's get_model: the later chunks' gradients in one bucket each,
                # their reduction overlapping the first chunk's backward
                disable_bucketing=index > 0,
            )
        )
    # what megatron's pipeline schedules hold micro-batches in (a list: one per chunk)
    no_syncs = [ddp.no_sync for ddp in ddp_chunks]
    config.no_sync_func = no_syncs[0] if len(no_syncs) == 1 else no_syncs
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam",
            lr=0.0,
            min_lr=0.0,
            weight_decay=optim.weight_decay,
            adam_beta1=optim.adam_beta1,
            adam_beta2=optim.adam_beta2,
            adam_eps=optim.adam_eps,
            clip_grad=optim.clip_grad,
            bf16=optim.bf16,
            params_dtype=optim.params_dtype,
            use_distributed_optimizer=optim.use_distributed_optimizer,
        ),
        ddp_chunks,
    )
    return ddp_chunks, optimizer


def sub_optimizers(optimizer) -> list:
    """The parts of wrap_for_training's optimizer: megatron chains a dense and an expert-parallel
    optimizer under EP (each steps its own parameters over its own data-parallel group)."""
    return list(getattr(optimizer, "chained_optimizers", [optimizer]))


def holds_experts(sub_optimizer) -> bool:
    """Whether a part of the optimizer (sub_optimizers) steps the expert-parallel parameters."""
    return any(group.get("is_expert_parallel", False) for group in sub_optimizer.param_groups)
