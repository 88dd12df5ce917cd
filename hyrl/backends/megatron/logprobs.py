"""Per-token log-probs and entropy from vocab-parallel logits (each TP rank holds V/TP columns).

The logits are the largest tensor of a step (151,936 columns per position for Qwen3), so the
pass works through them CHUNK_POSITIONS positions at a time: the float32 working copies
(scaled logits, exponentials) exist for one chunk only, and backward recomputes them chunk by
chunk from the saved logits and two floats per position (log Z, H).
"""

from __future__ import annotations

import torch

# Positions per chunk: each float32 working copy is CHUNK_POSITIONS x V/TP x 4 bytes
# (311 MB at V = 151,936, TP = 1), a few of them at once, instead of full-size copies.
CHUNK_POSITIONS = 512
# Up to this many logits (positions x V) on one TP rank, in one chunk, torch's own ops do the
# pass: the float32 copies autograd keeps are at most 256 KiB, and the custom Function's Python
# forward and backward cost more than the arithmetic (the tiny recipe: 224 x 16 logits a
# micro-batch; about 4% of its actor update, py-spy).
SMALL_LOGITS = 1 << 16


def vocab_parallel_log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_positions: int = CHUNK_POSITIONS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) and H(p) per position, p = softmax(logits / temperature) over the full vocab.

    logits: [..., V / TP] this rank's vocabulary shard; targets: [...] global token ids.
    Both results are float32 with the shape of targets; their gradients flow to this rank's
    logits shard (every TP rank computes the same loss from them).
    """
    positions = logits.numel() // max(logits.shape[-1], 1)
    if logits.numel() <= SMALL_LOGITS and positions <= chunk_positions and _tp_group() is None:
        return _small_log_probs_and_entropy(logits, targets, float(temperature), with_entropy)
    log_probs, entropy = _LogProbsAndEntropy.apply(
        logits, targets, float(temperature), with_entropy, chunk_positions
    )
    return log_probs, entropy if with_entropy else None


def _small_log_probs_and_entropy(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The same pass as _LogProbsAndEntropy on one rank with torch's ops (autograd's own
    backward): log p = log_softmax(z)[target], H = -sum p log p, z = logits / T in float32."""
    log_p = torch.log_softmax(logits.float() / temperature, dim=-1)
    log_probs = log_p.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return log_probs, None
    return log_probs, -(log_p.exp() * log_p).sum(dim=-1)


def _tp_group():
    from megatron.core import parallel_state

    if parallel_state.get_tensor_model_parallel_world_size() == 1:
        return None
    return parallel_state.get_tensor_model_parallel_group()


def _vocab_start(shard_size: int) -> int:
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_rank() * shard_size


