"""Per-token log-probs and entropy from vocab-parallel logits (each TP rank holds V/TP columns)."""

from __future__ import annotations

import torch


def _tp_sum(x: torch.Tensor) -> torch.Tensor:
    # Forward all-reduce, backward identity: every TP rank computes the same loss downstream.
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

    return reduce_from_tensor_model_parallel_region(x)


def vocab_parallel_log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) and H(p) per position, p = softmax(logits / temperature) over the full vocab.

    logits: [..., V / TP] this rank's vocabulary shard; targets: [...] global token ids.
    """
    from megatron.core import parallel_state

    logits = logits.float() / temperature
    with torch.no_grad():
        shift = logits.max(dim=-1, keepdim=True).values
        torch.distributed.all_reduce(
            shift, op=torch.distributed.ReduceOp.MAX,
            group=parallel_state.get_tensor_model_parallel_group())
    shifted = logits - shift
    log_z = torch.log(_tp_sum(shifted.exp().sum(dim=-1)))

    shard_size = logits.shape[-1]
    vocab_start = parallel_state.get_tensor_model_parallel_rank() * shard_size
    local_ids = targets - vocab_start
    on_this_rank = (local_ids >= 0) & (local_ids < shard_size)
    target_logit = shifted.gather(-1, local_ids.clamp(0, shard_size - 1).unsqueeze(-1)).squeeze(-1)
    target_logit = _tp_sum(target_logit * on_this_rank)
    log_probs = target_logit - log_z

    entropy = None
    if with_entropy:
        # H = log Z - sum_v p_v * shifted_v
        probs = torch.exp(shifted - log_z.unsqueeze(-1))
        entropy = log_z - _tp_sum((probs * shifted).sum(dim=-1))
    return log_probs, entropy
