"""Run by torchrun from tests/unit/backends/test_dynamic_batch.py: dynamic micro-batches whose
count differs between data-parallel ranks (skewed lengths), under EP = world size, against one rank.

Usage: torchrun --nproc-per-node N tests/helpers/skew_worker.py OUT.json [bshd|thd]
Writes rank 0's view: the log-probs of every row, the loss and the gradient norm of one step
(thd: micro-batches packed, with the packed totals of rank 0's micro-batches and its own need).
"""

import json
import sys

import torch

from hyrl.algorithms.batch import pack
from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
from hyrl.models.qwen3_moe.config import TINY

# rows 0-3 short (one micro-batch of 4 under the budget), rows 4-7 long (one row each)
LENGTHS = [(2, 1), (2, 1), (3, 1), (2, 2), (9, 8), (10, 7), (8, 9), (11, 6)]
MAX_TOKENS = 20


def main(out_path: str, qkv_format: str = "bshd") -> None:
    import os

    from megatron.core import parallel_state

    world = int(os.environ.get("WORLD_SIZE", "1"))
    layout = ParallelLayout(expert_model_parallel_size=world)
    init_distributed(layout, seed=7, timeout_minutes=1.0)  # a hang fails within a minute
    torch.manual_seed(0)
    from transformers import Qwen3MoeForCausalLM

    hf_model = Qwen3MoeForCausalLM(TINY.to_hf_config()).eval()  # same weights on every rank
    actor = MegatronActor(
        TINY,
        layout,
        ActorSettings(
            optim=OptimizerSettings(
                micro_batch_size=1,
                clip_grad=0.0,
                noise_scale_beta=None,
                max_tokens_per_micro_batch=MAX_TOKENS,
                packed_sequences=qkv_format == "thd",
            )
        ),
    )
    actor.load_hf_state_dict(hf_model.state_dict())

    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 15, (p,), generator=generator).tolist() for p, _ in LENGTHS]
    responses = [torch.randint(3, 15, (r,), generator=generator).tolist() for _, r in LENGTHS]
    full = pack(prompts, responses, torch.linspace(-1, 1, len(LENGTHS)), pad_id=0)
    dp_rank = parallel_state.get_data_parallel_rank()
    per_rank = len(full) // parallel_state.get_data_parallel_world_size()
    local = full.select(slice(dp_rank * per_rank, (dp_rank + 1) * per_rank))
    micro_batches = actor._micro_batches(local)  # (micro-batch, rows) pairs
    counts = [len(micro_batches)]
    packed_totals = [mb.packing.total for mb, _ in micro_batches if mb.packing is not None]
    own_needs = [
        mb.packing.needed(mb.sequence_lengths(), mb.tokens.shape[1])
        for mb, _ in micro_batches
        if mb.packing is not None
    ]

    log_probs, _ = actor.log_probs(local)
    gathered = [torch.empty_like(log_probs) for _ in range(world)]
    torch.distributed.all_gather(gathered, log_probs.contiguous())
    local.old_log_probs = log_probs
    metrics = actor.train_step(local, total_tokens=full.num_response_tokens, lr=1e-2)
    if torch.distributed.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(
                {
                    "log_probs": (torch.cat(gathered) * full.loss_mask).tolist(),
                    "loss": metrics["actor/loss"],
                    "grad_norm": metrics["actor/grad_norm"],
                    "micro_batches": counts,
                    "packed_totals": packed_totals,
                    "own_needs": own_needs,
                },
                f,
            )
    destroy_distributed()


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:3])
