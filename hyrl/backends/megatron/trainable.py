"""What the actor and the critic share: a sharded GPTModel, micro-batching, AdamW, one step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.backends.megatron import cpu_compat, grads
from hyrl.backends.megatron.model import causal_attention_mask


@dataclass(frozen=True)
class OptimizerSettings:
    micro_batch_size: int
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_grad: float = 1.0  # global L2 norm; 0 disables clipping

    @classmethod
    def from_flags(cls, flags, prefix: str = "") -> "OptimizerSettings":
        """The actor's flags, or with prefix "critic_" the critic's (Adam betas/eps are shared)."""
        return cls(
            micro_batch_size=getattr(flags, f"{prefix}micro_batch_size"),
            weight_decay=getattr(flags, f"{prefix}weight_decay"),
            adam_beta1=flags.adam_beta1, adam_beta2=flags.adam_beta2, adam_eps=flags.adam_eps,
            clip_grad=getattr(flags, f"{prefix}clip_grad"))


class MegatronTrainable:
    """One rank's shard of a model with its own optimizer. Every rank calls every method."""

    metric_prefix = "model"

    def __init__(self, model: torch.nn.Module, optim: OptimizerSettings):
        self.model, self.optim = model, optim
        self.device = cpu_compat.device()
        decay = [p for p in model.parameters() if p.ndim > 1]
        no_decay = [p for p in model.parameters() if p.ndim <= 1]  # norms: no weight decay
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": optim.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=0.0, betas=(optim.adam_beta1, optim.adam_beta2), eps=optim.adam_eps)
        self.optimizer_steps = 0

    def _outputs(self, model: torch.nn.Module, batch: TokenBatch) -> torch.Tensor:
        """The model's last layer for every position: [N, L, V/TP] logits or [N, L, 1] values."""
        tokens = batch.tokens.to(self.device)
        seq_len = tokens.shape[1]
        positions = torch.arange(seq_len, device=self.device).expand_as(tokens)
        return model(tokens, positions, causal_attention_mask(seq_len, self.device))

    def _micro_batches(self, batch: TokenBatch, size: int | None = None):
        size = size or self.optim.micro_batch_size
        for start in range(0, len(batch), size):
            yield batch.select(slice(start, start + size))

    def _accumulate(self, batch: TokenBatch, loss_fn) -> dict[str, torch.Tensor]:
        """Forward/backward every micro-batch; `loss_fn(micro_batch) -> (loss, stats)`."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, torch.Tensor] = {}
        for micro_batch in self._micro_batches(batch):
            loss, stats = loss_fn(micro_batch.to(self.device))
            loss.backward()
            for key, value in {"loss": loss.detach(), **stats}.items():
                sums[key] = sums.get(key, 0.0) + value.detach().double()
        return sums

    def _step(self, sums: dict[str, torch.Tensor], lr: float) -> dict[str, float]:
        """Reduce grads, clip, AdamW step; statistics summed over DP ranks (each is a share of
        the global token mean) and returned as `<prefix>/<name>`."""
        from megatron.core import parallel_state

        grads.finalize_grads(self.model)
        grad_norm = grads.global_grad_norm(self.model)
        grads.clip_grads(self.model, self.optim.clip_grad, grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer_steps += 1

        keys = sorted(sums)
        totals = torch.stack([sums[k].reshape(()) for k in keys]).to(self.device)
        if parallel_state.get_data_parallel_world_size() > 1:
            torch.distributed.all_reduce(totals, group=parallel_state.get_data_parallel_group())
        p = self.metric_prefix
        metrics = {f"{p}/{k}": float(v) for k, v in zip(keys, totals.cpu())}
        metrics.update({f"{p}/grad_norm": grad_norm, f"{p}/lr": lr,
                        f"{p}/optimizer_steps": self.optimizer_steps})
        return metrics
