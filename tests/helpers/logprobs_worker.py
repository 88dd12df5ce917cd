"""The unchunked log-prob pass hyrl used before (the reference the chunked one must equal), and
two runs for tests/unit/backends/test_logprobs.py.

  torchrun --nproc-per-node 2 tests/helpers/logprobs_worker.py tp2 OUT.json
      TP=2: values and gradients of the chunked pass against the reference and torch.
  python tests/helpers/logprobs_worker.py memory chunked|unchunked POSITIONS VOCAB backward|no_grad
      prints the peak resident memory (MiB) of one pass (forward and backward, or the no-grad
      log-prob pass) beyond the logits.
"""

from __future__ import annotations

import json
import resource
import sys

import torch


def unchunked_log_probs_and_entropy(logits, targets, temperature=1.0, with_entropy=False):
    """hyrl.backends.megatron.logprobs before chunking, verbatim: full-size float copies."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

    logits = logits.float() / temperature
    with torch.no_grad():
        shift = logits.max(dim=-1, keepdim=True).values
        torch.distributed.all_reduce(
            shift,
            op=torch.distributed.ReduceOp.MAX,
            group=parallel_state.get_tensor_model_parallel_group(),
        )
    shifted = logits - shift
    log_z = torch.log(reduce_from_tensor_model_parallel_region(shifted.exp().sum(dim=-1)))

    shard_size = logits.shape[-1]
    vocab_start = parallel_state.get_tensor_model_parallel_rank() * shard_size
    local_ids = targets - vocab_start
    on_this_rank = (local_ids >= 0) & (local_ids < shard_size)
    target_logit = shifted.gather(-1, local_ids.clamp(0, shard_size - 1).unsqueeze(-1)).squeeze(-1)
    target_logit = reduce_from_tensor_model_parallel_region(target_logit * on_this_rank)
    log_probs = target_logit - log_z

    entropy = None
    if with_entropy:
        probs = torch.exp(shifted - log_z.unsqueeze(-1))
        entropy = log_z - reduce_from_tensor_model_parallel_region((probs * shifted).sum(dim=-1))
    return log_probs, entropy


def values_and_grads(fn, logits, targets, temperature, weights):
    """log p, H, and the gradient of sum(w_lp log p + w_H H) with respect to the logits."""
    leaf = logits.detach().clone().requires_grad_(True)
    log_probs, entropy = fn(leaf, targets, temperature=temperature, with_entropy=True)
    (grad,) = torch.autograd.grad(
        (weights[0] * log_probs).sum() + (weights[1] * entropy).sum(), leaf
    )
    return log_probs.detach(), entropy.detach(), grad


def tp2(out_path: str) -> None:
    from megatron.core import parallel_state

    from hyrl.backends.megatron.logprobs import vocab_parallel_log_probs_and_entropy
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(tensor_model_parallel_size=2), seed=1)
    rank = parallel_state.get_tensor_model_parallel_rank()
    gen = torch.Generator().manual_seed(0)  # the same full logits on both ranks
    vocab, shard = 64, 32
    full = torch.randn(3, 7, vocab, generator=gen) * 4.0
    targets = torch.randint(0, vocab, (3, 7), generator=gen)
    weights = (torch.randn(3, 7, generator=gen), torch.randn(3, 7, generator=gen))
    mine = full[..., rank * shard : (rank + 1) * shard]
    result = {}
    local = slice(rank * shard, (rank + 1) * shard)
    log_prob_weights = (weights[0], torch.zeros_like(weights[1]))  # a loss of log p only
    for temperature in (1.0, 0.7):

        def run(fn, logits, loss_weights, temperature=temperature):
            return values_and_grads(fn, logits, targets, temperature, loss_weights)

        def chunked_fn(*args, **kwargs):
            return vocab_parallel_log_probs_and_entropy(*args, **kwargs, chunk_positions=4)

        chunked = run(chunked_fn, mine, weights)
        unchunked = run(unchunked_log_probs_and_entropy, mine, weights)
        torch_full = run(_torch_full_vocab, full, weights)
        torch_mine = (*torch_full[:2], torch_full[2][..., local])
        result[str(temperature)] = {
            # [log p, H, gradient of w_lp log p + w_H H]
            "chunked_vs_unchunked": _max_diffs(chunked, unchunked),
            "chunked_vs_torch": _max_diffs(chunked, torch_mine),
            "unchunked_vs_torch": _max_diffs(unchunked, torch_mine),
            # the gradient of a loss of log p only
            "log_prob_grad_chunked_vs_unchunked": _max_diffs(
                run(chunked_fn, mine, log_prob_weights)[2:],
                run(unchunked_log_probs_and_entropy, mine, log_prob_weights)[2:],
            )[0],
            "grad_abs_max": float(chunked[2].abs().max()),
        }
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(result, f)
    destroy_distributed()


def _max_diffs(ours, theirs) -> list[float]:
    return [float((a - b).abs().max()) for a, b in zip(ours, theirs)]


def _torch_full_vocab(logits, targets, temperature=1.0, with_entropy=True):
    scaled = logits.float() / temperature
    log_probs = torch.log_softmax(scaled, dim=-1).gather(-1, targets[..., None])[..., 0]
    return log_probs, torch.distributions.Categorical(logits=scaled).entropy()


def memory(impl: str, positions: int, vocab: int, mode: str) -> None:
    """Peak RSS growth (MiB) over the resident logits of forward + backward (log p and H both
    in the loss; the logits' gradient, as large as they are, is part of it) or of the no-grad
    pass."""
    from hyrl.backends.megatron.logprobs import vocab_parallel_log_probs_and_entropy
    from hyrl.backends.megatron.model import ParallelLayout, init_distributed

    init_distributed(ParallelLayout(), seed=1)
    fn = {
        "chunked": vocab_parallel_log_probs_and_entropy,
        "unchunked": unchunked_log_probs_and_entropy,
    }[impl]
    torch.manual_seed(0)
    logits = torch.randn(1, positions, vocab).requires_grad_(mode == "backward")
    targets = torch.randint(0, vocab, (1, positions))
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if mode == "backward":
        log_probs, entropy = fn(logits, targets, temperature=0.7, with_entropy=True)
        (log_probs.sum() + entropy.sum()).backward()
    else:
        with torch.no_grad():
            fn(logits, targets, temperature=0.7, with_entropy=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "impl": impl,
                "mode": mode,
                "positions": positions,
                "vocab": vocab,
                "logits_mib": logits.numel() * 4 / 2**20,
                "peak_above_logits_mib": (peak - baseline) / 1024,
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1] == "tp2":
        tp2(sys.argv[2])
    else:
        memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
