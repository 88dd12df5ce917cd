"""Host memory a node pins for --offload-train (pure): what the trainer parks in host memory
while colocated engines generate (hyrl/backends/megatron/offload.py), from the plan's per-GPU
memory lines.

    parked per GPU = weights + optimizer states (+ the KL reference's weights, + the critic's
                     weights and optimizer states); gradient buffers are freed, not copied
    per node       = parked per GPU x training GPUs a node

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
    memory_lines: list[dict], offloading: bool, training_gpus_per_node: int | None
) -> dict:
    """{"offloading", and with it "per_gpu_bytes", "parked" (the line names), and with the GPUs
    a node trains on, "per_node_bytes", "gpus_per_node"}."""
    if not offloading:
        return {"offloading": False}
    parked = [line for line in memory_lines if line["name"] in PARKED_LINES]
    per_gpu = sum(line["bytes"] for line in parked)
    out = {"offloading": True, "per_gpu_bytes": per_gpu, "parked": [x["name"] for x in parked]}
    if training_gpus_per_node:
        out["gpus_per_node"] = training_gpus_per_node
        out["per_node_bytes"] = per_gpu * training_gpus_per_node
    return out


def format_host_memory(plan: dict | None) -> list[str]:
    """The plan table's host-memory line."""
    if not plan:
        return []
    if not plan["offloading"]:
        return ["  host RAM: no --offload-train: nothing parked (Ray, data, engines not modelled)"]
    what = " + ".join(plan["parked"])
    per_gpu = plan["per_gpu_bytes"] / GIB
    if "per_node_bytes" not in plan:
        return [
            f"  host RAM: {per_gpu:.1f} GiB pinned per training GPU for --offload-train ({what}); "
            "give --gpus-per-node for a node's"
        ]
    return [
        f"  host RAM per node: at least {plan['per_node_bytes'] / GIB:.1f} GiB pinned for "
        f"--offload-train = {plan['gpus_per_node']} training GPUs x {per_gpu:.1f} GiB ({what}), "
        f"up to {2 * plan['per_node_bytes'] / GIB:.1f} GiB (torch's caching host allocator "
        "rounds each pinned buffer up to a power of two); not counted: a checkpoint save's "
        "host copies, Ray, data, SGLang's host memory, reward workers"
    ]
