"""Run by torchrun from tests/unit/backends/test_megatron_training.py: one optimizer step of the
actor under DP = world size on megatron's DDP, with or without the distributed optimizer, in fp32
or bf16.

Usage: torchrun --nproc-per-node N tests/helpers/dp_worker.py OUT.json DISTRIBUTED(0|1) BF16(0|1)
Writes rank 0's view: Adam-state elements held by each rank, the gradient norm, the first
weights after the step, and the noise scale's small-batch squared norms (one per DP rank).
"""

import json
import os
import sys

import torch

from hyrl.algorithms.batch import pack
from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
from hyrl.models.qwen3_moe.config import TINY


def batch():
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(8)]
    responses = [torch.randint(3, 15, (1 + i % 3,), generator=generator).tolist() for i in range(8)]
    return pack(prompts, responses, torch.linspace(-1, 1, 8), pad_id=0)


def adam_elements(actor) -> int:
    """Elements of Adam's moments this rank holds (every chained part, distinct tensors)."""
    seen, total = set(), 0
    for sub in actor.optimizer.chained_optimizers:
        for state in sub.optimizer.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if id(state[key]) not in seen:
                    seen.add(id(state[key]))
                    total += state[key].numel()
    return total


def main(out_path: str, distributed: bool, bf16: bool) -> None:
    from megatron.core import parallel_state

    world = int(os.environ.get("WORLD_SIZE", "1"))
    init_distributed(ParallelLayout(), seed=7)
    torch.manual_seed(0)
    from transformers import Qwen3MoeForCausalLM

    hf_model = Qwen3MoeForCausalLM(TINY.to_hf_config()).eval()  # same weights on every rank
    actor = MegatronActor(
        TINY,
        ParallelLayout(),
        ActorSettings(
            optim=OptimizerSettings(
                micro_batch_size=4, clip_grad=0.0, bf16=bf16, use_distributed_optimizer=distributed
            )
        ),
    )
    actor.load_hf_state_dict(hf_model.state_dict())
    full = batch()
    rank = parallel_state.get_data_parallel_rank()
    per_rank = len(full) // world
    local = full.select(slice(rank * per_rank, (rank + 1) * per_rank))
    local.old_log_probs, _ = actor.log_probs(local)
    metrics = actor.train_step(local, total_tokens=full.num_response_tokens, lr=1e-2)
    elements = torch.tensor([adam_elements(actor)])
    gathered = [torch.zeros_like(elements) for _ in range(world)]
    torch.distributed.all_gather(gathered, elements)
    after = actor.export_full_state_dict()
    if torch.distributed.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(
                {
                    "adam_elements": [int(x) for x in gathered],
                    "params": sum(p.numel() for p in actor.model.parameters()),
                    "param_dtype": str(next(actor.model.parameters()).dtype),
                    "grad_norm": metrics["actor/grad_norm"],
                    "small_sq": actor._small_batch[0] if actor._small_batch else None,
                    "weights_after": {
                        k: v.float().flatten()[:8].tolist() for k, v in sorted(after.items())
                    },
                },
                f,
            )
    destroy_distributed()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1")
