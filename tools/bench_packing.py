#!/usr/bin/env python
"""Padded rows (--qkv-format bshd) against packed sequences (thd), side by side in one run.

    .venv/bin/python tools/bench_packing.py [--repeats 20] [--rows 32] [--micro-batch-size 8]
        [--threads 1] [--seed 1] [--json]

One rank, the tiny recipe's model (hyrl.models.qwen3_moe.config.TINY, megatron-core's local
spec on CPU), one actor: per repeat, the log-prob pass and one optimizer step (lr 0: the
weights stay) over the same batch, first padded then packed, alternating. Two batches:
  uniform  the tiny recipe's shape: every row 7 tokens (5-token prompt, 2-token response);
  skewed   lengths 4..64 tokens drawn long-tailed (most rows short, a few near the 64-token
           maximum), as RL rollouts are: padded rows spend most of their tokens on padding.
Reported: the median wall time of each pass per layout, the ratio thd / bshd, and the tokens
each layout runs through the model (padded: rows x longest per micro-batch; packed: the sum of
lengths). Not a timed test: a measurement, printed with the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time


def _batch(kind: str, rows: int, seed: int):
    import torch

    from hyrl.algorithms.batch import pack

    generator = torch.Generator().manual_seed(seed)
    if kind == "uniform":
        lengths = [(5, 2)] * rows
    else:  # total length 4 + 60 * u^3 with u uniform: median about 11, a tail to 64
        totals = [
            4 + int(60 * float(torch.rand((), generator=generator)) ** 3) for _ in range(rows)
        ]
        lengths = [(max(2, n // 2), max(1, n - max(2, n // 2))) for n in totals]
    prompts = [torch.randint(3, 15, (p,), generator=generator).tolist() for p, _ in lengths]
    responses = [torch.randint(3, 15, (r,), generator=generator).tolist() for _, r in lengths]
    return pack(prompts, responses, torch.linspace(-1, 1, rows), pad_id=0)


def _tokens_run(actor, batch) -> int:
    total = 0
    for mb, _rows in actor._micro_batches(batch):
        total += mb.tokens.numel() if mb.packing is None else mb.packing.total
    return total


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    import torch

    torch.set_num_threads(args.threads)
    from bench_weight_sync import machine  # tools/ is this script's folder

    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
    from hyrl.models.qwen3_moe.config import TINY

    init_distributed(ParallelLayout(), seed=args.seed)
    torch.manual_seed(args.seed)
    padded = OptimizerSettings(micro_batch_size=args.micro_batch_size, noise_scale_beta=None)
    packed = dataclasses.replace(padded, packed_sequences=True)
    actor = MegatronActor(TINY, ParallelLayout(), ActorSettings(optim=padded))
    results: dict = {
        "machine": machine(),
        "threads": args.threads,
        "repeats": args.repeats,
    }
    for kind in ("uniform", "skewed"):
        batch = _batch(kind, args.rows, args.seed)
        times: dict[str, dict[str, list[float]]] = {
            "bshd": {"logprob_s": [], "update_s": []},
            "thd": {"logprob_s": [], "update_s": []},
        }
        tokens = {}
        for repeat in range(args.repeats + 1):  # the first round warms up, not counted
            for name, optim in (("bshd", padded), ("thd", packed)):
                actor.optim = optim
                start = time.perf_counter()
                log_probs, _ = actor.log_probs(batch)
                middle = time.perf_counter()
                batch.old_log_probs = log_probs
                actor.train_step(batch, batch.num_response_tokens, lr=0.0)
                end = time.perf_counter()
                if repeat:
                    times[name]["logprob_s"].append(middle - start)
                    times[name]["update_s"].append(end - middle)
                tokens[name] = _tokens_run(actor, batch)
        medians = {
            name: {k: statistics.median(v) for k, v in parts.items()}
            for name, parts in times.items()
        }
        results[kind] = {
            "sequence_tokens": sum(batch.sequence_lengths()),
            "tokens_run": tokens,
            "median_s": medians,
            "thd_over_bshd": {
                k: medians["thd"][k] / medians["bshd"][k] for k in ("logprob_s", "update_s")
            },
        }
    destroy_distributed()
    if args.json:
        print(json.dumps(results, indent=2))
        return results
    print(f"# bshd vs thd, {results['machine']}, {args.threads} thread(s), {args.repeats} repeats")
    print(
        "| batch | tokens in rows | run padded | run packed | log-prob pass bshd / thd (ms) "
        "| ratio | update bshd / thd (ms) | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for kind in ("uniform", "skewed"):
        r = results[kind]
        m = r["median_s"]
        print(
            f"| {kind} | {r['sequence_tokens']} | {r['tokens_run']['bshd']} | "
            f"{r['tokens_run']['thd']} | {1e3 * m['bshd']['logprob_s']:.1f} / "
            f"{1e3 * m['thd']['logprob_s']:.1f} | {r['thd_over_bshd']['logprob_s']:.2f} | "
            f"{1e3 * m['bshd']['update_s']:.1f} / {1e3 * m['thd']['update_s']:.1f} | "
            f"{r['thd_over_bshd']['update_s']:.2f} |"
        )
    return results


if __name__ == "__main__":
    main()
