"""Host memory of a training node (pure): what --offload-train pins while colocated engines
generate (hyrl/backends/megatron/offload.py), from the plan's per-GPU memory lines, and what a
checkpoint save gathers.

    parked per GPU = weights + optimizer states (+ the KL reference's weights, + the critic's
                     weights and optimizer states); gradient buffers are freed, not copied
    per node       = parked per GPU x training GPUs a node (up to twice that: torch's caching
                     host allocator rounds each pinned buffer up to a power of two)
    save per GPU   = 12 B x the trained models' params per GPU: the distributed optimizer's
                     "fully_reshardable" save (hyrl/backends/megatron/train_checkpoint.py)
                     gathers the fp32 param, Adam m and v of the rank's model-parallel shard
                     from its whole DP group onto every rank, in host memory (megatron-core
                     0.16.1 distrib_optimizer.get_parameter_state_dp_zero with
                     return_on_all_ranks). Its memory-efficient variant
                     (distrib_optim_fully_reshardable_mem_efficient: Gloo, DP rank 0 only) is
                     not used: one rank per DP group would then gather and write every
                     optimizer state alone, no save in parallel along DP, and the preemption
                     lead must hold a save.

The per-GPU lines are the most loaded pipeline stage's, so this is an upper bound per GPU and
a lower bound of the node's host memory: Ray, the data, SGLang's own host memory and the
reward workers are not counted.
"""

from __future__ import annotations

from hyrl.plan.memory import GIB

PARKED_LINES = (
    "actor weights",
    "actor optimizer (Adam)",
    "reference weights",
    "critic weights",
    "critic optimizer (Adam)",
)


def host_memory_plan(
    memory_lines: list[dict],
    offloading: bool,
    training_gpus_per_node: int | None,
    save_bytes_per_gpu: float = 0.0,
) -> dict:
    """{"offloading", and with it "per_gpu_bytes", "parked" (the line names); with the GPUs a
    node trains on, "gpus_per_node" and "per_node_bytes"; "save_per_gpu_bytes" (and
    "save_per_node_bytes") when a save gathers optimizer states (`save_bytes_per_gpu`, 0 when
    not: no distributed optimizer)}."""
    out: dict = {"offloading": offloading}
    if training_gpus_per_node:
        out["gpus_per_node"] = training_gpus_per_node
    if save_bytes_per_gpu:
        out["save_per_gpu_bytes"] = save_bytes_per_gpu
        if training_gpus_per_node:
            out["save_per_node_bytes"] = save_bytes_per_gpu * training_gpus_per_node
    if not offloading:
        return out
    parked = [line for line in memory_lines if line["name"] in PARKED_LINES]
    per_gpu = sum(line["bytes"] for line in parked)
    out.update(per_gpu_bytes=per_gpu, parked=[x["name"] for x in parked])
    if training_gpus_per_node:
        out["per_node_bytes"] = per_gpu * training_gpus_per_node
    return out


def format_host_memory(plan: dict | None) -> list[str]:
    """The plan table's host-memory lines."""
    if not plan:
        return []
    out = []
    if not plan["offloading"]:
        out.append(
            "  host RAM: no --offload-train: nothing parked (Ray, data, engines not modelled)"
        )
    elif "per_node_bytes" not in plan:
        out.append(
            f"  host RAM: {plan['per_gpu_bytes'] / GIB:.1f} GiB pinned per training GPU for "
            f"--offload-train ({' + '.join(plan['parked'])}); give --gpus-per-node for a node's"
        )
    else:
        out.append(
            f"  host RAM per node: at least {plan['per_node_bytes'] / GIB:.1f} GiB pinned for "
            f"--offload-train = {plan['gpus_per_node']} training GPUs x "
            f"{plan['per_gpu_bytes'] / GIB:.1f} GiB ({' + '.join(plan['parked'])}), up to "
            f"{2 * plan['per_node_bytes'] / GIB:.1f} GiB (torch's caching host allocator rounds "
            "each pinned buffer up to a power of two); not counted: Ray, data, SGLang's host "
            "memory, reward workers"
        )
    if "save_per_gpu_bytes" in plan:
        per_node = (
            f", {plan['save_per_node_bytes'] / GIB:.1f} GiB a node"
            if "save_per_node_bytes" in plan
            else ""
        )
        out.append(
            f"    during a save: + {plan['save_per_gpu_bytes'] / GIB:.1f} GiB per training GPU"
            f"{per_node} (12 B x params per GPU: the fully_reshardable optimizer save gathers "
            "each model-parallel shard's fp32 param, Adam m and v onto every rank of its DP "
            "group in host memory; the memory-efficient variant, DP rank 0 alone, is not used: "
            "it would write every optimizer state from one rank per DP group)"
        )
    return out
