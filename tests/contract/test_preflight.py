"""hyrl's preflight of --sglang-server-args with SGLang 0.5.23 installed. At 74107ac it listed
ServerArgs with dataclasses.fields; 0.5.23's ServerArgs is a msgspec Struct, so any
--sglang-server-args raised TypeError before the run started."""

from __future__ import annotations

import pytest
import sglang.srt.server_args  # noqa: F401 - SGLang picks its platform on import: before the patch
import torch

from hyrl.config import ConfigError
from hyrl.plan.cli import config_from_dry_run, recipe_dry_run
from hyrl.rollout.sglang.preflight import preflight_sglang

RECIPE = "recipes/qwen3_30b_a3b/grpo.sh"


def test_preflight_checks_server_args_with_sglangs_parser(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # preflight's machine check
    good, _ = config_from_dry_run(
        recipe_dry_run(RECIPE, ["--sglang-server-args", "--chunked-prefill-size 4096"])
    )
    preflight_sglang(good)
    bad, _ = config_from_dry_run(
        recipe_dry_run(RECIPE, ["--sglang-server-args", "--chunked-prefil-size 4096"])
    )
    with pytest.raises(ConfigError) as refused:
        preflight_sglang(bad)
    assert refused.value.flag == "--sglang-server-args"
    assert "--chunked-prefil-size" in str(refused.value)
