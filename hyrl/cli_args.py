"""What every `hyrl <command>` parser shares. Standard library only."""

from __future__ import annotations

import argparse


def parse_args(parser: argparse.ArgumentParser, argv: list[str]):
    """argparse's namespace, or the exit code it asked for (2 on a bad flag, 0 on --help), so a
    command's `main` returns its code instead of exiting the process."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