class _LogProbsAndEntropy(torch.autograd.Function):
    """With z = logits / T, log Z = logsumexp over the whole vocabulary (all TP shards):
        log p_t = z_t - log Z,            d log p_t / dz_v = 1[v = t] - p_v
        H = log Z - sum_v p_v z_v,        dH / dz_v = -p_v (log p_v + H)
    and d/dlogits = d/dz / T. Backward needs only the logits, the targets, log Z and H (a few
    floats per position), and no TP communication: log Z is already global."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, with_entropy, chunk_positions):
        shard_size = logits.shape[-1]
        flat_logits = logits.reshape(-1, shard_size)
        local_ids, on_this_rank = _local_targets(targets.reshape(-1), shard_size)
        group = _tp_group()
        # log Z = shift + log_sum, kept apart: z - shift - log_sum rounds as the forward did
        shifts = torch.empty(flat_logits.shape[0], dtype=torch.float32, device=logits.device)
        log_sums, log_probs = torch.empty_like(shifts), torch.empty_like(shifts)
        entropy = torch.empty_like(shifts) if with_entropy else None
        for rows in _chunks(flat_logits.shape[0], chunk_positions):
            z = flat_logits[rows].float() / temperature
            shift = z.max(dim=-1).values
            if group is not None:
                torch.distributed.all_reduce(shift, op=torch.distributed.ReduceOp.MAX, group=group)
            z -= shift.unsqueeze(-1)
            exp_z = torch.exp(z)
            parts = [
                exp_z.sum(dim=-1),  # sum_v e^(z_v - shift), then the target's shifted logit
                z.gather(-1, local_ids[rows, None]).squeeze(-1) * on_this_rank[rows],
            ]
            if with_entropy:
                parts.append((exp_z * z).sum(dim=-1))  # sum_v e^(z_v - shift) (z_v - shift)
            del exp_z
            sums = torch.stack(parts)
            if group is not None:
                torch.distributed.all_reduce(sums, group=group)
            log_sum = torch.log(sums[0])
            shifts[rows], log_sums[rows] = shift, log_sum
            log_probs[rows] = sums[1] - log_sum
            if entropy is not None:
                entropy[rows] = log_sum - sums[2] / sums[0]
        ctx.save_for_backward(
            logits, local_ids, on_this_rank, shifts, log_sums, *([entropy] if with_entropy else [])
        )
        ctx.temperature, ctx.chunk_positions = temperature, chunk_positions
        ctx.set_materialize_grads(False)  # None for an output the loss does not use
        if entropy is None:  # a placeholder output: autograd.Function returns tensors only
            entropy = shifts.new_zeros(()).expand_as(shifts)
            ctx.mark_non_differentiable(entropy)
        return log_probs.view(targets.shape), entropy.view(targets.shape)

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        logits, local_ids, on_this_rank, shifts, log_sums, *entropy = ctx.saved_tensors
        if not entropy:  # with_entropy=False
            grad_entropy = None
        if grad_log_probs is None and grad_entropy is None:
            return None, None, None, None, None
        shard_size = logits.shape[-1]
        flat_logits = logits.reshape(-1, shard_size)
        grad_logits = torch.empty_like(flat_logits)
        grad_lp = None if grad_log_probs is None else grad_log_probs.reshape(-1).float()
        grad_h = None if grad_entropy is None else grad_entropy.reshape(-1).float()
        for rows in _chunks(flat_logits.shape[0], ctx.chunk_positions):
            log_p = flat_logits[rows].float() / ctx.temperature
            log_p -= shifts[rows].unsqueeze(-1)
            log_p -= log_sums[rows].unsqueeze(-1)
            p = torch.exp(log_p)
            if grad_h is not None:  # -g_H p (log p + H), in log_p's memory
                grad_z = log_p.add_(entropy[0][rows].unsqueeze(-1)).mul_(p)
                grad_z.mul_(-grad_h[rows].unsqueeze(-1))
                if grad_lp is not None:
                    grad_z.addcmul_(p, grad_lp[rows].unsqueeze(-1), value=-1.0)
            else:
                assert grad_lp is not None, "both grads None returned above"
                grad_z = p.mul_(-grad_lp[rows].unsqueeze(-1))
            if grad_lp is not None:  # g_lp (1[v = t] - p): the 1[v = t] part
                grad_z.scatter_add_(
                    -1, local_ids[rows, None], (grad_lp[rows] * on_this_rank[rows])[:, None]
                )
            grad_logits[rows] = grad_z.div_(ctx.temperature)
        return grad_logits.view(logits.shape), None, None, None, None


def _local_targets(targets: torch.Tensor, shard_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Column of each target in this rank's shard (0 where another rank holds it) and a 0/1
    float mask of the targets this rank holds."""
    local_ids = targets.long() - _vocab_start(shard_size)
    on_this_rank = (local_ids >= 0) & (local_ids < shard_size)
    return local_ids.clamp(0, shard_size - 1), on_this_rank.float()


def _chunks(num_positions: int, chunk_positions: int):
    for start in range(0, num_positions, chunk_positions):
        yield slice(start, min(start + chunk_positions, num_positions))
