"""`hyrl <command>`: train, sweep, analyze, profile-rollout, plan, convert, cost."""

from __future__ import annotations

import os
import sys

USAGE = """usage: hyrl <command> [flags]

commands:
  train    run GRPO (launch one process per rank with launch/torchrun.sh or a recipe)
  sweep    run a recipe at several batch sizes, lr re-derived by a scaling rule, resumable:
           hyrl sweep RECIPE --out DIR [--batch-mults 1,2,4,8,16] [--lr-rule sqrt|linear|none]
           [--fixed-lr-control M] [--seeds 1234,...] [--max-samples N] [--max-parallel 1]
           [-- EXTRA RECIPE FLAGS...]
  analyze  samples / throughput / time to a target, alignment, fastest valid batch:
           hyrl analyze PATH... --target eval/accuracy=0.77 [--reference NAME]
           [--tolerance 0.2] --out DIR   (PATH: run or sweep directories)
  profile-rollout  decode throughput against concurrency, to find where it plateaus:
           hyrl profile-rollout --engine hf --concurrency 1,2,4,...,256 --num-prompts N
           --max-new-tokens L [--repeats 3] [--warmup 1] [--seed 0] [--json] --out DIR
  plan     rank layout, GPUs needed and per-GPU memory of a recipe, without GPUs:
           hyrl plan RECIPE.sh [--json] [-- EXTRA FLAGS]  |  hyrl plan [--json] -- TRAIN FLAGS
           --world-size N   (exits 1 when the recipe does not fit, naming the flag)
  convert  checkpoints between Hugging Face and Megatron distributed format (Qwen3-MoE):
           hyrl convert hf-to-mcore --hf-dir D --out M [--tp N --ep N --pp N]
           hyrl convert mcore-to-hf --load M --out D
  cost     GPU-hours and dollars a time cut saves:
           hyrl cost --gpus N --hours H --usd-per-gpu-hour P --time-reduction F [--json]

`hyrl train --help` lists every flag, grouped by concern."""


def _train(argv: list[str]) -> int:
    from hyrl.train import main

    return main(argv)


