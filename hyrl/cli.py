"""`hyrl <command>`: train now; sweep, analyze, profile-rollout, convert and plan follow."""

from __future__ import annotations

import os
import sys

USAGE = """usage: hyrl <command> [flags]

commands:
  train    run GRPO (launch one process per rank with launch/torchrun.sh or a recipe)

`hyrl train --help` lists every flag, grouped by concern."""


def _train(argv: list[str]) -> int:
    from hyrl.config import ConfigError, build_parser, load, world_size_from_env

    if any(a in ("-h", "--help") for a in argv):
        build_parser().print_help()
        return 0
    try:
        world_size = world_size_from_env()
        cfg = load(argv, world_size)  # parsed, validated, every derived value resolved
        from hyrl.train import preflight

        preflight(cfg)
    except ConfigError as err:
        # Every rank validates before any process group starts; one of them says why.
        if os.environ.get("RANK", "0") == "0":
            print(f"hyrl train: error: {err}", file=sys.stderr)
        return 2
    from hyrl.train import train

    run_dir = train(cfg, world_size)
    if os.environ.get("RANK", "0") == "0":
        print(f"run directory: {run_dir}")
    return 0


COMMANDS = {"train": _train}


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
