"""Checks on the ConfigError hyrl.config raises, shared by tests/unit/config: `rejected` (validate
refuses a config), `parse_rejected` (parse_args refuses a command line), `assert_names` (the
error names the flag, the value and what is allowed) and `assert_rejected` (both)."""

from __future__ import annotations

import pytest

from hyrl.config import ConfigError, RunConfig, parse_args, validate


def rejected(cfg: RunConfig, world_size: int = 1) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(cfg, world_size)
    return info.value


def parse_rejected(argv: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_args(argv)
    return info.value


def assert_names(err: ConfigError, flag: str, value) -> None:
    """The error names the flag, the offending value and what is allowed."""
    assert err.flag == flag
    text = str(err)
    assert flag in text
    assert str(value) in text
    assert "allowed" in text


def assert_rejected(cfg: RunConfig, flag: str, value, world_size: int = 1) -> ConfigError:
    err = rejected(cfg, world_size)
    assert_names(err, flag, value)
    assert err.value == value
    return err
