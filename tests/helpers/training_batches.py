"""A small training batch for one actor (random prompts and responses, the actor's own
log-probs as old and reference, a linear ramp of advantages): shared by the CPU and CUDA
offload tests."""

import torch

from hyrl.algorithms.batch import pack


def training_batch(actor, seed: int, rows: int = 8):
    generator = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(rows)]
    responses = [torch.randint(3, 15, (3,), generator=generator).tolist() for _ in range(rows)]
    batch = pack(prompts, responses, torch.zeros(rows), pad_id=0)
    batch.old_log_probs, _ = actor.log_probs(batch)
    batch.ref_log_probs = batch.old_log_probs
    batch.advantages = torch.linspace(-1, 1, rows)[:, None].expand_as(batch.old_log_probs)
    return batch
