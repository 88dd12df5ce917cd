"""Machine-dependent flag checks (hyrl.train.preflight) that refuse a run before any process
group."""

import importlib.util

import pytest

from hyrl.config import ConfigError, parse_args, resolve
from hyrl.train.preflight import preflight


def test_tensorboard_dir_without_the_tensorboard_package_is_refused(tmp_path, monkeypatch):
    cfg = resolve(parse_args(["--run-dir", str(tmp_path / "run"), "--tensorboard-dir", "tb"]))
    preflight(cfg)  # installed here (requirements-cpu.txt pins it)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name)
    )
    with pytest.raises(ConfigError) as info:
        preflight(cfg)
    assert info.value.flag == "--tensorboard-dir" and info.value.value == "tb"
    assert "tensorboard package, which is not installed" in str(info.value)
    preflight(resolve(parse_args(["--run-dir", str(tmp_path / "run")])))  # no mirror: no need
