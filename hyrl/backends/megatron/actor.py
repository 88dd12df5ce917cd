"""The policy (actor) on megatron-core: log-prob pass, PPO-clip update, weight export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hyrl.algorithms.actor_loss import ActorLoss
from hyrl.algorithms.batch import TokenBatch
from hyrl.backends.megatron import weights
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.logprobs import vocab_parallel_log_probs_and_entropy
from hyrl.backends.megatron.micro_batches import cat_padded
from hyrl.backends.megatron.model import ParallelLayout, build_model_chunks
from hyrl.backends.megatron.pipeline import from_last_stage
from hyrl.backends.megatron.trained_model import MegatronTrainedModel, only_chunk
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

if TYPE_CHECKING:
    from hyrl.backends.megatron.routing_replay import RoutingReplay
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.mismatch import MismatchView
    from hyrl.config.concerns.model import ModelView
    from hyrl.config.concerns.rollout import RolloutView


@dataclass(frozen=True)
class ActorSettings:
    optim: OptimizerSettings
    loss: ActorLoss = ActorLoss()  # the loss's terms and clip range (hyrl.algorithms)
    temperature: float = 1.0  # log-probs of softmax(logits / T), as the rollout sampled them
    keep_reference: bool = False  # a frozen copy for KL (loss term or reward penalty)
    transformer_impl: str = "auto"
    token_dispatcher: str = "auto"
    routing_replay: bool = False  # replay the engine's MoE routing (--use-rollout-routing-replay)
    routing_measure: bool = False  # only compare with it (--measure-routing-mismatch)

    @classmethod
    def of(
        cls,
        optim: OptimizerSettings,
        algorithm: AlgorithmView,
        mismatch: MismatchView,
        model: ModelView,
        rollout: RolloutView,
    ) -> ActorSettings:
        """The actor of a run: its optimizer `optim` (OptimizerSettings.for_actor), the
        algorithm's loss (`ActorLoss.of`), the routing replay or measurement, the model's
        kernels and the rollout's temperature."""
        return cls(
            optim=optim,
            loss=ActorLoss.of(algorithm),
            temperature=rollout.rollout_temperature,
            keep_reference=algorithm.kl_loss_coef > 0 or algorithm.kl_coef > 0,
            transformer_impl=model.transformer_impl,
            token_dispatcher=model.moe_token_dispatcher_type,
            routing_replay=mismatch.use_rollout_routing_replay,
            routing_measure=mismatch.measure_routing_mismatch,
        )


