"""Run by torchrun from tests: load fixed HF weights into a sharded actor, report logits and one
step.

Usage: torchrun --nproc-per-node N tests/helpers/parity_worker.py OUT.json TP EP [PP [V [L]]]
V: virtual pipeline stages per pipeline rank (0: none); L: layers (default: TINY's 2).
Under PP > 1 the logits live on the last stage only: the full-logit check is left out there
(log-probs, loss, gradient norm, weights and the critic are compared on every layout).
"""

import dataclasses
import json
import sys

import torch

from hyrl.algorithms.batch import pack
from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
from hyrl.backends.megatron.critic import CriticSettings, MegatronCritic
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.model import (
    ParallelLayout,
    causal_attention_mask,
    destroy_distributed,
    init_distributed,
)
from hyrl.models.qwen3_moe.config import TINY


def main(out_path: str, tp: int, ep: int, pp: int = 1, vp: int = 0, layers: int = 0) -> None:
    from megatron.core import parallel_state

    arch = dataclasses.replace(TINY, num_layers=layers) if layers else TINY
    layout = ParallelLayout(
        tensor_model_parallel_size=tp,
        expert_model_parallel_size=ep,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp or None,
        sequence_parallel=tp > 1,
    )
    init_distributed(layout, seed=7)
    torch.manual_seed(0)
    from transformers import Qwen3MoeForCausalLM

    hf_model = Qwen3MoeForCausalLM(arch.to_hf_config()).eval()  # same weights on every rank
    actor = MegatronActor(
        arch, layout, ActorSettings(optim=OptimizerSettings(micro_batch_size=2, clip_grad=0.0))
    )
    actor.load_hf_state_dict(hf_model.state_dict())
    # the critic's first trunk: the actor's weights, each rank copying its own shards
    critic = MegatronCritic(
        arch,
        layout,
        CriticSettings(optim=OptimizerSettings(micro_batch_size=2, clip_grad=0.0), value_clip=0.2),
    )
    critic.load_trunk_from(actor.chunks)

    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(8)]
    responses = [torch.randint(0, 16, (1 + i % 3,), generator=generator).tolist() for i in range(8)]
    advantages = torch.linspace(-1, 1, 8)
    full = pack(prompts, responses, advantages, pad_id=0, pad_to_multiple_of=2)
    dp_rank = parallel_state.get_data_parallel_rank()
    dp_size = parallel_state.get_data_parallel_world_size()
    per_rank = len(full) // dp_size
    local = full.select(slice(dp_rank * per_rank, (dp_rank + 1) * per_rank))

    # Reference gradient: at ratio 1 the PPO-clip loss is -sum(A * log p) / tokens.
    hf_log_probs = torch.log_softmax(hf_model(full.tokens).logits, -1).gather(
        -1, full.targets[..., None]
    )[..., 0]
    hf_loss = (
        -(full.advantages[:, None] * hf_log_probs * full.loss_mask).sum() / full.num_response_tokens
    )
    hf_loss.backward()
    hf_grad_norm = float(torch.sqrt(sum(p.grad.pow(2).sum() for p in hf_model.parameters())))
    hf_log_probs = hf_log_probs.detach()
    # Full logits: this rank's vocabulary shard, gathered over TP, against transformers'.
    logits = hf_logits = torch.zeros(())  # under PP: not compared (see the module doc)
    if pp == 1:
        with torch.no_grad():
            seq_len = local.tokens.shape[1]
            shard = actor.model(
                local.tokens,
                torch.arange(seq_len).expand_as(local.tokens),
                causal_attention_mask(seq_len, local.tokens.device),
            )
            shards = [torch.empty_like(shard) for _ in range(tp)]
            torch.distributed.all_gather(
                shards, shard.contiguous(), group=parallel_state.get_tensor_model_parallel_group()
            )
            logits = torch.cat(shards, dim=-1)
            hf_logits = hf_model(local.tokens).logits
    log_probs, _ = actor.log_probs(local)
    local.old_log_probs = log_probs
    metrics = actor.train_step(local, total_tokens=full.num_response_tokens, lr=1e-2)
    # the noise scale's small-batch |g|^2: per micro-batch at DP = 1, per DP rank otherwise
    small_sq = None if actor._small_batch is None else actor._small_batch[0]
    after = actor.export_hf_state_dict()
    # the weight-sync form: every rank takes part in the gathers, only rank 0 keeps the copy
    kept = actor.export_hf_state_dict(keep=torch.distributed.get_rank() == 0)
    if torch.distributed.get_rank() == 0:
        assert kept.keys() == after.keys() and all(torch.equal(kept[k], after[k]) for k in after)
    else:
        assert kept == {}

    # The critic (its trunk copied from the actor's shards above: the HF weights), a fixed
    # value head, then values and one clipped-value-loss step.
    if hasattr(critic.chunks[-1], "output_layer"):  # the last pipeline stage holds the head
        with torch.no_grad():
            head = critic.chunks[-1].output_layer.weight
            head.copy_(torch.linspace(-0.05, 0.05, head.numel()).view_as(head))
    values = critic.values(local)
    local.old_values = values
    local.returns = local.loss_mask * torch.linspace(0, 1, local.tokens.shape[1])
    critic_metrics = critic.train_step(local, total_tokens=full.num_response_tokens, lr=1e-2)
    values_after = critic.values(local)
    gathered = [torch.empty_like(values_after) for _ in range(dp_size)]
    torch.distributed.all_gather(
        gathered, values_after, group=parallel_state.get_data_parallel_group()
    )
    mask = local.loss_mask > 0
    hf_local = hf_log_probs[dp_rank * per_rank : (dp_rank + 1) * per_rank]
    result = {
        "max_logit_diff_vs_hf": float((logits - hf_logits).abs().max()),
        "max_logprob_diff_vs_hf": float((log_probs - hf_local)[mask].abs().max()),
        "loss": metrics["actor/loss"],
        "grad_norm": metrics["actor/grad_norm"],
        "noise_small_sq": small_sq,
        "hf_grad_norm": hf_grad_norm,
        "weights_after_step": {k: v.flatten()[:8].tolist() for k, v in sorted(after.items())},
        "critic_value_loss": critic_metrics["critic/value_loss"],
        "critic_grad_norm": critic_metrics["critic/grad_norm"],
        "critic_values_after_step": torch.cat(gathered).flatten().tolist(),
    }
    if torch.distributed.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(result, f)
    destroy_distributed()


if __name__ == "__main__":
    main(
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]) if len(sys.argv) > 4 else 1,
        int(sys.argv[5]) if len(sys.argv) > 5 else 0,
        int(sys.argv[6]) if len(sys.argv) > 6 else 0,
    )
