"""The value model (critic) on megatron-core: same trunk as the actor, a scalar head, own
optimizer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.ppo import value_loss
from hyrl.backends.megatron import weights
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.model import ParallelLayout, build_model_chunks
from hyrl.backends.megatron.trained_model import MegatronTrainedModel
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

if TYPE_CHECKING:
    from hyrl.config.concerns.critic import CriticView
    from hyrl.config.concerns.model import ModelView

VALUE_HEAD_PREFIX = "output_layer."


@dataclass(frozen=True)
class CriticSettings:
    optim: OptimizerSettings
    value_clip: float = 0.2  # 0 disables clipping
    transformer_impl: str = "auto"
    token_dispatcher: str = "auto"

    @classmethod
    def of(cls, optim: OptimizerSettings, critic: CriticView, model: ModelView) -> CriticSettings:
        """The critic of a run under gae: its optimizer `optim` (OptimizerSettings.for_critic),
        its value clip and the model's kernels."""
        return cls(
            optim=optim,
            value_clip=critic.value_clip,
            transformer_impl=model.transformer_impl,
            token_dispatcher=model.moe_token_dispatcher_type,
        )


class MegatronCritic(MegatronTrainedModel):
    metric_prefix = "critic"

    def __init__(self, arch: Qwen3MoeArch, layout: ParallelLayout, settings: CriticSettings):
        self.arch, self.settings = arch, settings
        super().__init__(
            build_model_chunks(
                arch,
                layout,
                settings.transformer_impl,
                settings.token_dispatcher,
                value_head=True,
                params_dtype=settings.optim.params_dtype,
            ),
            settings.optim,
        )

    def load_trunk(self, full_state: dict[str, torch.Tensor]) -> None:
        """Everything but the value head from full Megatron-named weights (e.g. the actor's)."""
        weights.load_full_state_dict(
            self.chunks, full_state, self.arch, skip=lambda name: name.startswith(VALUE_HEAD_PREFIX)
        )
        self.reload_weights()

    def load_trunk_from_hf(self, reader: hf_mapping.SliceReader) -> None:
        """Everything but the value head from an HF directory read one slice at a time (hf_io's
        HFWeights): this rank's shards only."""
        weights.load_from_hf(
            self.chunks, reader, self.arch, skip=lambda name: name.startswith(VALUE_HEAD_PREFIX)
        )
        self.reload_weights()

    @torch.no_grad()
    def load_trunk_from(self, actor_chunks: list[torch.nn.Module]) -> None:
        """Everything but the value head from the actor's chunks, shard by shard: the critic is
        built with the actor's layout, so each rank copies its own parameters of the same name
        and nothing is gathered."""
        for chunk, source in zip(self.chunks, actor_chunks, strict=True):
            theirs = dict(source.named_parameters())
            for name, param in chunk.named_parameters():
                if name.startswith(VALUE_HEAD_PREFIX):
                    continue
                if name not in theirs or theirs[name].shape != param.shape:
                    raise ValueError(
                        f"critic parameter {name} {tuple(param.shape)} has no counterpart in "
                        "the actor's shards (the critic is built with the actor's layout)"
                    )
                param.copy_(theirs[name])
        self.reload_weights()

    def _values_of(self, mb: TokenBatch, output: torch.Tensor) -> torch.Tensor:
        """[N, L] values from the value head's output of `mb` (packed or not: per_row)."""
        return self.per_row(mb, output.squeeze(-1).float())

    @torch.no_grad()
    def values(self, batch: TokenBatch) -> torch.Tensor:
        """V(state up to position t) for every position: [N, L]."""
        self.train_mode(False)
        return self._forward_only(
            self.ddp_chunks, batch, lambda mb, out: (self._values_of(mb, out),)
        )[0]

    def train_step(self, batch: TokenBatch, total_tokens: float, lr: float) -> dict[str, float]:
        """One critic optimizer step; batch carries returns and old_values."""

        def loss_fn(mb: TokenBatch, output: torch.Tensor, rows: int):
            values = self._values_of(mb, output)
            assert mb.old_values is not None and mb.returns is not None, "the loop's gae set them"
            loss, clip_frac = value_loss(
                values,
                mb.old_values,
                mb.returns,
                mb.loss_mask,
                self.settings.value_clip,
                total_tokens=total_tokens,
            )
            return loss, {"value_clip_frac": clip_frac}

        metrics = self._step(self._accumulate(batch, loss_fn, total_tokens), lr)
        metrics["critic/value_loss"] = metrics.pop("critic/loss")
        return metrics
