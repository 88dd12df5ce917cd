"""Fixtures shared by the config tests: `run_dir`, a fresh run directory under tmp_path, and
`cfg_of`, argv (without --run-dir) -> RunConfig parsed into it. The checks on ConfigError the
tests share are tests/helpers/config_errors.py."""

from __future__ import annotations

import pytest

from hyrl.config import RunConfig, parse_args


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")


@pytest.fixture
def cfg_of(run_dir):
    """argv (without --run-dir) -> RunConfig with a fresh run directory under tmp_path."""

    def make(*argv: str) -> RunConfig:
        return parse_args(["--run-dir", run_dir, *argv])

    return make
