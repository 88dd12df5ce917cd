"""The SGLang engine's flag checks against this machine and the installed sglang, before any
process group (hyrl.train.preflight calls them): a refused flag exits 2 naming it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from hyrl.config import ConfigError
from hyrl.config.weight_transport import TRANSPORTS, reaching

if TYPE_CHECKING:
    from hyrl.config.concerns.rollout import RolloutView


def preflight_sglang(rollout: RolloutView, transport: str) -> None:
    """SGLang needs CUDA and the sglang package (unless attached to a router); pass-through
    --sglang-* flags must be flags of the installed sglang.launch_server, and --dp-size in them
    must suit the weight transport (transport: --update-weight-transport, resolved by
    `hyrl.config.rollout_layout.update_weight_transport`)."""
    import importlib.util
    import shlex

    from hyrl.rollout.sglang.server import check_not_managed

    try:
        check_not_managed(shlex.split(rollout.sglang_server_args or ""))
    except ValueError as err:
        raise ConfigError(
            "--sglang-server-args",
            rollout.sglang_server_args,
            str(err),
            "flags hyrl does not set itself",
        ) from None
    if rollout.sglang_router_url is not None:
        return  # the servers run elsewhere; nothing of SGLang is needed here
    if not torch.cuda.is_available():
        raise ConfigError(
            "--rollout-engine",
            "sglang",
            "SGLang engines need CUDA GPUs and this machine has none",
            "hf on a machine without CUDA, or "
            "--sglang-router-url to attach to servers running elsewhere",
        )
    if importlib.util.find_spec("sglang") is None:
        raise ConfigError(
            "--rollout-engine",
            "sglang",
            "the sglang package is not installed",
            "pip install -r requirements.txt (sglang==0.5.23), or hf",
        )
    if rollout.sglang_server_args:
        try:
            args = parse_sglang_cli(
                ["--model-path", "hyrl-preflight", *shlex.split(rollout.sglang_server_args)]
            )
        except SGLangArgsRefused as err:
            raise ConfigError(
                "--sglang-server-args",
                rollout.sglang_server_args,
                f"the installed sglang.launch_server refuses it: {err}",
                "flags and values listed by python -m sglang.launch_server --help",
            ) from None
        if getattr(args, "dp_size", 1) > 1 and not TRANSPORTS[transport].dp_replicas:
            raise ConfigError(
                "--sglang-server-args",
                rollout.sglang_server_args,
                f"--dp-size {args.dp_size}: SGLang 0.5.23 takes --update-weight-transport "
                f"{transport} only without data-parallel replicas in a server (its tokenizer "
                "manager asserts dp_size == 1 for tensor and distributed updates)",
                "more engines (--rollout-num-gpus) instead of --dp-size, or "
                "--update-weight-transport " + " or ".join(reaching("dp_replicas")),
            )


class SGLangArgsRefused(ValueError):
    """SGLang's launch_server parser refused an argv; the message is argparse's."""


def parse_sglang_cli(argv: Sequence[str]):
    """SGLang's own launch_server parser (``ServerArgs.add_cli_args``, what
    ``prepare_server_args`` builds) on ``argv``: its namespace, or SGLangArgsRefused with
    argparse's message. (0.5.23's ServerArgs is no dataclass: its fields are known only to its
    own parser.)"""
    import argparse

    from sglang.srt.server_args import ServerArgs

    class RefusingParser(argparse.ArgumentParser):
        def error(self, message):  # argparse would print the usage and exit
            raise SGLangArgsRefused(message)

    parser = RefusingParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(list(argv))
