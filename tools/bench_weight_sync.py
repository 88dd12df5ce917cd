"""Peak memory of a weight sync against the bucket size, streamed and as one full dict.

    MALLOC_MMAP_THRESHOLD_=65536 OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 \
        tools/bench_weight_sync.py --tp 1 --ep 2 --buffer-mib 16,64,256 [--json]

(MALLOC_MMAP_THRESHOLD_ fixes glibc's mmap threshold, so freed tensors go back to the system
and RSS follows what is allocated; without it glibc keeps freed blocks up to 32 MiB in its heap
and RSS overstates what a sync holds.)

Builds a wide Qwen3-MoE (default ~115M parameters, fp32: 2 layers, hidden 1024, 16 experts of
ffn 1024, vocab 4096) as a Megatron actor on this machine's ranks (gloo on CPU), then on rank
0 measures, for each bucket size, a sync into an hf rollout engine (`update_weights_stream` of
`iter_hf_buckets`, what the trainer runs), and once the old path (`export_hf_state_dict`: the
whole model gathered into rank 0's host memory, then `update_weights`). Every rank takes part
in the gathers. Two measurements per sync, both on rank 0:

* counted: ``LiveBytes.peak``, the bytes the stream held at once (buckets being filled or
  handed out, gather buffers of the parameter in flight); for the full dict, its bytes.
* RSS: the process's resident memory, sampled every millisecond during the sync, highest value
  minus the value just before (what the allocator really took, whatever it was for; on CUDA
  ``torch.cuda.max_memory_allocated`` growth instead).

Not a test: a measurement, printed with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

MIB = 1024**2


def wide_arch(layers: int, hidden: int, experts: int, ffn: int, vocab: int):
    from hyrl.models.qwen3_moe.config import Qwen3MoeArch

    return Qwen3MoeArch(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=8,
        num_query_groups=4,
        kv_channels=hidden // 8,
        num_experts=experts,
        moe_ffn_hidden_size=ffn,
        moe_router_topk=2,
        vocab_size=vocab,
        max_position_embeddings=256,
    )


class PeakRss:
    """Highest RSS (or CUDA allocated bytes) above the value at entry, sampled every 1 ms."""

    def __init__(self, device: torch.device):
        import psutil

        self.device, self.process = device, psutil.Process()

    def _now(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated()
        return self.process.memory_info().rss

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        self.base = self._now()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._now())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._now())
        if self.device.type == "cuda":
            self.peak = max(self.peak, torch.cuda.max_memory_allocated())
        self.growth = self.peak - self.base


def machine() -> str:
    from bench_vs_trl import cpu_model  # tools/ is this script's folder

    cpu = cpu_model()
    import psutil

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (
        f"{cpu}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 1024**3:.0f} GiB "
        f"RAM, {gpu}; torch {torch.__version__}, Python {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--ep", type=int, default=1)
    parser.add_argument(
        "--buffer-mib",
        default="16,64,256",
        help="bucket sizes (--update-weight-buffer-size) in MiB, comma-separated",
    )
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        buffers = [int(float(b) * MIB) for b in args.buffer_mib.split(",")]
    except ValueError:
        parser.error(f"--buffer-mib {args.buffer_mib!r}: expected MiB numbers like 16,64,256")
    if any(b < 1 for b in buffers):
        parser.error(f"--buffer-mib {args.buffer_mib!r}: every size must be > 0")

    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
    from hyrl.backends.megatron.trainable import OptimizerSettings
    from hyrl.models.qwen3_moe import hf_mapping
    from hyrl.models.weight_buckets import LiveBytes, tensor_bytes
    from hyrl.rollout.hf_engine import HFRolloutEngine

    arch = wide_arch(args.layers, args.hidden, args.experts, args.ffn, args.vocab)
    layout = ParallelLayout(tensor_model_parallel_size=args.tp, expert_model_parallel_size=args.ep)
    init_distributed(layout, seed=0)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    actor = MegatronActor(arch, layout, ActorSettings(optim=OptimizerSettings(micro_batch_size=1)))
    device = next(actor.model.parameters()).device
    engine = HFRolloutEngine(arch, concurrency=1, pad_id=0, eos_id=1) if rank == 0 else None
    params = sum(p.numel() for p in engine.model.parameters()) if rank == 0 else 0
    model_bytes = sum(tensor_bytes(p) for p in engine.model.parameters()) if rank == 0 else 0

    # one unmeasured sync first: one-time allocations (gloo buffers, allocator arenas) are not
    # the sync's
    for _ in actor.hf_weight_buckets(max(buffers), keep=False):
        pass
    rows = []
    for buffer_bytes in buffers:
        live = LiveBytes()
        start = time.perf_counter()
        with PeakRss(device) as rss:
            buckets = actor.hf_weight_buckets(buffer_bytes, keep=rank == 0, live=live)
            if rank == 0:
                engine.update_weights_stream(buckets)
            else:
                for _ in buckets:
                    pass
        rows.append(
            {
                "path": "stream",
                "buffer_bytes": buffer_bytes,
                "counted_peak_bytes": live.peak,
                "rss_peak_growth_bytes": rss.growth,
                "elapsed_s": time.perf_counter() - start,
            }
        )
    start = time.perf_counter()
    with PeakRss(device) as rss:
        full = actor.export_hf_state_dict(keep=rank == 0)
        counted = sum(tensor_bytes(t) for t in full.values())
        if rank == 0:
            engine.update_weights(full)
        del full
    rows.append(
        {
            "path": "full dict",
            "buffer_bytes": None,
            "counted_peak_bytes": counted,
            "rss_peak_growth_bytes": rss.growth,
            "elapsed_s": time.perf_counter() - start,
        }
    )

    if rank == 0:
        # the engine holds what the actor holds: check the last sync really delivered it
        reference = dict(hf_mapping.split_fused_experts(actor.export_hf_state_dict()))
        got = dict(hf_mapping.split_fused_experts(engine.model.state_dict()))
        assert all(torch.equal(got[n], reference[n]) for n in reference), "sync lost weights"
    else:
        actor.export_hf_state_dict(keep=False)
    if rank == 0:
        result = {
            "machine": machine(),
            "ranks": world,
            "tp": args.tp,
            "ep": args.ep,
            "device": str(device),
            "parameters": params,
            "model_bytes": model_bytes,
            "arch": arch.as_dict(),
            "rows": rows,
        }
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print(f"machine: {result['machine']}")
            print(
                f"{world} rank(s) on {device} (TP={args.tp} EP={args.ep}); model "
                f"{params / 1e6:.1f}M parameters, {model_bytes / MIB:.0f} MiB "
                f"({next(actor.model.parameters()).dtype})"
            )
            print("| path | bucket | counted peak | RSS peak growth | peak / bucket | time |")
            print("|---|---|---|---|---|---|")
            for row in rows:
                bucket = (
                    "-" if row["buffer_bytes"] is None else f"{row['buffer_bytes'] / MIB:.0f} MiB"
                )
                ratio = (
                    "-"
                    if row["buffer_bytes"] is None
                    else f"{row['counted_peak_bytes'] / row['buffer_bytes']:.2f}"
                )
                print(
                    f"| {row['path']} | {bucket} | {row['counted_peak_bytes'] / MIB:.1f} MiB | "
                    f"{row['rss_peak_growth_bytes'] / MIB:.1f} MiB | {ratio} | "
                    f"{row['elapsed_s']:.2f} s |"
                )
    destroy_distributed()


if __name__ == "__main__":
    main()
