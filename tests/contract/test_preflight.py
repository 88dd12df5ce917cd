"""hyrl's preflight of --sglang-server-args with SGLang 0.5.23 installed. At 74107ac it listed
ServerArgs with dataclasses.fields; 0.5.23's ServerArgs is a msgspec Struct, so any
--sglang-server-args raised TypeError before the run started."""

from __future__ import annotations

import pytest
import sglang.srt.server_args  # noqa: F401 - SGLang picks its platform on import: before the patch
import torch

from hyrl.config import ConfigError, ResolvedConfig, resolve
from hyrl.config.rollout_layout import update_weight_transport
from hyrl.plan.cli import config_from_dry_run, recipe_dry_run
from hyrl.rollout.sglang.preflight import preflight_sglang

RECIPE = "recipes/qwen3_30b_a3b/grpo.sh"


def recipe_config(extra: list[str]) -> ResolvedConfig:
    """The recipe's resolved flags with extra (its dry run)."""
    return resolve(config_from_dry_run(recipe_dry_run(RECIPE, extra))[0])


def preflight(cfg: ResolvedConfig) -> None:
    """preflight_sglang as hyrl.train.preflight calls it."""
    preflight_sglang(cfg.rollout, update_weight_transport(cfg))


def test_preflight_checks_server_args_with_sglangs_parser(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # preflight's machine check
    preflight(recipe_config(["--sglang-server-args", "--chunked-prefill-size 4096"]))
    bad = recipe_config(["--sglang-server-args", "--chunked-prefil-size 4096"])
    with pytest.raises(ConfigError) as refused:
        preflight(bad)
    assert refused.value.flag == "--sglang-server-args"
    assert "--chunked-prefil-size" in str(refused.value)


def test_data_parallel_replicas_in_a_server_are_refused_for_tensor_and_distributed_sync(
    monkeypatch,
):
    """SGLang's tokenizer manager asserts dp_size == 1 in update_weights_from_tensor and
    update_weights_from_distributed (managers/tokenizer_control_mixin.py): a server started
    with --dp-size 2 would fail at the first weight sync, after the whole start-up."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    colocated = recipe_config(["--sglang-server-args", "--dp-size 2"])
    with pytest.raises(ConfigError) as refused:
        preflight(colocated)  # the recipe's --colocate: tensor sync
    assert refused.value.flag == "--sglang-server-args"
    assert "--dp-size 2" in str(refused.value) and "tensor" in str(refused.value)
    on_disk = recipe_config(
        ["--sglang-server-args", "--data-parallel-size 2", "--update-weight-transport", "disk"]
    )
    preflight(on_disk)  # disk updates have no such assertion
