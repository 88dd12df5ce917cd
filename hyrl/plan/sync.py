"""The predicted time of one weight sync (the actor's weights to the SGLang engines): a model
from the bytes to move and link bandwidths, not a measurement (pure arithmetic, no torch).

What a sync does (hyrl/backends/megatron/weights.py, iter_full_parameters; hyrl/weight_sync/ and
hyrl/rollout/sglang/receive/), and what the model charges for it, one step after the other
(the stream builds the next bucket only after the last one is in; TRANSFERS says which transfer
each transport makes, by the names of hyrl.config.weight_transport):

- TP all-gather: every rank gathers the TP-split parameters (attention q/k/v/o, embedding,
  output layer; norms and routers are whole on every rank) over its TP group: a ring
  all-gather of S bytes takes S x (TP - 1) / TP / bus bandwidth;
- EP all-gather: every rank gathers the routed experts over its EP group (ETP = 1):
  experts x (EP - 1) / EP / bus bandwidth;
- PP broadcast (PP > 1): every stage's parameters go to the other stages, stage after stage:
  the whole model / bus bandwidth;
  each over NVLink when the group stays inside a node, over InfiniBand when it spans nodes
  (--gpus-per-node says which; group_bus_bandwidth);
- the transfer:
  - colocated (--update-weight-transport tensor with --colocate): CUDA IPC on each GPU: the trainer
    rank copies every bucket into one flat buffer (the whole model), the engine's TP rank on
    the same GPU copies its shard out of it (the model / engine TP); each copy reads and writes
    its bytes in HBM;
  - engines on GPUs of their own (--update-weight-transport distributed): rank 0 broadcasts every
    bucket over NCCL to the engines' GPUs on the rollout nodes: the whole model through rank
    0's one NIC, then the engine's shard copy in HBM as above.

Bandwidths are nominal link peaks per GPU, one direction (Links); NCCL reaches a fraction of
them, so the time is a lower bound of what these terms cost. Not modelled: the per-bucket HTTP
calls, serialization and latency, SGLang's pause, /end_weight_update post-processing and cache
flush, and the gathers overlapping the transfer (they do not: see above).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from hyrl.config.weight_transport import DISK, DISTRIBUTED, LOAD_STATE_DICT, TENSOR

GB = 1e9  # the model speaks decimal GB and GB/s, as link bandwidths are quoted


@dataclass(frozen=True)
class Links:
    """Bandwidths the model assumes, per GPU and direction; `hyrl plan --nvlink-gb-s ...`."""

    # NVLink 4 on H100/H200 SXM: 18 links x 50 GB/s = 900 GB/s both directions, 450 each way
    nvlink_gb_s: float = 450.0
    # one 400 Gb/s NDR InfiniBand NIC per GPU (DGX/HGX H100 and H200 nodes): 50 GB/s
    ib_gbit_s: float = 400.0
    # H100 SXM's HBM3 (H200: 4800 GB/s): a copy reads and writes every byte
    hbm_gb_s: float = 3350.0

    @property
    def ib_gb_s(self) -> float:
        return self.ib_gbit_s / 8


LINK_FLAGS = {
    "--nvlink-gb-s": ("nvlink_gb_s", "NVLink bus bandwidth per GPU, one direction (GB/s)"),
    "--ib-gbit-s": ("ib_gbit_s", "InfiniBand per GPU (Gb/s)"),
    "--hbm-gb-s": ("hbm_gb_s", "GPU memory (HBM) bandwidth for the on-GPU copies (GB/s)"),
}

ASSUMPTIONS = (
    "nominal link peaks (no NCCL efficiency factor): a lower bound of these terms",
    "ring collectives: an all-gather of S bytes over n ranks moves S x (n - 1) / n per GPU",
    "gathers and transfer one after the other (the stream builds a bucket after the last is in)",
    "a group inside one node runs over NVLink; one spanning nodes over InfiniBand, one NIC per "
    "GPU, NCCL's rings spread over the NICs of the group's GPUs on a node (group_bus_bandwidth)",
    "separate rollout GPUs sit on nodes of their own; the distributed broadcast leaves rank "
    "0's node through rank 0's one NIC",
    "an engine's TP rank copies 1 / engine TP of the model (norms, replicated, ignored)",
)
NOT_MODELLED = (
    "per-bucket HTTP calls, serialization and latency",
    "SGLang's pause, /end_weight_update post-processing and cache flush",
)


@dataclass(frozen=True)
class Transfer:
    """What the model charges for one transport's transfer: "cuda_ipc" (on each GPU: the
    trainer rank's flat copy, then the engine TP rank's shard copy, in HBM), "broadcast" (NCCL
    out of rank 0's node through its one NIC, then the shard copy), or None: not modelled, and
    `why`."""

    path: str | None
    why: str = ""


_BY_DISK = Transfer(None, "--update-weight-transport disk (a shared file system)")
# (transport, engines on the training GPUs) -> its transfer, for every placement the layout allows
TRANSFERS: dict[tuple[str, bool], Transfer] = {
    (TENSOR, True): Transfer("cuda_ipc"),
    (TENSOR, False): Transfer(
        None,
        "--update-weight-transport tensor without --colocate (buckets through Ray's object store "
        "in host memory)",
    ),
    (DISTRIBUTED, False): Transfer("broadcast"),
    (DISK, True): _BY_DISK,
    (DISK, False): _BY_DISK,
    (LOAD_STATE_DICT, False): Transfer(None, "hf rollout engine (SGLang engines only)"),
}


def sync_seconds(
    *,
    model_bytes: float,
    tp_split_bytes: float,
    expert_bytes: float,
    tp: int,
    ep: int,
    pp: int,
    tp_bw: float,
    ep_bw: float,
    pp_bw: float,
    broadcast_bw: float | None,
    flatten: bool,
    engine_tp: int,
    hbm_bw: float,
) -> dict:
    """Seconds of each term of one sync (bandwidths in bytes/s, sizes in bytes of the sync
    dtype, whole-model sizes), and their sum:

        tp_gather    = tp_split_bytes x (TP - 1) / TP / tp_bw
        ep_gather    = expert_bytes x (EP - 1) / EP / ep_bw
        pp_broadcast = model_bytes / pp_bw                       (PP > 1, else 0)
        broadcast    = model_bytes / broadcast_bw                (None: no broadcast, 0)
        gpu_copies   = 2 x (model_bytes [flatten] + model_bytes / engine_tp) / hbm_bw
    """
    terms = {
        "tp_gather": tp_split_bytes * (tp - 1) / tp / tp_bw,
        "ep_gather": expert_bytes * (ep - 1) / ep / ep_bw,
        "pp_broadcast": model_bytes / pp_bw if pp > 1 else 0.0,
        "broadcast": model_bytes / broadcast_bw if broadcast_bw is not None else 0.0,
        "gpu_copies": 2 * ((model_bytes if flatten else 0.0) + model_bytes / engine_tp) / hbm_bw,
    }
    return {**terms, "total": sum(terms.values())}


def _size(n_bytes: float) -> str:
    return f"{n_bytes / GB:.2f} GB" if n_bytes >= 1e8 else f"{n_bytes / 1e6:.3g} MB"


def _seconds(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 0.01 else f"{seconds * 1e3:.3g} ms"


def group_bus_bandwidth(size: int, nodes: int, links: Links) -> tuple[float, str]:
    """(GB/s, text) of a ring collective over a group of `size` GPUs on `nodes` nodes.

    Inside a node: NVLink. Across nodes NCCL runs several rings (channels) at once, each
    leaving a node through the NIC of one of the group's GPUs there, so the group's
    size / nodes GPUs a node bring as many NICs: bus bandwidth min(NVLink, size / nodes x IB
    per GPU)."""
    if nodes <= 1:
        return links.nvlink_gb_s, f"NVLink {links.nvlink_gb_s:g} GB/s"
    per_node = size // nodes
    bw = min(links.nvlink_gb_s, per_node * links.ib_gb_s)
    return bw, (
        f"InfiniBand ({nodes} nodes; {per_node} GPU(s) a node x {links.ib_gb_s:g} GB/s, "
        f"at most NVLink {links.nvlink_gb_s:g}) = {bw:g} GB/s"
    )


def weight_sync_plan(
    *,
    counts: dict,
    num_layers: int,
    bytes_per_weight: int,
    dtype: str,
    layout: dict,
    group_nodes: dict[str, int] | None,
    transport: str,
    colocated: bool,
    engine_tp: int,
    buffer_bytes: int,
    links: Links,
    expert_tensors: int = 0,
) -> dict:
    """The plan's "weight_sync" entry: the inputs, each term (sync_seconds) with its text, the
    assumptions; {"modelled": False, "why": ...} for a path the model does not cover.

    counts: param_counts; group_nodes: the nodes one group of each kind ("tp", "ep", "pp")
    spans, None when --gpus-per-node is not given (then every group is taken as inside a
    node)."""
    transfer = TRANSFERS[(transport, colocated)]
    if transfer.path is None:
        return {"modelled": False, "why": transfer.why}
    tp, ep, pp = layout["tp"], layout["ep"], layout["pp"]
    nodes = group_nodes or {"tp": 1, "ep": 1, "pp": 1}
    model = bytes_per_weight * counts["total"]
    tp_split = bytes_per_weight * (
        num_layers * counts["attention_per_layer"] + counts["embedding"] + counts["output_layer"]
    )
    experts = bytes_per_weight * counts["experts"]
    tp_bw, tp_text = group_bus_bandwidth(tp, nodes["tp"], links)
    ep_bw, ep_text = group_bus_bandwidth(ep, nodes["ep"], links)
    pp_bw, pp_text = group_bus_bandwidth(pp, nodes["pp"], links)
    broadcast = transfer.path == "broadcast"
    seconds = sync_seconds(
        model_bytes=model,
        tp_split_bytes=tp_split,
        expert_bytes=experts,
        tp=tp,
        ep=ep,
        pp=pp,
        tp_bw=tp_bw * GB,
        ep_bw=ep_bw * GB,
        pp_bw=pp_bw * GB,
        broadcast_bw=links.ib_gb_s * GB if broadcast else None,
        flatten=not broadcast,
        engine_tp=engine_tp,
        hbm_bw=links.hbm_gb_s * GB,
    )
    where = "" if group_nodes is not None else " (--gpus-per-node not given: inside a node)"
    lines = [
        (
            "tp_gather",
            f"TP all-gather: {_size(tp_split)} (attention, embedding, output) x "
            f"{tp - 1}/{tp} over {tp_text}{where}",
        ),
        (
            "ep_gather",
            f"EP all-gather: {_size(experts)} experts x {ep - 1}/{ep} over {ep_text}{where}",
        ),
    ]
    if pp > 1:
        lines.append(("pp_broadcast", f"PP broadcast: {_size(model)} over {pp_text}{where}"))
    shard = model / engine_tp
    if broadcast:
        lines.append(
            (
                "broadcast",
                f"NCCL broadcast to the engines (--update-weight-transport distributed): "
                f"{_size(model)} through rank 0's InfiniBand {links.ib_gb_s:g} GB/s",
            )
        )
        copies = f"engine load: {_size(shard)} (model / engine TP {engine_tp})"
    else:
        copies = (
            f"CUDA IPC (colocated, --update-weight-transport tensor): flatten {_size(model)} + "
            f"engine load {_size(shard)} (model / engine TP {engine_tp})"
        )
    lines.append(("gpu_copies", f"{copies}, each read + written at HBM {links.hbm_gb_s:g} GB/s"))
    return {
        "modelled": True,
        "kind": "model",  # a prediction from link bandwidths, not a measurement
        "seconds": seconds["total"],
        "terms_s": {k: v for k, v in seconds.items() if k != "total"},
        "lines": [{"term": term, "seconds": seconds[term], "text": text} for term, text in lines],
        "model_bytes": model,
        "bytes_per_weight": bytes_per_weight,
        "dtype": dtype,
        "params": counts["total"],
        "buckets_at_least": math.ceil(model / buffer_bytes),
        "buffer_bytes": buffer_bytes,
        "transport": transport,
        "links": {**asdict(links), "ib_gb_s": links.ib_gb_s},
        "assumptions": list(ASSUMPTIONS),
        "not_modelled": [
            *NOT_MODELLED,
            f"SGLang's weight loader, which takes the tensors one by one in Python on every "
            f"engine TP rank ({expert_tensors:,} expert tensors alone: layers x experts x "
            "gate/up/down)",
        ],
    }


def format_weight_sync(sync: dict | None) -> list[str]:
    """The plan table's weight-sync lines."""
    if not sync:
        return []
    if not sync["modelled"]:
        return [f"  weight sync (model): not modelled for the {sync['why']}"]
    out = [
        f"  weight sync: {_seconds(sync['seconds'])} predicted, a lower bound (a model from link "
        f"bandwidths, not a measurement; what it leaves out below) to move "
        f"{_size(sync['model_bytes'])} = {sync['params']:,} params x "
        f"{sync['bytes_per_weight']} B ({sync['dtype']}, the actor's weights as sent) in >= "
        f"{sync['buckets_at_least']} buckets of {sync['buffer_bytes'] / 2**20:g} MiB",
    ]
    for line in sync["lines"]:
        out.append(f"    {_seconds(line['seconds']):>11}  {line['text']}")
    out.append("    assumes: " + "; ".join(sync["assumptions"]))
    out.append("    not modelled: " + "; ".join(sync["not_modelled"]))
    return out
