"""A weight sync's bytes/s against a plain memcpy of the same bytes, and its peak memory
against the bucket size, streamed and as one full dict.

    MALLOC_MMAP_THRESHOLD_=65536 OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 \
        tools/bench_weight_sync.py --tp 1 --ep 2 --buffer-mib 16,64,256 \
        [--repeats 3] [--memcpy-repeats 10] [--json]

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

Speed, in bytes/s (GB/s = 1e9 B/s): the bytes the sync delivered (counted as the buckets pass
into the engine) over its wall time, median of ``--repeats`` syncs; beside it a plain memcpy of
the same number of bytes on rank 0 (``copy_`` of one buffer of the parameters' dtype into
another, on the parameters' device, both touched before timing; median of
``--memcpy-repeats``, the other ranks waiting in a barrier), and their ratio: the share of a
bare copy's speed the sync reaches on this machine. Peak against bucket: the counted peak and
the RSS growth, each over the bucket size (the highest of the repeats).

Not a test: a measurement, printed with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from hyrl.models.weight_buckets import LiveBytes, tensor_bytes

MIB = 1024**2
GB = 1e9


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


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memcpy_rate(num_bytes: int, dtype: torch.dtype, device: torch.device, repeats: int) -> dict:
    """A plain copy of ``num_bytes`` (rounded down to whole elements of ``dtype``) on ``device``:
    ``dst.copy_(src)``, both buffers written before the clock starts (no first-touch page faults
    timed); every repeat's seconds, the median and bytes / median."""
    element = torch.empty((), dtype=dtype).element_size()
    numel = max(num_bytes // element, 1)
    src = torch.ones(numel, dtype=dtype, device=device)
    dst = torch.zeros(numel, dtype=dtype, device=device)
    dst.copy_(src)  # once untimed: caches and the allocator as the timed copies find them
    times = []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        _synchronize(device)
        times.append(time.perf_counter() - start)
    copied = numel * element
    median = statistics.median(times)
    return {
        "bytes": copied,
        "dtype": str(dtype).removeprefix("torch."),
        "repeats": repeats,
        "times_s": times,
        "median_s": median,
        "bytes_per_s": copied / median,
    }


def speed_and_peak(row: dict, memcpy_bytes_per_s: float) -> dict:
    """The derived columns of one row: the sync's bytes/s (bytes over median seconds), its
    ratio to the memcpy's, and the counted and RSS peaks over the bucket size (None for the
    full dict, which has no bucket)."""
    rate = row["sync_bytes"] / row["elapsed_s"]
    bucket = row["buffer_bytes"]
    return {
        "sync_bytes_per_s": rate,
        "memcpy_bytes_per_s": memcpy_bytes_per_s,
        "sync_over_memcpy": rate / memcpy_bytes_per_s,
        "counted_peak_over_bucket": None if bucket is None else row["counted_peak_bytes"] / bucket,
        "rss_peak_over_bucket": None if bucket is None else row["rss_peak_growth_bytes"] / bucket,
    }


def counting(buckets, tally: dict):
    """The buckets as they are, adding their bytes to ``tally["bytes"]``; no reference kept
    once the consumer asks for the next one (the stream's peak stays the stream's)."""
    for bucket in buckets:
        tally["bytes"] += sum(tensor_bytes(t) for _, t in bucket)
        yield bucket
        del bucket


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
    parser.add_argument(
        "--repeats", type=int, default=3, help="syncs per bucket size (median time)"
    )
    parser.add_argument(
        "--memcpy-repeats", type=int, default=10, help="memcpys of the model's bytes (median)"
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
    if args.repeats < 1 or args.memcpy_repeats < 1:
        parser.error("--repeats and --memcpy-repeats: at least 1")

    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
    from hyrl.models.qwen3_moe import hf_mapping
    from hyrl.rollout.hf_engine import HFRolloutEngine

    arch = wide_arch(args.layers, args.hidden, args.experts, args.ffn, args.vocab)
    layout = ParallelLayout(tensor_model_parallel_size=args.tp, expert_model_parallel_size=args.ep)
    init_distributed(layout, seed=0)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    actor = MegatronActor(arch, layout, ActorSettings(optim=OptimizerSettings(micro_batch_size=1)))
    device = next(actor.model.parameters()).device
    dtype = next(actor.model.parameters()).dtype
    engine = HFRolloutEngine(arch, concurrency=1, pad_id=0, eos_id=1) if rank == 0 else None
    params = sum(p.numel() for p in engine.model.parameters()) if rank == 0 else 0
    model_bytes = sum(tensor_bytes(p) for p in engine.model.parameters()) if rank == 0 else 0

    # one unmeasured sync first: one-time allocations (gloo buffers, allocator arenas) are not
    # the sync's
    for _ in actor.hf_weight_buckets(max(buffers), keep=False):
        pass

    def measure(path: str, buffer_bytes: int | None, run) -> dict:
        """``run(tally)`` syncs once and returns its counted peak; --repeats times."""
        times, counted, rss_growth, sync_bytes = [], 0, 0, 0
        for _ in range(args.repeats):
            tally = {"bytes": 0}
            start = time.perf_counter()
            with PeakRss(device) as rss:
                counted = max(counted, run(tally))
                _synchronize(device)
            times.append(time.perf_counter() - start)
            rss_growth = max(rss_growth, rss.growth)
            sync_bytes = tally["bytes"]
        return {
            "path": path,
            "buffer_bytes": buffer_bytes,
            "sync_bytes": sync_bytes,
            "counted_peak_bytes": counted,
            "rss_peak_growth_bytes": rss_growth,
            "times_s": times,
            "elapsed_s": statistics.median(times),
        }

    def stream(buffer_bytes: int):
        def run(tally: dict) -> int:
            live = LiveBytes()
            buckets = actor.hf_weight_buckets(buffer_bytes, keep=rank == 0, live=live)
            if rank == 0:
                engine.update_weights_stream(counting(buckets, tally))
            else:
                for _ in buckets:
                    pass
            return live.peak

        return run

    def full_dict(tally: dict) -> int:
        full = actor.export_hf_state_dict(keep=rank == 0)
        counted = sum(tensor_bytes(t) for t in full.values())
        if rank == 0:
            tally["bytes"] += counted
            engine.update_weights(full)
        del full
        return counted

    rows = [measure("stream", b, stream(b)) for b in buffers]
    rows.append(measure("full dict", None, full_dict))

    # the memcpy on rank 0 alone, the other ranks waiting: the same bytes as a sync delivers
    memcpy = memcpy_rate(model_bytes, dtype, device, args.memcpy_repeats) if rank == 0 else None
    torch.distributed.barrier()

    if rank == 0:
        # the engine holds what the actor holds: check the last sync really delivered it
        reference = dict(hf_mapping.split_fused_experts(actor.export_hf_state_dict()))
        got = dict(hf_mapping.split_fused_experts(engine.model.state_dict()))
        assert all(torch.equal(got[n], reference[n]) for n in reference), "sync lost weights"
        assert all(row["sync_bytes"] == model_bytes for row in rows), "a sync missed bytes"
    else:
        actor.export_hf_state_dict(keep=False)
    if rank == 0:
        assert memcpy is not None
        for row in rows:
            row.update(speed_and_peak(row, memcpy["bytes_per_s"]))
        result = {
            "machine": machine(),
            "ranks": world,
            "tp": args.tp,
            "ep": args.ep,
            "device": str(device),
            "dtype": str(dtype).removeprefix("torch."),
            "torch_threads": torch.get_num_threads(),
            "parameters": params,
            "model_bytes": model_bytes,
            "repeats": args.repeats,
            "arch": arch.as_dict(),
            "memcpy": memcpy,
            "rows": rows,
        }
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print_table(result)
    destroy_distributed()


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_table(result: dict) -> None:
    memcpy = result["memcpy"]
    print(f"machine: {result['machine']}")
    print(
        f"{result['ranks']} rank(s) on {result['device']} (TP={result['tp']} EP={result['ep']}, "
        f"{result['torch_threads']} torch thread(s) a rank); model "
        f"{result['parameters'] / 1e6:.1f}M parameters, {result['model_bytes'] / MIB:.0f} MiB "
        f"({result['dtype']}); sync times: median of {result['repeats']}"
    )
    print(
        f"memcpy: {memcpy['bytes'] / MIB:.0f} MiB {memcpy['dtype']} copy_ on rank 0 in "
        f"{memcpy['median_s'] * 1e3:.1f} ms = {memcpy['bytes_per_s'] / GB:.2f} GB/s"
    )
    print(
        "| path | bucket | time | sync GB/s | memcpy GB/s | sync / memcpy | counted peak | "
        "counted / bucket | RSS peak growth | RSS / bucket |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in result["rows"]:
        bucket = "-" if row["buffer_bytes"] is None else f"{row['buffer_bytes'] / MIB:.0f} MiB"
        print(
            f"| {row['path']} | {bucket} | {row['elapsed_s']:.2f} s | "
            f"{row['sync_bytes_per_s'] / GB:.3f} | {row['memcpy_bytes_per_s'] / GB:.2f} | "
            f"{row['sync_over_memcpy']:.3f} | {row['counted_peak_bytes'] / MIB:.1f} MiB | "
            f"{_ratio(row['counted_peak_over_bucket'])} | "
            f"{row['rss_peak_growth_bytes'] / MIB:.1f} MiB | "
            f"{_ratio(row['rss_peak_over_bucket'])} |"
        )


if __name__ == "__main__":
    main()