def _parse(parser, argv: list[str]):
    """argparse's namespace, or the exit code it asked for (2 on a bad flag, 0 on --help)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2


def _analyze(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="hyrl analyze", description="Samples, throughput and time to a validation target; "
        "alignment against a reference run; critical batch; fastest valid run.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories (metrics.jsonl) or sweep directories (sweep.json)")
    parser.add_argument("--target", required=True, metavar="METRIC=VALUE",
                        help="e.g. eval/accuracy=0.77")
    parser.add_argument("--reference", default=None, metavar="NAME",
                        help="reference run name (default: sweep.json's, else the smallest B)")
    parser.add_argument("--tolerance", type=float, default=0.2,
                        help="alignment band: samples ratios within 1 +/- this (default 0.2)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the report goes")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    from hyrl.batchsize.analyze import AnalysisError, analyze, collect_runs, parse_target
    from hyrl.batchsize.report import print_summary, write_report

    try:
        target = parse_target(args.target)
        runs, sweep_reference, notes = collect_runs(args.paths)
        result = analyze(runs, target, args.reference or sweep_reference, args.tolerance)
        result["notes"] = notes + result["notes"]
    except AnalysisError as err:
        print(f"hyrl analyze: error: {err}", file=sys.stderr)
        return 2
    try:
        written = write_report(result, runs, args.out)
    except OSError as err:
        print(f"hyrl analyze: error: --out {args.out}: cannot write the report ({err})",
              file=sys.stderr)
        return 2
    print_summary(result, written)
    return 0


def _sweep(argv: list[str]) -> int:
    import argparse

    # Everything after the first `--` goes to the recipe, untouched.
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(
        prog="hyrl sweep", allow_abbrev=False,
        description="Run RECIPE at batch sizes B0 x m (prompts P0 x m, G kept) with the "
        "learning rate re-derived from the recipe's (B0, lr0) by --lr-rule; record the runs in "
        "DIR/sweep.json for `hyrl analyze DIR`. Re-running the same command resumes: finished "
        "members are skipped, unfinished ones are moved aside (never deleted) and rerun.",
        epilog="Flags after `--` are passed to every run of RECIPE (before the sweep's own "
        "batch, lr, seed and run-dir flags, which win). NPROC and the rest of the environment "
        "reach the recipe unchanged.")
    parser.add_argument("recipe", metavar="RECIPE", help="recipe script, e.g. recipes/tiny/grpo.sh")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="sweep directory: sweep.json, one run directory and log per member")
    parser.add_argument("--batch-mults", default="1,2,4,8,16", metavar="M,M,...",
                        help="batch multipliers, positive integers including 1 (default 1,2,4,8,16)")
    parser.add_argument("--lr-rule", default="sqrt", choices=("sqrt", "linear", "none"),
                        help="lr = lr0 x (B / B0)^k, k = 1/2, 1, 0 (default sqrt)")
    parser.add_argument("--fixed-lr-control", default=None, metavar="M",
                        help="also run multiplier M (an integer >= 2, in --batch-mults or not) at "
                        "the reference lr: the fixed-lr ablation")
    parser.add_argument("--seeds", default=None, metavar="S,S,...",
                        help="seeds; every member runs once per seed (default: the recipe's)")
    parser.add_argument("--max-samples", default=None, metavar="N",
                        help="run every member for ceil(N / (P x G)) rollout steps, so all "
                        "consume the same responses (default: the recipe's --num-steps)")
    parser.add_argument("--max-parallel", default="1", metavar="N",
                        help="members running at once (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no live progress display")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    from hyrl.batchsize.sweep import SweepError, failed_members, print_summary, run_sweep

    try:
        sweep = run_sweep(args.recipe, args.out, batch_mults=args.batch_mults,
                          lr_rule=args.lr_rule, fixed_lr_control=args.fixed_lr_control,
                          seeds=args.seeds, max_samples=args.max_samples,
                          max_parallel=args.max_parallel, extra_args=extra,
                          show_progress=not args.no_progress)
    except SweepError as err:
        print(f"hyrl sweep: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"hyrl sweep: interrupted; the running members were stopped. Run the same command "
              f"again to resume (finished members in {args.out} are kept).", file=sys.stderr)
        return 130
    print_summary(sweep, args.out)
    return 1 if failed_members(sweep) else 0


def _cost(argv: list[str]) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog="hyrl cost", description="GPU-hours and dollars of a job, and what a cut saves.")
    parser.add_argument("--gpus", type=int, required=True, metavar="N", help="GPUs (>= 1)")
    parser.add_argument("--hours", type=float, required=True, metavar="H", help="hours (> 0)")
    parser.add_argument("--usd-per-gpu-hour", type=float, required=True, metavar="P",
                        help="dollars per GPU-hour (>= 0)")
    parser.add_argument("--time-reduction", type=float, required=True, metavar="F",
                        help="fraction of time cut, 0 <= F < 1 (0.1 = 10%%)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    from hyrl.batchsize.cost import CostError, cost, format_table

    try:
        result = cost(args.gpus, args.hours, args.usd_per_gpu_hour, args.time_reduction)
    except CostError as err:
        print(f"hyrl cost: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else format_table(result))
    return 0


def _profile_rollout(argv: list[str]) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog="hyrl profile-rollout", allow_abbrev=False,
        description="Decode throughput (tokens/s, responses/s) and latency against concurrency "
        "C, the sequences the engine decodes at once; the plateau is the smallest C within 5%% "
        "of the best tokens/s. Writes DIR/profile.json, profile.md and profile.png.")
    parser.add_argument("--engine", required=True, choices=("hf", "sglang"),
                        help="rollout engine (hf: transformers on CPU, the tiny Qwen3-MoE; "
                        "sglang: a server given by --sglang-url or started from --model-path)")
    parser.add_argument("--sglang-url", metavar="URL", default=None,
                        help="sglang: profile the running server or router at http://HOST:PORT")
    parser.add_argument("--model-path", metavar="DIR", default=None,
                        help="sglang: start one server on this machine's GPUs from this local "
                        "Hugging Face directory (--max-running-requests = the largest C)")
    parser.add_argument("--num-gpus-per-engine", type=int, default=1, metavar="N",
                        help="sglang with --model-path: the server's tensor-parallel size")
    parser.add_argument("--sglang-mem-fraction-static", type=float, default=None, metavar="F",
                        help="sglang with --model-path: GPU memory fraction for weights and KV")
    parser.add_argument("--sglang-server-args", default="", metavar="'ARGS'",
                        help="sglang with --model-path: further launch_server flags, verbatim")
    parser.add_argument("--concurrency", required=True, metavar="C,C,...",
                        help="concurrencies: positive integers, strictly increasing, each <= "
                        "--num-prompts, e.g. 1,2,4,8,16")
    parser.add_argument("--num-prompts", type=int, required=True, metavar="N",
                        help="prompts generated per timed pass (>= 1)")
    parser.add_argument("--max-new-tokens", type=int, required=True, metavar="L",
                        help="most tokens per response (>= 1; responses may stop earlier at eos)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per C (default 3)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed generate calls per C before timing (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="prompt order and weights (default 0)")
    parser.add_argument("--json", action="store_true", help="print profile.json to stdout")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the profile goes")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    from hyrl.rollout.profile import ProfileError, validate_flags

    prompt_tokens, max_positions = 5, None
    if args.engine == "hf":
        from hyrl.models.qwen3_moe.config import TINY

        max_positions = TINY.max_position_embeddings  # arith prompts are 5 tokens
    try:
        concurrencies = validate_flags(
            engine=args.engine, concurrency=args.concurrency, num_prompts=args.num_prompts,
            max_new_tokens=args.max_new_tokens, repeats=args.repeats, warmup=args.warmup,
            seed=args.seed, out=args.out, prompt_tokens=prompt_tokens,
            max_positions=max_positions, sglang_url=args.sglang_url, model_path=args.model_path)
    except ProfileError as err:
        print(f"hyrl profile-rollout: error: {err}", file=sys.stderr)
        return 2
    from hyrl.data.arith import ArithTask
    from hyrl.data.tokenizer import build_tokenizer
    from hyrl.rollout.base import SamplingParams
    from hyrl.rollout.profile import (ProgressBar, hf_engine_factory, print_table,
                                      profile_engine, write_outputs)

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

        from hyrl.rollout.profile import sglang_engine_factory
        from hyrl.rollout.sglang.server import SGLangServerProcess
        from hyrl.rollout.sglang.weight_sync import free_port

        url, model = args.sglang_url, args.sglang_url
        if args.model_path is not None:
            server = SGLangServerProcess(
                args.model_path, port=free_port(), tp_size=args.num_gpus_per_engine,
                mem_fraction_static=args.sglang_mem_fraction_static,
                max_running_requests=concurrencies[-1], random_seed=args.seed,
                server_args=shlex.split(args.sglang_server_args),
                log_path=os.path.join(args.out, "sglang_server.log"))
            from hyrl.rollout.sglang.client import SGLangError

            try:
                server.start()
            except SGLangError as err:
                print(f"hyrl profile-rollout: error: --model-path {args.model_path}: {err}",
                      file=sys.stderr)
                return 1
            url, model = server.url, args.model_path
        # No stop tokens of hyrl's: the model's own end-of-sequence ends a response, as in training.
        make_engine = sglang_engine_factory(url, stop_token_ids=[])
    try:
        with ProgressBar() as progress:
            result = profile_engine(make_engine, prompts, concurrencies, params,
                                    repeats=args.repeats, warmup=args.warmup,
                                    on_progress=progress, continuous=args.engine == "sglang")
    finally:
        if server is not None:
            server.kill()
    result["parameters"].update(engine=args.engine, model=model, seed=args.seed,
                                eos_id=tokenizer.eos_token_id if args.engine == "hf" else None)
    try:
        written = write_outputs(result, args.out)
    except OSError as err:
        print(f"hyrl profile-rollout: error: --out {args.out}: cannot write the profile ({err})",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        print_table(result, written)
    return 0


def _plan(argv: list[str]) -> int:
    from hyrl.plan import main

    return main(argv)


def _convert(argv: list[str]) -> int:
    from hyrl.checkpoint.cli import main

    return main(argv)


COMMANDS = {"train": _train, "sweep": _sweep, "analyze": _analyze,
            "profile-rollout": _profile_rollout, "plan": _plan, "convert": _convert,
            "cost": _cost}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"hyrl: unknown command {command!r}; allowed: {', '.join(COMMANDS)}\n\n{USAGE}",
              file=sys.stderr)
        return 2
    return COMMANDS[command](rest)


if __name__ == "__main__":
    sys.exit(main())
