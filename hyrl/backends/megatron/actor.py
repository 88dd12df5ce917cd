"""The policy (actor) on megatron-core: log-prob pass, PPO-clip update, weight export."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.algorithms.losses import grpo_loss
from hyrl.backends.megatron import cpu_compat, grads, weights
from hyrl.backends.megatron.logprobs import vocab_parallel_log_probs_and_entropy
from hyrl.backends.megatron.model import ParallelLayout, build_gpt_model, causal_attention_mask
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch


@dataclass(frozen=True)
class ActorSettings:
    micro_batch_size: int
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    temperature: float = 1.0  # log-probs of softmax(logits / T), as the rollout sampled them
    eps_clip: float = 0.2
    eps_clip_high: float = 0.2
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "low_var_kl"
    entropy_coef: float = 0.0
    transformer_impl: str = "auto"
    token_dispatcher: str = "auto"

    @classmethod
    def from_flags(cls, flags) -> "ActorSettings":
        return cls(
            micro_batch_size=flags.micro_batch_size, weight_decay=flags.weight_decay,
            adam_beta1=flags.adam_beta1, adam_beta2=flags.adam_beta2, adam_eps=flags.adam_eps,
            clip_grad=flags.clip_grad, temperature=flags.rollout_temperature,
            eps_clip=flags.eps_clip,
            eps_clip_high=flags.eps_clip if flags.eps_clip_high is None else flags.eps_clip_high,
            kl_loss_coef=flags.kl_loss_coef, kl_loss_type=flags.kl_loss_type,
            entropy_coef=flags.entropy_coef, transformer_impl=flags.transformer_impl,
            token_dispatcher=flags.moe_token_dispatcher_type,
        )


class MegatronActor:
    """One rank's shard of the policy. Every rank of the job constructs one and calls each method."""

    def __init__(self, arch: Qwen3MoeArch, layout: ParallelLayout, settings: ActorSettings):
        self.arch, self.layout, self.settings = arch, layout, settings
        self.device = cpu_compat.device()
        self.model = build_gpt_model(arch, layout, settings.transformer_impl, settings.token_dispatcher)
        self.ref_model = None
        if settings.kl_loss_coef > 0:
            # A second model (modules hold process groups, so no deepcopy) with the same weights.
            self.ref_model = build_gpt_model(arch, layout, settings.transformer_impl,
                                             settings.token_dispatcher)
            self.ref_model.load_state_dict(self.model.state_dict())
            self.ref_model.eval().requires_grad_(False)
        decay = [p for p in self.model.parameters() if p.ndim > 1]
        no_decay = [p for p in self.model.parameters() if p.ndim <= 1]  # norms: no weight decay
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": settings.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=0.0, betas=(settings.adam_beta1, settings.adam_beta2), eps=settings.adam_eps)
        self.optimizer_steps = 0

    # -- forward passes -------------------------------------------------------------------
    def _forward(self, model: torch.nn.Module, batch: TokenBatch, with_entropy: bool):
        tokens = batch.tokens.to(self.device)
        seq_len = tokens.shape[1]
        positions = torch.arange(seq_len, device=self.device).expand_as(tokens)
        logits = model(tokens, positions, causal_attention_mask(seq_len, self.device))
        return vocab_parallel_log_probs_and_entropy(
            logits, batch.targets.to(self.device), self.settings.temperature, with_entropy)

    def _micro_batches(self, batch: TokenBatch):
        size = self.settings.micro_batch_size
        for start in range(0, len(batch), size):
            yield batch.select(slice(start, start + size))

    @torch.no_grad()
    def log_probs(self, batch: TokenBatch, reference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position log pi(target) and entropy under the current (or reference) weights."""
        model = self.ref_model if reference else self.model
        model.eval()
        outputs = [self._forward(model, mb, with_entropy=True) for mb in self._micro_batches(batch)]
        return torch.cat([o[0] for o in outputs]).cpu(), torch.cat([o[1] for o in outputs]).cpu()

    # -- update ---------------------------------------------------------------------------
    def train_step(self, batch: TokenBatch, total_tokens: float, lr: float) -> dict[str, float]:
        """One optimizer step over this rank's share of the global batch (micro-batch accumulation).

        total_tokens: response tokens in the whole global batch (all DP ranks), so that summed
        gradients equal the token-level mean over the global batch.
        """
        from megatron.core import parallel_state

        s = self.settings
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, torch.Tensor] = {}
        for mb in self._micro_batches(batch):
            log_probs, entropy = self._forward(self.model, mb, with_entropy=s.entropy_coef > 0)
            mb = mb.to(self.device)
            loss, stats = grpo_loss(
                log_probs, mb.old_log_probs, mb.advantages, mb.loss_mask,
                eps_clip=s.eps_clip, eps_clip_high=s.eps_clip_high,
                ref_log_probs=mb.ref_log_probs, kl_loss_coef=s.kl_loss_coef,
                kl_loss_type=s.kl_loss_type, entropy=entropy, entropy_coef=s.entropy_coef,
                total_tokens=total_tokens)
            loss.backward()
            for key, value in {"loss": loss.detach(), **stats}.items():
                sums[key] = sums.get(key, 0.0) + value.detach().double()

        grads.finalize_grads(self.model)
        grad_norm = grads.global_grad_norm(self.model)
        grads.clip_grads(self.model, s.clip_grad, grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer_steps += 1

        # Each micro-batch statistic is a share of the global token mean: sum over DP ranks.
        keys = sorted(sums)
        totals = torch.stack([sums[k].reshape(()) for k in keys]).to(self.device)
        if parallel_state.get_data_parallel_world_size() > 1:
            torch.distributed.all_reduce(totals, group=parallel_state.get_data_parallel_group())
        metrics = {f"actor/{k}": float(v) for k, v in zip(keys, totals.cpu())}
        metrics.update({"actor/grad_norm": grad_norm, "actor/lr": lr})
        return metrics

    # -- weights --------------------------------------------------------------------------
    def export_hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Full HF-named weights, on every rank (collective: all ranks must call)."""
        return hf_mapping.megatron_to_hf(weights.gather_full_state_dict(self.model, self.arch), self.arch)

    def load_hf_state_dict(self, hf_state: dict[str, torch.Tensor]) -> None:
        full = hf_mapping.hf_to_megatron(hf_state, self.arch)
        weights.load_full_state_dict(self.model, full, self.arch)
        if self.ref_model is not None:
            self.ref_model.load_state_dict(self.model.state_dict())