class MegatronActor(MegatronTrainedModel):
    metric_prefix = "actor"

    def __init__(self, arch: Qwen3MoeArch, layout: ParallelLayout, settings: ActorSettings):
        self.arch, self.layout, self.settings = arch, layout, settings
        super().__init__(
            build_model_chunks(
                arch,
                layout,
                settings.transformer_impl,
                settings.token_dispatcher,
                routing_replay=self._routing_hooks(settings),
                params_dtype=settings.optim.params_dtype,
            ),
            settings.optim,
        )
        self.replay: RoutingReplay | None = None  # the routers' hooks: replay, or only measure
        self._records_routing = False  # an on-policy update compares the routing (see _train)
        self._routing_counts = torch.zeros(3, dtype=torch.float64)  # see routing_metrics
        if self._routing_hooks(settings):
            from hyrl.backends.megatron.routing_replay import RoutingReplay

            self.replay = RoutingReplay(self.model)
        self.ref_chunks: list[torch.nn.Module] | None = None
        if settings.keep_reference:
            # A second model (modules hold process groups, so no deepcopy) with the same weights.
            self.ref_chunks = build_model_chunks(
                arch,
                layout,
                settings.transformer_impl,
                settings.token_dispatcher,
                params_dtype=settings.optim.params_dtype,
            )
            self._copy_to_reference()
            for chunk in self.ref_chunks:
                chunk.eval().requires_grad_(False)

    @property
    def ref_model(self) -> torch.nn.Module | None:
        """The reference when this rank holds it in one chunk; None without one."""
        return None if self.ref_chunks is None else only_chunk(self.ref_chunks)

    def _copy_to_reference(self) -> None:
        if self.ref_chunks is not None:
            for ref, chunk in zip(self.ref_chunks, self.chunks, strict=True):
                ref.load_state_dict(chunk.state_dict())

    def frozen_models(self) -> list[torch.nn.Module]:
        return [] if self.ref_chunks is None else list(self.ref_chunks)

    def _log_probs(self, model: torch.nn.Module, batch: TokenBatch, with_entropy: bool):
        return self._log_probs_of(self._outputs(model, batch), batch, with_entropy)

    def _log_probs_of(self, logits: torch.Tensor, batch: TokenBatch, with_entropy: bool):
        """log pi(target) and entropy ([N, L]) from the vocab-parallel logits of `batch` (of its
        packed tokens under --qkv-format thd: computed there, then laid out per row)."""
        targets = self.packed_like(batch, batch.targets.to(self.device))
        log_probs, entropy = vocab_parallel_log_probs_and_entropy(
            logits, targets, self.settings.temperature, with_entropy
        )
        return self.per_row(batch, log_probs), (
            None if entropy is None else self.per_row(batch, entropy)
        )

    def _engine_routing(self, mb: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The engine's expert ids of `mb` and its response positions, in the layout the
        routers see (packed under --qkv-format thd; -1 / False on the padding), both on the
        trainer's device: the ids are held in host memory until here (an H100 run with
        --use-rollout-routing-replay stopped on cuda:0 response positions against CPU ids)."""
        return (
            self.packed_like(mb, _dense(mb.routed_experts).to(self.device), fill=-1),
            self.packed_like(mb, (mb.loss_mask > 0).to(self.device), fill=False),
        )

    @staticmethod
    def _routing_hooks(settings: ActorSettings) -> bool:
        return settings.routing_replay or settings.routing_measure

    def _micro_batch_context(self, micro_batch: TokenBatch):
        """Routing replay for the update; on policy (train_step_on_policy) it also records the
        routing for the comparison, replaying or only measuring, as log_probs does."""
        record = self._records_routing and self.replay is not None
        if micro_batch.routed_experts is None or not (self.settings.routing_replay or record):
            return super()._micro_batch_context(micro_batch)
        assert self.replay is not None, (
            "__init__ hooks the routers under --use-rollout-routing-replay"
        )
        return self.replay.replaying(
            self._engine_routing(micro_batch)[0], record=record, replay=self.settings.routing_replay
        )

    @torch.no_grad()
    def log_probs(
        self, batch: TokenBatch, reference: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position log pi(target) and entropy under the current (or reference) weights.

        With routing replay the actor (not the reference) replays `batch.routed_experts` and
        counts, on response positions, where its own routing and the routing it used differ
        from the engine's (read by `routing_metrics`); measuring only, it routes on its own."""
        chunks = self.ref_chunks if reference else self.ddp_chunks
        assert chunks is not None, "a reference pass only with a reference (--kl-*coef > 0)"
        for chunk in chunks:
            chunk.eval()
        if reference or self.replay is None or batch.routed_experts is None:
            log_probs, entropy = self._forward_only(
                chunks, batch, lambda mb, logits: self._log_probs_of(logits, mb, with_entropy=True)
            )
            return log_probs, entropy
        model = only_chunk(chunks)
        outputs: list[tuple[torch.Tensor, ...]] = []  # replay: no pipeline (refused with PP)
        for mb, rows in self._micro_batches(batch):
            routed, responses = self._engine_routing(mb)
            with self.replay.replaying(routed, record=True, replay=self.settings.routing_replay):
                log_probs, entropy = self._log_probs(model, mb, with_entropy=True)
                self._routing_counts += self.replay.comparison(routed, responses)
            outputs.append((log_probs[:rows], entropy[:rows]))  # not the loss-free padding rows
        log_probs, entropy = cat_padded(outputs, batch.tokens.shape[1])
        return log_probs, entropy

    def train_step(self, batch: TokenBatch, total_tokens: float, lr: float) -> dict[str, float]:
        """One optimizer step over this rank's share of the global batch (micro-batch accumulation).

        total_tokens: response tokens in the whole global batch (all DP ranks), so that summed
        gradients equal the token-level mean over the global batch.
        """
        assert batch.old_log_probs is not None, "the loop's log-prob pass set them"
        return self._train(batch, total_tokens, lr, on_policy=False, pg_weights_of=None)[0]

    def train_step_on_policy(
        self, batch: TokenBatch, total_tokens: float, lr: float, pg_weights_of=None
    ) -> tuple[dict[str, float], tuple[torch.Tensor, torch.Tensor]]:
        """train_step on an exactly on-policy batch (sampled by the current weights, one
        optimizer step per rollout): the old log-probs are the step's own first forward pass,
        detached (the ratio is 1 in value, its gradient the policy gradient), not a separate
        no-grad pass over the same weights. pg_weights_of(old_log_probs, rollout_log_probs,
        loss_mask) gives a micro-batch's --use-tis/--use-mis weights (None: none); with routing
        replay (or only measuring) the forward records and compares the routing as log_probs
        does. Returns (metrics, (old log-probs, entropy)): [n, L] of this rank's rows in host
        memory, on every pipeline stage."""
        return self._train(batch, total_tokens, lr, on_policy=True, pg_weights_of=pg_weights_of)

    def _train(self, batch: TokenBatch, total_tokens: float, lr: float, on_policy, pg_weights_of):
        s = self.settings
        kept: list[tuple[torch.Tensor, ...]] = []  # on-policy: each micro-batch's old log-probs

        def loss_fn(mb: TokenBatch, logits: torch.Tensor, rows: int):
            log_probs, entropy = self._log_probs_of(
                logits, mb, with_entropy=s.loss.needs_entropy or on_policy
            )
            old_log_probs, pg_weights = mb.old_log_probs, mb.pg_weights
            if on_policy:
                assert entropy is not None, "computed with the entropy on policy"
                old_log_probs = log_probs.detach()
                kept.append((old_log_probs[:rows], entropy.detach()[:rows]))  # not the padding
                if pg_weights_of is not None:
                    assert mb.rollout_log_probs is not None, "a rollout carries the engine's"
                    pg_weights = pg_weights_of(old_log_probs, mb.rollout_log_probs, mb.loss_mask)
                if self.replay is not None and mb.routed_experts is not None:
                    self._routing_counts += self.replay.comparison(*self._engine_routing(mb))
            assert old_log_probs is not None, "the loop's log-prob pass set them"
            return s.loss(mb, log_probs, old_log_probs, entropy, total_tokens, pg_weights)

        self._records_routing = on_policy
        try:
            metrics = self._step(self._accumulate(batch, loss_fn, total_tokens), lr)
        finally:
            self._records_routing = False
        if not on_policy:
            return metrics, None
        # the last pipeline stage ran the loss: its rows go to every stage
        old = cat_padded(kept, batch.tokens.shape[1]) if kept else None
        return metrics, from_last_stage(old)

    def routing_metrics(self) -> dict[str, float]:
        """Routing against the engine's, summed over every rank's log-prob passes since the
        last call (collective: all ranks call it), over (response position, layer) pairs:
        mismatch/routing_compared, mismatch/routing_diff_frac (the actor's own top-k differs
        from the engine's), mismatch/routing_replay_errors (megatron dispatched to experts
        other than the engine's: 0 when the replay works)."""
        counts = self._routing_counts.to(self.device)
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            torch.distributed.all_reduce(counts)  # TP (SP slices) and DP ranks see distinct tokens
        self._routing_counts = torch.zeros(3, dtype=torch.float64)
        compared, own_differs, used_differs = (float(x) for x in counts.cpu())
        metrics = {
            "mismatch/routing_compared": compared,
            "mismatch/routing_diff_frac": own_differs / compared if compared else 0.0,
        }
        if self.settings.routing_replay:
            metrics["mismatch/routing_replay_errors"] = used_differs
        return metrics

    # -- weights --------------------------------------------------------------------------
    def export_hf_state_dict(self, keep: bool = True) -> dict[str, torch.Tensor]:
        """Full HF-named weights in host memory (collective: all ranks must call); a rank with
        keep=False takes part and gets {}."""
        full = self.export_full_state_dict(keep)
        return hf_mapping.megatron_to_hf(full, self.arch) if keep else {}

    def hf_weight_buckets(self, buffer_bytes: int, keep=True, live=None):
        """The weights as a stream of HF checkpoint-layout buckets of <= buffer_bytes, gathered
        one parameter at a time (collective: every rank iterates to the end; see
        ``weights.iter_hf_buckets`` for keep and live)."""
        return weights.iter_hf_buckets(self.chunks, self.arch, buffer_bytes, keep, live)

    def export_full_state_dict(self, keep: bool = True) -> dict[str, torch.Tensor]:
        """Full Megatron-named weights (global expert ids) in host memory (collective)."""
        return weights.gather_full_state_dict(self.chunks, self.arch, keep)

    def load_hf_state_dict(self, hf_state: dict[str, torch.Tensor]) -> None:
        """From a whole HF state dict in memory (tests, small models)."""
        full = hf_mapping.hf_to_megatron(hf_state, self.arch)
        weights.load_full_state_dict(self.chunks, full, self.arch)
        self.reload_weights()
        self._copy_to_reference()

    def load_hf(self, reader: hf_mapping.SliceReader) -> None:
        """From an HF directory read one slice at a time (hf_io's HFWeights): this rank's shards
        only (``weights.load_from_hf``); the reference copies them."""
        weights.load_from_hf(self.chunks, reader, self.arch)
        self.reload_weights()
        self._copy_to_reference()


def _dense(routed_experts) -> torch.Tensor:
    """A micro-batch's routing as the [n, L, layers, top-k] tensor replay takes."""
    return routed_experts.dense() if hasattr(routed_experts, "dense") else routed_experts
