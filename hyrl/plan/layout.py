"""Megatron's rank layout of a run: parallel sizes and the rank groups they make."""

from __future__ import annotations

import itertools
import math

from hyrl.config.concerns.parallel import ParallelView

# Ranks above this are summarised instead of listing every group.
MAX_RANKS_LISTED = 64
# Megatron-core 0.16's rank order (parallel_state.initialize_model_parallel(order=...)):
# consecutive ranks first vary TP, then CP, EP, DP, and PP last.
MEGATRON_ORDER = ("tp", "cp", "ep", "dp", "pp")


def rank_groups(sizes: dict[str, int], token: str) -> list[list[int]]:
    """Megatron's rank groups of the parallelism `token` ("tp", "dp", "tp-ep", ...).

    Ranks are laid out in `sizes`' order, the first fastest (rank = sum idx_i x stride_i); a
    group varies the named dimensions and fixes the others, as
    parallel_state.generate_masked_orthogonal_rank_groups does.
    """
    names = list(sizes)
    strides = [math.prod(sizes[n] for n in names[:i]) for i in range(len(names))]
    varying = [i for i, n in enumerate(names) if n in token.split("-")]
    fixed = [i for i in range(len(names)) if i not in varying]

    def indices(dims):  # every index tuple over dims, the first dimension fastest
        for combo in itertools.product(*[range(sizes[names[i]]) for i in reversed(dims)]):
            yield tuple(reversed(combo))

    groups = []
    for fixed_idx in indices(fixed):
        base = sum(i * strides[dim] for i, dim in zip(fixed_idx, fixed))
        groups.append(
            [
                base + sum(i * strides[dim] for i, dim in zip(var_idx, varying))
                for var_idx in indices(varying)
            ]
        )
    return groups


def parallel_layout(parallel: ParallelView, world_size: int) -> dict:
    tp, pp = parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size
    ep, etp = parallel.expert_model_parallel_size, parallel.expert_tensor_parallel_size
    return {
        "tp": tp,
        "pp": pp,
        "vp": parallel.virtual_pipeline_model_parallel_size,  # chunks per pipeline rank; None: one
        "ep": ep,
        "etp": etp,
        "cp": 1,
        "dp": world_size // (tp * pp),
        "expert_dp": world_size // (ep * etp * pp),
        "sequence_parallel": parallel.sequence_parallel,
        "order": "-".join(MEGATRON_ORDER),
    }


def layout_groups(layout: dict) -> dict:
    dense = {"tp": layout["tp"], "cp": 1, "ep": 1, "dp": layout["dp"], "pp": layout["pp"]}
    expert = {
        "tp": layout["etp"],
        "cp": 1,
        "ep": layout["ep"],
        "dp": layout["expert_dp"],
        "pp": layout["pp"],
    }
    return {
        "tp": rank_groups(dense, "tp"),
        "dp": rank_groups(dense, "dp"),
        "pp": rank_groups(dense, "pp"),
        "ep": rank_groups(expert, "ep"),
        "expert_dp": rank_groups(expert, "dp"),
    }


def groups_spanning_nodes(groups: list[list[int]], gpus_per_node: int) -> list[list[int]]:
    return [grp for grp in groups if len({r // gpus_per_node for r in grp}) > 1]


def summarise_groups(groups: dict) -> dict:
    return {
        name: {"count": len(grps), "size": len(grps[0]), "first": grps[0], "last": grps[-1]}
        for name, grps in groups.items()
    }
