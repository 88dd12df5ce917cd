"""Where the tiny recipe's actor update spends its time: torch.profiler over the real path.

    python tools/profile_step.py [--steps 30] [--warmup 5] [--top 25] [--out FILE.md] [--json]

Builds the actor as `recipes/tiny/grpo.sh` does on one rank (TINY, micro-batches of 32 of 128
rows, Adam, clip 1.0, the noise scale on) and runs `--steps` on-policy updates
(MegatronActor.train_step_on_policy, what the trainer calls for that recipe) on one fixed
batch of 4-token prompts and 2-token responses, after `--warmup` untimed ones. Prints the
wall time per update, the share of it in each region (forward, loss, backward, the
optimizer step with its clipping, megatron's DDP bookkeeping) and the ops with the most
self CPU time. A measurement of this checkout on this machine, not a test; run it with
OMP_NUM_THREADS=1 as the recipes' benchmarks do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROWS, PROMPT_TOKENS, RESPONSE_TOKENS = 128, 4, 2  # 16 prompts x 8 responses, "a+b=" -> "c<eos>"


def _batch(seed: int):
    from hyrl.algorithms.batch import pack

    generator = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(3, 15, (PROMPT_TOKENS,), generator=generator).tolist() for _ in range(ROWS)
    ]
    responses = [
        torch.randint(3, 15, (RESPONSE_TOKENS,), generator=generator).tolist() for _ in range(ROWS)
    ]
    return pack(prompts, responses, torch.randn(ROWS, generator=generator), pad_id=0)


def _actor(micro_batch_size: int = 32):
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, init_distributed
    from hyrl.models.qwen3_moe.config import TINY

    init_distributed(ParallelLayout(), seed=1234)
    settings = ActorSettings(
        optim=OptimizerSettings(micro_batch_size=micro_batch_size, clip_grad=1.0),
        eps_clip=0.2,
        eps_clip_high=0.28,
    )
    return MegatronActor(TINY, ParallelLayout(), settings)


# (region, dotted attribute to time): each gets a record_function around it
REGIONS = (
    (
        "embedding",
        "megatron.core.models.common.embeddings.language_model_embedding",
        "LanguageModelEmbedding.forward",
    ),
    ("attention", "megatron.core.transformer.attention", "SelfAttention.forward"),
    (
        "core attention",
        "megatron.core.transformer.dot_product_attention",
        "DotProductAttention.forward",
    ),
    ("router", "megatron.core.transformer.moe.router", "TopKRouter.forward"),
    (
        "dispatch",
        "megatron.core.transformer.moe.token_dispatcher",
        "MoEAllGatherTokenDispatcher.token_dispatch",
    ),
    (
        "combine",
        "megatron.core.transformer.moe.token_dispatcher",
        "MoEAllGatherTokenDispatcher.token_combine",
    ),
    ("experts", "megatron.core.transformer.moe.experts", "SequentialMLP.forward"),
    (
        "column-parallel linears",
        "megatron.core.tensor_parallel.layers",
        "ColumnParallelLinear.forward",
    ),
    ("loss", "hyrl.backends.megatron.actor", "grpo_loss"),
    ("log-probs", "hyrl.backends.megatron.actor", "vocab_parallel_log_probs_and_entropy"),
    ("backward", "torch", "Tensor.backward"),
    ("optimizer step", "hyrl.backends.megatron.trained_model", "MegatronTrainedModel._step"),
    (
        "DDP finalize",
        "megatron.core.distributed.distributed_data_parallel",
        "DistributedDataParallel.finish_grad_sync",
    ),
)


def _wrap_regions() -> None:
    import importlib

    for region, module_name, attr in REGIONS:
        owner = importlib.import_module(module_name)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name):
            print(f"profile_step: {module_name}.{attr} not found: region {region!r} left out")
            continue
        original = getattr(owner, name)

        def timed(*args, _original=original, _region=region, **kwargs):
            with torch.profiler.record_function(f"## {_region}"):
                return _original(*args, **kwargs)

        setattr(owner, name, timed)


def profile(steps: int, warmup: int, top: int, micro_batch_size: int = 32) -> dict:
    actor = _actor(micro_batch_size)
    batch = _batch(seed=0)
    _wrap_regions()

    def update():
        actor.train_step_on_policy(batch, batch.num_response_tokens, lr=3e-4, pg_weights_of=None)

    for _ in range(warmup):
        update()
    wall_s = []
    for _ in range(steps):
        start = time.perf_counter()
        update()
        wall_s.append(time.perf_counter() - start)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            with torch.profiler.record_function("## update"):
                update()
    events = prof.key_averages()
    total_us = next(e.cpu_time_total for e in events if e.key == "## update")
    ops_per_update = sum(e.count for e in events if e.key.startswith("aten::")) / steps
    regions = {
        e.key[3:]: (e.cpu_time_total / total_us, e.cpu_time_total / steps / 1e3)
        for e in events
        if e.key.startswith("## ") and e.key != "## update"
    }
    ops = sorted(
        (e for e in events if not e.key.startswith("## ")),
        key=lambda e: e.self_cpu_time_total,
        reverse=True,
    )[:top]
    return {
        "micro_batch_size": micro_batch_size,
        "update_ms_median": statistics.median(wall_s) * 1e3,
        "update_ms_profiled": total_us / steps / 1e3,
        "aten_ops_per_update": ops_per_update,
        "region_share_and_ms": dict(sorted(regions.items(), key=lambda kv: -kv[1][0])),
        "top_ops": [
            {
                "op": e.key,
                "calls_per_update": e.count / steps,
                "self_ms_per_update": e.self_cpu_time_total / steps / 1e3,
                "self_share": e.self_cpu_time_total / total_us,
            }
            for e in ops
        ],
    }


def markdown(result: dict, machine: str) -> str:
    lines = [
        f"Actor update (tiny recipe, {ROWS} rows, micro-batches of {result['micro_batch_size']}), "
        f"{machine}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}: "
        f"median {result['update_ms_median']:.1f} ms per update "
        f"({result['update_ms_profiled']:.1f} ms under the profiler), "
        f"{result['aten_ops_per_update']:.0f} aten ops per update.",
        "",
        "| region | share of the update (nested regions overlap) | ms / update, profiled |",
        "|---|---|---|",
        *(
            f"| {k} | {share:.1%} | {ms:.1f} |"
            for k, (share, ms) in result["region_share_and_ms"].items()
        ),
        "",
        "| op | calls / update | self ms / update | self share |",
        "|---|---|---|---|",
        *(
            f"| `{o['op']}` | {o['calls_per_update']:.0f} | {o['self_ms_per_update']:.2f} "
            f"| {o['self_share']:.1%} |"
            for o in result["top_ops"]
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--micro-batch-size", type=int, default=32, help="rows per micro-batch (the recipe's: 32)"
    )
    parser.add_argument("--out", type=Path, help="also write the markdown tables here")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    for flag, value in (
        ("--steps", args.steps),
        ("--top", args.top),
        ("--micro-batch-size", args.micro_batch_size),
    ):
        if value < 1:
            parser.error(f"{flag} {value}: must be at least 1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_vs_trl import cpu_model

    with contextlib.redirect_stdout(sys.stderr):  # megatron's start-up chatter
        result = profile(args.steps, args.warmup, args.top, args.micro_batch_size)
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    if args.json:
        print(json.dumps({"machine": machine, **result}, indent=2))
    else:
        text = markdown(result, machine)
        print(text)
        if args.out:
            args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
