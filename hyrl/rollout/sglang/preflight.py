"""The SGLang engine's flag checks against this machine and the installed sglang, before any
process group (hyrl.preflight calls them): a refused flag exits 2 naming it."""

from __future__ import annotations

import torch

from hyrl.config import ConfigError, RunConfig


def preflight_sglang(cfg: RunConfig) -> None:
    """SGLang needs CUDA and the sglang package (unless attached to a router); pass-through
    --sglang-* flags must be flags of the installed sglang.launch_server."""
    import importlib.util
    import shlex

    from hyrl.rollout.sglang.server import check_not_managed

    try:
        check_not_managed(shlex.split(cfg.sglang_server_args or ""))
    except ValueError as err:
        raise ConfigError(
            "--sglang-server-args",
            cfg.sglang_server_args,
            str(err),
            "flags hyrl does not set itself",
        ) from None
    if cfg.sglang_router_url is not None:
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
    if cfg.sglang_server_args:
        import dataclasses

        from sglang.srt.server_args import ServerArgs

        known = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(ServerArgs)}
        for token in shlex.split(cfg.sglang_server_args):
            flag = token.split("=", 1)[0]
            if flag.startswith("--") and flag not in known:
                raise ConfigError(
                    "--sglang-server-args",
                    cfg.sglang_server_args,
                    f"{flag} is not a flag of the installed sglang.launch_server",
                    "flags listed by python -m sglang.launch_server --help",
                )
