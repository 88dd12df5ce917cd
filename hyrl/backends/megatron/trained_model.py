"""What the actor and the critic share: MegatronTrainedModel, one rank's shard of a model with
its own optimizer (hyrl.backends.base.TrainedModel on megatron-core), which MegatronActor and
MegatronCritic extend with their passes and losses. It composes one concern per module:
megatron's DDP and optimizer (`ddp_optimizer`), the rows cut into micro-batches
(`micro_batches`), the pipeline schedules under PP (`pipeline`), the gradient noise scale
(`gradient_noise`) and the optimizer step (`optimizer_step`); what stays here is gradient
accumulation over the micro-batches, the step's counters and --offload-train's entry points."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.backends.megatron import cpu_compat, gradient_noise, grads, optimizer_step
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings, wrap_for_training
from hyrl.backends.megatron.micro_batches import cat_padded, split_micro_batches
from hyrl.backends.megatron.model import causal_attention_mask
from hyrl.backends.megatron.pipeline import from_last_stage, pipelined, run_pipeline
from hyrl.metrics.noise_scale import GradientNoiseScale

if TYPE_CHECKING:
    from megatron.core.models.gpt import GPTModel


def only_chunk(chunks: list):
    """The one chunk of a model this rank holds; an error under virtual pipeline stages."""
    if len(chunks) != 1:
        raise RuntimeError(
            f"this rank holds the model in {len(chunks)} chunks (virtual pipeline stages): "
            "iterate over them"
        )
    return chunks[0]


class MegatronTrainedModel:
    """One rank's shard of a model with its own optimizer. Every rank calls every method.

    `chunks` are the bare GPTModels (weights, checkpoints, routing hooks): one, or under
    virtual pipeline stages one per stage in vp_stage order; `ddp_chunks` wrap them for
    training (megatron's DistributedDataParallel, over a Float16Module under bf16) and
    `optimizer` is megatron's over all of them (see wrap_for_training). `model` and `ddp` name
    the one chunk when there is one."""

    metric_prefix = "model"

    def __init__(self, chunks: list[GPTModel], optim: OptimizerSettings):
        self.chunks, self.optim = list(chunks), optim
        self.device = cpu_compat.device()
        self.ddp_chunks, self.optimizer = wrap_for_training(self.chunks, optim)
        self.optimizer_steps = 0
        self.skipped_steps = 0  # updates skipped for a non-finite loss or gradient norm, in all
        self.consecutive_skips = 0  # ... and in a row up to the latest step (0: it updated)
        self.noise_scale = (
            None
            if optim.noise_scale_beta is None
            else GradientNoiseScale(beta=optim.noise_scale_beta)
        )
        # measured by _accumulate for _step
        self._small_batch: gradient_noise.SmallBatches | None = None

    @property
    def model(self) -> GPTModel:
        """The model when this rank holds it in one chunk (no virtual pipeline stages)."""
        return only_chunk(self.chunks)

    @property
    def ddp(self):
        """The DDP-wrapped model when this rank holds it in one chunk."""
        return only_chunk(self.ddp_chunks)

    @property
    def config(self):
        """The TransformerConfig every chunk shares."""
        return self.chunks[0].config

    def train_mode(self, training: bool = True) -> None:
        for ddp in self.ddp_chunks:
            ddp.train(training)

    def reload_weights(self) -> None:
        """After weights were written into `model` from outside (a checkpoint, the actor's
        initial weights): the optimizer's fp32 main params (bf16) or shards (distributed
        optimizer) are refreshed from them, else its next step would write the old ones back."""
        self.optimizer.reload_model_params()

    def _outputs(self, model: torch.nn.Module, batch: TokenBatch) -> torch.Tensor:
        """The model's last layer for every position: [N, L, V/TP] logits or [N, L, 1] values;
        for a packed micro-batch (--qkv-format thd) [1, T, ...] over its packed tokens, which
        `per_row` lays back out as [N, L, ...]."""
        tokens = batch.tokens.to(self.device)
        packing = batch.packing
        if packing is not None:
            return model(
                packing.pack(tokens),
                packing.positions(self.device),
                None,
                packed_seq_params=packing.packed_seq_params(self.device),
            )
        seq_len = tokens.shape[1]
        positions = torch.arange(seq_len, device=self.device).expand_as(tokens)
        return model(tokens, positions, causal_attention_mask(seq_len, self.device))

    @staticmethod
    def per_row(batch: TokenBatch, per_token: torch.Tensor) -> torch.Tensor:
        """A per-token result of `_outputs` ([1, T, ...] when `batch` is packed) as [N, L, ...]."""
        return per_token if batch.packing is None else batch.packing.unpack(per_token)

    @staticmethod
    def packed_like(batch: TokenBatch, per_position: torch.Tensor, fill=0) -> torch.Tensor:
        """An [N, L, ...] field of `batch` in the layout the model sees ([1, T, ...] packed)."""
        return per_position if batch.packing is None else batch.packing.pack(per_position, fill)

    def _micro_batches(self, batch: TokenBatch) -> list[tuple[TokenBatch, int]]:
        """(micro-batch, rows of `batch` it holds) pairs: split_micro_batches with this model's
        settings and token dispatcher (collective over DP under EP)."""
        return split_micro_batches(
            batch, self.optim, self.config.moe_token_dispatcher_type, self.device
        )

    def _accumulate(
        self, batch: TokenBatch, loss_fn, total_tokens: float
    ) -> dict[str, torch.Tensor]:
        """Forward/backward every micro-batch; `loss_fn(micro_batch, outputs, rows) -> (loss,
        stats)` with outputs the model's last layer for the micro-batch (see _outputs) and rows
        how many of its first rows are `batch`'s (the rest carry no loss: _micro_batches).

        For the gradient noise scale it also measures small-batch squared gradient norms:
        this rank's gradient before the data-parallel reduction when DP > 1, else each
        micro-batch's own gradient (the difference it adds to the accumulated one). Each is
        rescaled from its share of the global token mean to a mean over its own tokens.
        """
        from megatron.core import parallel_state

        self.train_mode()
        for ddp in self.ddp_chunks:  # the main_grad buffers the backward hooks accumulate into
            ddp.zero_grad_buffer()
        self.optimizer.zero_grad(set_to_none=True)
        dp_size = parallel_state.get_data_parallel_world_size()
        if pipelined():
            return self._accumulate_pipelined(batch, loss_fn, total_tokens)
        micro_batches = list(self._micro_batches(batch))
        # Dynamic micro-batches differ in size, and the estimator needs one small-batch size.
        per_micro_batch = (
            self.noise_scale is not None
            and dp_size == 1
            and len(micro_batches) > 1
            and self.optim.max_tokens_per_micro_batch is None
        )
        small_sq: list[float] = []
        sums: dict[str, torch.Tensor] = {}
        before: list[torch.Tensor] | None = None  # the buffers before this micro-batch
        for index, (micro_batch, rows) in enumerate(micro_batches):
            if per_micro_batch and index > 0:  # the first starts from the zeroed buffers
                before = self._grad_norms().snapshot(into=before)
            # --overlap-grad-reduce: megatron's DDP starts each bucket's reduction in the last
            # micro-batch's backward pass; no_sync keeps the earlier ones to accumulation
            last = index == len(micro_batches) - 1
            with (
                self._micro_batch_context(micro_batch),
                nullcontext() if last else self.ddp.no_sync(),
            ):  # forward, backward
                micro_batch = micro_batch.to(self.device)
                loss, stats = loss_fn(micro_batch, self._outputs(self.ddp, micro_batch), rows)
                loss.backward()
            if per_micro_batch:
                share = gradient_noise.loss_share(micro_batch, batch, total_tokens, self.device)
                small_sq.append(self._grad_norms().squared_norm(since=before) / share**2)
            for key, value in {"loss": loss.detach(), **stats}.items():
                sums[key] = sums.get(key, 0.0) + value.detach().double()
        self._small_batch = (
            (small_sq, float(self.optim.micro_batch_size))
            if per_micro_batch
            else self._per_rank_small_batches(batch, total_tokens)
        )
        return sums

    def _forward_only(
        self, chunks: list, batch: TokenBatch, outputs_of
    ) -> tuple[torch.Tensor, ...]:
        """A no-grad pass over every row: outputs_of(micro_batch, model outputs) gives a tuple
        of [n, l] tensors per micro-batch; they come back as [N, L] tensors on the CPU, on
        every pipeline stage."""
        length = batch.tokens.shape[1]
        if not pipelined():
            module = only_chunk(chunks)
            parts = []
            for micro_batch, rows in self._micro_batches(batch):
                micro_batch = micro_batch.to(self.device)
                parts.append(
                    tuple(
                        t[:rows]
                        for t in outputs_of(micro_batch, self._outputs(module, micro_batch))
                    )
                )  # not the padding rows
            return cat_padded(parts, length)

        def on_last_stage(micro_batch, rows, output):
            outs = outputs_of(micro_batch, output)
            return output.new_zeros(()), {str(i): t[:rows].detach() for i, t in enumerate(outs)}

        results = run_pipeline(
            chunks,
            list(self._micro_batches(batch)),
            self._outputs,
            on_last_stage,
            forward_only=True,
            device=self.device,
        )
        gathered = (
            cat_padded([tuple(r[str(i)] for i in range(len(r))) for r in results], length)
            if results
            else None
        )  # the last stage's, in host memory; sent as objects
        return from_last_stage(gathered)

    def _accumulate_pipelined(
        self, batch: TokenBatch, loss_fn, total_tokens: float
    ) -> dict[str, torch.Tensor]:
        """_accumulate under PP > 1: megatron's 1F1B schedule runs forward and backward of every
        micro-batch; the sums come from the last stage to every stage. The noise scale measures
        each DP rank's gradient (DP > 1); one micro-batch's gradient cannot be told apart while
        the stages interleave them, so at DP = 1 it measures nothing (see README)."""

        def on_last_stage(micro_batch, rows, output):
            loss, stats = loss_fn(micro_batch, output, rows)
            return loss, {"loss": loss.detach(), **{k: v.detach() for k, v in stats.items()}}

        results = run_pipeline(
            self.ddp_chunks,
            list(self._micro_batches(batch)),
            self._outputs,
            on_last_stage,
            forward_only=False,
            device=self.device,
        )
        sums: dict[str, float] = {}
        for stats in results:
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        sums = from_last_stage(sums)
        self._small_batch = self._per_rank_small_batches(batch, total_tokens)
        return {k: torch.tensor(v, dtype=torch.float64) for k, v in sums.items()}

    def _micro_batch_context(self, micro_batch: TokenBatch):
        """What stays in place around one micro-batch's forward and backward (the actor's
        routing replay); nothing here."""
        return nullcontext()

    def _grad_norms(self) -> grads.GradBufferNorms:
        """This rank's gradient norms before any reduction, read from megatron's DDP gradient
        buffers (the `main_grad`s its backward hooks accumulate into)."""
        if getattr(self, "_grad_buffer_norms", None) is None:
            self._grad_buffer_norms = grads.GradBufferNorms(
                self.ddp_chunks, self.chunks, gradient_noise.includes_experts()
            )
        return self._grad_buffer_norms

    def _per_rank_small_batches(self, batch: TokenBatch, total_tokens: float):
        """Every DP rank's gradient as a small batch (DP > 1 and the noise scale on; collective
        over DP: gradient_noise.per_rank_small_batches); None otherwise."""
        if self.noise_scale is None:
            return None
        return gradient_noise.per_rank_small_batches(
            batch, total_tokens, lambda: self._grad_norms().squared_norm(), self.device
        )

    def _update_noise_scale(self, grad_norm: float) -> dict[str, float]:
        """The noise-scale metrics of this step (gradient_noise.update); none when it is not
        measured or accumulation measured no small batches."""
        if self.noise_scale is None or self._small_batch is None:
            return {}
        return gradient_noise.update(
            self.noise_scale, self._small_batch, grad_norm, self.optimizer, self.metric_prefix
        )

    def _step(self, sums: dict[str, torch.Tensor], lr: float) -> dict[str, float]:
        """Reduce grads, clip, Adam step, all by megatron-core (hyrl.backends.megatron.
        optimizer_step, in megatron's order); statistics summed over DP ranks (each is a share
        of the global token mean) and returned as `<prefix>/<name>`.

        When the loss or the gradient norm is not finite on any rank, the update is skipped: no
        Adam step, optimizer_steps (hence the lr schedule) and the noise-scale averages
        unchanged, the grads dropped at the next zero_grad. `<prefix>/skipped` is 1 for such a
        step.
        """
        found_inf, grad_norm = optimizer_step.reduce_grads(self.ddp_chunks, self.optimizer)
        skipped = found_inf or not optimizer_step.all_ranks_finite(
            sums["loss"], grad_norm, self.device
        )
        if skipped:
            self.skipped_steps += 1
            self.consecutive_skips += 1
            noise_metrics = {}
        else:
            noise_metrics = self._update_noise_scale(grad_norm)
            optimizer_step.clip(self.optimizer, self.optim.clip_grad, grad_norm)
            optimizer_step.adam_step(self.optimizer, lr)
            self.optimizer_steps += 1
            self.consecutive_skips = 0

        p = self.metric_prefix
        totals = optimizer_step.summed_over_dp(sums, self.device)
        metrics = {f"{p}/{k}": v for k, v in totals.items()}
        metrics.update(
            {
                f"{p}/grad_norm": grad_norm,
                f"{p}/lr": lr,
                f"{p}/optimizer_steps": self.optimizer_steps,
                f"{p}/skipped": float(skipped),
                **noise_metrics,
            }
        )
        return metrics

    # -- checkpoint state (hyrl.backends.megatron.train_checkpoint) ---------------------------
    def state_dict(self) -> dict:
        """This rank's counters and noise-scale averages (weights and optimizer states go to
        distributed checkpoints: hyrl.backends.megatron.train_checkpoint)."""
        return {
            "optimizer_steps": self.optimizer_steps,
            "skipped_steps": self.skipped_steps,
            "consecutive_skips": self.consecutive_skips,
            "noise_scale": None if self.noise_scale is None else self.noise_scale.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer_steps = int(state["optimizer_steps"])
        self.skipped_steps = int(state["skipped_steps"])
        self.consecutive_skips = int(state["consecutive_skips"])
        if self.noise_scale is not None and state["noise_scale"] is not None:
            self.noise_scale.load_state_dict(state["noise_scale"])

    # -- --offload-train: GPU memory handed to colocated engines (hyrl.backends.megatron.offload)
    def _offload(self):
        from hyrl.backends.megatron.offload import TrainedModelOffload

        if getattr(self, "_offload_state", None) is None:
            self._offload_state = TrainedModelOffload(self, self.frozen_models())
        return self._offload_state

    def frozen_models(self) -> list[torch.nn.Module]:
        """Models without an optimizer that go with the training state (the actor's reference)."""
        return []

    def offload_training_state(self) -> int:
        """Free the gradient buffers, park the optimizer states (and frozen models) in host
        memory; the weights stay for the weight sync. Bytes released on this rank's device:
        torch.cuda.memory_allocated before - after on GPU, the storage bytes on CPU."""
        return self._measure_freed(self._offload().offload_training_state)

    def offload_weights(self) -> int:
        """Park the weights in host memory (after the weight sync); bytes released as above."""
        return self._measure_freed(self._offload().offload_weights)

    def restore_offloaded(self) -> None:
        """Everything offloaded back on the device (weights, optimizer states, zeroed grads)."""
        self._offload().restore()

    def _measure_freed(self, offload) -> int:
        if self.device.type != "cuda":
            return offload()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        offload()
        return before - torch.cuda.memory_allocated()
