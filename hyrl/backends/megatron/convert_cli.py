"""`hyrl convert`: Hugging Face <-> Megatron distributed checkpoints for Qwen3-MoE.

hyrl convert hf-to-mcore --hf-dir D --out M [--tp N --ep N --pp N] [--transformer-impl local]
hyrl convert mcore-to-hf --load M --out D

The flags are parsed here; the conversions build megatron models and are the backend's
(hyrl.backends.megatron.convert), imported only once the flags parse.
"""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """Convert Qwen3-MoE checkpoints between a Hugging Face directory and a Megatron
distributed checkpoint (megatron.core.dist_checkpointing, torch_dist). Runs as one process: the
distributed checkpoint is resharded when it is loaded, so it loads under any TP/EP layout. The
whole model is built on one device; on a GPU node, CUDA_VISIBLE_DEVICES= keeps it in host memory."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hyrl convert", description=DESCRIPTION)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{hf-to-mcore,mcore-to-hf}"
    )

    to_mcore = commands.add_parser(
        "hf-to-mcore",
        help="HF directory -> hyrl mcore checkpoint",
        description="HF directory -> hyrl mcore checkpoint",
    )
    to_mcore.add_argument(
        "--hf-dir", required=True, help="HF model directory (config.json, safetensors)"
    )
    to_mcore.add_argument("--out", required=True, help="new (or empty) checkpoint directory")
    layout = (
        "checked against the architecture and recorded; the checkpoint loads under any valid layout"
    )
    to_mcore.add_argument(
        "--tp",
        "--tensor-model-parallel-size",
        dest="tp",
        type=int,
        default=1,
        metavar="N",
        help=f"tensor-parallel size the checkpoint is meant for ({layout})",
    )
    to_mcore.add_argument(
        "--ep",
        "--expert-model-parallel-size",
        dest="ep",
        type=int,
        default=1,
        metavar="N",
        help=f"expert-parallel size the checkpoint is meant for ({layout})",
    )
    to_mcore.add_argument(
        "--pp",
        "--pipeline-model-parallel-size",
        dest="pp",
        type=int,
        default=1,
        metavar="N",
        help=f"pipeline-parallel size the checkpoint is meant for ({layout})",
    )
    to_mcore.add_argument(
        "--num-layers-per-virtual-pipeline-stage",
        dest="vp_layers",
        type=int,
        default=None,
        metavar="N",
        help=f"layers per virtual pipeline stage the checkpoint is meant for ({layout}; "
        "default: none)",
    )
    to_mcore.add_argument(
        "--transformer-impl",
        choices=("local", "transformer_engine"),
        default="local",
        help="whose sharded-checkpoint key names to write: megatron's local layer "
        "spec or Transformer Engine's (default: local; hyrl loads either)",
    )

    to_hf = commands.add_parser(
        "mcore-to-hf",
        help="hyrl mcore checkpoint -> HF directory",
        description="hyrl mcore checkpoint -> HF directory (architecture "
        "and dtype from the checkpoint's metadata)",
    )
    to_hf.add_argument("--load", required=True, help="hyrl mcore checkpoint directory")
    to_hf.add_argument("--out", required=True, help="new (or empty) HF model directory")
    to_hf.add_argument(
        "--max-shard-gib",
        type=float,
        default=5.0,
        metavar="GIB",
        help="largest safetensors file, GiB (default 5)",
    )
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse already said which flag and value
        return exit_.code if isinstance(exit_.code, int) else 2
    # the conversions are the megatron backend's: imported once the flags parse
    from hyrl.backends.megatron.convert import hf_to_mcore, mcore_to_hf
    from hyrl.checkpoint.hf_io import ConversionError

    try:
        if args.command == "hf-to-mcore":
            meta = hf_to_mcore(
                args.hf_dir,
                args.out,
                tp=args.tp,
                ep=args.ep,
                pp=args.pp,
                spec=args.transformer_impl,
                vp_layers=args.vp_layers,
            )
            intended = meta.intended_layout
            print(
                f"wrote {args.out}: hyrl mcore checkpoint of {args.hf_dir} "
                f"({meta.arch.num_layers} layers, {meta.arch.num_experts} experts, "
                f"{meta.dtype}, {meta.spec} keys; meant for "
                f"TP{intended['tensor_model_parallel_size']} "
                f"EP{intended['expert_model_parallel_size']})"
            )
        else:
            if args.max_shard_gib <= 0:
                raise ConversionError(f"--max-shard-gib {args.max_shard_gib}: must be positive")
            meta = mcore_to_hf(
                args.load, args.out, max_shard_bytes=int(args.max_shard_gib * 1024**3)
            )
            print(
                f"wrote {args.out}: Hugging Face Qwen3-MoE directory ({meta.dtype}) "
                f"from {args.load}"
            )
    except ConversionError as err:
        print(f"hyrl convert {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0
