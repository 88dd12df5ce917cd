"""Run by torchrun from tests: a fresh actor (with its reference copy) and critic built as the
backend builds them from one seed, their initial weights gathered in full, then one actor step.

Usage: torchrun --nproc-per-node N tests/helpers/initial_weights_worker.py OUT.pt TP EP PP [V L]
V: virtual pipeline stages per pipeline rank (0: none); L: layers (default: TINY's 2). Rank 0
writes OUT.pt: the gathered actor and critic weights, the global RNG state after the
builds, the step's loss and gradient norm. TP > 1 runs with sequence parallelism.
"""

import dataclasses
import sys

import torch

from hyrl.algorithms.batch import pack
from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
from hyrl.backends.megatron.critic import CriticSettings, MegatronCritic
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
from hyrl.backends.megatron.weights import gather_full_state_dict
from hyrl.models.qwen3_moe.config import TINY

SEED = 11


def one_step(actor: MegatronActor) -> dict:
    """The actor's first step on a fixed batch of 8 responses, this DP rank's rows."""
    from megatron.core import parallel_state

    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(8)]
    responses = [torch.randint(0, 16, (1 + i % 3,), generator=generator).tolist() for i in range(8)]
    full = pack(prompts, responses, torch.linspace(-1, 1, 8), pad_id=0, pad_to_multiple_of=2)
    dp_rank = parallel_state.get_data_parallel_rank()
    per_rank = len(full) // parallel_state.get_data_parallel_world_size()
    local = full.select(slice(dp_rank * per_rank, (dp_rank + 1) * per_rank))
    local.old_log_probs, _ = actor.log_probs(local)
    metrics = actor.train_step(local, total_tokens=full.num_response_tokens, lr=1e-2)
    return {"loss": metrics["actor/loss"], "grad_norm": metrics["actor/grad_norm"]}


def main(out_path: str, tp: int, ep: int, pp: int, vp: int = 0, layers: int = 0) -> None:
    arch = dataclasses.replace(TINY, num_layers=layers) if layers else TINY
    layout = ParallelLayout(
        tensor_model_parallel_size=tp,
        expert_model_parallel_size=ep,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp or None,
        sequence_parallel=tp > 1,
    )
    init_distributed(layout, seed=SEED)
    torch.manual_seed(SEED)  # as MegatronBackend seeds before it builds
    optim = OptimizerSettings(micro_batch_size=2, clip_grad=0.0)
    actor = MegatronActor(arch, layout, ActorSettings(optim=optim, keep_reference=True))
    critic = MegatronCritic(arch, layout, CriticSettings(optim=optim))
    rng_after_builds = torch.get_rng_state()
    actor_weights = gather_full_state_dict(actor.chunks, arch)
    reference_weights = gather_full_state_dict(actor.ref_chunks, arch)
    critic_weights = gather_full_state_dict(critic.chunks, arch)
    step = one_step(actor)
    if torch.distributed.get_rank() == 0:
        result = {
            "actor": actor_weights,
            "reference": reference_weights,
            "critic": critic_weights,
            "rng_after_builds": rng_after_builds,
            **step,
        }
        torch.save(result, out_path)
    destroy_distributed()


if __name__ == "__main__":
    main(sys.argv[1], *(int(arg) for arg in sys.argv[2:]))
