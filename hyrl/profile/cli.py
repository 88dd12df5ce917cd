"""`hyrl profile-rollout`: decode throughput against concurrency, the parser and the command.

The flags are validated before anything heavy is imported (`hyrl.profile.flags`); the measuring
is `hyrl.profile.measure`, the tables and files `hyrl.profile.report`. The engines it measures
are made here (`hf_engine_factory`, `sglang_engine_factory`; SGLang's through the engine
factory, hyrl.rollout.build).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from hyrl.config.parser import parse_or_exit_code

if TYPE_CHECKING:  # not imported when run: the flags are checked before torch is imported
    from hyrl.rollout.base import RolloutEngine


def main(argv: list[str]) -> int:
    """`hyrl profile-rollout`: 0 with the profile written; 2 on a bad flag or unwritable --out,
    1 when the SGLang server of --model-path does not start."""
    parser = argparse.ArgumentParser(
        prog="hyrl profile-rollout",
        allow_abbrev=False,
        description="Decode throughput (tokens/s, responses/s) and latency against concurrency "
        "C, the sequences the engine decodes at once; the plateau is the smallest C within 5%% "
        "of the best tokens/s. Writes DIR/profile.json, profile.md and profile.png.",
    )
    parser.add_argument(
        "--engine",
        required=True,
        choices=("hf", "sglang"),
        help="rollout engine (hf: transformers on CPU, the tiny Qwen3-MoE; "
        "sglang: a server given by --sglang-url or started from --model-path)",
    )
    parser.add_argument(
        "--sglang-url",
        metavar="URL",
        default=None,
        help="sglang: profile the running server or router at http://HOST:PORT",
    )
    parser.add_argument(
        "--model-path",
        metavar="DIR",
        default=None,
        help="sglang: start one server on this machine's GPUs from this local "
        "Hugging Face directory (--max-running-requests = the largest C)",
    )
    parser.add_argument(
        "--num-gpus-per-engine",
        type=int,
        default=1,
        metavar="N",
        help="sglang with --model-path: the server's tensor-parallel size",
    )
    parser.add_argument(
        "--sglang-mem-fraction-static",
        type=float,
        default=None,
        metavar="F",
        help="sglang with --model-path: GPU memory fraction for weights and KV",
    )
    parser.add_argument(
        "--sglang-server-args",
        default="",
        metavar="'ARGS'",
        help="sglang with --model-path: further launch_server flags, verbatim",
    )
    parser.add_argument(
        "--concurrency",
        required=True,
        metavar="C,C,...",
        help="concurrencies: positive integers, strictly increasing, each <= "
        "--num-prompts, e.g. 1,2,4,8,16",
    )
    parser.add_argument(
        "--num-prompts",
        type=int,
        required=True,
        metavar="N",
        help="prompts generated per timed pass (>= 1)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        required=True,
        metavar="L",
        help="most tokens per response (>= 1; responses may stop earlier at eos)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per C (default 3)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed generate calls per C before timing (default 1)",
    )
    parser.add_argument("--seed", type=int, default=0, help="prompt order and weights (default 0)")
    parser.add_argument("--json", action="store_true", help="print profile.json to stdout")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the profile goes")
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    from hyrl.profile.flags import ProfileError, validate_flags

    prompt_tokens, max_positions = 5, None
    if args.engine == "hf":
        from hyrl.models.qwen3_moe.config import TINY

        max_positions = TINY.max_position_embeddings  # arith prompts are 5 tokens
    try:
        concurrencies = validate_flags(
            engine=args.engine,
            concurrency=args.concurrency,
            num_prompts=args.num_prompts,
            max_new_tokens=args.max_new_tokens,
            repeats=args.repeats,
            warmup=args.warmup,
            seed=args.seed,
            out=args.out,
            prompt_tokens=prompt_tokens,
            max_positions=max_positions,
            sglang_url=args.sglang_url,
            model_path=args.model_path,
        )
    except ProfileError as err:
        print(f"hyrl profile-rollout: error: {err}", file=sys.stderr)
        return 2
    from hyrl.data.arith import ArithTask
    from hyrl.data.tokenizer import build_tokenizer
    from hyrl.profile.measure import profile_engine
    from hyrl.profile.report import ProgressBar, print_table, write_outputs
    from hyrl.rollout.base import SamplingParams

    tokenizer = build_tokenizer()
    task = ArithTask(tokenizer, seed=args.seed)
    prompts = [p.prompt_ids for p in task.next_batch(args.num_prompts)]
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
    server, model = None, "TINY Qwen3-MoE"
    if args.engine == "hf":
        # The real eos id: responses may stop early, and profile_engine counts what was generated.
        make_engine = hf_engine_factory(tokenizer.pad_token_id, tokenizer.eos_token_id, args.seed)
    else:
        import shlex

        from hyrl.rollout.build import launch_sglang_server

        url, model = args.sglang_url, args.sglang_url
        if args.model_path is not None:
            try:
                server = launch_sglang_server(
                    args.model_path,
                    os.path.join(args.out, "sglang_server.log"),
                    tp_size=args.num_gpus_per_engine,
                    mem_fraction_static=args.sglang_mem_fraction_static,
                    max_running_requests=concurrencies[-1],
                    random_seed=args.seed,
                    server_args=shlex.split(args.sglang_server_args),
                )
            except RuntimeError as err:  # SGLangError: it did not come up (its log's last lines)
                print(
                    f"hyrl profile-rollout: error: --model-path {args.model_path}: {err}",
                    file=sys.stderr,
                )
                return 1
            url, model = server.url, args.model_path
        # No stop tokens of hyrl's: the model's own end-of-sequence ends a response, as in training.
        make_engine = sglang_engine_factory(url, stop_token_ids=[])
    try:
        with ProgressBar() as progress:
            result = profile_engine(
                make_engine,
                prompts,
                concurrencies,
                params,
                repeats=args.repeats,
                warmup=args.warmup,
                on_progress=progress,
                continuous=args.engine == "sglang",
            )
    finally:
        if server is not None:
            server.kill()
    result["parameters"].update(
        engine=args.engine,
        model=model,
        seed=args.seed,
        eos_id=tokenizer.eos_token_id if args.engine == "hf" else None,
    )
    try:
        written = write_outputs(result, args.out)
    except OSError as err:
        print(
            f"hyrl profile-rollout: error: --out {args.out}: cannot write the profile ({err})",
            file=sys.stderr,
        )
        return 2
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        print_table(result, written)
    return 0


# --- the hf engine ---------------------------------------------------------------------------


def hf_engine_factory(pad_id: int, eos_id: int, seed: int) -> Callable[[int], RolloutEngine]:
    """make_engine(c) for the tiny Qwen3-MoE on CPU; every c starts from the same weights and
    random state (torch seeded with `seed`)."""
    import torch

    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.hf_engine import HFRolloutEngine

    def make_engine(concurrency: int) -> HFRolloutEngine:
        torch.manual_seed(seed)
        return HFRolloutEngine(TINY, concurrency=concurrency, pad_id=pad_id, eos_id=eos_id)

    return make_engine


# --- the sglang engine -----------------------------------------------------------------------


def sglang_engine_factory(url: str, stop_token_ids: list[int]) -> Callable[[int], RolloutEngine]:
    """make_engine(c): a client of the server (or router) at `url` that keeps at most c requests
    in flight; the server is the same for every c (its --max-running-requests must be >= the
    largest c, which `hyrl profile-rollout --model-path` sets)."""
    from hyrl.rollout.build import sglang_engine_at

    def make_engine(concurrency: int) -> RolloutEngine:
        return sglang_engine_at(url, concurrency, stop_token_ids)

    return make_engine
