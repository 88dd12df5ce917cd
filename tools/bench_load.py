"""Host memory of loading a Hugging Face checkpoint into the Megatron actor, per rank: the
sharded load (each rank reads only its own TP/EP/PP slices, one tensor at a time) against the
old full load (every rank `from_pretrained` in float32, then its shards cut from that).

    python tools/bench_load.py [--ep 2 --nproc 2] [--path sharded,full] [--json]

Writes a Qwen3-MoE directory with random weights (default ~104M parameters: 2 layers, hidden
512, 64 experts of ffn 512, vocab 2048; bfloat16 safetensors shards of 64 MiB, the per-expert
layout `save_pretrained` writes), then for each path starts `torchrun --nproc-per-node NPROC`
of this file. Every rank:

1. starts the process groups (gloo), then resets the kernel's peak-RSS counter
   (/proc/self/clear_refs) and reads its RSS: the baseline;
2. builds its shard of the model (float32, megatron's CPU initialisation) and loads the
   checkpoint into it;
3. reports its peak RSS (VmHWM) minus the baseline: what building and loading its shard took,
   whatever it was for (the shard itself included);
4. with --check (the default), after measuring, loads the whole directory the old way into a
   second model of the same layout and compares every parameter bit for bit.

`model_bytes` is the full model's parameters in the training dtype (float32): what one rank
holds after a full load. MALLOC_MMAP_THRESHOLD_=65536 is set for the ranks so freed tensors go
back to the system (glibc otherwise keeps freed blocks of up to 32 MiB in its heap).

Not a test: a measurement, printed with the machine it ran on (tests/unit/checkpoint/
test_sharded_load.py runs it and bounds the sharded path).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_weight_sync import wide_arch  # noqa: E402 - tools/, this script's own directory

MIB = 1024**2
PATHS = ("sharded", "full")


def write_hf_dir(arch, out: Path, dtype: str, shard_mib: int, seed: int = 0) -> int:
    """A Hugging Face directory of `arch` with random weights, written one tensor at a time
    (config.json and safetensors shards); returns the parameter count."""
    import torch

    from hyrl.checkpoint.hf_io import HFShardWriter, hf_shapes
    from hyrl.models.qwen3_moe import hf_mapping

    generator = torch.Generator().manual_seed(seed)
    writer = HFShardWriter(out, shard_mib * MIB)
    count = 0
    for name, shape in sorted(hf_shapes(arch).items()):
        tensor = (torch.randn(shape, generator=generator) * 0.02).to(getattr(torch, dtype))
        for hf_name, part in hf_mapping.split_fused_experts({name: tensor}):
            writer.add(hf_name, part)
        count += tensor.numel()
        del tensor
    writer.finish()
    config = arch.to_hf_config()
    config.architectures = ["Qwen3MoeForCausalLM"]
    config.dtype = dtype
    config.to_json_file(str(out / "config.json"))
    return count


# -- one rank (under torchrun) -----------------------------------------------------------------
def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def _build(arch, layout):
    from hyrl.backends.megatron.model import build_model_chunks

    return build_model_chunks(arch, layout, transformer_impl="local")


def _load_full(chunks, hf_dir: str, arch) -> None:
    """The old path: the whole directory in float32 on this rank, then its shards cut."""
    import torch
    from transformers import Qwen3MoeForCausalLM

    from hyrl.backends.megatron import weights
    from hyrl.models.qwen3_moe import hf_mapping

    state = Qwen3MoeForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).state_dict()
    weights.load_full_state_dict(chunks, hf_mapping.hf_to_megatron(state, arch), arch)


def _load_sharded(chunks, hf_dir: str, arch) -> None:
    from hyrl.backends.megatron import weights
    from hyrl.checkpoint.hf_io import HFWeights

    with HFWeights(hf_dir) as reader:
        weights.load_from_hf(chunks, reader, arch)


def worker(args) -> None:
    import torch

    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
    from hyrl.checkpoint.hf_io import read_hf_arch

    arch = read_hf_arch(args.hf_dir)
    layout = ParallelLayout(
        tensor_model_parallel_size=args.tp,
        expert_model_parallel_size=args.ep,
        pipeline_model_parallel_size=args.pp,
        sequence_parallel=args.tp > 1,
    )
    init_distributed(layout, seed=1)
    rank = torch.distributed.get_rank()
    torch.distributed.barrier()
    _reset_peak()
    baseline = _status("VmRSS")
    chunks = _build(arch, layout)
    built = _status("VmHWM") - baseline
    before_load = _status("VmRSS") - baseline
    (_load_sharded if args.worker == "sharded" else _load_full)(chunks, args.hf_dir, arch)
    peak = _status("VmHWM") - baseline
    after_load = _status("VmRSS") - baseline
    shard_bytes = sum(p.numel() * p.element_size() for c in chunks for p in c.parameters())
    result = {
        "rank": rank,
        "peak_growth_bytes": peak,
        "build_growth_bytes": built,
        "rss_before_load_bytes": before_load,
        "rss_after_load_bytes": after_load,
        "shard_bytes": shard_bytes,
    }
    if args.check:  # after measuring: the other path into a second model, bit for bit
        other = _build(arch, layout)
        (_load_full if args.worker == "sharded" else _load_sharded)(other, args.hf_dir, arch)
        mine = {n: p for c in chunks for n, p in c.named_parameters()}
        theirs = {n: p for c in other for n, p in c.named_parameters()}
        result["bit_equal"] = mine.keys() == theirs.keys() and all(
            torch.equal(p, theirs[n]) for n, p in mine.items()
        )
        result["different"] = sorted(n for n, p in mine.items() if not torch.equal(p, theirs[n]))
    Path(args.out).with_suffix(f".rank{rank}.json").write_text(json.dumps(result))
    torch.distributed.barrier()
    destroy_distributed()


# -- the launcher ------------------------------------------------------------------------------
def run_path(path: str, hf_dir: Path, args, tmp: Path) -> list[dict]:
    out = tmp / f"{path}.json"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", str(args.nproc), str(Path(__file__).resolve()),
        "--worker", path, "--hf-dir", str(hf_dir), "--out", str(out),
        "--tp", str(args.tp), "--ep", str(args.ep), "--pp", str(args.pp),
        *([] if args.check else ["--no-check"]),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_load: the {path} load failed:\n{proc.stderr[-4000:]}")
    return [json.loads(out.with_suffix(f".rank{r}.json").read_text()) for r in range(args.nproc)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--disk-dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--shard-mib", type=int, default=64)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--ep", type=int, default=2)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--path", default="sharded,full", help="comma list of sharded, full")
    parser.add_argument("--no-check", dest="check", action="store_false")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--hf-dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return
    paths = args.path.split(",")
    if not paths or any(p not in PATHS for p in paths):
        parser.error(f"--path {args.path}: a comma list of {', '.join(PATHS)}")
    arch = wide_arch(args.layers, args.hidden, args.experts, args.ffn, args.vocab)
    with tempfile.TemporaryDirectory(prefix="bench_load-") as tmp_name:
        tmp = Path(tmp_name)
        params = write_hf_dir(arch, tmp / "hf", args.disk_dtype, args.shard_mib)
        model_bytes = params * 4  # float32, the training dtype
        results = {path: run_path(path, tmp / "hf", args, tmp) for path in paths}
    report = {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "parameters": params,
        "model_bytes": model_bytes,
        "disk_dtype": args.disk_dtype,
        "layout": {"nproc": args.nproc, "tp": args.tp, "ep": args.ep, "pp": args.pp},
        "paths": {
            path: {
                "ranks": ranks,
                "max_growth_over_model": max(r["peak_growth_bytes"] for r in ranks) / model_bytes,
            }
            for path, ranks in results.items()
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['machine']}")
    print(
        f"model: {params / 1e6:.1f}M parameters, {model_bytes / MIB:.0f} MiB in float32; "
        f"on disk {args.disk_dtype}; {args.nproc} ranks TP={args.tp} EP={args.ep} PP={args.pp}"
    )
    print("| path | rank | shard MiB | peak growth MiB | growth / model | bit-equal |")
    print("|---|---|---|---|---|---|")
    for path, entry in report["paths"].items():
        for r in entry["ranks"]:
            growth = r["peak_growth_bytes"]
            print(
                f"| {path} | {r['rank']} | {r['shard_bytes'] / MIB:.0f} | {growth / MIB:.0f} | "
                f"{growth / model_bytes:.2f} | {r.get('bit_equal', 'not checked')} |"
            )


if __name__ == "__main__":
    main()
