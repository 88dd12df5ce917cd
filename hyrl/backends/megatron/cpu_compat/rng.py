"""megatron's model-parallel RNG streams on CPU generators: its tracker swaps CUDA generator
states, and its seeding builds them with CUDA generators."""

from __future__ import annotations

import torch

from hyrl.backends.megatron.cpu_compat.machine import on_cpu


def cpu_generator_for_rng_tracker() -> None:
    """The model-parallel RNG tracker swaps CUDA generator states (in and out of its `fork`):
    on a CPU-only machine it swaps the CPU generator's."""
    from megatron.core.tensor_parallel import random as mp_random

    def _get_rng_state(device="cuda", clone=False, graph_safe=False):
        state = torch.get_rng_state()
        return state.clone() if clone else state

    def _set_rng_state(new_state, device=-1, graph_safe=False):
        torch.set_rng_state(new_state)

    mp_random._get_cuda_rng_state = _get_rng_state
    mp_random._set_cuda_rng_state = _set_rng_state


def seed_model_parallel_rng(seed: int) -> None:
    """Seed megatron's named RNG streams (data-parallel, tensor-parallel, expert)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    if not on_cpu():
        mp_random.model_parallel_cuda_manual_seed(seed)
        return
    # Same seed layout as model_parallel_cuda_manual_seed, on CPU generators.
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    etp_rank = parallel_state.get_expert_tensor_parallel_rank()
    mp_random.initialize_rng_tracker(force_reset=True)
    tracker = mp_random.get_cuda_rng_tracker()
    streams = {
        mp_random._DATA_PARALLEL_RNG_TRACKER_NAME: seed,
        mp_random._MODEL_PARALLEL_RNG_TRACKER_NAME: seed + 2718 + tp_rank,
        mp_random._EXPERT_PARALLEL_RNG_TRACKER_NAME: seed + 1024 + 100 * ep_rank + etp_rank,
    }
    tracker.set_states(
        {name: torch.Generator().manual_seed(s).get_state() for name, s in streams.items()}
    )
