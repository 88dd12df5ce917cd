"""The kernels megatron builds the model with (hyrl.config.concerns.model): the fused MoE
permutation is refused with the local transformer spec, and on a machine without Transformer
Engine by preflight; Megatron's fused cross entropy is refused with the reason."""

from __future__ import annotations

import pytest
from config_errors import assert_names, assert_rejected

from hyrl.config import ConfigError, resolve, validate


def test_fused_permutation_is_refused_with_the_local_spec_and_without_te_here(cfg_of):
    err = assert_rejected(
        cfg_of("--moe-permute-fusion", "--transformer-impl", "local"), "--moe-permute-fusion", True
    )
    assert "Transformer Engine kernel" in str(err) and "--transformer-impl local" in str(err)
    cfg = cfg_of("--moe-permute-fusion")
    validate(cfg, 1)  # auto: a dry run plans for a cluster with TE from any machine
    from hyrl.backends.megatron.backend import check_machine
    from hyrl.backends.megatron.model import transformer_engine_importable

    if transformer_engine_importable():
        check_machine(resolve(cfg).model)
    else:  # this machine: refused before any process group, by preflight
        with pytest.raises(ConfigError, match="does not import on this machine") as info:
            check_machine(resolve(cfg).model)
        assert_names(info.value, "--moe-permute-fusion", True)


def test_megatrons_fused_cross_entropy_is_refused_with_the_reason(cfg_of):
    err = assert_rejected(
        cfg_of("--cross-entropy-loss-fusion"), "--cross-entropy-loss-fusion", True
    )
    assert "temperature 1" in str(err) and "entropy" in str(err)
