"""`hyrl <command>`: cli.py only dispatches, through a table of "module:function"."""

from __future__ import annotations

import importlib
import subprocess
import sys

from testpaths import ROOT

from hyrl.cli import COMMANDS, USAGE, main


def test_every_command_names_a_function_that_exists():
    for command, target in COMMANDS.items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), command


def test_the_usage_names_every_command():
    for command in COMMANDS:
        assert f"\n  {command} " in USAGE


def test_an_unknown_command_is_refused_with_the_allowed_ones(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hyrl: unknown command 'trian'; allowed: train, eval, sweep, analyze, ")


def test_no_command_prints_the_usage_and_exits_2_help_exits_0(capsys):
    assert main([]) == 2
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.count("usage: hyrl <command>") == 2


def test_dispatch_imports_only_the_command_it_runs():
    code = (
        "import sys; from hyrl.cli import main; rc = main(['cost', '--gpus', '2', '--hours', "
        "'1', '--usd-per-gpu-hour', '3', '--time-reduction', '0.5', '--json']); "
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('hyrl.train.cli', "
        "'hyrl.rollout', 'hyrl.plan', 'hyrl.batchsize.sweep'))]; assert not bad, bad; "
        "sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert '"saved_usd": 3.0' in done.stdout


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    from hyrl.cli import main as cli_main

    assert cli_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"hyrl {version('hyrl')}"
